package election

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/hashicorp/consul/api"
)

// ErrReassignInProgress refuses a reassignment of a partition that is
// already being moved.
var ErrReassignInProgress = errors.New("election: reassignment in progress")

// Reassignment is the value of a partition's reassign key: the move of its
// replicas to Target (docs/design.md §7.6). While it exists the replicas key
// holds Union(): Target, then Removing in their old order.
type Reassignment struct {
	Target   []string `json:"target"`
	Adding   []string `json:"adding"`
	Removing []string `json:"removing"`
}

// NewReassignment is the move from replicas to target.
func NewReassignment(replicas, target []string) Reassignment {
	m := Reassignment{Target: slices.Clone(target), Adding: []string{}, Removing: []string{}}
	for _, n := range target {
		if !slices.Contains(replicas, n) {
			m.Adding = append(m.Adding, n)
		}
	}
	for _, n := range replicas {
		if !slices.Contains(target, n) {
			m.Removing = append(m.Removing, n)
		}
	}
	return m
}

// Union is the replica list while the move is in flight: the preferred
// leader is Target's first.
func (m Reassignment) Union() []string {
	return append(slices.Clone(m.Target), m.Removing...)
}

// validate checks the move's own lists and that replicas, the replicas key
// beside it, is its union.
func (m Reassignment) validate(replicas []string) error {
	if len(m.Target) == 0 {
		return errors.New("empty target")
	}
	for _, list := range [][]string{m.Target, m.Removing} {
		if err := checkNodes(list); err != nil {
			return err
		}
	}
	for _, n := range m.Adding {
		if !slices.Contains(m.Target, n) {
			return fmt.Errorf("adding %q is not in the target %v", n, m.Target)
		}
	}
	for _, n := range m.Removing {
		if slices.Contains(m.Target, n) {
			return fmt.Errorf("removing %q is in the target %v", n, m.Target)
		}
	}
	if !slices.Equal(replicas, m.Union()) {
		return fmt.Errorf("replicas %v are not the union %v", replicas, m.Union())
	}
	return nil
}

func checkNodes(list []string) error {
	seen := make(map[string]bool, len(list))
	for _, n := range list {
		if !nodeIDPattern.MatchString(n) || seen[n] {
			return fmt.Errorf("replica %q is invalid or repeated in %v", n, list)
		}
		seen[n] = true
	}
	return nil
}

func decodeReassignment(key string, value []byte, replicas []string) (Reassignment, error) {
	var m Reassignment
	if err := json.Unmarshal(value, &m); err != nil {
		return Reassignment{}, fmt.Errorf("%w: %s: %v", ErrCorruptMetadata, key, err)
	}
	if err := m.validate(replicas); err != nil {
		return Reassignment{}, fmt.Errorf("%w: %s: %v", ErrCorruptMetadata, key, err)
	}
	return m, nil
}

