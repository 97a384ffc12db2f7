package kafkabroker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/groupcoord"
	"github.com/logagent/logagent/kafka"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"
	"github.com/logagent/logagent/wire"
)

// The sidecar's side of the Kafka listener (docs/kafka.md): Broker is
// kafka.Broker on the functions the HTTP handlers call, which the Sidecar
// gives it, so a Kafka request and an HTTP request for the same thing run
// the same code below their decoding (docs/design.md §2.1): ProduceBatch
// (forwarding, lanes, idempotence), FetchReplica and ReadLocal (the
// serving decision and the region read), CreateTopic and DeleteTopic.

// Bounds of the Kafka paths.
const (
	// maxKafkaWaiters bounds the goroutines one long poll starts, one per
	// partition it waits on; partitions beyond it are not watched, and
	// their data is answered at the fetch's max wait at the latest.
	maxKafkaWaiters = 64
	// leaderWaitSlice bounds each long poll a waiting fetch sends to the
	// leader of a partition this agent does not serve: a poll that
	// outlives its fetch (another partition had data) ends within it.
	leaderWaitSlice = 250 * time.Millisecond
	// timestampScanBytes is what one step of a ListOffsets by timestamp
	// reads.
	timestampScanBytes = 1 << 20
)

// Broker implements kafka.Broker.
type Broker struct {
	s     Sidecar
	coord Coordinator
	cfg   Config
	// polls are the long polls sent to leaders for WaitForData; each ends
	// within leaderWaitSlice of its fetch, and the agent's stop waits for
	// them (Wait).
	polls sync.WaitGroup
}

var _ kafka.Broker = (*Broker)(nil)

// New returns the broker of cfg.
func New(cfg Config) *Broker {
	return &Broker{s: cfg.Sidecar, coord: cfg.Coordinator, cfg: cfg}
}

// Wait waits for the long polls WaitForData sent to leaders; the agent's
// stop calls it once the listener has closed.
func (b *Broker) Wait() {
	b.polls.Wait()
}

// NodeID is the broker id this agent presents: FNV-1a of its node id,
// positive, so it is the same on every start and for every client.
func NodeID(nodeID string) int32 {
	h := fnv.New32a()
	h.Write([]byte(nodeID))
	return int32(h.Sum32() & 0x7fffffff)
}

// kafkaPartition checks a topic and partition against the metadata.
func (b *Broker) kafkaPartition(topic string, p int32) (int, error) {
	tm, ok := b.s.LookupTopic(topic)
	if !ok {
		return 0, reply.UnknownTopic(topic)
	}
	if p < 0 || int(p) >= len(tm.Partitions) {
		return 0, reply.NewAPIError(fasthttp.StatusNotFound, wire.CodeUnknownPartition, "no partition "+reply.PartitionName(topic, int(p)), false)
	}
	return int(p), nil
}

// Serving implements kafka.Broker: the agent's state.
func (b *Broker) Serving() error { return b.s.Serving() }

// Topics is every topic of this agent's metadata; none while it does not
// serve (its partitions are not open yet).
func (b *Broker) Topics() []kafka.Topic {
	if b.s.Serving() != nil {
		return nil
	}
	snap := b.coord.Metadata()
	var topics []kafka.Topic
	for _, name := range snap.Topics() {
		tm, ok := snap.Topic(name)
		if !ok {
			continue
		}
		t := kafka.Topic{Name: name, ID: kafkaTopicID(tm.Config.ID), Internal: name == groupcoord.OffsetsTopic}
		for _, pm := range tm.Partitions {
			kp := kafka.Partition{Partition: int32(pm.Partition), LeaderEpoch: pm.State.Epoch, Replicas: len(pm.Replicas), ISR: len(pm.State.ISR)}
			if tm.Err != nil || pm.LeaderSession == "" || pm.State.Leader == "" {
				kp.Err = reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeLeaderNotAvailable, b.s.NoLeaderMessage(name, pm.Partition), true)
			}
			t.Partitions = append(t.Partitions, kp)
		}
		topics = append(topics, t)
	}
	return topics
}

// kafkaTopicID is a topic's Kafka id: the first 16 bytes of the SHA-256 of
// its incarnation id, so a re-created topic has a new one.
func kafkaTopicID(id string) [16]byte {
	var out [16]byte
	if id != "" {
		sum := sha256.Sum256([]byte(id))
		copy(out[:], sum[:16])
	}
	return out
}

// kafkaConfigError is INVALID_CONFIG for a setting the sidecar does not
// implement.
func kafkaConfigError(format string, args ...any) error {
	return &kafka.Error{Code: kerr.InvalidConfig.Code, Message: fmt.Sprintf(format, args...)}
}

