package group

import "errors"

// The errors of the package. Every error a call returns matches one of them
// (errors.Is) and wraps it with the details; a call that returns an error
// changes nothing.
var (
	// ErrInvalidInput is a call no well-behaved caller makes: an empty
	// member id or topic, no topics, a session timeout of zero, a negative
	// offset or partition count, a name or metadata over its limit.
	ErrInvalidInput = errors.New("group: invalid input")
	// ErrUnknownGroup: the coordinator has no group of that id.
	ErrUnknownGroup = errors.New("group: unknown group")
	// ErrUnknownMember: the group has no member of that id (it never joined,
	// left, or its session expired: it must join again).
	ErrUnknownMember = errors.New("group: unknown member")
	// ErrFencedMemberEpoch: a heartbeat's member epoch is neither the
	// member's current epoch nor, after a lost answer, its previous one
	// (KIP-848's FENCED_MEMBER_EPOCH). The member must give up every
	// partition and join again.
	ErrFencedMemberEpoch = errors.New("group: fenced member epoch")
	// ErrStaleMemberEpoch: a fetch or commit carries a member epoch from
	// before the member's current ownership of the partition, or one the
	// member never had (409 stale_member_epoch). The member heartbeats to
	// learn its epoch and assignment.
	ErrStaleMemberEpoch = errors.New("group: stale member epoch")
	// ErrNotOwner: the member does not own the partition (it was never
	// granted to it, or the member released it).
	ErrNotOwner = errors.New("group: not the partition's owner")
	// ErrOffsetBeyondHighWatermark: a commit of an offset past the
	// partition's high watermark, which no consumer can have read to.
	ErrOffsetBeyondHighWatermark = errors.New("group: offset beyond the high watermark")
	// ErrCorruptRecord: bytes that are not a record of the offsets topic
	// this package wrote (truncated, damaged, unknown version or kind).
	ErrCorruptRecord = errors.New("group: corrupt offsets record")
)