// StartReassign starts moving a partition's replicas to target: one
// transaction [check-index config, cas replicas := the union, cas reassign
// 0 := the move] over a consistent read of the partition's keys. A target
// with a repeated or invalid node, or fewer replicas than the topic's
// min_insync_replicas, is ErrInvalidTopic; a move already in flight
// ErrReassignInProgress; a target equal to the replicas is no move (done
// true, nothing written). Any key that changed between the read and the
// write is ErrConflict: read again.
func (c *Client) StartReassign(ctx context.Context, topic string, partition int, target []string) (Reassignment, bool, error) {
	if !ValidTopicName(topic) {
		return Reassignment{}, false, fmt.Errorf("%w: name %q", ErrInvalidTopic, topic)
	}
	op, rule := fmt.Sprintf("reassign %s/%d", topic, partition), keyRule(c.keys.prefix)
	configPair, err := c.getConsistent(ctx, c.keys.config(topic), op, rule)
	if err != nil {
		return Reassignment{}, false, err
	}
	if configPair == nil {
		return Reassignment{}, false, fmt.Errorf("%w: %s", ErrUnknownTopic, topic)
	}
	tc, err := decodeTopicConfig(configPair.Key, configPair.Value)
	if err != nil {
		return Reassignment{}, false, err
	}
	if partition < 0 || partition >= tc.Partitions {
		return Reassignment{}, false, fmt.Errorf("%w: %s/%d", ErrUnknownPartition, topic, partition)
	}
	if err := checkNodes(target); err != nil || len(target) == 0 {
		return Reassignment{}, false, fmt.Errorf("%w: target of %s/%d: %v", ErrInvalidTopic, topic, partition, err)
	}
	if len(target) < tc.MinInsyncReplicas {
		return Reassignment{}, false, fmt.Errorf("%w: target %v of %s/%d has fewer replicas than min_insync_replicas %d",
			ErrInvalidTopic, target, topic, partition, tc.MinInsyncReplicas)
	}
	replicasKey, reassignKey := c.keys.replicas(topic, partition), c.keys.reassign(topic, partition)
	replicasPair, err := c.getConsistent(ctx, replicasKey, op, rule)
	if err != nil {
		return Reassignment{}, false, err
	}
	if replicasPair == nil {
		return Reassignment{}, false, corruptMissing(replicasKey)
	}
	replicas, err := decodeReplicas(replicasKey, replicasPair.Value)
	if err != nil {
		return Reassignment{}, false, err
	}
	movePair, err := c.getConsistent(ctx, reassignKey, op, rule)
	if err != nil {
		return Reassignment{}, false, err
	}
	if movePair != nil {
		m, err := decodeReassignment(reassignKey, movePair.Value, replicas)
		if err != nil {
			return Reassignment{}, false, err
		}
		return m, false, fmt.Errorf("%w: %s/%d is moving to %v", ErrReassignInProgress, topic, partition, m.Target)
	}
	m := NewReassignment(replicas, target)
	if slices.Equal(replicas, target) {
		return m, true, nil
	}
	ops := api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: configPair.Key, Index: configPair.ModifyIndex}},
		{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: replicasKey, Index: replicasPair.ModifyIndex, Value: encodeJSON(m.Union())}},
		{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: reassignKey, Index: 0, Value: encodeJSON(m)}},
	}
	ok, resp, err := c.txn(ctx, ops, op, rule)
	if err != nil {
		return Reassignment{}, false, err
	}
	if !ok {
		return Reassignment{}, false, fmt.Errorf("%w: %s/%d changed while the move was written: %s", ErrConflict, topic, partition, txnErrors(resp))
	}
	c.log.Info("reassignment started", "topic", topic, "partition", partition, "replicas", replicas,
		"target", m.Target, "adding", m.Adding, "removing", m.Removing)
	return m, false, nil
}

// CompleteReassign ends the move of a partition this agent leads at epoch:
// [check-session leader key, cas state := isr and elr at this leader's
// index, cas replicas := the target, delete-cas reassign], replicasIndex and
// reassignIndex being the ModifyIndexes of the snapshot the leader decided
// from (PartitionMeta.ReplicasIndex, ReassignIndex). isr and elr must hold
// no replica outside the target. Errors are ProposeISR's: ErrNotLeader
// steps down, ErrConflict has the leadership's State re-read (decide again
// from the next snapshot).
func (c *Client) CompleteReassign(ctx context.Context, topic string, partition int, epoch int32, m Reassignment, replicasIndex, reassignIndex uint64, isr []string, elr []EligibleReplica) error {
	key := partitionKey{topic: topic, partition: partition}
	c.mu.Lock()
	l := c.leaderships[key]
	c.mu.Unlock()
	if l == nil || l.epoch != epoch || l.ctx.Err() != nil {
		return fmt.Errorf("%w: %s/%d epoch %d", ErrNotLeader, topic, partition, epoch)
	}
	if err := checkNodes(isr); err != nil || !slices.Contains(isr, c.cfg.NodeID) {
		return fmt.Errorf("%w: isr %v of %s/%d: %v (it must hold the leader)", ErrInvalidTopic, isr, topic, partition, err)
	}
	for _, n := range isr {
		if !slices.Contains(m.Target, n) {
			return fmt.Errorf("%w: isr %v of %s/%d holds %q, outside the target %v", ErrInvalidTopic, isr, topic, partition, n, m.Target)
		}
	}
	for _, e := range elr {
		if !slices.Contains(m.Target, e.Node) || slices.Contains(isr, e.Node) {
			return fmt.Errorf("%w: eligible replica %q of %s/%d is in the ISR or outside the target", ErrInvalidTopic, e.Node, topic, partition)
		}
	}
	l.mu.Lock()
	base := l.stateIndex
	l.mu.Unlock()
	extra := api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: c.keys.replicas(topic, partition), Index: replicasIndex, Value: encodeJSON(m.Target)}},
		{KV: &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: c.keys.reassign(topic, partition), Index: reassignIndex}},
	}
	err := c.casStateWith(ctx, l, base, PartitionState{Leader: c.cfg.NodeID, Epoch: epoch, ISR: slices.Clone(isr), ELR: slices.Clone(elr)}, extra)
	if err == nil {
		c.log.Info("reassignment complete", "topic", topic, "partition", partition, "epoch", epoch, "replicas", m.Target, "isr", isr)
	}
	return err
}
