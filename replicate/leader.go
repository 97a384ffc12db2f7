package replicate

import (
	"fmt"
	"slices"
	"time"
)

// LeaderConfig is what a replica knows when it becomes a partition's leader.
type LeaderConfig struct {
	// Self is this replica's node id.
	Self string
	// Epoch is the leader epoch this replica won in Consul. Before creating
	// the Leader the caller assigns it in the log's epoch cache, starting at
	// EpochStartOffset (the log end offset at the time), so that the cache's
	// latest epoch is Epoch.
	Epoch            int32
	EpochStartOffset int64
	// Replicas is the partition's replica set, Self included.
	Replicas []string
	// ISR is the committed in-sync replica set as stored in Consul, Self
	// included.
	ISR []string
	// ELR are the eligible leader replicas as stored with the ISR.
	ELR               []EligibleReplica
	MinInsyncReplicas int
	// LagTimeMax is how long a follower may go without catching up before
	// it is proposed for removal from the ISR.
	LagTimeMax time.Duration
	Durability Durability
	// LogEndOffset is the next offset the log will write; SyncedEndOffset
	// bounds the records known to be fsynced (at most LogEndOffset).
	LogEndOffset    int64
	SyncedEndOffset int64
	// HighWatermark is the replica's checkpointed HW, at most LogEndOffset.
	HighWatermark int64
	EpochCache    EpochCache
}

// AckID names a pending produce ack; the caller picks it, unique among the
// acks pending on one Leader.
type AckID uint64

// AckOutcome is a finished produce wait: Err is nil when the write met its
// acks condition, and otherwise matches ErrNotEnoughReplicasAfterAppend,
// ErrNotLeader or ErrAckTimeout.
type AckOutcome struct {
	ID  AckID
	Err error
}

// ISRProposal is an ISR change for the caller to write with the guarded
// Consul transaction (check the leader key's session, CAS the state at
// Epoch). The caller answers with ISRCommitted or ISRProposalFailed.
type ISRProposal struct {
	Epoch int32
	ISR   []string
	// ELR are the eligible leader replicas the change leaves, written with
	// the ISR.
	ELR []EligibleReplica
	// Replicas, when not nil, ends a reassignment (ProposeReassignment):
	// the same transaction sets the replica set to it. After ISRCommitted
	// the caller hands the committed replica set to SetReplicas.
	Replicas []string
	// NonReplicas, when not empty, are what the change takes out of
	// Consul's ISR and ELR because they are not replicas: Consul named
	// them at the leader's election (NewLeader) or in an ISRCommitted.
	// The caller warns about them: Consul's state was corrupt.
	NonReplicas []string
}

// EligibleReplica is a replica outside the ISR that still holds every
// committed record, so it may lead when no ISR member is alive (KIP-966's
// eligible leader replicas): it left the ISR in a change that took the ISR
// below min_insync_replicas, and the HW has not grown since, since it never
// grows while the ISR is below min_insync_replicas. A later change that
// brings the ISR back to min_insync_replicas empties the set: the HW may
// move on without them. A follower that lost its data never joins it.
// LogEndOffset is the replica's log end as the leader last knew it, so that
// elections try the longest log first.
type EligibleReplica struct {
	ID           string
	LogEndOffset int64
}

// LeaderReady is the output the caller drains from a Leader with Ready.
type LeaderReady struct {
	// HighWatermarkChanged says HighWatermark grew since the last Ready:
	// checkpoint it and publish it to readers.
	HighWatermarkChanged bool
	HighWatermark        int64
	// ISRProposal, when not nil, is an ISR change to write to Consul.
	ISRProposal *ISRProposal
	// Acks are the produce waits that finished, in the order they did.
	// Answer each at once: none needs anything else to be persisted first.
	Acks []AckOutcome
}

// ReplicaStatus is the leader's view of one replica, for status and metrics.
type ReplicaStatus struct {
	ID string
	// LogEndOffset is the replica's last fetch offset in this epoch, or -1
	// before its first valid fetch. For the leader it is its own log end.
	LogEndOffset int64
	// LastCaughtUp is when the replica was last known to be caught up
	// (Kafka's lastCaughtUpTimeMs); zero if never in this epoch.
	LastCaughtUp time.Time
	// InSync says the replica is in the committed ISR.
	InSync bool
	// Retiring says the replica's latest fetch said its agent is stopping.
	Retiring bool
}

// unknownOffset is a follower's log end offset before its first valid fetch
// of the epoch: the HW waits for it.
const unknownOffset int64 = -1

// replicaProgress is what the leader learns about a follower from its
// fetches (Kafka's Replica state).
type replicaProgress struct {
	logEnd                int64
	lastCaughtUp          time.Time
	lastFetchLeaderLogEnd int64
	lastFetchTime         time.Time
	// dataLoss is the DataLoss flag of the follower's latest fetch: it is
	// removed from the ISR and not admitted while set.
	dataLoss bool
	// retiring is the Retiring flag of its latest fetch.
	retiring bool
	// parked says its latest fetch, at the leader's log end, is held in a
	// live fetch session (FollowerParked): it counts as caught up until
	// the leader's log moves past it (parkPassed), or until the fetch is
	// answered or the session ends if that comes first.
	parked bool
	// parkPassed is when an append moved the leader's log past the parked
	// fetch, zero before. A parked follower stands for one that fetches
	// at the log end all the time, so that is when it stopped being
	// caught up (Kafka's lastCaughtUpTimeMs: the latest time the leader's
	// log end was at most its fetch offset), however long its answer
	// then takes to go out: a session's writer may spend long on a slow
	// link sending other partitions' answers first.
	parkPassed time.Time
}

type pendingAck struct {
	id         AckID
	lastOffset int64
	acks       Acks
	deadline   time.Time
}

// isrChange is the one ISR proposal in flight.
type isrChange struct {
	isr []string
	elr []EligibleReplica
	// added is the follower an expansion adds; it counts toward the HW
	// before the change commits. Empty for a shrink.
	added string
	// replicas is the replica set a reassignment's completion sets.
	replicas []string
	// nonReplicas are what the change takes out of Consul's ISR and ELR
	// (ISRProposal.NonReplicas).
	nonReplicas []string
}

