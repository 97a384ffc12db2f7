package groupcoord

import (
	"context"
	"errors"
	"hash/fnv"
	"time"

	"github.com/logagent/logagent/group"
)

// OffsetsTopic is the internal topic whose records are the committed
// offsets, named like Kafka's, so Kafka tools recognise it.
const OffsetsTopic = "__consumer_offsets"

// Limits of the API.
const (
	DefaultSessionTimeout = 10 * time.Second
	MinSessionTimeout     = time.Second
	MaxSessionTimeout     = 5 * time.Minute
	// MaxHeartbeatWait bounds a heartbeat's long poll.
	MaxHeartbeatWait = 30 * time.Second
	// MaxCommitOffsets bounds the offsets of one commit request.
	MaxCommitOffsets = 1000
)

// The package's errors; each is wrapped with the details.
var (
	// ErrNotCoordinator: this agent does not lead the group's offsets
	// partition (any more). Retriable: the caller finds the leader again.
	ErrNotCoordinator = errors.New("groupcoord: not the group's coordinator")
	// ErrLoading: this agent has just become the coordinator and has not
	// yet committed what its predecessor appended. Retriable.
	ErrLoading = errors.New("groupcoord: coordinator loading")
	// ErrUnknownTopic: a subscription or commit names a topic that does
	// not exist, or a partition beyond its count.
	ErrUnknownTopic = errors.New("groupcoord: unknown topic or partition")
	// ErrGroupNotEmpty: offsets reset while members own partitions of the
	// topic, or a group deleted while it has members.
	ErrGroupNotEmpty = errors.New("groupcoord: group has members owning the topic")
	// ErrInvalidSessionTimeout: a classic member's session timeout
	// outside MinSessionTimeout to MaxSessionTimeout (Kafka's
	// INVALID_SESSION_TIMEOUT).
	ErrInvalidSessionTimeout = errors.New("groupcoord: invalid session timeout")
	// ErrInvalidRequest: a request no well-behaved client sends.
	ErrInvalidRequest = errors.New("groupcoord: invalid request")
	// ErrUnavailable: Consul or the offsets partition failed; nothing
	// changed, or the outcome is unknown and the state is reloaded.
	// Retriable.
	ErrUnavailable = errors.New("groupcoord: coordinator unavailable")
	// ErrNotAppended: Host.AppendOffsets refused a batch before appending
	// it (too few in-sync replicas), so the log is as it was.
	ErrNotAppended = errors.New("groupcoord: offsets batch not appended")
	// ErrCommitSuperseded: a commit of the group's partition that reached
	// the coordinator later was queued first (this one waited for a high
	// watermark meanwhile); appended now, it would take the committed
	// offset back. Not retriable: a retry would arrive later still.
	ErrCommitSuperseded = errors.New("groupcoord: a later commit of the partition went first")
)

// PartitionFor is the offsets partition, out of n, that stores group's
// offsets: its leader coordinates the group.
func PartitionFor(group string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(group))
	return int(h.Sum32() % uint32(n))
}

// LeaderState is an offsets partition this agent leads.
type LeaderState struct {
	Epoch          int32
	LogStartOffset int64
	HighWatermark  int64
	LogEndOffset   int64
}

// Host is what the coordinator needs of the agent.
type Host interface {
	// OffsetsLeader reports whether this agent leads partition p of the
	// offsets topic, and its position.
	OffsetsLeader(p int) (LeaderState, bool)
	// AppendOffsets appends batch (count records) to offsets partition p
	// as its leader at epoch, with acks=all, and returns the batch's base
	// offset once it is committed; an error leaves the outcome unknown,
	// but one that matches ErrNotAppended.
	AppendOffsets(ctx context.Context, p int, epoch int32, batch []byte, count int) (int64, error)
	// TrimOffsets deletes the whole segments of offsets partition p below
	// offset, a committed offset: everything before it was restated after
	// it.
	TrimOffsets(p int, offset int64) error
	// ReadOffsets returns whole committed batches of offsets partition p
	// from offset on (the first may start before it), at most about
	// maxBytes; empty at the high watermark.
	ReadOffsets(p int, offset int64, maxBytes int) ([]byte, error)
	// Partitions is a topic's partition count in the agent's metadata; 0
	// when there is no such topic.
	Partitions(topic string) int32
	// Positions returns a partition's log start offset and high
	// watermark, as its leader knows them.
	Positions(ctx context.Context, tp group.TopicPartition) (logStart, highWatermark int64, err error)
}

// Store keeps groups' states in Consul (election.Client implements it).
type Store interface {
	LoadGroupState(ctx context.Context, group string) ([]byte, uint64, error)
	SaveGroupState(ctx context.Context, group string, value []byte, index uint64) (uint64, error)
	// DeleteGroupState deletes the group's state if its key is still at
	// index; an error leaves it (election.ErrConflict: it moved).
	DeleteGroupState(ctx context.Context, group string, index uint64) error
	GroupStates(ctx context.Context) ([]string, error)
	// GroupStateValues reads every stored state by group id at once.
	GroupStateValues(ctx context.Context) (map[string][]byte, error)
}

