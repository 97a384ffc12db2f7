package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// ErrInvalidGroupID is returned, before any request, for a group or member
// id that is not 1 to 255 bytes long.
var ErrInvalidGroupID = errors.New("client: invalid group or member id")

// maxGroupIDBytes bounds group and member ids (docs/api.md, "Consumer groups").
const maxGroupIDBytes = 255

func validateGroupID(what, id string) error {
	if len(id) == 0 || len(id) > maxGroupIDBytes {
		return fmt.Errorf("%w: %s %q: want 1 to %d bytes", ErrInvalidGroupID, what, id, maxGroupIDBytes)
	}
	return nil
}

func groupPath(group string) string { return "/v1/groups/" + url.PathEscape(group) }

// doGroupJSON is doJSON for a group endpoint: what is left of ctx's
// deadline goes as the timeout parameter, so that the agent gives the
// operation up when this client does. Without it the agent retried an
// unavailable coordinator for its own 15 s: a commit given up on here, and
// then sent again or followed by a newer one, could land after it and take
// the committed offset back.
func (c *Client) doGroupJSON(ctx context.Context, method, path string, query url.Values, in, out any) error {
	if d, ok := ctx.Deadline(); ok {
		if query == nil {
			query = url.Values{}
		}
		query.Set("timeout", max(d.Sub(c.clock.Now()), 0).Truncate(time.Millisecond).String())
	}
	return c.doJSONQuery(ctx, method, path, query, in, out)
}

// TopicPartition names one partition of a topic, as the group API does:
// {"topic":"orders","partition":0}.
type TopicPartition struct {
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
}

func (tp TopicPartition) String() string { return tp.Topic + "/" + strconv.Itoa(tp.Partition) }

// GroupSummary is one group of GET /v1/groups.
type GroupSummary struct {
	Group   string `json:"group"`
	Epoch   int64  `json:"epoch"`
	Members int    `json:"members"`
}

// GroupDescription is GET /v1/groups/{group}: its members and, per
// partition of the topics they consume, owner, committed offset and lag.
type GroupDescription struct {
	Group       string           `json:"group"`
	Epoch       int64            `json:"epoch"`
	Coordinator string           `json:"coordinator"`
	Members     []GroupMember    `json:"members"`
	Partitions  []GroupPartition `json:"partitions"`
}

// GroupMember is a member of a GroupDescription.
type GroupMember struct {
	MemberID         string           `json:"member_id"`
	MemberEpoch      int64            `json:"member_epoch"`
	Topics           []string         `json:"topics"`
	SessionTimeoutMS int64            `json:"session_timeout_ms"`
	Assigned         []TopicPartition `json:"assigned"`
	Revoking         []TopicPartition `json:"revoking"`
}

// GroupPartition is a partition of a GroupDescription.
type GroupPartition struct {
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	// Owner is the member id that owns the partition, empty when none.
	Owner string `json:"owner"`
	// Committed is the group's committed offset, -1 when none.
	Committed     int64 `json:"committed"`
	HighWatermark int64 `json:"high_watermark"`
	// Lag is HighWatermark - Committed, or HighWatermark minus the log
	// start offset when nothing is committed.
	Lag int64 `json:"lag"`
}

// CommittedOffset is one committed offset of a group: the next offset to
// consume (Kafka's convention).
type CommittedOffset struct {
	Topic        string `json:"topic"`
	Partition    int    `json:"partition"`
	Offset       int64  `json:"offset"`
	Metadata     string `json:"metadata"`
	CommitTimeMS int64  `json:"commit_time_ms"`
}

// PartitionOffset is an offset of one partition, as a commit or a reset
// answers it.
type PartitionOffset struct {
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	Offset    int64  `json:"offset"`
}

