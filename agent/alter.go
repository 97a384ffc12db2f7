package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/kafkabroker"
	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/wire"
)

// alterTopicRequest is the body of PATCH /v1/topics/{topic}: the settings
// to change, the others left as they are. retention and retention_bytes
// take "default" for the agent's storage block again.
type alterTopicRequest struct {
	Partitions        *int `json:"partitions"`
	MinInsyncReplicas *int `json:"min_insync_replicas"`
	// Retention is a duration as in the configuration ("72h"; "0s" keeps
	// records for ever).
	Retention *string `json:"retention"`
	// RetentionBytes is a byte count or a size string ("10GiB"; 0 for no
	// bound).
	RetentionBytes json.RawMessage `json:"retention_bytes"`
}

// defaultSetting names the agent's own value in an alter request.
const defaultSetting = "default"

// alterRetries bounds the alters a concurrent change of the same topic
// makes this agent read again and redo.
const alterRetries = 3

// handleAlterTopic serves PATCH /v1/topics/{topic}.
func (a *Agent) handleAlterTopic(ctx *fasthttp.RequestCtx) {
	if !a.serving(ctx) {
		return
	}
	name, ok := a.topicParam(ctx)
	if !ok || refuseInternalTopic(ctx, name, "altered") {
		return
	}
	var req alterTopicRequest
	if err := reply.DecodeOneObject(ctx.PostBody(), &req); err != nil {
		reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest, "body is not a topic change: "+err.Error(), false)
		return
	}
	change, err := parseAlter(req)
	if err != nil {
		reply.WriteAPIError(ctx, err)
		return
	}
	previous, alterErr := a.alterTopic(name, change)
	if alterErr != nil {
		writeErr(ctx, alterErr)
		return
	}
	prev := a.describeConfig(previous)
	a.writeTopicDescription(ctx, name, &prev)
}

// parseAlter checks an alter request's values on their own; what depends
// on the topic is checked against it in alterTopic.
func parseAlter(req alterTopicRequest) (kafkabroker.TopicChange, *reply.APIError) {
	invalid := func(format string, args ...any) (kafkabroker.TopicChange, *reply.APIError) {
		return kafkabroker.TopicChange{}, reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeInvalidRequest, fmt.Sprintf(format, args...), false)
	}
	c := kafkabroker.TopicChange{Partitions: req.Partitions, MinInsyncReplicas: req.MinInsyncReplicas}
	if p := req.Partitions; p != nil && (*p < 1 || *p > config.MaxTopicPartitions) {
		return invalid("partitions %d is outside 1 to %d", *p, config.MaxTopicPartitions)
	}
	if m := req.MinInsyncReplicas; m != nil && *m < 1 {
		return invalid("min_insync_replicas %d must be at least 1", *m)
	}
	if r := req.Retention; r != nil {
		if *r == defaultSetting {
			c.ResetRetention = true
		} else {
			d, err := time.ParseDuration(*r)
			if err != nil || d < 0 || d%time.Millisecond != 0 {
				return invalid("retention %q must be a duration such as \"72h\" (whole milliseconds, 0s for no bound) or %q", *r, defaultSetting)
			}
			c.Retention = &d
		}
	}
	if raw := bytes.TrimSpace(req.RetentionBytes); len(raw) > 0 {
		var s string
		var n int64
		switch {
		case json.Unmarshal(raw, &n) == nil:
		case json.Unmarshal(raw, &s) == nil && s == defaultSetting:
			c.ResetRetentionBytes = true
		case json.Unmarshal(raw, &s) == nil:
			var err error
			if n, err = config.ParseSize(s); err != nil {
				return invalid("retention_bytes: %v", err)
			}
		default:
			return invalid("retention_bytes %s must be a byte count, a size such as \"10GiB\" or %q", raw, defaultSetting)
		}
		if n < 0 {
			return invalid("retention_bytes %d must not be negative (0 for no bound)", n)
		}
		if !c.ResetRetentionBytes {
			c.RetentionBytes = &n
		}
	}
	if c == (kafkabroker.TopicChange{}) {
		return invalid("nothing to change: give partitions, min_insync_replicas, retention or retention_bytes")
	}
	return c, nil
}

// alterTopic applies a change to a topic, for PATCH /v1/topics/{topic},
// and returns once this agent's metadata shows it, with the config the
// change replaced as the alter read it from Consul (this agent's metadata
// may not have shown an alter made through another agent yet, so it cannot
// say what changed). New partitions are placed over the live agents that
// are not being drained, continuing the topic's round
// (election.AssignAddedPartitions). A concurrent change of the same topic
// makes it read again, up to alterRetries times.
func (a *Agent) alterTopic(name string, c kafkabroker.TopicChange) (previous election.TopicConfig, err error) {
	callCtx, cancel := context.WithTimeout(context.Background(), peerCallTimeout)
	defer cancel()
	var tc election.TopicConfig
	for range alterRetries {
		tc, err = a.coord.AlterTopic(callCtx, name, func(old election.TopicConfig, replicas [][]string) (election.TopicConfig, [][]string, error) {
			previous = old
			return a.applyChange(callCtx, old, replicas, c)
		})
		if !errors.Is(err, election.ErrConflict) {
			break
		}
	}
	var apiErr *reply.APIError
	switch {
	case err == nil:
	case errors.As(err, &apiErr):
		return election.TopicConfig{}, err
	case errors.Is(err, election.ErrUnknownTopic):
		return election.TopicConfig{}, reply.UnknownTopic(name)
	case errors.Is(err, election.ErrNotEnoughAgents), errors.Is(err, election.ErrInvalidTopic):
		return election.TopicConfig{}, reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeInvalidRequest, err.Error(), false)
	default:
		return election.TopicConfig{}, reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeServiceUnavailable, "cannot alter topic: "+err.Error(), true)
	}
	// Answer once this agent's metadata has the change, so the describe
	// that answers it, and a produce that follows, see it.
	for {
		snap := a.coord.Metadata()
		if tm, ok := snap.Topic(name); ok && tm.Config.ID == tc.ID && tm.Config.Partitions == tc.Partitions &&
			tm.Config.MinInsyncReplicas == tc.MinInsyncReplicas && bytes.Equal(tm.Config.Storage, tc.Storage) {
			return previous, nil
		}
		select {
		case <-snap.Changed():
		case <-callCtx.Done():
			return election.TopicConfig{}, reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeServiceUnavailable,
				"topic "+name+" altered, but the metadata watch has not shown it yet", true)
		}
	}
}