// topicSettings maps a CreateTopics entry's Kafka configs to the topic API's
// settings and the topic's own storage settings (partition.TopicStorage).
func topicSettings(spec kafka.TopicSpec) (CreateTopicRequest, []byte, error) {
	req := CreateTopicRequest{Name: spec.Name}
	if spec.Partitions > 0 {
		n := int(spec.Partitions)
		req.Partitions = &n
	}
	if spec.ReplicationFactor > 0 {
		n := int(spec.ReplicationFactor)
		req.ReplicationFactor = &n
	}
	var ts partition.TopicStorage
	var hasStorage bool
	for name, v := range spec.Configs {
		n, numErr := strconv.ParseInt(v, 10, 64)
		switch name {
		case "min.insync.replicas":
			if numErr != nil || n < 1 {
				return req, nil, kafkaConfigError("min.insync.replicas %q is not a positive integer", v)
			}
			m := int(n)
			req.MinInsyncReplicas = &m
		case "unclean.leader.election.enable":
			if v != "false" {
				return req, nil, kafkaConfigError("unclean.leader.election.enable=%s is not supported: only false", v)
			}
			f := false
			req.UncleanLeaderElection = &f
		case "cleanup.policy":
			if v != "delete" {
				return req, nil, kafkaConfigError("cleanup.policy=%s is not supported: only delete (no compaction)", v)
			}
		case "segment.bytes":
			if numErr != nil || n < 4<<10 || n > 2<<30 {
				return req, nil, kafkaConfigError("segment.bytes %q is outside 4 KiB to 2 GiB", v)
			}
			ts.SegmentBytes, hasStorage = n, true
		case "retention.ms", "retention.bytes":
			if numErr != nil || n < -1 {
				return req, nil, kafkaConfigError("%s %q is not an integer of at least -1", name, v)
			}
			if name == "retention.ms" {
				n = kafkaRetentionMS(n)
				ts.RetentionMS = &n
			} else {
				n = kafkaRetentionBytes(n)
				ts.RetentionBytes = &n
			}
			hasStorage = true
		default:
			return req, nil, kafkaConfigError("config %s is not supported (docs/kafka.md)", name)
		}
	}
	if !hasStorage {
		return req, nil, nil
	}
	storage, err := json.Marshal(ts)
	return req, storage, err
}

// CreateTopic is CreateTopics' entry: the topic API's creation.
func (b *Broker) CreateTopic(ctx context.Context, spec kafka.TopicSpec) error {
	if err := b.s.Serving(); err != nil {
		return err
	}
	if spec.Name == groupcoord.OffsetsTopic {
		return reply.NewAPIError(fasthttp.StatusForbidden, wire.CodeInternalTopic, groupcoord.OffsetsTopic+" is created by the consumer groups' coordinators", false)
	}
	req, storage, err := topicSettings(spec)
	if err != nil {
		return err
	}
	// 0 and Kafka's -1 take the cluster's default.
	if p := spec.Partitions; p < -1 || int(p) > config.MaxTopicPartitions {
		return &kafka.Error{Code: kerr.InvalidPartitions.Code, Message: fmt.Sprintf("partitions %d is outside 1 to %d", p, config.MaxTopicPartitions)}
	}
	if rf := spec.ReplicationFactor; rf < -1 {
		return &kafka.Error{Code: kerr.InvalidReplicationFactor.Code, Message: fmt.Sprintf("replication factor %d is not positive", rf)}
	}
	if spec.ValidateOnly {
		return b.validateTopic(ctx, req)
	}
	err = b.s.CreateTopic(req, storage)
	switch {
	case errors.Is(err, election.ErrTopicExists):
		return reply.NewAPIError(fasthttp.StatusConflict, wire.CodeTopicExists, "topic "+spec.Name+" exists", false)
	case errors.Is(err, election.ErrNotEnoughAgents):
		return &kafka.Error{Code: kerr.InvalidReplicationFactor.Code, Message: err.Error()}
	case errors.Is(err, election.ErrInvalidTopic):
		return &kafka.Error{Code: kerr.InvalidRequest.Code, Message: err.Error()}
	}
	return err
}

// validateTopic is a CreateTopics with validate_only: the checks a
// creation makes before it writes.
func (b *Broker) validateTopic(ctx context.Context, req CreateTopicRequest) error {
	if !election.ValidTopicName(req.Name) {
		return reply.InvalidTopicName(req.Name)
	}
	if _, ok := b.coord.Metadata().Topic(req.Name); ok {
		return reply.NewAPIError(fasthttp.StatusConflict, wire.CodeTopicExists, "topic "+req.Name+" exists", false)
	}
	callCtx, cancel := context.WithTimeout(ctx, peer.CallTimeout)
	defer cancel()
	agents, err := b.coord.Agents(callCtx)
	if err != nil {
		return reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeServiceUnavailable, "cannot list agents: "+err.Error(), true)
	}
	nodes := election.PlacementNodes(agents, b.coord.Metadata())
	tc := b.s.TopicConfig(req, len(nodes))
	if tc.ReplicationFactor > len(nodes) {
		return &kafka.Error{Code: kerr.InvalidReplicationFactor.Code, Message: fmt.Sprintf("replication factor %d is above the %d agents that take new replicas (alive, passing every Consul check, not being drained)", tc.ReplicationFactor, len(nodes))}
	}
	if tc.MinInsyncReplicas > tc.ReplicationFactor {
		return kafkaConfigError("min.insync.replicas %d is above the replication factor %d", tc.MinInsyncReplicas, tc.ReplicationFactor)
	}
	return nil
}