// ListGroups returns the groups the agents know.
func (c *Client) ListGroups(ctx context.Context) ([]GroupSummary, error) {
	var out struct {
		Groups *[]GroupSummary `json:"groups"`
	}
	if err := c.doGroupJSON(ctx, http.MethodGet, "/v1/groups", nil, nil, &out); err != nil {
		return nil, fmt.Errorf("list groups: %w", err)
	}
	if out.Groups == nil {
		return nil, fmt.Errorf("%w: list groups: no \"groups\" array", ErrProtocol)
	}
	return *out.Groups, nil
}

// DescribeGroup returns a group's members, and the owner, committed offset,
// high watermark and lag of each partition it consumes. It fails with
// ErrUnknownGroup for a group with neither members nor committed offsets.
func (c *Client) DescribeGroup(ctx context.Context, group string) (*GroupDescription, error) {
	if err := validateGroupID("group", group); err != nil {
		return nil, err
	}
	var d GroupDescription
	if err := c.doGroupJSON(ctx, http.MethodGet, groupPath(group), nil, nil, &d); err != nil {
		return nil, fmt.Errorf("describe group %q: %w", group, err)
	}
	if d.Group != group {
		return nil, fmt.Errorf("%w: describe group %q answered group %q", ErrProtocol, group, d.Group)
	}
	return &d, nil
}

// CommittedOffsets returns the group's committed offsets, of one topic, or
// of every topic when topic is empty. It fails with ErrUnknownGroup for a
// group with neither members nor committed offsets.
func (c *Client) CommittedOffsets(ctx context.Context, group, topic string) ([]CommittedOffset, error) {
	if err := validateGroupID("group", group); err != nil {
		return nil, err
	}
	var query url.Values
	if topic != "" {
		if err := ValidateTopicName(topic); err != nil {
			return nil, err
		}
		query = url.Values{"topic": {topic}}
	}
	var out struct {
		Offsets []CommittedOffset `json:"offsets"`
	}
	if err := c.doGroupJSON(ctx, http.MethodGet, groupPath(group)+"/offsets", query, nil, &out); err != nil {
		return nil, fmt.Errorf("committed offsets of group %q: %w", group, err)
	}
	return out.Offsets, nil
}

// ResetOffsets sets the group's committed offset of every partition of
// topic to "earliest" (the log start), "latest" (the high watermark) or an
// offset given in decimal, and returns the offsets set. The agent refuses
// (ErrGroupNotEmpty) while a member owns a partition of the topic.
func (c *Client) ResetOffsets(ctx context.Context, group, topic, to string) ([]PartitionOffset, error) {
	if err := validateGroupID("group", group); err != nil {
		return nil, err
	}
	if err := ValidateTopicName(topic); err != nil {
		return nil, err
	}
	if to != "earliest" && to != "latest" {
		if n, err := strconv.ParseInt(to, 10, 64); err != nil || n < 0 {
			return nil, fmt.Errorf("%w: reset offsets to %q: want earliest, latest or an offset", ErrInvalidOption, to)
		}
	}
	in := map[string]string{"topic": topic, "to": to}
	var out struct {
		Offsets []PartitionOffset `json:"offsets"`
	}
	if err := c.doGroupJSON(ctx, http.MethodPost, groupPath(group)+"/offsets/reset", nil, in, &out); err != nil {
		return nil, fmt.Errorf("reset offsets of group %q, topic %q: %w", group, topic, err)
	}
	return out.Offsets, nil
}

// DeleteGroup deletes a group and its committed offsets, as
// kafka-consumer-groups --delete does: a join afterwards starts a new
// group. The agent refuses (ErrGroupNotEmpty) while the group has members,
// and answers ErrUnknownGroup for a group with neither a stored state,
// committed offsets nor Kafka clients' group in the coordinator's memory
// (also for a delete retried after its first try deleted it).
func (c *Client) DeleteGroup(ctx context.Context, group string) error {
	if err := validateGroupID("group", group); err != nil {
		return err
	}
	if err := c.doGroupJSON(ctx, http.MethodDelete, groupPath(group), nil, nil, nil); err != nil {
		return fmt.Errorf("delete group %q: %w", group, err)
	}
	return nil
}