// applyChange is the new config of a topic and the replica lists of the
// partitions it adds; its refusals are *reply.APIError.
func (a *Agent) applyChange(ctx context.Context, tc election.TopicConfig, replicas [][]string, c kafkabroker.TopicChange) (election.TopicConfig, [][]string, error) {
	invalid := func(format string, args ...any) (election.TopicConfig, [][]string, error) {
		return election.TopicConfig{}, nil, reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeInvalidRequest, fmt.Sprintf(format, args...), false)
	}
	if m := c.MinInsyncReplicas; m != nil {
		if *m > tc.ReplicationFactor {
			return invalid("min_insync_replicas %d is above the replication factor %d of topic %s", *m, tc.ReplicationFactor, tc.Name)
		}
		tc.MinInsyncReplicas = *m
	}
	if c.Retention != nil || c.RetentionBytes != nil || c.ResetRetention || c.ResetRetentionBytes {
		ts, err := decodeTopicStorage(tc)
		if err != nil {
			return election.TopicConfig{}, nil, reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeInvalidRequest, err.Error(), false)
		}
		switch {
		case c.ResetRetention:
			ts.RetentionMS = nil
		case c.Retention != nil:
			ms := c.Retention.Milliseconds()
			ts.RetentionMS = &ms
		}
		switch {
		case c.ResetRetentionBytes:
			ts.RetentionBytes = nil
		case c.RetentionBytes != nil:
			ts.RetentionBytes = c.RetentionBytes
		}
		tc.Storage = nil
		if ts != (partition.TopicStorage{}) {
			tc.Storage, _ = json.Marshal(ts) // a struct of numbers and pointers to them
		}
	}
	var added [][]string
	if p := c.Partitions; p != nil {
		if *p <= tc.Partitions {
			return invalid("topic %s has %d partitions, and partitions can only be added: ask for more than %d", tc.Name, tc.Partitions, tc.Partitions)
		}
		nodes, err := a.placementNodes(ctx)
		if err != nil {
			return election.TopicConfig{}, nil, err
		}
		if added, err = election.AssignAddedPartitions(nodes, replicas, *p, tc.ReplicationFactor); err != nil {
			return election.TopicConfig{}, nil, err
		}
		tc.Partitions = *p
	}
	return tc, added, nil
}

// placementNodes are the agents new partitions may be placed on: those
// whose checks pass and that are not being drained.
func (a *Agent) placementNodes(ctx context.Context) ([]string, error) {
	agents, err := a.coord.Agents(ctx)
	if err != nil {
		return nil, reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeServiceUnavailable, "cannot list agents: "+err.Error(), true)
	}
	return election.PlacementNodes(agents, a.coord.Metadata()), nil
}

// decodeTopicStorage reads a topic's storage settings, refusing ones this
// agent does not know (it would drop them when writing them back).
func decodeTopicStorage(tc election.TopicConfig) (partition.TopicStorage, error) {
	var ts partition.TopicStorage
	if len(tc.Storage) == 0 {
		return ts, nil
	}
	dec := json.NewDecoder(bytes.NewReader(tc.Storage))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ts); err != nil {
		return ts, fmt.Errorf("topic %s has storage settings this agent does not know (%s): %v", tc.Name, tc.Storage, err)
	}
	return ts, nil
}

// topicSettings are a topic's effective retention limits on this agent
// (its own settings over this agent's storage block), for a describe.
type topicSettings struct {
	retention      string
	retentionBytes int64
	// agentDefaults names the settings that come from this agent's
	// storage block, the topic having none of its own.
	agentDefaults []string
}

// describeSettings is tc's topicSettings on this agent.
func (a *Agent) describeSettings(tc election.TopicConfig) (topicSettings, error) {
	ts, err := decodeTopicStorage(tc)
	if err != nil {
		return topicSettings{}, err
	}
	opts, err := partition.LogOptionsFor(a.logOptions(), tc)
	if err != nil {
		return topicSettings{}, err
	}
	s := topicSettings{retention: shortDuration(opts.Retention), retentionBytes: opts.RetentionBytes, agentDefaults: []string{}}
	if ts.RetentionMS == nil && !ts.NoRetention {
		s.agentDefaults = append(s.agentDefaults, "retention")
	}
	if ts.RetentionBytes == nil && !ts.NoRetention {
		s.agentDefaults = append(s.agentDefaults, "retention_bytes")
	}
	return s, nil
}

// shortDuration writes d as the configuration does: "72h", "10m",
// "1h30m", without the zero units time.Duration.String ends in.
func shortDuration(d time.Duration) string {
	s := d.String()
	if trimmed, ok := strings.CutSuffix(s, "m0s"); ok {
		s = trimmed + "m"
	}
	if trimmed, ok := strings.CutSuffix(s, "h0m"); ok {
		s = trimmed + "h"
	}
	return s
}