// DeleteTopic is DeleteTopics' entry: the topic API's deletion.
func (b *Broker) DeleteTopic(ctx context.Context, name string) error {
	if err := b.s.Serving(); err != nil {
		return err
	}
	if name == groupcoord.OffsetsTopic {
		return reply.NewAPIError(fasthttp.StatusForbidden, wire.CodeInternalTopic, groupcoord.OffsetsTopic+" holds the consumer groups' offsets and is not deleted", false)
	}
	switch err := b.s.DeleteTopic(name); {
	case err == nil:
		return nil
	case errors.Is(err, election.ErrUnknownTopic):
		return reply.UnknownTopic(name)
	case errors.Is(err, election.ErrInvalidTopic):
		return reply.InvalidTopicName(name)
	default:
		return reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeServiceUnavailable, "delete topic: "+err.Error(), true)
	}
}

// alterableTopic is the topic an alter names, or the error to answer: the
// agent is not serving, the topic is the offsets topic, or unknown.
func (b *Broker) alterableTopic(topic string) (*election.TopicMeta, error) {
	if err := b.s.Serving(); err != nil {
		return nil, err
	}
	if topic == groupcoord.OffsetsTopic {
		return nil, reply.NewAPIError(fasthttp.StatusForbidden, wire.CodeInternalTopic, groupcoord.OffsetsTopic+" holds the consumer groups' offsets and is not altered", false)
	}
	tm, ok := b.s.LookupTopic(topic)
	if !ok {
		return nil, reply.UnknownTopic(topic)
	}
	return tm, nil
}

// AddPartitions is CreatePartitions' entry: the topic API's alter of the
// partition count.
func (b *Broker) AddPartitions(ctx context.Context, topic string, count int32, validateOnly bool) error {
	tm, err := b.alterableTopic(topic)
	if err != nil {
		return err
	}
	if have := tm.Config.Partitions; int(count) <= have || int(count) > config.MaxTopicPartitions {
		return &kafka.Error{Code: kerr.InvalidPartitions.Code, Message: fmt.Sprintf(
			"topic %s has %d partitions, and partitions can only be added, up to %d: not %d", topic, have, config.MaxTopicPartitions, count)}
	}
	if validateOnly {
		nodes, err := b.s.PlacementNodes(ctx)
		if err == nil && len(nodes) < tm.Config.ReplicationFactor {
			err = &kafka.Error{Code: kerr.InvalidReplicationFactor.Code, Message: fmt.Sprintf(
				"replication factor %d is above the %d agents that are live and not being drained", tm.Config.ReplicationFactor, len(nodes))}
		}
		return err
	}
	n := int(count)
	return b.s.AlterTopic(topic, TopicChange{Partitions: &n})
}

// AlterTopicConfigs is IncrementalAlterConfigs' entry: min.insync.replicas,
// retention.ms and retention.bytes map to the topic API's alter; a delete
// of a retention config is "default" (the agents' storage block), and
// min.insync.replicas has no default to go back to.
func (b *Broker) AlterTopicConfigs(ctx context.Context, topic string, changes []kafka.ConfigChange, validateOnly bool) error {
	tm, err := b.alterableTopic(topic)
	if err != nil {
		return err
	}
	var c TopicChange
	for _, ch := range changes {
		if ch.Value == nil {
			switch ch.Name {
			case "retention.ms":
				c.ResetRetention = true
			case "retention.bytes":
				c.ResetRetentionBytes = true
			default:
				return kafkaConfigError("config %s cannot be deleted: only retention.ms and retention.bytes have a default to go back to", ch.Name)
			}
			continue
		}
		n, err := strconv.ParseInt(*ch.Value, 10, 64)
		switch ch.Name {
		case "min.insync.replicas":
			if err != nil || n < 1 || n > int64(tm.Config.ReplicationFactor) {
				return kafkaConfigError("min.insync.replicas %q is outside 1 to the replication factor %d", *ch.Value, tm.Config.ReplicationFactor)
			}
			m := int(n)
			c.MinInsyncReplicas = &m
		case "retention.ms":
			if err != nil || n < -1 {
				return kafkaConfigError("retention.ms %q is not an integer of at least -1", *ch.Value)
			}
			d := time.Duration(kafkaRetentionMS(n)) * time.Millisecond
			c.Retention = &d
		case "retention.bytes":
			if err != nil || n < -1 {
				return kafkaConfigError("retention.bytes %q is not an integer of at least -1", *ch.Value)
			}
			n = kafkaRetentionBytes(n)
			c.RetentionBytes = &n
		default:
			return kafkaConfigError("config %s cannot be altered: min.insync.replicas, retention.ms and retention.bytes can (docs/kafka.md)", ch.Name)
		}
	}
	if validateOnly || c == (TopicChange{}) {
		return nil
	}
	return b.s.AlterTopic(topic, c)
}

