package replicate

import (
	"fmt"
	"slices"
)

// UndefinedEpoch is the last fetched epoch of a replica whose log holds no
// epoch at all (an empty log).
const UndefinedEpoch int32 = -1

// Durability is when a replica's appended records count toward the high
// watermark. The zero value is the safe default.
type Durability uint8

const (
	// DurabilityFsync counts a record only once it is fsynced, on the leader
	// and on every follower: an acknowledged acks=all write survives every
	// host losing power at once.
	DurabilityFsync Durability = iota
	// DurabilityReplicated counts a record once it is appended (in the page
	// cache): an acknowledged write survives the loss of all but one in-sync
	// replica, not a simultaneous power loss.
	DurabilityReplicated
)

func (d Durability) String() string {
	switch d {
	case DurabilityFsync:
		return "fsync"
	case DurabilityReplicated:
		return "replicated"
	default:
		return fmt.Sprintf("durability(%d)", uint8(d))
	}
}

// Acks is what a producer waits for before its write is answered.
type Acks int8

const (
	// AcksNone answers before the append; the state machines never see it.
	AcksNone Acks = 0
	// AcksLeader answers once the leader counts the write: appended, and in
	// fsync mode fsynced.
	AcksLeader Acks = 1
	// AcksAll answers once the high watermark passes the write.
	AcksAll Acks = -1
)

func (a Acks) String() string {
	switch a {
	case AcksNone:
		return "0"
	case AcksLeader:
		return "1"
	case AcksAll:
		return "all"
	default:
		return fmt.Sprintf("acks(%d)", int8(a))
	}
}

// EpochCache is a replica's leader-epoch cache (segstore's
// leader-epoch-checkpoint): for every epoch that has records in the log, the
// offset of its first record, plus the current leader's epoch from the moment
// it took over. The state machines only read it; the log that owns it
// changes it on append and truncation.
type EpochCache interface {
	// LatestEpoch is the highest epoch in the cache; ok is false when the
	// cache is empty.
	LatestEpoch() (epoch int32, ok bool)
	// EndOffsetForEpoch answers Kafka's OffsetsForLeaderEpoch for one
	// epoch: the largest cached epoch at or below the asked one, and the
	// offset where that epoch ends (the start of the next cached epoch, or
	// the log end offset for the latest one). For an epoch below every
	// cached epoch it returns the asked epoch and the start of the first
	// cached one, because none of the asked epoch's records are kept. ok is
	// false when the asked epoch is above every cached epoch, or the cache
	// is empty.
	EndOffsetForEpoch(epoch int32) (foundEpoch int32, endOffset int64, ok bool)
}

// EpochEndOffset is an answer to "where does epoch E end in your log": the
// largest epoch at or below E that the answering log has, and its end.
type EpochEndOffset struct {
	Epoch     int32
	EndOffset int64
}

// Diverges is KIP-320's check of a fetch that names the epoch of the last
// batch the fetcher holds, e being where that epoch ends in the log read:
// the fetcher's log diverges from it at or before fetchOffset when the log
// does not have that epoch (e is an earlier one) or ends it before
// fetchOffset. The leader applies it to a follower's fetch, the Kafka
// listener to a consumer's (Fetch v12+, docs/kafka.md); the fetcher then
// truncates to e.
func (e EpochEndOffset) Diverges(lastFetchedEpoch int32, fetchOffset int64) bool {
	return e.Epoch < lastFetchedEpoch || e.EndOffset < fetchOffset
}

// FetchRequest is a follower's fetch, as the follower state machine produces
// it and the leader state machine validates it. Max bytes and max wait are
// the transport's business.
type FetchRequest struct {
	ReplicaID string
	// FetchOffset is the follower's log end offset: the next offset it
	// wants. In fsync mode it is also fsynced (see Follower).
	FetchOffset int64
	// CurrentLeaderEpoch is the epoch of the leader the follower follows.
	CurrentLeaderEpoch int32
	// LastFetchedEpoch is the latest epoch in the follower's log, or
	// UndefinedEpoch when its log has none.
	LastFetchedEpoch int32
	// DataLoss says the follower cannot show it holds what it held when it
	// was admitted to the ISR (its data was lost or wiped): the leader
	// removes it from the ISR and admits it again only once its fetches
	// come without the flag, which the follower clears only under the
	// ISR-join rule (see FetchResult.EpochStartOffset).
	DataLoss bool
	// Retiring says the follower's agent is stopping: it is no successor
	// for a handover (Leader.Successors), though it counts as any follower
	// until it leaves.
	Retiring bool
}

