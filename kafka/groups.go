package kafka

import (
	"context"
	"time"
)

// Groups is what the listener needs of the sidecar for consumer groups:
// the classic group protocol (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup) with client-side assignors, committed offsets, and the
// admin views and deletion (DescribeGroups, ListGroups, DeleteGroups). Each method is safe for
// concurrent use; an error is answered with ErrorCode's code (an *Error
// carries Kafka's group codes: ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS,
// UNKNOWN_MEMBER_ID, ...). The sidecar forwards every call to the group's
// coordinator; a call that cannot reach one answers
// COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR, and the client finds the
// coordinator again (the listener, once more).
type Groups interface {
	// JoinGroup returns once the join phase the member takes part in has
	// ended (at most the rebalance timeout), or with an error. With
	// MEMBER_ID_REQUIRED the result's MemberID is the id to join with.
	JoinGroup(ctx context.Context, req JoinGroupRequest) (JoinGroupResult, error)
	// SyncGroup returns the member's assignment once the leader's
	// SyncGroup gave it (the leader's own at once).
	SyncGroup(ctx context.Context, req SyncGroupRequest) ([]byte, error)
	Heartbeat(ctx context.Context, group, member string, generation int32) error
	// LeaveGroup removes members; errs has one entry per member (nil, or
	// UNKNOWN_MEMBER_ID), err is the whole request's.
	LeaveGroup(ctx context.Context, group string, members []string) (errs []error, err error)
	// CommitOffsets commits all of the offsets or none, once they are
	// durable.
	CommitOffsets(ctx context.Context, req CommitRequest) error
	// FetchOffsets returns the group's committed offsets (none for an
	// unknown group).
	FetchOffsets(ctx context.Context, group string) ([]CommittedOffset, error)
	// DescribeGroup describes a classic group: State "Dead" when there
	// is no such group.
	DescribeGroup(ctx context.Context, group string) (GroupDescription, error)
	// ListGroups lists the groups of the cluster.
	ListGroups(ctx context.Context) ([]GroupListing, error)
	// DeleteGroup deletes a group without members and its committed
	// offsets (NON_EMPTY_GROUP while it has members, GROUP_ID_NOT_FOUND
	// for none).
	DeleteGroup(ctx context.Context, group string) error
}

// invalidGroupID says whether a membership API (JoinGroup, SyncGroup,
// Heartbeat, LeaveGroup) is answered INVALID_GROUP_ID, as Kafka's
// coordinator answers an empty group id there. The offset and admin APIs
// take the empty id as a group's, as Kafka does for backward
// compatibility.
func invalidGroupID(group string) bool {
	return group == ""
}

// GroupProtocol is one assignor of a JoinGroup, with its metadata. The
// byte slices the listener passes to Groups (protocol metadata, SyncGroup
// assignments) are the callee's to keep: the listener copies them out of
// the connection's frame buffer, which its next request reuses.
type GroupProtocol struct {
	Name     string
	Metadata []byte
}

// JoinGroupRequest is a JoinGroup.
type JoinGroupRequest struct {
	Group            string
	MemberID         string // empty for a new member
	ClientID         string
	ClientHost       string
	ProtocolType     string
	Protocols        []GroupProtocol
	SessionTimeout   time.Duration
	RebalanceTimeout time.Duration
	// RequireKnownMemberID: JoinGroup v4+, whose new member is answered
	// MEMBER_ID_REQUIRED with its id first.
	RequireKnownMemberID bool
}

// JoinGroupResult is a JoinGroup's answer.
type JoinGroupResult struct {
	MemberID     string
	Generation   int32
	ProtocolType string
	Protocol     string
	Leader       string
	// Members are every member's metadata, for the leader only.
	Members []GroupMember
}

// GroupMember is a member's protocol metadata in a JoinGroupResult.
type GroupMember struct {
	MemberID string
	Metadata []byte
}

// SyncGroupRequest is a SyncGroup; Assignments (the leader's) by member.
type SyncGroupRequest struct {
	Group                  string
	MemberID               string
	Generation             int32
	ProtocolType, Protocol string // empty before v5
	Assignments            map[string][]byte
}

// CommitRequest is an OffsetCommit: a member's at its generation, or with
// generation -1 and no member a simple commit.
type CommitRequest struct {
	Group      string
	MemberID   string
	Generation int32
	Offsets    []OffsetCommit
}

// OffsetCommit is one partition's offset of a CommitRequest.
type OffsetCommit struct {
	Topic     string
	Partition int32
	Offset    int64
	Metadata  string
}

// CommittedOffset is one partition's committed offset.
type CommittedOffset struct {
	Topic     string
	Partition int32
	Offset    int64
	Metadata  string
}

// GroupDescription is DescribeGroups' answer for one group.
type GroupDescription struct {
	State        string // Kafka's names: Empty, PreparingRebalance, CompletingRebalance, Stable, Dead
	ProtocolType string
	Protocol     string
	Members      []GroupMemberDescription
}

// GroupMemberDescription is one member of a GroupDescription.
type GroupMemberDescription struct {
	MemberID   string
	ClientID   string
	ClientHost string
	Metadata   []byte
	Assignment []byte
}

// GroupListing is one group of ListGroups.
type GroupListing struct {
	Group        string
	ProtocolType string
	State        string
}