// TopicConfigs are a topic's settings under Kafka's names: its own storage
// settings over this agent's storage block.
func (b *Broker) TopicConfigs(name string) (map[string]string, error) {
	if err := b.s.Serving(); err != nil {
		return nil, err
	}
	tm, ok := b.s.LookupTopic(name)
	if !ok {
		return nil, reply.UnknownTopic(name)
	}
	opts, err := partition.LogOptionsFor(b.s.LogOptions(), tm.Config)
	if err != nil {
		return nil, reply.NewAPIError(fasthttp.StatusInternalServerError, wire.CodeInternal, err.Error(), false)
	}
	return map[string]string{
		"retention.ms":                   strconv.FormatInt(retentionValue(opts.Retention.Milliseconds()), 10),
		"retention.bytes":                strconv.FormatInt(retentionValue(opts.RetentionBytes), 10),
		"segment.bytes":                  strconv.FormatInt(opts.SegmentBytes, 10),
		"min.insync.replicas":            strconv.Itoa(tm.Config.MinInsyncReplicas),
		"unclean.leader.election.enable": strconv.FormatBool(tm.Config.UncleanLeaderElection),
		"cleanup.policy":                 "delete",
	}, nil
}

// kafkaRetentionMS is a Kafka retention.ms (at least -1) as logagent's
// retention in ms (kafkaRetention): a value beyond what a time.Duration
// holds (partition.MaxRetentionMS, about 292 years; Kafka's Long.MAX_VALUE
// is a common "forever") converted to a Duration wrapped around to a
// negative or a short bound, so it is no bound too.
func kafkaRetentionMS(n int64) int64 { return kafkaRetention(n, partition.MaxRetentionMS) }

// kafkaRetentionBytes is a Kafka retention.bytes (at least -1) as
// logagent's (kafkaRetention).
func kafkaRetentionBytes(n int64) int64 { return kafkaRetention(n, math.MaxInt64) }

// kafkaRetention is a Kafka retention bound as logagent's, 0 for no bound:
// Kafka's -1, and anything above most. Kafka's 0 bounds at nothing (every
// sealed segment goes): logagent's 0 is no bound, so it is the smallest
// bound, 1.
func kafkaRetention(n, most int64) int64 {
	switch {
	case n < 0 || n > most:
		return 0
	case n == 0:
		return 1
	}
	return n
}

// retentionValue is a retention bound as Kafka names it: -1 for none.
func retentionValue(v int64) int64 {
	if v <= 0 {
		return -1
	}
	return v
}

// Produce appends one client batch through ProduceBatch, as an HTTP
// produce of a binary batch does, idempotent batches and the sidecar's
// lanes included.
func (b *Broker) Produce(ctx context.Context, req kafka.ProduceRequest) (_ kafka.ProduceResult, err error) {
	start := b.cfg.Now()
	// Every answer is observed, the refusals before the acks were read
	// included (they were not counted).
	defer func() { b.cfg.ObserveProduce(req.Acks, err, b.cfg.Now().Sub(start)) }()
	failed := kafka.ProduceResult{BaseOffset: -1, LogStartOffset: -1}
	if err := b.s.Serving(); err != nil {
		return failed, err
	}
	if req.Topic == groupcoord.OffsetsTopic {
		return failed, reply.NewAPIError(fasthttp.StatusForbidden, wire.CodeInternalTopic, groupcoord.OffsetsTopic+" is written by the consumer groups' coordinators only", false)
	}
	p, err := b.kafkaPartition(req.Topic, req.Partition)
	if err != nil {
		return failed, err
	}
	var acks replicate.Acks
	switch req.Acks {
	case -1:
		acks = replicate.AcksAll
	case 1:
		acks = replicate.AcksLeader
	case 0:
		acks = replicate.AcksNone
	default:
		return failed, &kafka.Error{Code: kerr.InvalidRequiredAcks.Code, Message: fmt.Sprintf("acks %d is not -1, 0 or 1", req.Acks)}
	}
	// Validated again, as every batch that reaches the log is, and copied:
	// the loop stamps offsets into its own copy, after an acks=0 answer.
	batch, count, err := b.s.DecodeBatch(req.Batch, acks)
	if err != nil {
		return failed, err
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = b.cfg.ProduceTimeout
	}
	deadline := b.cfg.Now().Add(min(timeout, b.cfg.MaxProduceTimeout))
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	baseOffset, duplicate, apiErr := b.s.ProduceBatch(req.Topic, p, batch, count, acks, deadline)
	if apiErr != nil && apiErr.Code == wire.CodeInternal {
		// An unexpected error of a produce (a 500 that may follow the
		// leader's append, a leader's answer the sidecar could not decode)
		// leaves its outcome unknown: Kafka's REQUEST_TIMED_OUT, which
		// producers retry, an idempotent one with the same sequence. The
		// UNKNOWN_SERVER_ERROR internal maps to is not retriable: kgo
		// failed records that may have been written. The agent's answer
		// stays in the chain for the produce metrics.
		return failed, fmt.Errorf("%w: %w", &kafka.Error{Code: kerr.RequestTimedOut.Code, Message: "the outcome is unknown"}, apiErr)
	}
	if apiErr != nil {
		return failed, apiErr
	}
	b.cfg.Produced(req.Topic, count, len(batch))
	out := kafka.ProduceResult{BaseOffset: -1, LogStartOffset: -1, Duplicate: duplicate}
	if baseOffset != nil {
		out.BaseOffset = *baseOffset
	}
	if r := b.s.Replica(req.Topic, p); r != nil {
		out.LogStartOffset = r.CurrentLog().LogStartOffset()
	}
	return out, nil
}