// Leader is the leader's replication state for one partition: it validates
// follower fetches, tracks their progress, moves the high watermark, decides
// ISR changes and completes produce acks. It does no I/O and is not safe for
// concurrent use: the caller feeds it inputs one at a time and drains Ready.
type Leader struct {
	self       string
	epoch      int32
	epochStart int64
	replicas   []string
	minISR     int
	lagTimeMax time.Duration
	cache      EpochCache

	ownLog
	hw int64

	isr []string
	elr []EligibleReplica
	// nonReplicas are what Consul's ISR and ELR, as last committed, name
	// outside the replicas (withoutNonReplicas); isr and elr leave them
	// out. Until a change without them commits the HW does not grow: they
	// count as ISR members whose log end is unknown, as the followers any
	// shrink removes count until it commits.
	nonReplicas []string
	inFlight    *isrChange
	followers   map[string]*replicaProgress
	// dead are the followers Consul last said are dead (SetDeadFollowers).
	dead map[string]bool

	acks   []pendingAck
	ackIDs map[AckID]struct{}

	resigned bool
	ready    LeaderReady
}

// NewLeader returns the state of a replica that just became leader. Every
// follower in the ISR counts as caught up at now, and every follower's log
// end is unknown until it fetches, so the HW waits for each ISR member's
// first fetch of the epoch. Members of the ISR or ELR that are not
// replicas it leaves out (withoutNonReplicas): its first Ready proposes
// Consul's ISR and ELR without them, and the HW waits for that change.
func NewLeader(cfg LeaderConfig, now time.Time) (*Leader, error) {
	var nonReplicas []string
	cfg.ISR, cfg.ELR, nonReplicas = withoutNonReplicas(cfg.ISR, cfg.ELR, cfg.Replicas)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	l := &Leader{
		self:       cfg.Self,
		epoch:      cfg.Epoch,
		epochStart: cfg.EpochStartOffset,
		replicas:   slices.Clone(cfg.Replicas),
		minISR:     cfg.MinInsyncReplicas,
		lagTimeMax: cfg.LagTimeMax,
		cache:      cfg.EpochCache,
		ownLog:     ownLog{durability: cfg.Durability, logEnd: cfg.LogEndOffset, syncedEnd: cfg.SyncedEndOffset},
		hw:         cfg.HighWatermark,
		followers:  make(map[string]*replicaProgress, len(cfg.Replicas)-1),
		dead:       map[string]bool{},
		ackIDs:     make(map[AckID]struct{}),
	}
	l.isr = l.inReplicaOrder(cfg.ISR)
	l.elr = cfg.ELR
	l.nonReplicas = nonReplicas
	for _, id := range l.replicas {
		if id == l.self {
			continue
		}
		p := &replicaProgress{logEnd: unknownOffset, lastFetchLeaderLogEnd: l.logEnd}
		if slices.Contains(l.isr, id) {
			p.lastCaughtUp = now
			p.lastFetchTime = now
		}
		l.followers[id] = p
	}
	if len(nonReplicas) > 0 {
		l.maybeShrinkISR(now)
	}
	l.updateHighWatermark()
	return l, nil
}

// withoutNonReplicas splits Consul's isr and elr into the members that are
// replicas, in their order, and the ones that are not (an operator's edit,
// a bug, a move that removed a replica racing a stale ISR write). Leaving
// those out only shrinks the ISR and ELR, which a leader in the ISR may
// always do (Kafka's rule: it holds the committed log, and the HW only
// ever counted replicas): a non-replica fetches nothing (ErrNotReplica),
// so no record the HW passed depends on it, and a campaign needs to be a
// replica. Refusing them instead had the leader step down, and whoever won
// the next epoch meet the same state: the epoch climbed and the partition
// took no writes until Consul was repaired.
func withoutNonReplicas(isr []string, elr []EligibleReplica, replicas []string) ([]string, []EligibleReplica, []string) {
	var nonReplicas []string
	notReplica := func(id string) bool {
		if slices.Contains(replicas, id) {
			return false
		}
		if !slices.Contains(nonReplicas, id) {
			nonReplicas = append(nonReplicas, id)
		}
		return true
	}
	isr = slices.DeleteFunc(slices.Clone(isr), notReplica)
	elr = slices.DeleteFunc(slices.Clone(elr), func(e EligibleReplica) bool { return notReplica(e.ID) })
	return isr, elr, nonReplicas
}

func (cfg *LeaderConfig) validate() error {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: leader: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case cfg.Self == "":
		return invalid("empty self id")
	case cfg.Epoch < 0:
		return invalid("negative epoch %d", cfg.Epoch)
	case !slices.Contains(cfg.Replicas, cfg.Self):
		return invalid("self %q is not among the replicas %v", cfg.Self, cfg.Replicas)
	case !slices.Contains(cfg.ISR, cfg.Self):
		return invalid("self %q is not in the ISR %v", cfg.Self, cfg.ISR)
	case cfg.MinInsyncReplicas < 1 || cfg.MinInsyncReplicas > len(cfg.Replicas):
		return invalid("min insync replicas %d outside [1, %d]", cfg.MinInsyncReplicas, len(cfg.Replicas))
	case cfg.LagTimeMax <= 0:
		return invalid("lag time max %s is not positive", cfg.LagTimeMax)
	case cfg.Durability != DurabilityFsync && cfg.Durability != DurabilityReplicated:
		return invalid("unknown %s", cfg.Durability)
	case cfg.LogEndOffset < 0:
		return invalid("negative log end offset %d", cfg.LogEndOffset)
	case cfg.SyncedEndOffset < 0 || cfg.SyncedEndOffset > cfg.LogEndOffset:
		return invalid("synced end offset %d outside [0, log end %d]", cfg.SyncedEndOffset, cfg.LogEndOffset)
	case cfg.HighWatermark < 0 || cfg.HighWatermark > cfg.LogEndOffset:
		return invalid("high watermark %d outside [0, log end %d]", cfg.HighWatermark, cfg.LogEndOffset)
	case cfg.EpochStartOffset < 0 || cfg.EpochStartOffset > cfg.LogEndOffset:
		return invalid("epoch start offset %d outside [0, log end %d]", cfg.EpochStartOffset, cfg.LogEndOffset)
	case cfg.EpochCache == nil:
		return invalid("no epoch cache")
	}
	if err := checkMembers("replicas", cfg.Replicas, nil); err != nil {
		return invalid("%v", err)
	}
	// NewLeader left out the non-replicas.
	if err := checkMembers("ISR", cfg.ISR, nil); err != nil {
		return invalid("%v", err)
	}
	for _, e := range cfg.ELR {
		if slices.Contains(cfg.ISR, e.ID) {
			return invalid("eligible replica %q is in the ISR %v", e.ID, cfg.ISR)
		}
	}
	if latest, ok := cfg.EpochCache.LatestEpoch(); !ok || latest != cfg.Epoch {
		return fmt.Errorf("%w: leader epoch %d is not the epoch cache's latest (%d, present %t): assign it before leading", ErrInconsistentLog, cfg.Epoch, latest, ok)
	}
	// The end of the previous epoch is where this one starts; with no
	// previous epoch the cache answers with the start of the first one.
	if cfg.Epoch > 0 {
		if _, end, ok := cfg.EpochCache.EndOffsetForEpoch(cfg.Epoch - 1); !ok || end != cfg.EpochStartOffset {
			return fmt.Errorf("%w: epoch cache starts epoch %d at %d, not at %d", ErrInconsistentLog, cfg.Epoch, end, cfg.EpochStartOffset)
		}
	}
	return nil
}