// FetchResult is the leader's answer to a valid fetch, without the records:
// the caller reads those from the log, from FetchOffset up to LogEndOffset,
// and adds the log start offset.
type FetchResult struct {
	LeaderEpoch int32
	// HighWatermark is the leader's HW after this fetch was counted. A held
	// (long-poll) fetch should carry the HW at the time it is answered.
	HighWatermark int64
	// LogEndOffset is the leader's log end offset, fsynced or not:
	// followers may copy records the leader has not fsynced yet.
	LogEndOffset int64
	// Diverging, when not nil, says the follower's log diverges from the
	// leader's at or before FetchOffset (KIP-320): no records go with it,
	// and the follower truncates (see Follower.FetchResponded).
	Diverging *EpochEndOffset
	// EpochStartOffset is where the leader's epoch starts in its log: a
	// follower holds every record of earlier epochs that the leader kept,
	// committed ones included, once its log reaches both this and the HW
	// (Kafka's ISR-join rule).
	EpochStartOffset int64
}

// EpochRequest asks the leader where one of the follower's epochs ends in
// the leader's log (Kafka's OffsetsForLeaderEpoch), to decide how far the
// follower must truncate.
type EpochRequest struct {
	ReplicaID          string
	CurrentLeaderEpoch int32
	// Epoch is the latest epoch in the follower's log.
	Epoch int32
}

// ownLog is what a replica's state machine, leader or follower, knows of its
// own log: where it ends and up to where it is fsynced.
type ownLog struct {
	durability Durability
	logEnd     int64
	syncedEnd  int64
}

// appended moves the log end past lastOffset, which must not be below it.
func (o *ownLog) appended(lastOffset int64) error {
	if lastOffset < o.logEnd {
		return fmt.Errorf("%w: appended last offset %d is below the log end %d", ErrInvalidInput, lastOffset, o.logEnd)
	}
	o.logEnd = lastOffset + 1
	return nil
}

// synced records that every record up to and including lastOffset, which
// must be below the log end, is fsynced.
func (o *ownLog) synced(lastOffset int64) error {
	if lastOffset >= o.logEnd {
		return fmt.Errorf("%w: synced last offset %d is not below the log end %d", ErrInvalidInput, lastOffset, o.logEnd)
	}
	o.syncedEnd = max(o.syncedEnd, lastOffset+1)
	return nil
}

// durableEnd is where the replica's own records stop counting toward the HW.
func (o *ownLog) durableEnd() int64 {
	if o.durability == DurabilityFsync {
		return o.syncedEnd
	}
	return o.logEnd
}

// checkMembers reports a list with an empty or repeated node id, or one
// outside allowed (when allowed is not nil).
func checkMembers(what string, ids, allowed []string) error {
	for i, id := range ids {
		if id == "" {
			return fmt.Errorf("%s has an empty node id", what)
		}
		if slices.Contains(ids[:i], id) {
			return fmt.Errorf("%s has %q twice", what, id)
		}
		if allowed != nil && !slices.Contains(allowed, id) {
			return fmt.Errorf("%s has %q, which is not a replica", what, id)
		}
	}
	return nil
}

// CheckLeaderEpoch is the one epoch fence of every replica-to-replica
// action: a request made for an older epoch than the current one is fenced
// (ErrFencedLeaderEpoch), one for a newer epoch comes from a node that knows
// more than this one (ErrUnknownLeaderEpoch), and only the same epoch
// passes.
func CheckLeaderEpoch(requested, current int32) error {
	switch {
	case requested < current:
		return fmt.Errorf("%w: request epoch %d, current epoch %d", ErrFencedLeaderEpoch, requested, current)
	case requested > current:
		return fmt.Errorf("%w: request epoch %d, current epoch %d", ErrUnknownLeaderEpoch, requested, current)
	}
	return nil
}