// checkLeaderEpoch is Kafka's current_leader_epoch check against the
// epoch this agent's Metadata answers report: FENCED_LEADER_EPOCH when
// the client's is older, UNKNOWN_LEADER_EPOCH when newer.
func (b *Broker) checkLeaderEpoch(topic string, p int, current int32) error {
	if current < 0 {
		return nil
	}
	pm, ok := b.coord.Metadata().Partition(topic, p)
	if !ok {
		return reply.UnknownTopic(topic)
	}
	switch err := replicate.CheckLeaderEpoch(current, pm.State.Epoch); {
	case errors.Is(err, replicate.ErrFencedLeaderEpoch):
		return reply.NewAPIError(fasthttp.StatusConflict, wire.CodeFencedLeaderEpoch, err.Error(), true)
	case errors.Is(err, replicate.ErrUnknownLeaderEpoch):
		return reply.NewAPIError(fasthttp.StatusPreconditionFailed, wire.CodeUnknownLeaderEpoch, err.Error(), true)
	}
	return nil
}

// Fetch reads from the local replica when FetchReplica chooses it (the
// region leaves with sendfile), else from the leader's client API. The
// last fetched epoch is checked against the log read (ReadLocal), or by
// the leader, as Kafka checks it against the replica that serves.
func (b *Broker) Fetch(ctx context.Context, req kafka.FetchRequest) (kafka.FetchResult, error) {
	start := b.cfg.Now()
	defer func() { b.cfg.ObserveFetch(b.cfg.Now().Sub(start)) }()
	if err := b.s.Serving(); err != nil {
		return kafka.FetchResult{}, err
	}
	p, err := b.kafkaPartition(req.Topic, req.Partition)
	if err != nil {
		return kafka.FetchResult{}, err
	}
	if err := b.checkLeaderEpoch(req.Topic, p, req.CurrentLeaderEpoch); err != nil {
		return kafka.FetchResult{}, err
	}
	maxBytes := max(int64(req.MaxBytes), 1)
	r, refusal := b.s.FetchReplica(req.Topic, p)
	if refusal == nil {
		region, pos, e := b.s.ReadLocal(r, req.Offset, req.LastFetchedEpoch, maxBytes)
		if e != nil {
			return kafka.FetchResult{}, e
		}
		if pos.Diverging != nil {
			return divergingResult(pos), nil
		}
		b.cfg.Fetched(req.Topic, region.Len)
		return kafka.FetchResult{HighWatermark: pos.HW, LogStartOffset: pos.LSO, Records: regionRecords{region}}, nil
	}
	body, pos, e := b.s.LeaderFetch(req.Topic, p, strconv.FormatInt(req.Offset, 10), req.LastFetchedEpoch, maxBytes, 0)
	if errors.Is(e, ErrNoLeaderToAsk) {
		return kafka.FetchResult{}, refusal
	}
	if e != nil {
		return kafka.FetchResult{}, e
	}
	if pos.Diverging != nil {
		return divergingResult(pos), nil
	}
	// Counted at the leader, whose client API served it (as a proxied
	// HTTP fetch is).
	return kafka.FetchResult{HighWatermark: pos.HW, LogStartOffset: pos.LSO, Records: &bytesRecords{Reader: bytes.NewReader(body)}}, nil
}

// divergingResult is a fetch's answer when the log diverges from the
// client's: the positions and the diverging epoch, no records.
func divergingResult(pos LogPositions) kafka.FetchResult {
	return kafka.FetchResult{HighWatermark: pos.HW, LogStartOffset: pos.LSO,
		Diverging: &kafka.EpochEndOffset{Epoch: pos.Diverging.Epoch, EndOffset: pos.Diverging.EndOffset}}
}

// regionRecords are a fetch's batches in a segment file: WriteTo sends
// them with sendfile(2) to a TCP connection.
type regionRecords struct{ r *segstore.Region }

func (r regionRecords) Len() int64                         { return r.r.Len }
func (r regionRecords) WriteTo(w io.Writer) (int64, error) { return r.r.WriteTo(w) }
func (r regionRecords) Close() error                       { return r.r.Close() }

// bytesRecords are batches a leader sent, in memory.
type bytesRecords struct{ *bytes.Reader }

func (r *bytesRecords) Len() int64   { return r.Size() }
func (r *bytesRecords) Close() error { return nil }