// Epoch is the leader epoch.
func (l *Leader) Epoch() int32 { return l.epoch }

// HighWatermark is the exclusive bound of committed records.
func (l *Leader) HighWatermark() int64 { return l.hw }

// LogEndOffset is the leader's log end offset, fsynced or not.
func (l *Leader) LogEndOffset() int64 { return l.logEnd }

// ISR is the committed in-sync replica set, in replica order.
func (l *Leader) ISR() []string { return slices.Clone(l.isr) }

// ELR is the committed set of eligible leader replicas.
func (l *Leader) ELR() []EligibleReplica { return slices.Clone(l.elr) }

// Resigned says the leader resigned: every input but Ready fails.
func (l *Leader) Resigned() bool { return l.resigned }

// Progress is the leader's view of every replica, in replica order.
func (l *Leader) Progress() []ReplicaStatus {
	out := make([]ReplicaStatus, 0, len(l.replicas))
	for _, id := range l.replicas {
		s := ReplicaStatus{ID: id, InSync: slices.Contains(l.isr, id)}
		if id == l.self {
			s.LogEndOffset = l.logEnd
		} else {
			p := l.followers[id]
			s.LogEndOffset, s.LastCaughtUp, s.Retiring = p.logEnd, p.caughtUpAsOf(), p.retiring
		}
		out = append(out, s)
	}
	return out
}

// Successors lists, in replica order, the followers that can take the
// leadership over without losing anything this leader holds (the
// controlled shutdown's choice, docs/design.md §7): in the committed ISR,
// and in the ISR of the change in flight if there is one (a removal may
// commit before the handover), not reported dead, not flagging data loss,
// and with a fetch offset at the leader's log end, which in fsync mode
// counts only what the follower has fsynced; not one whose agent is
// stopping too. The caller stops appending first, or the log end moves on
// while it looks.
func (l *Leader) Successors() []string {
	var out []string
	for _, id := range l.isr {
		p := l.followers[id]
		switch {
		case id == l.self, l.dead[id], p.dataLoss, p.retiring, p.logEnd != l.logEnd:
		case l.inFlight != nil && !slices.Contains(l.inFlight.isr, id):
		default:
			out = append(out, id)
		}
	}
	return out
}

// CanAppend is the check before appending a produce request: an acks=all
// write is refused (ErrNotEnoughReplicas) while the committed ISR is smaller
// than min_insync_replicas, and every write is refused (ErrNotLeader) after
// resigning.
func (l *Leader) CanAppend(acks Acks) error {
	if l.resigned {
		return fmt.Errorf("%w: epoch %d resigned", ErrNotLeader, l.epoch)
	}
	if acks == AcksAll && len(l.isr) < l.minISR {
		return fmt.Errorf("%w: ISR %v is below min insync replicas %d", ErrNotEnoughReplicas, l.isr, l.minISR)
	}
	return nil
}

// Appended reports that the log wrote records up to and including
// lastOffset at now. In replicated mode they count toward the HW at once;
// in fsync mode once Synced reports them. A parked follower (FollowerParked)
// counts as caught up only until now: from then on it lags, however long
// its parked fetch takes to be answered.
func (l *Leader) Appended(lastOffset int64, now time.Time) error {
	if l.resigned {
		return fmt.Errorf("%w: epoch %d resigned", ErrNotLeader, l.epoch)
	}
	if err := l.appended(lastOffset); err != nil {
		return err
	}
	for _, p := range l.followers {
		if p.parked && p.parkPassed.IsZero() {
			p.parkPassed = now
		}
	}
	l.updateHighWatermark()
	return nil
}

// Synced reports that every record up to and including lastOffset is
// fsynced (one group commit).
func (l *Leader) Synced(lastOffset int64) error {
	if l.resigned {
		return fmt.Errorf("%w: epoch %d resigned", ErrNotLeader, l.epoch)
	}
	if err := l.synced(lastOffset); err != nil {
		return err
	}
	l.updateHighWatermark()
	return nil
}

// WaitAck registers a produce wait for an appended write whose last record is
// lastOffset. acks=1 finishes once the leader counts the write, acks=all once
// the HW passes it, or with ErrNotEnoughReplicasAfterAppend if the committed
// ISR is (or becomes) smaller than min_insync_replicas first. A write still
// waiting at deadline fails with ErrAckTimeout on the next Tick; a zero
// deadline waits for ever. The outcome comes out of Ready, possibly the next
// one.
func (l *Leader) WaitAck(id AckID, lastOffset int64, acks Acks, deadline time.Time) error {
	if l.resigned {
		return fmt.Errorf("%w: epoch %d resigned", ErrNotLeader, l.epoch)
	}
	if acks != AcksLeader && acks != AcksAll {
		return fmt.Errorf("%w: ack %d: nothing to wait for with acks=%s", ErrInvalidInput, id, acks)
	}
	if _, dup := l.ackIDs[id]; dup {
		return fmt.Errorf("%w: ack %d is already pending", ErrInvalidInput, id)
	}
	if lastOffset < 0 || lastOffset >= l.logEnd {
		return fmt.Errorf("%w: ack %d: last offset %d is not appended (log end %d)", ErrInvalidInput, id, lastOffset, l.logEnd)
	}
	l.ackIDs[id] = struct{}{}
	l.acks = append(l.acks, pendingAck{id: id, lastOffset: lastOffset, acks: acks, deadline: deadline})
	l.settleAcks()
	return nil
}

