package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
)

// topicNamePattern is docs/design.md §3's rule; "." and ".." are refused too.
var topicNamePattern = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// ValidateTopicName returns an error matching ErrInvalidTopicName unless
// name is a valid topic name (docs/design.md §3). Every call that names a topic
// checks it first, so a bad name never reaches a URL.
func ValidateTopicName(name string) error {
	if !topicNamePattern.MatchString(name) || name == "." || name == ".." {
		return fmt.Errorf("%w %q: want 1 to 249 of [a-zA-Z0-9._-], other than %q and %q", ErrInvalidTopicName, name, ".", "..")
	}
	return nil
}

// TopicSpec is a topic to create (POST /v1/topics). Zero fields are left to
// the agent's topic_defaults.
type TopicSpec struct {
	Name              string `json:"name"`
	Partitions        int    `json:"partitions,omitempty"`
	ReplicationFactor int    `json:"replication_factor,omitempty"`
	MinInsyncReplicas int    `json:"min_insync_replicas,omitempty"`
}

// TopicInfo describes a topic (GET /v1/topics/{t}).
type TopicInfo struct {
	Name string `json:"name"`
	// Config is the topic's configuration as the agent reports it, each
	// value as raw JSON, so that no field is lost or rounded.
	Config map[string]json.RawMessage `json:"config,omitempty"`
	// PreviousConfig is set in AlterTopic's answer: the config the alter
	// replaced, as the agent read it with the change (its Config before
	// the alter may not have shown a change made through another agent).
	PreviousConfig map[string]json.RawMessage `json:"previous_config,omitempty"`
	Partitions     []PartitionInfo            `json:"partitions"`
}

// PartitionInfo is one partition of a TopicInfo.
type PartitionInfo struct {
	Partition int `json:"partition"`
	// Leader is the leader's node id; empty when the partition is offline.
	Leader   string   `json:"leader"`
	Epoch    int32    `json:"epoch"`
	Replicas []string `json:"replicas"`
	ISR      []string `json:"isr"`
	// HighWatermark and LogStartOffset are the positions of the replica
	// of the agent asked; -1 when it has no replica of the partition (its
	// answer leaves them out: they are not 0).
	HighWatermark  int64 `json:"high_watermark"`
	LogStartOffset int64 `json:"log_start_offset"`
	// LogEndOffset is the log end offset of that replica, nil when the
	// agent has none; on the leader, LogEndOffset - HighWatermark is the
	// records appended but not yet committed.
	LogEndOffset *int64 `json:"log_end_offset,omitempty"`
	// Role is that replica's: "leader" or "follower"; empty when the
	// agent has no replica of the partition.
	Role string `json:"role,omitempty"`
	// Reassignment is the move of the partition's replicas in flight
	// (logagent partition move, node drain, rebalance, self-healing), nil
	// when there is none; Replicas then holds the target, then the
	// replicas it removes.
	Reassignment *Reassignment `json:"reassignment,omitempty"`
}

// Reassignment is a partition's move in flight: to Target, adding and
// removing the replicas named.
type Reassignment struct {
	Target   []string `json:"target"`
	Adding   []string `json:"adding"`
	Removing []string `json:"removing"`
	// Cancelled marks a cancel's way back (CancelMove): Target is the list
	// the cancelled move started from, Removing the replicas it had added.
	Cancelled bool `json:"cancelled,omitempty"`
	// Progress is each added replica's catch-up, with the leader's log
	// start and end offsets (an added replica fetches from the log start):
	// only in the answer of the agent that leads the partition.
	Progress             []ReassignmentProgress `json:"progress,omitempty"`
	LeaderLogStartOffset *int64                 `json:"leader_log_start_offset,omitempty"`
	LeaderLogEndOffset   *int64                 `json:"leader_log_end_offset,omitempty"`
}

// UnmarshalJSON decodes a partition, the positions it leaves out as -1.
func (p *PartitionInfo) UnmarshalJSON(data []byte) error {
	type plain PartitionInfo // without this method
	v := plain{HighWatermark: -1, LogStartOffset: -1}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*p = PartitionInfo(v)
	return nil
}

func topicPath(name string) string { return "/v1/topics/" + url.PathEscape(name) }

// CreateTopic creates a topic. It fails with ErrTopicExists if the name is
// taken.
func (c *Client) CreateTopic(ctx context.Context, spec TopicSpec) error {
	if err := ValidateTopicName(spec.Name); err != nil {
		return err
	}
	if spec.Partitions < 0 || spec.ReplicationFactor < 0 || spec.MinInsyncReplicas < 0 {
		return fmt.Errorf("create topic %q: partitions, replication factor and min in-sync replicas must not be negative", spec.Name)
	}
	if err := c.doJSON(ctx, http.MethodPost, "/v1/topics", spec, nil); err != nil {
		return fmt.Errorf("create topic %q: %w", spec.Name, err)
	}
	return nil
}