// WaitForData is a fetch's long poll: one goroutine per partition (at most
// maxKafkaWaiters), on the local replica's changes or, for a partition
// served by its leader, the leader's own long poll in slices of
// leaderWaitSlice. It returns when one has data, max passed, ctx ended or
// the agent stops; the local waits have ended by then, the leader polls
// end within a slice.
func (b *Broker) WaitForData(ctx context.Context, positions []kafka.Position, max time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, max)
	ready := make(chan struct{}, 1)
	signal := func() {
		select {
		case ready <- struct{}{}:
		default:
		}
	}
	var local sync.WaitGroup
	defer local.Wait()
	defer cancel() // before local.Wait: the waits end on it
	for i, pos := range positions {
		if i == maxKafkaWaiters {
			break
		}
		p, err := b.kafkaPartition(pos.Topic, pos.Partition)
		if err != nil {
			return nil // the fetch answers the error at once
		}
		if r, refusal := b.s.FetchReplica(pos.Topic, p); refusal == nil {
			// A log that fails meanwhile is replaced by the one the
			// replica reopens: the fetch then answers from that one.
			log := r.CurrentLog()
			has := func() bool { return r.CurrentLog() != log || log.HighWatermark() > pos.Offset }
			if has() {
				return nil
			}
			local.Go(func() {
				r.WaitFor(max, b.cfg.Stopping, ctx.Done(), has)
				if has() {
					signal()
				}
			})
			continue
		}
		b.polls.Go(func() {
			if b.leaderWait(ctx, pos.Topic, p, pos.Offset) {
				signal()
			}
		})
	}
	select {
	case <-ready:
	case <-ctx.Done():
	case <-b.cfg.Stopping:
	}
	return nil
}

// leaderWait long-polls the partition's leader until its high watermark
// passes offset (true), a poll fails (true: the fetch answers the
// failure), or ctx ends (false).
func (b *Broker) leaderWait(ctx context.Context, topic string, p int, offset int64) bool {
	for {
		deadline, _ := ctx.Deadline()
		wait := min(time.Until(deadline), leaderWaitSlice)
		if ctx.Err() != nil || wait <= 0 {
			return false
		}
		body, pos, err := b.s.LeaderFetch(topic, p, strconv.FormatInt(offset, 10), -1, 1, wait)
		if err != nil || pos.HW > offset || len(body) > 0 {
			return ctx.Err() == nil
		}
	}
}

// positions are a partition's log start offset and high watermark: the
// local replica's when FetchReplica chooses it, else the leader's.
func (b *Broker) positions(topic string, p int) (LogPositions, error) {
	r, refusal := b.s.FetchReplica(topic, p)
	if refusal == nil {
		log := r.CurrentLog()
		return LogPositions{HW: log.HighWatermark(), LSO: log.LogStartOffset()}, nil
	}
	_, pos, err := b.s.LeaderFetch(topic, p, "latest", -1, 1, 0)
	if errors.Is(err, ErrNoLeaderToAsk) {
		return LogPositions{}, refusal
	}
	return pos, err
}

// readBatches reads whole batches from offset into memory, locally or from
// the leader, below the high watermark.
func (b *Broker) readBatches(topic string, p int, offset, maxBytes int64) ([]byte, error) {
	r, refusal := b.s.FetchReplica(topic, p)
	if refusal == nil {
		region, _, e := b.s.ReadLocal(r, offset, -1, maxBytes)
		if e != nil {
			return nil, e
		}
		defer region.Close()
		return io.ReadAll(region)
	}
	body, _, err := b.s.LeaderFetch(topic, p, strconv.FormatInt(offset, 10), -1, maxBytes, 0)
	if errors.Is(err, ErrNoLeaderToAsk) {
		return nil, refusal
	}
	return body, err
}

// ListOffset answers earliest (and earliest local: no tiered storage, so
// the same log start) and latest from the positions. By timestamp and by
// max timestamp it scans the batch headers of the committed log
// (scanCommitted), then decodes the one batch whose records it needs: the
// cost grows with the log (there is no time index), one read of the
// partition's committed bytes at worst, from the leader when this agent
// does not serve the partition.
func (b *Broker) ListOffset(ctx context.Context, topic string, partition int32, currentLeaderEpoch int32, timestamp int64) (kafka.OffsetAt, error) {
	if err := b.s.Serving(); err != nil {
		return noOffset, err
	}
	p, err := b.kafkaPartition(topic, partition)
	if err != nil {
		return noOffset, err
	}
	if err := b.checkLeaderEpoch(topic, p, currentLeaderEpoch); err != nil {
		return noOffset, err
	}
	pos, err := b.positions(topic, p)
	if err != nil {
		return noOffset, err
	}
	switch {
	case timestamp == kafka.EarliestTimestamp, timestamp == kafka.EarliestLocalTimestamp:
		return kafka.OffsetAt{Offset: pos.LSO, Timestamp: -1, LeaderEpoch: -1}, nil
	case timestamp == kafka.LatestTimestamp:
		return kafka.OffsetAt{Offset: pos.HW, Timestamp: -1, LeaderEpoch: -1}, nil
	case timestamp == kafka.MaxTimestamp:
		return b.maxTimestampRecord(ctx, topic, p, pos)
	case timestamp < 0:
		return noOffset, &kafka.Error{Code: kerr.InvalidRequest.Code, Message: fmt.Sprintf("timestamp %d is not -4, -3, -2, -1 or a time", timestamp)}
	}
	found := noOffset
	err = b.scanCommitted(ctx, topic, p, pos, func(batch []byte) bool {
		if record.Header(batch).MaxTimestamp() < timestamp {
			return true
		}
		at, ok := b.firstAtOrAfter(batch, timestamp)
		if ok {
			found = at
		}
		return !ok
	})
	if err != nil {
		return noOffset, err
	}
	return found, nil
}