// Fetch validates a follower's fetch and, when the follower's log matches
// the leader's up to the fetch offset, records its progress, which may move
// the HW, complete acks and propose adding the follower to the ISR.
//
// It fails with ErrFencedLeaderEpoch or ErrUnknownLeaderEpoch for another
// epoch, ErrNotReplica for a stranger, ErrOffsetOutOfRange for an offset
// beyond the leader's log end and ErrInvalidRequest for nonsense; then
// nothing is recorded. An offset below the log start offset is the caller's
// to refuse, before calling Fetch, with the same out-of-range answer.
//
// A follower whose last fetched epoch ends, in the leader's log, before its
// fetch offset (or which the leader does not have) gets
// FetchResult.Diverging, and no progress is recorded either: the log end it
// reported before in this epoch is forgotten (its log is not what it was),
// its flags are taken, and the fetch ends a park (FollowerParked), as of
// now.
func (l *Leader) Fetch(req FetchRequest, now time.Time) (FetchResult, error) {
	p, err := l.checkRequest(req.ReplicaID, req.CurrentLeaderEpoch)
	if err != nil {
		return FetchResult{}, err
	}
	if req.FetchOffset < 0 {
		return FetchResult{}, fmt.Errorf("%w: fetch offset %d from %q", ErrInvalidRequest, req.FetchOffset, req.ReplicaID)
	}
	if req.LastFetchedEpoch < UndefinedEpoch || req.LastFetchedEpoch > l.epoch {
		return FetchResult{}, fmt.Errorf("%w: last fetched epoch %d from %q, leader epoch %d", ErrInvalidRequest, req.LastFetchedEpoch, req.ReplicaID, l.epoch)
	}
	result := FetchResult{LeaderEpoch: l.epoch, LogEndOffset: l.logEnd, EpochStartOffset: l.epochStart}
	if req.LastFetchedEpoch != UndefinedEpoch {
		end, err := l.endOffsetForEpoch(req.LastFetchedEpoch)
		if err != nil {
			return FetchResult{}, err
		}
		if end.Diverges(req.LastFetchedEpoch, req.FetchOffset) {
			// Any fetch ends a park (FollowerParked): this follower is
			// not at the log end, whatever it sent before.
			p.endPark(now)
			// A follower whose fetch passed this check earlier in the
			// epoch held a prefix of this log up to what it reported;
			// now its log is not one (it changed under it: lost records,
			// older ones back). What it reported no longer counts, for
			// the HW, the join rule or a handover, and a data-loss flag
			// removes it at once, as on any other fetch.
			p.logEnd = unknownOffset
			p.dataLoss, p.retiring = req.DataLoss, req.Retiring
			if p.dataLoss {
				l.maybeShrinkISR(now)
			}
			result.HighWatermark = l.hw
			result.Diverging = &end
			return result, nil
		}
	}
	if req.FetchOffset > l.logEnd {
		return FetchResult{}, fmt.Errorf("%w: fetch offset %d from %q is beyond the log end %d", ErrOffsetOutOfRange, req.FetchOffset, req.ReplicaID, l.logEnd)
	}

	// Kafka's Replica.updateFetchState: a follower at the leader's log end is
	// caught up now; one that reached where the leader's log ended at its
	// previous fetch was caught up as of that fetch, or, if that fetch was
	// parked, as long as the park lasted.
	p.endPark(now)
	if req.FetchOffset >= l.logEnd {
		p.lastCaughtUp = maxTime(p.lastCaughtUp, now)
	} else if req.FetchOffset >= p.lastFetchLeaderLogEnd {
		p.lastCaughtUp = maxTime(p.lastCaughtUp, p.lastFetchTime)
	}
	p.lastFetchLeaderLogEnd = l.logEnd
	p.lastFetchTime = now
	p.logEnd = req.FetchOffset
	p.dataLoss = req.DataLoss
	p.retiring = req.Retiring

	if p.dataLoss {
		l.maybeShrinkISR(now)
	} else {
		l.maybeExpandISR(req.ReplicaID, p)
	}
	l.updateHighWatermark()
	result.HighWatermark = l.hw
	return result, nil
}

// OffsetForEpoch answers a follower's EpochRequest with the largest epoch at
// or below the asked one in the leader's log, and where it ends there. It
// fails like Fetch for a wrong epoch or a stranger.
func (l *Leader) OffsetForEpoch(req EpochRequest) (EpochEndOffset, error) {
	if _, err := l.checkRequest(req.ReplicaID, req.CurrentLeaderEpoch); err != nil {
		return EpochEndOffset{}, err
	}
	if req.Epoch < 0 || req.Epoch > l.epoch {
		return EpochEndOffset{}, fmt.Errorf("%w: epoch %d asked by %q, leader epoch %d", ErrInvalidRequest, req.Epoch, req.ReplicaID, l.epoch)
	}
	return l.endOffsetForEpoch(req.Epoch)
}

// FollowerParked reports that the follower's latest fetch, which Fetch has
// just recorded at the leader's log end, is held in a live fetch session
// (docs/design.md §7.9) instead of being asked again every fetch_max_wait:
// until FollowerUnparked, its next Fetch or an append (Appended) the
// follower counts as caught up, however long it waits, without an input
// per round. It refuses (ErrInvalidInput) a fetch offset other than the
// log end, and fails like Fetch for another epoch or a stranger.
func (l *Leader) FollowerParked(id string, epoch int32, fetchOffset int64) error {
	p, err := l.checkRequest(id, epoch)
	if err != nil {
		return err
	}
	if fetchOffset != l.logEnd || p.logEnd != l.logEnd {
		return fmt.Errorf("%w: %q parked at %d (recorded %d), log end %d", ErrInvalidInput, id, fetchOffset, p.logEnd, l.logEnd)
	}
	p.parked, p.parkPassed = true, time.Time{}
	return nil
}

// FollowerUnparked reports that the follower's parked fetch ended at at:
// answered (the log or the HW moved on), dropped, or its session ended, in
// which case at is the session's last sign of life, so a follower whose
// host vanished is removed lagTimeMax after it was last heard of, as if it
// had stopped fetching then. It counts as caught up as of at, or as of the
// append that moved the log past its fetch if that came first (an answer
// written long after the append does not make it any more caught up), and
// from then on by Kafka's rule again. A follower no longer parked (a later
// Fetch came first) is left as it is.
func (l *Leader) FollowerUnparked(id string, epoch int32, at time.Time) error {
	p, err := l.checkRequest(id, epoch)
	if err != nil {
		return err
	}
	p.endPark(at)
	return nil
}