// Partition names one partition in requests and answers.
type Partition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

// JoinRequest is POST /v1/groups/{group}/members.
type JoinRequest struct {
	Topics           []string `json:"topics"`
	SessionTimeoutMS int64    `json:"session_timeout_ms,omitempty"`
	MemberID         string   `json:"member_id,omitempty"`
}

// HeartbeatRequest is POST /v1/groups/{group}/members/{member}/heartbeat.
type HeartbeatRequest struct {
	MemberEpoch int32       `json:"member_epoch"`
	Owned       []Partition `json:"owned"`
	WaitMS      int64       `json:"wait_ms,omitempty"`
}

// MemberResponse answers a join or a heartbeat.
type MemberResponse struct {
	Group               string      `json:"group"`
	MemberID            string      `json:"member_id"`
	MemberEpoch         int32       `json:"member_epoch"`
	Assigned            []Partition `json:"assigned"`
	Revoke              []Partition `json:"revoke"`
	HeartbeatIntervalMS int64       `json:"heartbeat_interval_ms"`
}

// OffsetCommit is one offset of a commit.
type OffsetCommit struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Metadata  string `json:"metadata,omitempty"`
}

// CommitRequest is POST /v1/groups/{group}/offsets.
type CommitRequest struct {
	MemberID    string         `json:"member_id"`
	MemberEpoch int32          `json:"member_epoch"`
	Offsets     []OffsetCommit `json:"offsets"`
}

// Committed is one committed offset in an answer.
type Committed struct {
	Topic        string `json:"topic"`
	Partition    int32  `json:"partition"`
	Offset       int64  `json:"offset"`
	Metadata     string `json:"metadata,omitempty"`
	CommitTimeMS int64  `json:"commit_time_ms,omitempty"`
}

// CommitResponse answers a commit.
type CommitResponse struct {
	Committed []Committed `json:"committed"`
}

// OffsetsResponse is GET /v1/groups/{group}/offsets.
type OffsetsResponse struct {
	Group   string      `json:"group"`
	Offsets []Committed `json:"offsets"`
}

// FetchRequest is a member's fetch of one partition's records.
type FetchRequest struct {
	MemberID    string `json:"member_id"`
	MemberEpoch int32  `json:"member_epoch"`
	Topic       string `json:"topic"`
	Partition   int32  `json:"partition"`
}

// FetchResponse allows a member's fetch: Committed is the group's
// committed offset of the partition, -1 with none.
type FetchResponse struct {
	Committed int64 `json:"committed"`
}

// ResetRequest is POST /v1/groups/{group}/offsets/reset.
type ResetRequest struct {
	Topic string `json:"topic"`
	// To is "earliest", "latest" or an offset.
	To string `json:"to"`
}

// ResetResponse lists the offsets a reset committed.
type ResetResponse struct {
	Offsets []Committed `json:"offsets"`
}

// GroupSummary is one group in a list.
type GroupSummary struct {
	Group   string `json:"group"`
	Epoch   int32  `json:"epoch"`
	Members int    `json:"members"`
}

// ListResponse is GET /v1/groups.
type ListResponse struct {
	Groups []GroupSummary `json:"groups"`
}

// MemberDescription is one member in a Description.
type MemberDescription struct {
	MemberID         string      `json:"member_id"`
	MemberEpoch      int32       `json:"member_epoch"`
	Topics           []string    `json:"topics"`
	SessionTimeoutMS int64       `json:"session_timeout_ms"`
	Assigned         []Partition `json:"assigned"`
	Revoking         []Partition `json:"revoking"`
}

// PartitionDescription is one partition in a Description: its owner, the
// committed offset (-1: none), the high watermark and the lag.
type PartitionDescription struct {
	Topic         string `json:"topic"`
	Partition     int32  `json:"partition"`
	Owner         string `json:"owner"`
	Committed     int64  `json:"committed"`
	HighWatermark int64  `json:"high_watermark"`
	Lag           int64  `json:"lag"`
}

// Description is GET /v1/groups/{group}.
type Description struct {
	Group       string                 `json:"group"`
	Epoch       int32                  `json:"epoch"`
	Coordinator string                 `json:"coordinator"`
	Members     []MemberDescription    `json:"members"`
	Partitions  []PartitionDescription `json:"partitions"`
}

func partitionsOf(tps []group.TopicPartition) []Partition {
	out := make([]Partition, 0, len(tps))
	for _, tp := range tps {
		out = append(out, Partition{tp.Topic, tp.Partition})
	}
	return out
}