// noOffset is a ListOffsets answer that names no record.
var noOffset = kafka.OffsetAt{Offset: -1, Timestamp: -1, LeaderEpoch: -1}

// scanCommitted calls fn with each whole batch of the partition from the
// log start to the high watermark of pos, in offset order, reading
// timestampScanBytes at a time, until fn says to stop. A batch stays
// valid after fn returns: each read is a buffer of its own.
func (b *Broker) scanCommitted(ctx context.Context, topic string, p int, pos LogPositions, fn func(batch []byte) (more bool)) error {
	for offset := pos.LSO; offset < pos.HW; {
		if err := ctx.Err(); err != nil {
			return err
		}
		data, err := b.readBatches(topic, p, offset, timestampScanBytes)
		if start, ok := startPassed(err, offset); ok {
			// Retention deleted what the scan was to read next: the
			// log now starts at start.
			offset = start
			continue
		}
		if err != nil {
			return err
		}
		next := offset
		for len(data) >= record.HeaderSize {
			h := record.Header(data)
			size := h.Size()
			if size < record.HeaderSize || size > len(data) {
				break // a length this read cannot hold whole: read from here
			}
			if h.BaseOffset() >= pos.HW {
				return nil // committed since the positions were read
			}
			if !fn(data[:size]) {
				return nil
			}
			next = h.NextOffset()
			data = data[size:]
		}
		if next <= offset {
			return nil // no whole batch read: the region ended
		}
		offset = next
	}
	return nil
}

// maxTimestampRecord is the first record with the largest timestamp
// below the high watermark (KIP-734's max timestamp), as Kafka answers
// it: the first batch whose max_timestamp is the largest, then the first
// of its records with that timestamp, the batch's leader epoch; no record
// for an empty log. Kafka looks through the whole log and answers no
// record while that one is above the high watermark; this looks through
// the committed records only, the same answer whenever Kafka names one.
// Only the winning batch is decoded, unless its max_timestamp overstates
// its records (a client's claim, appended before leaders rewrote it):
// then a second scan decodes each batch that may hold a larger record
// than those found before it.
func (b *Broker) maxTimestampRecord(ctx context.Context, topic string, p int, pos LogPositions) (kafka.OffsetAt, error) {
	var winner []byte
	err := b.scanCommitted(ctx, topic, p, pos, func(batch []byte) bool {
		if winner == nil || record.Header(batch).MaxTimestamp() > record.Header(winner).MaxTimestamp() {
			winner = batch
		}
		return true
	})
	if err != nil || winner == nil {
		return noOffset, err
	}
	if at := b.largestRecord(winner); at.Timestamp == record.Header(winner).MaxTimestamp() {
		return at, nil
	}
	best := noOffset
	found := false
	err = b.scanCommitted(ctx, topic, p, pos, func(batch []byte) bool {
		if found && record.Header(batch).MaxTimestamp() <= best.Timestamp {
			return true
		}
		if at := b.largestRecord(batch); !found || at.Timestamp > best.Timestamp {
			best, found = at, true
		}
		return true
	})
	if err != nil {
		return noOffset, err
	}
	return best, nil
}

// largestRecord is the first record of a batch with the largest
// timestamp among its records; the batch's first offset and max
// timestamp when its records cannot be read.
func (b *Broker) largestRecord(batch []byte) kafka.OffsetAt {
	h := record.Header(batch)
	claimed := kafka.OffsetAt{Offset: h.BaseOffset(), Timestamp: h.MaxTimestamp(), LeaderEpoch: h.LeaderEpoch()}
	d := b.cfg.Decoders.Get().(*record.Decoder)
	defer b.cfg.Decoders.Put(d)
	it, err := d.Records(batch)
	if err != nil {
		return claimed
	}
	found := kafka.OffsetAt{Offset: -1, LeaderEpoch: h.LeaderEpoch()}
	for it.Next() {
		if rec := it.Record(); found.Offset < 0 || rec.Timestamp > found.Timestamp {
			found.Offset, found.Timestamp = rec.Offset, rec.Timestamp
		}
	}
	if it.Err() != nil || found.Offset < 0 {
		return claimed
	}
	return found
}