// endPark ends p's park, if it has one, at end: it was caught up until
// then, or until the leader's log moved past it if that was earlier.
func (p *replicaProgress) endPark(end time.Time) {
	if !p.parked {
		return
	}
	if !p.parkPassed.IsZero() && p.parkPassed.Before(end) {
		end = p.parkPassed
	}
	p.lastCaughtUp = maxTime(p.lastCaughtUp, end)
	p.parked, p.parkPassed = false, time.Time{}
}

// caughtUpAsOf is when p was last known to be caught up: for a parked
// follower, until the leader's log moved past it.
func (p *replicaProgress) caughtUpAsOf() time.Time {
	if p.parked {
		return maxTime(p.lastCaughtUp, p.parkPassed)
	}
	return p.lastCaughtUp
}

// Tick moves the leader's time: it fails acks past their deadline and, with
// no ISR change in flight, proposes removing every ISR follower that has not
// caught up within LagTimeMax or that Consul says is dead (SetDeadFollowers),
// and every non-replica Consul's ISR and ELR name, or else adding a parked
// follower that meets the ISR-join rule.
// The HW keeps counting a removed follower until ISRCommitted confirms the
// removal.
func (l *Leader) Tick(now time.Time) {
	if l.resigned {
		return
	}
	l.acks = slices.DeleteFunc(l.acks, func(a pendingAck) bool {
		if a.deadline.IsZero() || now.Before(a.deadline) {
			return false
		}
		l.finishAck(a, fmt.Errorf("%w: ack %d for last offset %d, high watermark %d", ErrAckTimeout, a.id, a.lastOffset, l.hw))
		return true
	})
	l.maybeShrinkISR(now)
	l.maybeClearELR()
	// A follower outside the ISR whose fetch is parked sends no fetch that
	// would propose adding it (one that came while another change was in
	// flight proposed nothing): propose it here.
	for _, id := range l.replicas {
		if p := l.followers[id]; id != l.self && p.parked {
			l.maybeExpandISR(id, p)
		}
	}
}

// TickNeeded reports whether a Tick, now or at any later time, could do
// anything before another call changes the leader: a write waits for its
// acknowledgement (its deadline), an ISR follower is dead, says it lost
// data or is caught up only by the clock (lagging behind the log end, a
// parked one too once an append passed it, so LagTimeMax may run out), a
// parked follower outside the ISR meets the join rule, the ELR can be
// cleared, or Consul's ISR or ELR names a non-replica. False, the leader's
// state does not depend on time: the agent stops ticking it, so thousands
// of idle partitions cost no wakes
// (docs/design.md §7). An ISR change in flight waits for ISRCommitted or
// ISRProposalFailed, calls both.
func (l *Leader) TickNeeded() bool {
	if l.resigned {
		return false
	}
	if len(l.acks) > 0 {
		return true
	}
	if l.inFlight != nil {
		return false
	}
	if len(l.nonReplicas) > 0 || len(l.elr) > 0 && len(l.isr) >= l.minISR {
		return true
	}
	// As maybeShrinkISR and then maybeExpandISR see them, with the clock
	// left out of caughtUp.
	for _, id := range l.isr {
		if p := l.followers[id]; id != l.self && (l.dead[id] || l.lostData(p) || p.logEnd != l.logEnd) {
			return true
		}
	}
	for _, id := range l.replicas {
		p := l.followers[id]
		if id != l.self && p.parked && !l.dead[id] && !p.dataLoss && !slices.Contains(l.isr, id) && l.meetsJoinRule(p) {
			return true
		}
	}
	return false
}

// AwaitingAcks reports whether a write waits for its acknowledgement: its
// deadline needs Tick at a fine grain, while an idle leader's ticks only
// time ISR lag, which lag_time_max measures in seconds.
func (l *Leader) AwaitingAcks() bool { return len(l.acks) > 0 }

// NextAckDeadline is the earliest deadline of the acks awaited, which a
// Tick at or after it fails; false when no awaited ack has one.
func (l *Leader) NextAckDeadline() (time.Time, bool) {
	var next time.Time
	for _, a := range l.acks {
		if !a.deadline.IsZero() && (next.IsZero() || a.deadline.Before(next)) {
			next = a.deadline
		}
	}
	return next, !next.IsZero()
}

// MinInsyncReplicas is the min_insync_replicas the leader applies.
func (l *Leader) MinInsyncReplicas() int { return l.minISR }

// SetMinInsyncReplicas applies a topic's changed min_insync_replicas
// (docs/design.md §7) at once: CanAppend and the HW rule use it from now
// on. Raised above the ISR, the HW stops and the acks=all writes it has not
// passed fail; lowered to the ISR or below, the HW may grow again, but
// only once the eligible leader replicas are gone from Consul, since they
// hold the committed log only while it cannot grow: the leader proposes
// the ISR unchanged with no ELR (KIP-966 clears the ELR on a change of
// min.insync.replicas for the same reason).
func (l *Leader) SetMinInsyncReplicas(n int) error {
	if l.resigned {
		return fmt.Errorf("%w: epoch %d resigned", ErrNotLeader, l.epoch)
	}
	if n < 1 || n > len(l.replicas) {
		return fmt.Errorf("%w: min insync replicas %d outside [1, %d]", ErrInvalidInput, n, len(l.replicas))
	}
	l.minISR = n
	l.maybeClearELR()
	l.updateHighWatermark()
	return nil
}

// maybeClearELR proposes, with no ISR change in flight, writing the ISR
// again without the eligible leader replicas once it reaches
// min_insync_replicas (possible only after SetMinInsyncReplicas lowered
// it: a change that brings the ISR there empties the ELR itself).
func (l *Leader) maybeClearELR() {
	if l.inFlight == nil && len(l.elr) > 0 && len(l.isr) >= l.minISR {
		l.propose(&isrChange{isr: slices.Clone(l.isr)})
	}
}

