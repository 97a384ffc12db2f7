package replicate

import "fmt"

// FollowerConfig is what a replica knows when it starts following a leader.
type FollowerConfig struct {
	// Self is this replica's node id.
	Self string
	// LeaderEpoch is the epoch of the leader to follow, from Consul. It is
	// at least the latest epoch in the replica's own log.
	LeaderEpoch int32
	Durability  Durability
	// LogEndOffset is the next offset the log will write; SyncedEndOffset
	// bounds the records known to be fsynced (at most LogEndOffset).
	LogEndOffset    int64
	SyncedEndOffset int64
	// HighWatermark is the replica's checkpointed HW, at most LogEndOffset.
	// It is never a truncation point.
	HighWatermark int64
	EpochCache    EpochCache
}

// Truncation is a cut the caller applies to the follower's log and its epoch
// cache, then confirms with Truncated.
type Truncation struct {
	// Offset is the new log end offset: every record at or above it goes,
	// with every cached epoch that starts at or above it, even when Offset
	// is the current log end (the cache may hold an epoch with no records).
	Offset int64
	// Restart means the whole log goes and starts again, empty, at Offset:
	// the leader no longer keeps the records after the follower's log end.
	Restart bool
}

// FollowerReady is the output the caller drains from a Follower with Ready.
// At most one of Truncate and Fetch is set.
type FollowerReady struct {
	// HighWatermarkChanged says HighWatermark changed since the last Ready:
	// checkpoint it and publish it to local readers.
	HighWatermarkChanged bool
	HighWatermark        int64
	// Truncate, when not nil, is to apply to the log; answer with Truncated.
	Truncate *Truncation
	// Fetch, when not nil, is to send to the leader. Append the records of
	// its answer, report them with Appended, then answer with
	// FetchResponded, FetchOutOfRange or FetchFailed.
	Fetch *FetchRequest
}

// followerPhase is where a follower is in its cycle: fetch, and truncate
// when the leader's answer says the logs diverged.
type followerPhase uint8

const (
	phaseTruncate followerPhase = iota
	phaseFetch
)

// Follower is a follower's replication state for one partition and one
// leader epoch: it fetches from its own log end with its log's latest epoch
// as the last fetched one, and truncates whenever the leader answers that
// the logs diverged (KIP-320's truncation on fetch, as Kafka's followers do
// since 2.7): the reconciliation by epoch of KIP-101 and KIP-279, never by
// its own HW, without a round trip of its own before the first fetch. It
// does no I/O and is not safe for concurrent use.
//
// In fsync mode the follower sends its next fetch only once every record it
// appended is fsynced, so the fetch offset the leader counts toward the HW
// is durable; one fsync covers a whole fetch response.
type Follower struct {
	self        string
	leaderEpoch int32
	cache       EpochCache

	ownLog
	hw        int64
	hwChanged bool
	leaderHW  int64

	phase followerPhase
	// sent says the current phase's fetch or truncation is out and its
	// answer is awaited.
	sent       bool
	truncation Truncation
	// reconciled says the truncation of phaseTruncate ends the
	// reconciliation; otherwise the epoch that remains the log's latest
	// must be keptEpoch or below, and the next fetch names it for the
	// leader to check again.
	reconciled bool
	keptEpoch  int32
}

// NewFollower returns the state of a replica that starts following the
// leader of cfg.LeaderEpoch. Its first output is a fetch (in fsync mode once
// its log is fsynced to its end): the leader checks the fetch's last
// fetched epoch against its own log before it counts the fetch offset.
func NewFollower(cfg FollowerConfig) (*Follower, error) {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: follower: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case cfg.Self == "":
		return nil, invalid("empty self id")
	case cfg.LeaderEpoch < 0:
		return nil, invalid("negative leader epoch %d", cfg.LeaderEpoch)
	case cfg.Durability != DurabilityFsync && cfg.Durability != DurabilityReplicated:
		return nil, invalid("unknown %s", cfg.Durability)
	case cfg.LogEndOffset < 0:
		return nil, invalid("negative log end offset %d", cfg.LogEndOffset)
	case cfg.SyncedEndOffset < 0 || cfg.SyncedEndOffset > cfg.LogEndOffset:
		return nil, invalid("synced end offset %d outside [0, log end %d]", cfg.SyncedEndOffset, cfg.LogEndOffset)
	case cfg.HighWatermark < 0 || cfg.HighWatermark > cfg.LogEndOffset:
		return nil, invalid("high watermark %d outside [0, log end %d]", cfg.HighWatermark, cfg.LogEndOffset)
	case cfg.EpochCache == nil:
		return nil, invalid("no epoch cache")
	}
	f := &Follower{
		self:        cfg.Self,
		leaderEpoch: cfg.LeaderEpoch,
		cache:       cfg.EpochCache,
		ownLog:      ownLog{durability: cfg.Durability, logEnd: cfg.LogEndOffset, syncedEnd: cfg.SyncedEndOffset},
		hw:          cfg.HighWatermark,
		phase:       phaseFetch,
	}
	if latest, ok := f.cache.LatestEpoch(); ok && latest > cfg.LeaderEpoch {
		return nil, invalid("the log has epoch %d, above leader epoch %d: stale leader metadata", latest, cfg.LeaderEpoch)
	}
	return f, nil
}