// DescribeTopic returns the topic's configuration and partitions. It fails
// with ErrUnknownTopic if there is no such topic.
func (c *Client) DescribeTopic(ctx context.Context, name string) (*TopicInfo, error) {
	if err := ValidateTopicName(name); err != nil {
		return nil, err
	}
	var info TopicInfo
	if err := c.doJSON(ctx, http.MethodGet, topicPath(name), nil, &info); err != nil {
		return nil, fmt.Errorf("describe topic %q: %w", name, err)
	}
	if info.Name != name {
		return nil, fmt.Errorf("%w: describe topic %q answered topic %q", ErrProtocol, name, info.Name)
	}
	return &info, nil
}

// AgentDefault, as TopicChanges.Retention or RetentionBytes, drops the
// topic's own value for the agents' storage block.
const AgentDefault = "default"

// TopicChanges are the settings AlterTopic changes; zero fields stay as
// they are.
type TopicChanges struct {
	// Partitions, when set, must be more than the topic has: partitions
	// are only ever added. Records with a key may then go to another
	// partition than before (the partitioner hashes over the new count).
	Partitions int
	// MinInsyncReplicas, when set, is within 1 and the replication factor.
	MinInsyncReplicas int
	// Retention is a duration ("72h"; "0s" for no bound) or AgentDefault.
	Retention string
	// RetentionBytes is a byte count or size ("10GiB"; "0" for no bound)
	// or AgentDefault.
	RetentionBytes string
}

// AlterTopic changes a topic's settings (PATCH /v1/topics/{t}) and
// returns its new description. A partition count not above the topic's
// fails with ErrInvalidRequest, an unknown topic with ErrUnknownTopic.
func (c *Client) AlterTopic(ctx context.Context, name string, changes TopicChanges) (*TopicInfo, error) {
	if err := ValidateTopicName(name); err != nil {
		return nil, err
	}
	if changes.Partitions < 0 || changes.MinInsyncReplicas < 0 {
		return nil, fmt.Errorf("alter topic %q: partitions and min in-sync replicas must not be negative", name)
	}
	body := map[string]any{}
	if changes.Partitions > 0 {
		body["partitions"] = changes.Partitions
	}
	if changes.MinInsyncReplicas > 0 {
		body["min_insync_replicas"] = changes.MinInsyncReplicas
	}
	if changes.Retention != "" {
		body["retention"] = changes.Retention
	}
	if changes.RetentionBytes != "" {
		body["retention_bytes"] = changes.RetentionBytes
	}
	if len(body) == 0 {
		return nil, fmt.Errorf("alter topic %q: nothing to change", name)
	}
	var info TopicInfo
	if err := c.doJSON(ctx, http.MethodPatch, topicPath(name), body, &info); err != nil {
		return nil, fmt.Errorf("alter topic %q: %w", name, err)
	}
	if info.Name != name {
		return nil, fmt.Errorf("%w: alter topic %q answered topic %q", ErrProtocol, name, info.Name)
	}
	return &info, nil
}

// DeleteTopic deletes a topic and its records.
func (c *Client) DeleteTopic(ctx context.Context, name string) error {
	if err := ValidateTopicName(name); err != nil {
		return err
	}
	if err := c.doJSON(ctx, http.MethodDelete, topicPath(name), nil, nil); err != nil {
		return fmt.Errorf("delete topic %q: %w", name, err)
	}
	return nil
}

// ListTopics returns the topics the agent knows. Depending on what the agent
// lists, an entry may carry only its Name (Partitions nil): DescribeTopic
// gives the rest.
func (c *Client) ListTopics(ctx context.Context) ([]TopicInfo, error) {
	var raw json.RawMessage
	if err := c.doJSON(ctx, http.MethodGet, "/v1/topics", nil, &raw); err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	topics, err := decodeTopicList(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: list topics: %v", ErrProtocol, err)
	}
	return topics, nil
}

// decodeTopicList accepts the shapes a topic list can reasonably take, as
// docs/design.md §8 does not fix one: a JSON array, or an object whose "topics" is
// one, of topic names or of topic descriptions.
func decodeTopicList(body []byte) ([]TopicInfo, error) {
	var items []json.RawMessage
	if trimmed := bytes.TrimSpace(body); len(trimmed) > 0 && trimmed[0] == '[' {
		if err := json.Unmarshal(trimmed, &items); err != nil {
			return nil, err
		}
	} else {
		var wrapped struct {
			Topics *[]json.RawMessage `json:"topics"`
		}
		if err := json.Unmarshal(body, &wrapped); err != nil {
			return nil, err
		}
		if wrapped.Topics == nil {
			return nil, fmt.Errorf("no \"topics\" array in %.100q", body)
		}
		items = *wrapped.Topics
	}
	topics := make([]TopicInfo, 0, len(items))
	for _, item := range items {
		var t TopicInfo
		if err := json.Unmarshal(item, &t.Name); err != nil {
			if err := json.Unmarshal(item, &t); err != nil {
				return nil, err
			}
		}
		if t.Name == "" {
			return nil, fmt.Errorf("topic without a name in %.100q", item)
		}
		topics = append(topics, t)
	}
	return topics, nil
}