// SetDeadFollowers tells the leader which replicas Consul says are dead (the
// agent's check is critical or its registration is gone); it replaces the
// previous set, and ids that are not followers of this partition (the
// leader itself included) are ignored. With no ISR change in flight, a dead
// ISR follower is proposed for removal at once instead of after LagTimeMax:
// the same guarded proposal as a lag-based shrink, so the HW keeps counting
// it until ISRCommitted confirms the removal. A dead follower is not added
// to the ISR, however far it fetched; once Consul stops calling it dead it
// is treated like any other follower again, and rejoins by catching up.
func (l *Leader) SetDeadFollowers(ids []string, now time.Time) error {
	if l.resigned {
		return fmt.Errorf("%w: epoch %d resigned", ErrNotLeader, l.epoch)
	}
	clear(l.dead)
	for _, id := range ids {
		if _, ok := l.followers[id]; ok {
			l.dead[id] = true
		}
	}
	l.maybeShrinkISR(now)
	return nil
}

// maybeShrinkISR proposes, with no ISR change in flight, removing every ISR
// follower that is dead, says it lost its data, or has not caught up within
// LagTimeMax, and every non-replica Consul's ISR and ELR name.
func (l *Leader) maybeShrinkISR(now time.Time) {
	if l.inFlight != nil {
		return
	}
	out := func(id string) bool {
		p := l.followers[id]
		return id != l.self && (l.dead[id] || l.lostData(p) || !l.caughtUp(p, now))
	}
	if slices.ContainsFunc(l.isr, out) || len(l.nonReplicas) > 0 {
		l.propose(&isrChange{isr: slices.DeleteFunc(slices.Clone(l.isr), out), nonReplicas: slices.Clone(l.nonReplicas)})
	}
}

// ISRCommitted reports that the guarded Consul transaction wrote isr as the
// partition's ISR at now, normally the proposal in flight, which it ends; a
// shrink lets the HW stop waiting for the removed followers, and an ISR
// below min_insync_replicas fails the acks=all writes the HW has not passed.
// A follower the change adds counts as caught up at now: it reached the HW
// to be proposed, and a lastCaughtUp from before it joined (none at all, for
// one that never reached the leader's log end in this epoch) would have the
// next Tick remove it again at once. Members of isr or elr that are not
// replicas it leaves out (withoutNonReplicas) and takes the rest as
// committed, then proposes Consul's ISR and ELR without them (and without
// any follower a Tick would remove); the HW waits for that change. It
// refuses (ErrInvalidInput) an ISR that lacks the leader or names a replica
// twice, and an ELR entry in the ISR; the proposal then stays in flight
// and the HW counts the ISR it had, which is not what Consul may elect
// from: the caller resigns. A leader outside Consul's ISR cannot show that
// it holds the committed log, so it may not repair that ISR either.
func (l *Leader) ISRCommitted(isr []string, elr []EligibleReplica, now time.Time) error {
	if l.resigned {
		return fmt.Errorf("%w: epoch %d resigned", ErrNotLeader, l.epoch)
	}
	isr, elr, nonReplicas := withoutNonReplicas(isr, elr, l.replicas)
	if err := checkMembers("committed ISR", isr, nil); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidInput, err)
	}
	if !slices.Contains(isr, l.self) {
		return fmt.Errorf("%w: committed ISR %v lacks the leader %q", ErrInvalidInput, isr, l.self)
	}
	for _, e := range elr {
		if slices.Contains(isr, e.ID) {
			return fmt.Errorf("%w: eligible replica %q is in the ISR %v", ErrInvalidInput, e.ID, isr)
		}
	}
	for _, id := range isr {
		if id != l.self && !slices.Contains(l.isr, id) {
			p := l.followers[id]
			p.lastCaughtUp = maxTime(p.lastCaughtUp, now)
		}
	}
	l.isr = l.inReplicaOrder(isr)
	l.elr = elr
	l.nonReplicas = nonReplicas
	l.inFlight = nil
	if len(nonReplicas) > 0 {
		l.maybeShrinkISR(now)
	}
	l.updateHighWatermark()
	return nil
}

// ISRProposalFailed reports that the proposal in flight was not written (the
// transaction failed). The next Tick or fetch may propose again; if the
// failure means the epoch moved, the caller resigns instead. A retry
// refused after a try whose outcome is unknown does not say that (the
// earlier try may have committed): the caller resigns then too.
func (l *Leader) ISRProposalFailed() error {
	if l.resigned {
		return fmt.Errorf("%w: epoch %d resigned", ErrNotLeader, l.epoch)
	}
	if l.inFlight == nil {
		return fmt.Errorf("%w: no ISR proposal in flight", ErrInvalidInput)
	}
	l.inFlight = nil
	// Dropping a pending addition can only raise the minimum.
	l.updateHighWatermark()
	return nil
}

// Resign ends the leadership: every pending ack fails with ErrNotLeader in
// the next Ready, and every later input fails. The caller must not answer a
// produce request after it lost the leadership, except with these outcomes.
func (l *Leader) Resign() {
	if l.resigned {
		return
	}
	l.resigned = true
	l.inFlight = nil
	l.ready.ISRProposal = nil
	for _, a := range l.acks {
		l.finishAck(a, fmt.Errorf("%w: epoch %d resigned before ack %d was done", ErrNotLeader, l.epoch, a.id))
	}
	l.acks = nil
}

// HasReady says Ready has something.
func (l *Leader) HasReady() bool {
	return l.ready.HighWatermarkChanged || l.ready.ISRProposal != nil || len(l.ready.Acks) > 0
}

// Ready returns the output accumulated since the last call and clears it.
func (l *Leader) Ready() LeaderReady {
	rd := l.ready
	rd.HighWatermark = l.hw
	l.ready = LeaderReady{}
	return rd
}

// checkRequest validates the parts common to every follower request.
func (l *Leader) checkRequest(replicaID string, currentLeaderEpoch int32) (*replicaProgress, error) {
	if l.resigned {
		return nil, fmt.Errorf("%w: epoch %d resigned", ErrNotLeader, l.epoch)
	}
	if err := CheckLeaderEpoch(currentLeaderEpoch, l.epoch); err != nil {
		return nil, fmt.Errorf("%w (from %q)", err, replicaID)
	}
	p, ok := l.followers[replicaID]
	if !ok {
		return nil, fmt.Errorf("%w: %q is not a follower among %v", ErrNotReplica, replicaID, l.replicas)
	}
	return p, nil
}