// LeaderEpoch is the epoch of the leader followed.
func (f *Follower) LeaderEpoch() int32 { return f.leaderEpoch }

// HighWatermark is min(leader HW, own durable log end), never decreasing
// except when a truncation cuts below it (only possible after an unclean
// election).
func (f *Follower) HighWatermark() int64 { return f.hw }

// LogEndOffset is the follower's log end offset, fsynced or not.
func (f *Follower) LogEndOffset() int64 { return f.logEnd }

// Truncated confirms the truncation from Ready, with the log end it left,
// at most the truncation's offset (exactly it for a restart).
func (f *Follower) Truncated(logEndOffset int64) error {
	t := f.truncation
	switch {
	case f.phase != phaseTruncate || !f.sent:
		return fmt.Errorf("%w: truncation report without a truncation in progress", ErrInvalidInput)
	case t.Restart && logEndOffset != t.Offset:
		return fmt.Errorf("%w: log restarted at %d, not at %d", ErrInvalidInput, logEndOffset, t.Offset)
	case logEndOffset < 0 || logEndOffset > t.Offset:
		return fmt.Errorf("%w: truncated to %d, asked for %d", ErrInvalidInput, logEndOffset, t.Offset)
	}
	f.logEnd = logEndOffset
	if t.Restart {
		// The empty log has nothing to fsync, and everything below the
		// leader's log start is committed: the leader deletes only below
		// its HW.
		f.syncedEnd = logEndOffset
		f.setHighWatermark(logEndOffset)
	} else {
		f.syncedEnd = min(f.syncedEnd, logEndOffset)
		if f.hw > logEndOffset {
			f.setHighWatermark(logEndOffset)
		}
	}

	f.sent = false
	if latest, ok := f.cache.LatestEpoch(); !f.reconciled && ok && latest > f.keptEpoch {
		return fmt.Errorf("%w: truncation to %d kept epoch %d, above epoch %d", ErrInconsistentLog, logEndOffset, latest, f.keptEpoch)
	}
	f.phase = phaseFetch
	return nil
}

// Appended reports that the log wrote records of the fetch in flight, up to
// and including lastOffset.
func (f *Follower) Appended(lastOffset int64) error {
	if f.phase != phaseFetch || !f.sent {
		return fmt.Errorf("%w: append without a fetch in flight", ErrInvalidInput)
	}
	if err := f.appended(lastOffset); err != nil {
		return err
	}
	f.updateHighWatermark()
	return nil
}

// Synced reports that every record up to and including lastOffset is
// fsynced.
func (f *Follower) Synced(lastOffset int64) error {
	if err := f.synced(lastOffset); err != nil {
		return err
	}
	f.updateHighWatermark()
	return nil
}

// FetchResponded gives the leader's answer to the fetch in flight, after its
// records were appended. A diverging answer (the leader's largest epoch at or
// below the fetch's last fetched epoch, and where it ends) starts a
// truncation to the end of that epoch in both logs: to min(leader's end, own
// end) when this log has that epoch too; when it does not, to the end of its
// own largest epoch below it, which the next fetch names (KIP-279);
// otherwise the follower's HW moves to min(leader HW, own
// durable log end).
func (f *Follower) FetchResponded(result FetchResult) error {
	if f.phase != phaseFetch || !f.sent {
		return fmt.Errorf("%w: fetch answer without a fetch in flight", ErrInvalidInput)
	}
	if result.LeaderEpoch != f.leaderEpoch {
		return fmt.Errorf("%w: fetch answer from epoch %d, following epoch %d", ErrInvalidInput, result.LeaderEpoch, f.leaderEpoch)
	}
	if result.Diverging != nil {
		latest, ok := f.cache.LatestEpoch()
		if !ok || result.Diverging.Epoch > latest {
			return fmt.Errorf("%w: diverging epoch %d, but the log's latest epoch is %d (present %t)", ErrInvalidInput, result.Diverging.Epoch, latest, ok)
		}
		return f.reconcile(*result.Diverging)
	}
	f.sent = false
	f.leaderHW = max(f.leaderHW, result.HighWatermark)
	f.updateHighWatermark()
	return nil
}