// startPassed says whether err is a read's offset_out_of_range answer for
// an offset below the log start, and the log start it names.
func startPassed(err error, offset int64) (int64, bool) {
	var e *reply.APIError
	if errors.As(err, &e) && e.Code == wire.CodeOffsetOutOfRange && e.LogStartOffset != nil && *e.LogStartOffset > offset {
		return *e.LogStartOffset, true
	}
	return 0, false
}

// firstAtOrAfter is the first record of a batch whose timestamp is at or
// after ts; the batch's first offset and max timestamp when its records
// cannot be read. It is false when every record is before ts: a
// max_timestamp above every record (a client's claim, appended before
// leaders rewrote it), after which the lookup goes on to the next batch,
// as Kafka's FileRecords.searchForTimestamp does.
func (b *Broker) firstAtOrAfter(batch []byte, ts int64) (kafka.OffsetAt, bool) {
	h := record.Header(batch)
	found := kafka.OffsetAt{Offset: h.BaseOffset(), Timestamp: h.MaxTimestamp(), LeaderEpoch: h.LeaderEpoch()}
	d := b.cfg.Decoders.Get().(*record.Decoder)
	defer b.cfg.Decoders.Put(d)
	it, err := d.Records(batch)
	if err != nil {
		return found, true
	}
	for it.Next() {
		if rec := it.Record(); rec.Timestamp >= ts {
			found.Offset, found.Timestamp = rec.Offset, rec.Timestamp
			return found, true
		}
	}
	return found, it.Err() != nil
}

// EndOffsetForEpoch asks the leader's epoch cache: this agent's log when it
// leads, else the leader's through the peer epoch query, which answers
// the partition's replicas.
func (b *Broker) EndOffsetForEpoch(ctx context.Context, topic string, part int32, currentLeaderEpoch, epoch int32) (int32, int64, error) {
	if err := b.s.Serving(); err != nil {
		return -1, -1, err
	}
	p, err := b.kafkaPartition(topic, part)
	if err != nil {
		return -1, -1, err
	}
	if err := b.checkLeaderEpoch(topic, p, currentLeaderEpoch); err != nil {
		return -1, -1, err
	}
	pm, _ := b.coord.Metadata().Partition(topic, p)
	if epoch > pm.State.Epoch {
		// Kafka answers an epoch above every known one as undefined.
		return segstore.UndefinedEpoch, segstore.UndefinedOffset, nil
	}
	if r := b.s.Replica(topic, p); r != nil {
		if v := r.CurrentView(); v.Role == partition.RoleLeader && !v.DataLoss {
			found, end := r.CurrentLog().EndOffsetForEpoch(epoch)
			return found, end, nil
		}
	}
	if pm.LeaderSession == "" || pm.State.Leader == "" || pm.State.Leader == b.cfg.NodeID {
		return -1, -1, reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeLeaderNotAvailable, b.s.NoLeaderMessage(topic, p), true)
	}
	info, ok := b.s.LookupAgent(pm.State.Leader)
	if !ok {
		return -1, -1, reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeLeaderNotAvailable, "leader "+pm.State.Leader+" is not among the registered agents", true)
	}
	answer, err := b.s.EpochEndOffset(info.PeerAddr, peer.EpochQuery{Topic: topic, Partition: p,
		EpochRequest: replicate.EpochRequest{ReplicaID: b.cfg.NodeID, CurrentLeaderEpoch: pm.State.Epoch, Epoch: epoch}})
	var pe *peer.Error
	switch {
	case err == nil:
		return answer.Epoch, answer.EndOffset, nil
	case errors.As(err, &pe) && pe.Code == wire.CodeNotReplica:
		// The leader answers its followers only: this agent holds no
		// replica of the partition (docs/kafka.md).
		return -1, -1, &kafka.Error{Code: kerr.NotLeaderForPartition.Code, Message: "this agent holds no replica of " + reply.PartitionName(topic, p) + " to ask its leader's epochs with: " + pe.Message}
	case errors.As(err, &pe):
		return -1, -1, reply.NewAPIError(pe.Status, pe.Code, pe.Message, true)
	default:
		return -1, -1, reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeLeaderNotAvailable, err.Error(), true)
	}
}

// InitProducerID reserves a new producer id, as POST /v1/producers
// without a body does. A Kafka producer gets a new one also when it names
// the id it had (the listener does not pass it on, docs/kafka.md).
func (b *Broker) InitProducerID(ctx context.Context) (int64, int16, error) {
	if err := b.s.Serving(); err != nil {
		return -1, -1, err
	}
	callCtx, cancel := context.WithTimeout(ctx, peer.CallTimeout)
	defer cancel()
	id, epoch, err := b.coord.AllocateProducerID(callCtx)
	if err != nil {
		// Retriable for Kafka clients, as a coordinator that is moving.
		return -1, -1, &kafka.Error{Code: kerr.CoordinatorNotAvailable.Code, Message: "cannot reserve a producer id in Consul: " + err.Error()}
	}
	return id, epoch, nil
}