// endOffsetForEpoch asks the leader's epoch cache, which always has the
// leader's own epoch, so every epoch up to it has an answer.
func (l *Leader) endOffsetForEpoch(epoch int32) (EpochEndOffset, error) {
	found, end, ok := l.cache.EndOffsetForEpoch(epoch)
	switch {
	case !ok:
		return EpochEndOffset{}, fmt.Errorf("%w: leader epoch cache has no epoch at or below %d", ErrInconsistentLog, epoch)
	case found > epoch || end < 0 || end > l.logEnd:
		return EpochEndOffset{}, fmt.Errorf("%w: leader epoch cache answers epoch %d ending at %d for epoch %d (log end %d)", ErrInconsistentLog, found, end, epoch, l.logEnd)
	}
	return EpochEndOffset{Epoch: found, EndOffset: end}, nil
}

// caughtUp is Kafka's Replica.isCaughtUp, a parked follower counting as
// caught up until the leader's log moved past it (while it has not, it is
// at the log end).
func (l *Leader) caughtUp(p *replicaProgress, now time.Time) bool {
	return p.logEnd == l.logEnd || now.Sub(p.caughtUpAsOf()) <= l.lagTimeMax
}

// maybeExpandISR proposes adding a follower outside the ISR whose log reached
// both the HW and the start of the current epoch (so it has every record of
// earlier epochs that this leader kept), unless Consul says it is dead or it
// says it lost data: a shrink would remove it again at once.
func (l *Leader) maybeExpandISR(id string, p *replicaProgress) {
	if l.inFlight != nil || l.dead[id] || p.dataLoss || slices.Contains(l.isr, id) {
		return
	}
	if l.meetsJoinRule(p) {
		l.propose(&isrChange{isr: l.inReplicaOrder(append(slices.Clone(l.isr), id)), added: id})
	}
}

// meetsJoinRule is Kafka's ISR-join rule: the follower's log reaches both
// the HW and the start of this epoch, so it holds every committed record
// and every record of earlier epochs this leader kept.
func (l *Leader) meetsJoinRule(p *replicaProgress) bool {
	return p.logEnd >= l.hw && p.logEnd >= l.epochStart
}

// lostData says a follower that flags data loss must leave the ISR: unless
// its log already meets the join rule (a replica created after the
// partition's first election, with nothing committed yet that it lacks),
// it may be missing committed records.
func (l *Leader) lostData(p *replicaProgress) bool {
	return p.dataLoss && !l.meetsJoinRule(p)
}

func (l *Leader) propose(c *isrChange) {
	c.elr = l.eligibleAfter(c.isr)
	l.inFlight = c
	l.ready.ISRProposal = &ISRProposal{Epoch: l.epoch, ISR: slices.Clone(c.isr), ELR: slices.Clone(c.elr), Replicas: slices.Clone(c.replicas), NonReplicas: slices.Clone(c.nonReplicas)}
}

// Replicas is the replica set this leader accepts follower requests from.
func (l *Leader) Replicas() []string { return slices.Clone(l.replicas) }

// InFlight says an ISR change (or a reassignment's completion) is waiting
// for its outcome.
func (l *Leader) InFlight() bool { return l.inFlight != nil }

// SetReplicas replaces the replica set (docs/design.md §7.6): a replica it
// adds is a follower outside the ISR with an unknown log end, which joins
// the ISR by the join rule like any other; a replica it drops is forgotten.
// It refuses (ErrInvalidInput) a set that lacks the leader, a member of the
// committed ISR, of the change in flight or of the ELR, or is smaller than
// min_insync_replicas: replicas leave only through a committed change that
// took them out of the ISR first.
func (l *Leader) SetReplicas(replicas []string) error {
	if l.resigned {
		return fmt.Errorf("%w: epoch %d resigned", ErrNotLeader, l.epoch)
	}
	if err := checkMembers("replicas", replicas, nil); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidInput, err)
	}
	needed := append(slices.Clone(l.isr), l.self)
	if l.inFlight != nil {
		needed = append(needed, l.inFlight.isr...)
	}
	for _, e := range l.elr {
		needed = append(needed, e.ID)
	}
	for _, id := range needed {
		if !slices.Contains(replicas, id) {
			return fmt.Errorf("%w: replicas %v lack %q, the leader or a member of the ISR, of a change in flight or of the ELR", ErrInvalidInput, replicas, id)
		}
	}
	if len(replicas) < l.minISR {
		return fmt.Errorf("%w: replicas %v are fewer than min insync replicas %d", ErrInvalidInput, replicas, l.minISR)
	}
	for _, id := range replicas {
		if _, ok := l.followers[id]; !ok && id != l.self {
			l.followers[id] = &replicaProgress{logEnd: unknownOffset, lastFetchLeaderLogEnd: l.logEnd}
		}
	}
	for id := range l.followers {
		if !slices.Contains(replicas, id) {
			delete(l.followers, id)
			delete(l.dead, id)
		}
	}
	l.replicas = slices.Clone(replicas)
	l.isr = l.inReplicaOrder(l.isr)
	return nil
}

// ProposeReassignment proposes the last step of a reassignment to target
// (docs/design.md §7.6): the replica set becomes target and the ISR loses
// every replica outside it, in one change. It refuses (ErrInvalidInput)
// unless no ISR change is in flight, the leader is in target, target is
// within the replica set and at least min_insync_replicas, and every target
// replica is in the committed ISR but those of deadKept, which must be
// target replicas this leader was told are dead (SetDeadFollowers): the
// replicas the move kept that died during it, which stay outside the ISR.
// The leader does not know which replicas a move added: that deadKept
// names none of them, and when it may leave them out at all
// (reassign.HeldByDeadKept), is the caller's decision (reassign.Next). The
// ISR the change leaves is the committed ISR's members in target, each
// admitted by this leader, so it holds the committed log; the ELR it
// leaves keeps only target replicas.
func (l *Leader) ProposeReassignment(target, deadKept []string) error {
	if err := l.checkLastMoveStep(target); err != nil {
		return err
	}
	if len(target) < l.minISR {
		return fmt.Errorf("%w: target %v is smaller than min insync replicas %d", ErrInvalidInput, target, l.minISR)
	}
	for _, id := range deadKept {
		if !slices.Contains(target, id) || !l.dead[id] {
			return fmt.Errorf("%w: %q left out of the ISR is not a target replica Consul says is dead", ErrInvalidInput, id)
		}
	}
	for _, id := range target {
		if !slices.Contains(l.isr, id) && !slices.Contains(deadKept, id) {
			return fmt.Errorf("%w: target replica %q is not in the ISR %v", ErrInvalidInput, id, l.isr)
		}
	}
	l.proposeLastMoveStep(target)
	return nil
}