// FetchOutOfRange reports that the leader refused the fetch offset, with the
// leader's log start and end offsets. Below the leader's log start the
// follower restarts its log there; beyond the leader's log end (possible
// only after an unclean election) it truncates to it.
func (f *Follower) FetchOutOfRange(leaderLogStart, leaderLogEnd int64) error {
	if f.phase != phaseFetch || !f.sent {
		return fmt.Errorf("%w: out of range answer without a fetch in flight", ErrInvalidInput)
	}
	switch {
	case leaderLogStart < 0 || leaderLogEnd < leaderLogStart:
		// No leader's log: a truncation to it would fail this one.
		return fmt.Errorf("%w: out of range answer with the leader's log [%d, %d)", ErrInvalidInput, leaderLogStart, leaderLogEnd)
	case leaderLogEnd < f.logEnd:
		f.startTruncation(Truncation{Offset: leaderLogEnd}, true, 0)
	case leaderLogStart > f.logEnd:
		f.startTruncation(Truncation{Offset: leaderLogStart, Restart: true}, true, 0)
	default:
		return fmt.Errorf("%w: fetch offset %d is within the leader's log [%d, %d)", ErrInvalidInput, f.logEnd, leaderLogStart, leaderLogEnd)
	}
	return nil
}

// FetchFailed says the fetch in flight got no usable answer; the next Ready
// sends another, after a back-off of the caller's. A fenced or unknown epoch
// means the caller should also refresh the leader metadata.
func (f *Follower) FetchFailed() error {
	if f.phase != phaseFetch || !f.sent {
		return fmt.Errorf("%w: fetch failure without a fetch in flight", ErrInvalidInput)
	}
	f.sent = false
	return nil
}

// HasReady says Ready has something.
func (f *Follower) HasReady() bool {
	return f.hwChanged || (!f.sent && (f.phase != phaseFetch || f.canFetch()))
}

// Ready returns the output accumulated since the last call and clears it.
func (f *Follower) Ready() FollowerReady {
	rd := FollowerReady{HighWatermarkChanged: f.hwChanged, HighWatermark: f.hw}
	f.hwChanged = false
	if f.sent {
		return rd
	}
	switch f.phase {
	case phaseTruncate:
		t := f.truncation
		rd.Truncate = &t
	case phaseFetch:
		if !f.canFetch() {
			return rd
		}
		lastFetched, ok := f.cache.LatestEpoch()
		if !ok {
			lastFetched = UndefinedEpoch
		}
		rd.Fetch = &FetchRequest{
			ReplicaID:          f.self,
			FetchOffset:        f.logEnd,
			CurrentLeaderEpoch: f.leaderEpoch,
			LastFetchedEpoch:   lastFetched,
		}
	}
	f.sent = true
	return rd
}

// reconcile decides the truncation for the leader's end of an epoch, as
// Kafka's AbstractFetcherThread.getOffsetTruncationState does.
func (f *Follower) reconcile(leader EpochEndOffset) error {
	own, ownEnd, ok := f.cache.EndOffsetForEpoch(leader.Epoch)
	switch {
	case leader.Epoch < 0 || leader.EndOffset < 0:
		return fmt.Errorf("%w: leader answered epoch %d ending at %d", ErrInvalidInput, leader.Epoch, leader.EndOffset)
	case !ok || own > leader.Epoch || ownEnd < 0 || ownEnd > f.logEnd:
		return fmt.Errorf("%w: own epoch cache answers epoch %d ending at %d (present %t) for epoch %d, log end %d", ErrInconsistentLog, own, ownEnd, ok, leader.Epoch, f.logEnd)
	case own == leader.Epoch:
		f.startTruncation(Truncation{Offset: min(ownEnd, leader.EndOffset, f.logEnd)}, true, 0)
	default:
		// The leader's epoch is unknown here, so nothing after this log's
		// own largest epoch below it can match the leader: cut there, and
		// the next fetch names that epoch for the leader to check.
		f.startTruncation(Truncation{Offset: min(ownEnd, f.logEnd)}, false, own)
	}
	return nil
}

func (f *Follower) startTruncation(t Truncation, reconciled bool, keptEpoch int32) {
	f.phase, f.sent = phaseTruncate, false
	f.truncation, f.reconciled, f.keptEpoch = t, reconciled, keptEpoch
}

// canFetch holds back a fetch in fsync mode until the log is fsynced, so the
// fetch offset the leader counts is durable.
func (f *Follower) canFetch() bool {
	return f.durability == DurabilityReplicated || f.syncedEnd == f.logEnd
}

func (f *Follower) updateHighWatermark() {
	if hw := min(f.leaderHW, f.durableEnd()); hw > f.hw {
		f.setHighWatermark(hw)
	}
}

func (f *Follower) setHighWatermark(hw int64) {
	f.hw, f.hwChanged = hw, true
}
