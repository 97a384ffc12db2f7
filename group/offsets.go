package group

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Offsets are the committed offsets of the groups one coordinator serves
// (those whose offsets live in one partition of the offsets topic), as of
// the records of that partition applied so far. It is not safe for
// concurrent use.
//
// It changes only through Apply, both when the coordinator rebuilds it from
// its partition on becoming leader and for a live commit: Commit checks a
// commit and encodes its record; the agent appends the record and Applies
// it once it is committed (acks=all), then answers the commit. So the
// offsets it answers fetches with are always durable, and a coordinator
// that rebuilds from the log gets exactly what its predecessor answered.
type Offsets struct {
	groups map[string]map[TopicPartition]Committed
}

// NewOffsets returns empty offsets.
func NewOffsets() *Offsets {
	return &Offsets{groups: make(map[string]map[TopicPartition]Committed)}
}

// CommitRequest is a member's commit of one partition's offset.
type CommitRequest struct {
	MemberID    string
	MemberEpoch int32
	Partition   TopicPartition
	Offset      int64
	Metadata    string
}

// Commit checks a commit of g's member against g (CheckCommit: a member
// that owns the partition, at an epoch of its ownership) and against the
// partition's high watermark, which the caller passes (an offset above it
// is ErrOffsetBeyondHighWatermark: nothing below it can have been read
// past it), and returns the record storing it with commit time now. It
// changes nothing: the caller appends the record, and Applies it once
// committed. A nil g (the coordinator has no such group) is
// ErrUnknownGroup.
func Commit(g *Group, req CommitRequest, highWatermark int64, now time.Time) (Record, error) {
	if g == nil {
		return Record{}, fmt.Errorf("%w: commit by %q", ErrUnknownGroup, req.MemberID)
	}
	if err := g.CheckCommit(req.MemberID, req.MemberEpoch, req.Partition); err != nil {
		return Record{}, err
	}
	if req.Offset > highWatermark {
		return Record{}, fmt.Errorf("%w: group %q, %v: offset %d, high watermark %d",
			ErrOffsetBeyondHighWatermark, g.id, req.Partition, req.Offset, highWatermark)
	}
	return OffsetRecord(g.id, req.Partition, Committed{Offset: req.Offset, Metadata: req.Metadata, CommitTime: now})
}

// Apply applies one record of the offsets topic, in log order: a commit
// replaces the partition's committed offset (the later record wins,
// whatever its commit time), an offset tombstone deletes it, a group
// tombstone deletes all of the group's. A record DecodeRecord refuses is
// its ErrCorruptRecord, and changes nothing.
func (o *Offsets) Apply(key, value []byte) error {
	e, err := DecodeRecord(key, value)
	if err != nil {
		return err
	}
	switch {
	case !e.Offset:
		delete(o.groups, e.Group)
	case e.Deleted:
		if parts := o.groups[e.Group]; parts != nil {
			delete(parts, e.Partition)
			if len(parts) == 0 {
				delete(o.groups, e.Group)
			}
		}
	default:
		parts := o.groups[e.Group]
		if parts == nil {
			parts = make(map[TopicPartition]Committed)
			o.groups[e.Group] = parts
		}
		parts[e.Partition] = e.Committed
	}
	return nil
}

// Committed returns tp's committed offset in group, if it has one.
func (o *Offsets) Committed(group string, tp TopicPartition) (Committed, bool) {
	c, ok := o.groups[group][tp]
	return c, ok
}

// PartitionOffset is one partition's committed offset.
type PartitionOffset struct {
	TopicPartition
	Committed
}

// Group returns the committed offsets of group, in partition order.
func (o *Offsets) Group(group string) []PartitionOffset {
	parts := o.groups[group]
	out := make([]PartitionOffset, 0, len(parts))
	for _, tp := range sortedKeys(parts) {
		out = append(out, PartitionOffset{tp, parts[tp]})
	}
	return out
}

// Groups returns the groups with committed offsets, in order.
func (o *Offsets) Groups() []string { return slices.Sorted(maps.Keys(o.groups)) }