// ProposeCancel proposes the last step of a cancelled reassignment's way
// back to target, the list the move started from (docs/design.md §7.6):
// the replica set becomes target and the ISR loses every replica outside
// it, the ones the move added, in one change. Unlike ProposeReassignment it
// does not need every target replica in the ISR (one may be the dead
// replica a move was replacing): the ISR it leaves is the committed ISR's
// members in target, which this leader admitted, so they hold the committed
// log, and the ELR keeps only target replicas (the removed ones leave the
// replica set). It refuses (ErrInvalidInput) unless no ISR change is in
// flight, the leader is in target, target is within the replica set and
// at least min_insync_replicas: min_insync_replicas raised while the move
// ran (an alter racing the moves, election.AlterTopic) must not have the
// way back commit a replica set SetReplicas refuses and no leader can
// start on; the move waits for it to be lowered again.
func (l *Leader) ProposeCancel(target []string) error {
	if err := l.checkLastMoveStep(target); err != nil {
		return err
	}
	if len(target) < l.minISR {
		return fmt.Errorf("%w: cancel target %v is smaller than min insync replicas %d", ErrInvalidInput, target, l.minISR)
	}
	l.proposeLastMoveStep(target)
	return nil
}

// proposeLastMoveStep proposes the replica set target, the committed ISR's
// members in it as the ISR and the ELR's as the ELR.
func (l *Leader) proposeLastMoveStep(target []string) {
	isr := slices.DeleteFunc(slices.Clone(l.isr), func(id string) bool { return !slices.Contains(target, id) })
	c := &isrChange{isr: l.inReplicaOrder(isr), replicas: slices.Clone(target)}
	c.elr = slices.DeleteFunc(l.eligibleAfter(c.isr), func(e EligibleReplica) bool { return !slices.Contains(target, e.ID) })
	l.inFlight = c
	l.ready.ISRProposal = &ISRProposal{Epoch: l.epoch, ISR: slices.Clone(c.isr), ELR: slices.Clone(c.elr), Replicas: slices.Clone(c.replicas)}
}

// checkLastMoveStep is what the last step of a move and of a cancelled
// move's way back both need: a leader that has not resigned, no ISR change
// in flight, and a target within the replica set that keeps the leader.
func (l *Leader) checkLastMoveStep(target []string) error {
	if l.resigned {
		return fmt.Errorf("%w: epoch %d resigned", ErrNotLeader, l.epoch)
	}
	if l.inFlight != nil {
		return fmt.Errorf("%w: an ISR change is in flight", ErrInvalidInput)
	}
	if err := checkMembers("target", target, l.replicas); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidInput, err)
	}
	if !slices.Contains(target, l.self) {
		return fmt.Errorf("%w: target %v lacks the leader %q", ErrInvalidInput, target, l.self)
	}
	return nil
}

// eligibleAfter is the ELR once isr replaces the committed ISR: empty when
// isr reaches min_insync_replicas (the HW may grow without the others
// again); else the current ELR less any member back in the ISR, plus every
// follower this change removes, which holds every record below the HW that
// stops growing with it (unless it lost its data).
func (l *Leader) eligibleAfter(isr []string) []EligibleReplica {
	if len(isr) >= l.minISR {
		return nil
	}
	elr := slices.DeleteFunc(slices.Clone(l.elr), func(e EligibleReplica) bool {
		return slices.Contains(isr, e.ID) || l.followers[e.ID].dataLoss
	})
	for _, id := range l.isr {
		if id == l.self || slices.Contains(isr, id) || slices.ContainsFunc(elr, func(e EligibleReplica) bool { return e.ID == id }) {
			continue
		}
		if p := l.followers[id]; !p.dataLoss {
			elr = append(elr, EligibleReplica{ID: id, LogEndOffset: max(p.logEnd, l.hw)})
		}
	}
	return elr
}

// updateHighWatermark sets the HW to the minimum log end over the maximal ISR
// (the committed ISR plus a pending addition) when that is higher, unless the
// committed ISR is below min_insync_replicas (KAFKA-15583), Consul still
// names eligible leader replicas (which hold every committed record only
// while the HW stands still) or non-replicas (nonReplicas), then settles
// the acks.
func (l *Leader) updateHighWatermark() {
	defer l.settleAcks()
	if len(l.isr) < l.minISR || len(l.elr) > 0 || len(l.nonReplicas) > 0 {
		return
	}
	candidate := l.durableEnd()
	for _, id := range l.isr {
		if id != l.self {
			candidate = min(candidate, l.followers[id].logEnd)
		}
	}
	if l.inFlight != nil && l.inFlight.added != "" {
		candidate = min(candidate, l.followers[l.inFlight.added].logEnd)
	}
	if candidate > l.hw {
		l.hw = candidate
		l.ready.HighWatermarkChanged = true
	}
}

// settleAcks finishes the acks whose condition holds, and fails acks=all
// writes the HW cannot pass while the ISR is below min_insync_replicas.
func (l *Leader) settleAcks() {
	if len(l.acks) == 0 {
		return
	}
	durable := l.durableEnd()
	underMinISR := len(l.isr) < l.minISR
	l.acks = slices.DeleteFunc(l.acks, func(a pendingAck) bool {
		switch {
		case a.acks == AcksLeader && a.lastOffset < durable, a.acks == AcksAll && a.lastOffset < l.hw:
			l.finishAck(a, nil)
		case a.acks == AcksAll && underMinISR:
			l.finishAck(a, fmt.Errorf("%w: ISR %v is below min insync replicas %d", ErrNotEnoughReplicasAfterAppend, l.isr, l.minISR))
		default:
			return false
		}
		return true
	})
}

func (l *Leader) finishAck(a pendingAck, err error) {
	delete(l.ackIDs, a.id)
	l.ready.Acks = append(l.ready.Acks, AckOutcome{ID: a.id, Err: err})
}

// inReplicaOrder sorts ids by their position in the replica set, so that
// proposals and comparisons do not depend on input order.
func (l *Leader) inReplicaOrder(ids []string) []string {
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b string) int {
		return slices.Index(l.replicas, a) - slices.Index(l.replicas, b)
	})
	return out
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
