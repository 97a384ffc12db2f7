package election

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/hashicorp/consul/api"
)

// ErrReassignInProgress refuses a reassignment of a partition that is
// already being moved.
var ErrReassignInProgress = errors.New("election: reassignment in progress")

// ErrNoReassignment refuses the cancel of a partition that has no move in
// flight: none was started, or its completion committed first.
var ErrNoReassignment = errors.New("election: no reassignment in progress")

// ErrCancelNotInSync refuses the cancel of a move when no replica of the
// list it started from is in the ISR: none of them could lead once the
// replicas it added are gone (docs/design.md §7.6).
var ErrCancelNotInSync = errors.New("election: no original replica in the ISR")

// Reassignment is the value of a partition's reassign key: the move of its
// replicas to Target (docs/design.md §7.6). While it exists the replicas key
// holds Union(): Target, then Removing in their old order.
type Reassignment struct {
	Target   []string `json:"target"`
	Adding   []string `json:"adding"`
	Removing []string `json:"removing"`
	// From is the replica list the move started from, in its order, for a
	// cancel to go back to; absent from moves written before it was kept
	// (Original then rebuilds the set).
	From []string `json:"from,omitempty"`
	// Cancelled marks the way back of a cancelled move (CancelReassign):
	// Target is the list the cancelled move started from and Removing the
	// replicas it had added. The leader completes it without waiting for
	// every target replica to be in the ISR. An agent that predates the
	// flag takes it for a move like any other, which waits for them: slower,
	// never unsafe.
	Cancelled bool `json:"cancelled,omitempty"`
	// Healing marks a move self-healing started to re-place a dead
	// replica (DecidedFrom.Healing): its leader cancels it when a replica
	// it adds makes no progress for cluster.replace_dead_after
	// (docs/design.md §7.7). An operator's move or a drain's never has
	// it, and is never cancelled but by an operator. A cancel's way back
	// keeps it, so that the leader leaves the replicas the cancelled move
	// added out of the partition's next re-placing. An agent that
	// predates the flag ignores it: the move then waits as any other.
	Healing bool `json:"healing,omitempty"`
}

// NewReassignment is the move from replicas to target.
func NewReassignment(replicas, target []string) Reassignment {
	m := Reassignment{Target: slices.Clone(target), Adding: []string{}, Removing: []string{}, From: slices.Clone(replicas)}
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

// Original is the replica list the move started from: From, or for a move
// that did not keep it the union less the replicas it adds.
func (m Reassignment) Original() []string {
	if m.From != nil {
		return slices.Clone(m.From)
	}
	return slices.DeleteFunc(m.Union(), func(n string) bool { return slices.Contains(m.Adding, n) })
}

// reverse is the way back of m: to its original list, removing what it
// added. Its union holds the same replicas as m's. The way back of a
// self-healing move is marked Healing too.
func (m Reassignment) reverse() Reassignment {
	return Reassignment{Target: m.Original(), Adding: []string{}, Removing: slices.Clone(m.Adding), Cancelled: true, Healing: m.Healing}
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
	if m.From != nil {
		if err := checkNodes(m.From); err != nil {
			return err
		}
		before := slices.DeleteFunc(m.Union(), func(n string) bool { return slices.Contains(m.Adding, n) })
		if len(m.From) != len(before) || slices.ContainsFunc(m.From, func(n string) bool { return !slices.Contains(before, n) }) {
			return fmt.Errorf("from %v is not the union less adding %v", m.From, before)
		}
	}
	if m.Cancelled && len(m.Adding) > 0 {
		return fmt.Errorf("a cancel adds %v", m.Adding)
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

// readPartitionKeys reads a partition's keys (replicas, state, reassign,
// leader) in one consistent listing, by kind: a move's key is valid only
// beside the replicas that are its union, and read one after the other
// they could come from two states (a cancel, or a completion and the next
// move, between the reads), taken for corrupt metadata.
func (c *Client) readPartitionKeys(ctx context.Context, topic string, partition int, op, rule string) (map[keyKind]*api.KVPair, error) {
	callCtx, cancel := c.callContext(ctx)
	defer cancel()
	pairs, _, err := c.api.KV().List(c.keys.partitionRoot(topic, partition), (&api.QueryOptions{RequireConsistent: true}).WithContext(callCtx))
	if err != nil {
		return nil, consulError(err, op, rule)
	}
	keys := make(map[keyKind]*api.KVPair, len(pairs))
	for _, pair := range pairs {
		if t, p, kind := c.keys.parse(pair.Key); t == topic && p == partition {
			keys[kind] = pair
		}
	}
	return keys, nil
}

// missingPartition is why a partition's listing had no replicas key: the
// topic is gone (deleted since it was looked up: ErrUnknownTopic, which the
// API answers 404, where the missing key read as corrupt metadata was a
// retriable 503 for ever), or it has no such partition; a topic whose
// config is there without the key is corrupt.
func (c *Client) missingPartition(ctx context.Context, topic string, partition int, op, rule string) error {
	configPair, err := c.getConsistent(ctx, c.keys.config(topic), op, rule)
	if err != nil {
		return err
	}
	if configPair == nil {
		return fmt.Errorf("%w: %s", ErrUnknownTopic, topic)
	}
	tc, err := decodeTopicConfig(configPair.Key, configPair.Value)
	if err != nil {
		return err
	}
	if partition < 0 || partition >= tc.Partitions {
		return fmt.Errorf("%w: %s/%d", ErrUnknownPartition, topic, partition)
	}
	return corruptMissing(c.keys.replicas(topic, partition))
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
// 0 := the move] over a consistent read of the config, then of the
// partition's keys at one index; for a target shorter than the replicas
// the check-index is a cas of the config, so that an AlterTopic decided
// before the move fails (startReassign). A target
// with a repeated or invalid node, or fewer replicas than the topic's
// min_insync_replicas, is ErrInvalidTopic; a move already in flight
// ErrReassignInProgress, unless it is a move to this very target (not a
// cancel's way back), which is answered as started (nothing written: a
// retry of a start whose answer was lost); a target equal to the replicas
// is no move (done true, nothing written). Any key that changed between
// the read and the write is ErrConflict: read again. The target is the
// caller's whole wish, whatever the replicas are (an operator's partition
// move); a target chosen from the metadata goes through
// StartReassignFrom.
func (c *Client) StartReassign(ctx context.Context, topic string, partition int, target []string) (Reassignment, bool, error) {
	return c.startReassign(ctx, topic, partition, target, nil)
}

// DecidedFrom is the metadata a move's target was chosen from: the
// topic's incarnation (TopicConfig.ID) and the ModifyIndex of the
// partition's replicas key (PartitionMeta.ReplicasIndex).
type DecidedFrom struct {
	TopicID       string
	ReplicasIndex uint64
	// Healing marks the move as self-healing's re-placing of a dead
	// replica (Reassignment.Healing).
	Healing bool
	// Draining holds the drain keys' ModifyIndexes (Snapshot.DrainIndex)
	// of the drained agents whose replicas the move re-places, which the
	// start transaction checks: a drain cancelled after the decision
	// (logagent node drain -cancel) was followed by the moves of leaders
	// whose metadata still showed it.
	Draining map[string]uint64
}

// StartReassignFrom is StartReassign for a target chosen from the
// metadata (self-healing, a drain: the dead or drained replicas of the
// replicas in from put elsewhere): it is ErrConflict, and writes nothing,
// unless the topic is still the incarnation from.TopicID and its replicas
// key still at from.ReplicasIndex, which the start transaction then
// checks, as it checks the drain keys of from.Draining (a cancelled drain:
// ErrConflict) and that no agent the move adds is being drained (a drain
// set after the decision: ErrConflict). Without it a start decided from
// metadata that had moved on (a move another leader completed, the topic
// deleted and created again) was written over replicas its decider never
// saw, and moved a partition off a replica just copied to, or onto agents
// of another incarnation's choice.
func (c *Client) StartReassignFrom(ctx context.Context, topic string, partition int, from DecidedFrom, target []string) (Reassignment, bool, error) {
	return c.startReassign(ctx, topic, partition, target, &from)
}

func (c *Client) startReassign(ctx context.Context, topic string, partition int, target []string, from *DecidedFrom) (Reassignment, bool, error) {
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
	if from != nil && tc.ID != from.TopicID {
		return Reassignment{}, false, fmt.Errorf("%w: %s is topic id %s, the move was decided for %s", ErrConflict, topic, tc.ID, from.TopicID)
	}
	if err := checkNodes(target); err != nil || len(target) == 0 {
		return Reassignment{}, false, fmt.Errorf("%w: target of %s/%d: %v", ErrInvalidTopic, topic, partition, err)
	}
	if len(target) < tc.MinInsyncReplicas {
		return Reassignment{}, false, fmt.Errorf("%w: target %v of %s/%d has fewer replicas than min_insync_replicas %d",
			ErrInvalidTopic, target, topic, partition, tc.MinInsyncReplicas)
	}
	replicasKey, reassignKey := c.keys.replicas(topic, partition), c.keys.reassign(topic, partition)
	keys, err := c.readPartitionKeys(ctx, topic, partition, op, rule)
	if err != nil {
		return Reassignment{}, false, err
	}
	replicasPair, movePair := keys[kindReplicas], keys[kindReassign]
	if replicasPair == nil {
		return Reassignment{}, false, c.missingPartition(ctx, topic, partition, op, rule)
	}
	replicas, err := decodeReplicas(replicasKey, replicasPair.Value)
	if err != nil {
		return Reassignment{}, false, err
	}
	if from != nil && replicasPair.ModifyIndex != from.ReplicasIndex {
		return Reassignment{}, false, fmt.Errorf("%w: %s/%d has replicas %v at index %d, the move was decided from index %d",
			ErrConflict, topic, partition, replicas, replicasPair.ModifyIndex, from.ReplicasIndex)
	}
	if movePair != nil {
		m, err := decodeReassignment(reassignKey, movePair.Value, replicas)
		if err != nil {
			return Reassignment{}, false, err
		}
		if !m.Cancelled && slices.Equal(m.Target, target) {
			// This very move: the retry of a start whose transaction
			// committed though its answer was lost (a timeout, answered
			// 503 retriable), which was refused as another move in
			// flight, its caller told its own move was someone else's.
			return m, false, nil
		}
		return m, false, fmt.Errorf("%w: %s/%d is moving to %v", ErrReassignInProgress, topic, partition, m.Target)
	}
	m := NewReassignment(replicas, target)
	m.Healing = from != nil && from.Healing
	if slices.Equal(replicas, target) {
		return m, true, nil
	}
	configGuard := &api.KVTxnOp{Verb: api.KVCheckIndex, Key: configPair.Key, Index: configPair.ModifyIndex}
	if len(target) < len(replicas) {
		// The move leaves the partition fewer replicas than AlterTopic
		// counts for it (readTopic's fewest), so a raise of
		// min_insync_replicas decided before this start and written after
		// it would leave a move, then replicas, that no leader can start
		// on (replicate.NewLeader): the epoch climbs from the next
		// election on. The alter writes the config with a cas at the
		// index it read: this writes the config's value as it is, with
		// its KV flags (which nothing else reads) one up, since Consul
		// leaves an unchanged entry's index where it is, and so the alter
		// fails and reads this move again.
		configGuard = &api.KVTxnOp{Verb: api.KVCAS, Key: configPair.Key, Index: configPair.ModifyIndex, Value: configPair.Value, Flags: configPair.Flags + 1}
	}
	ops := api.TxnOps{
		{KV: configGuard},
		{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: replicasKey, Index: replicasPair.ModifyIndex, Value: encodeJSON(m.Union())}},
		{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: reassignKey, Index: 0, Value: encodeJSON(m)}},
	}
	if from != nil {
		for _, node := range slices.Sorted(maps.Keys(from.Draining)) {
			// Fails when the key is gone (the drain cancelled) or was
			// written since (cancelled and set again: decided anew).
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: c.keys.draining(node), Index: from.Draining[node]}})
		}
		for _, node := range m.Adding {
			// A target is chosen among agents not being drained: a
			// drain of one set since would have the partition copied
			// there, then off it again by the next move.
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: c.keys.draining(node)}})
		}
	}
	ok, resp, err := c.txn(ctx, ops, op, rule)
	if err != nil {
		return Reassignment{}, false, err
	}
	if !ok {
		return Reassignment{}, false, fmt.Errorf("%w: %s/%d, a drain the move carries out, or a drain of an agent it adds changed while the move was written: %s", ErrConflict, topic, partition, txnErrors(resp))
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

// CancelReassign cancels the move of a partition in flight (Kafka's
// KIP-455 cancel): one transaction [cas replicas := the way back's union,
// cas reassign := the way back] guarded by the ModifyIndexes of the keys it
// read, the same two keys the completion guards, so of a cancel and a
// completion racing exactly one commits (docs/design.md §7.6). The way back
// (Reassignment.Cancelled) has the original list as its target and the
// added replicas as its removing; the leader hands over first if it is an
// added replica, then writes it like a completion, and the added replicas
// delete their data. No move in flight is ErrNoReassignment; a move with
// no replica of its original list in the ISR ErrCancelNotInSync; a move
// already cancelled answers its way back (nothing written). A key that
// changed between the read and the write is ErrConflict: read again.
func (c *Client) CancelReassign(ctx context.Context, topic string, partition int) (Reassignment, error) {
	return c.cancelReassign(ctx, topic, partition, nil)
}

// CancelReassignFrom is CancelReassign of the move whose reassign key is
// at reassignIndex (PartitionMeta.ReassignIndex), for a leader that
// decided from its metadata to cancel that move (a stalled self-healing
// move, docs/design.md §7.7): ErrConflict, and nothing written, when the
// partition has another move by then (that one completed and an operator
// started the next, which is not the leader's to cancel); a way back
// already there is answered as CancelReassign answers it.
func (c *Client) CancelReassignFrom(ctx context.Context, topic string, partition int, reassignIndex uint64) (Reassignment, error) {
	return c.cancelReassign(ctx, topic, partition, &reassignIndex)
}

// cancelReassign is CancelReassign, of the move at *reassignIndex only
// when it is not nil.
func (c *Client) cancelReassign(ctx context.Context, topic string, partition int, reassignIndex *uint64) (Reassignment, error) {
	if !ValidTopicName(topic) {
		return Reassignment{}, fmt.Errorf("%w: name %q", ErrInvalidTopic, topic)
	}
	op, rule := fmt.Sprintf("cancel the reassignment of %s/%d", topic, partition), keyRule(c.keys.prefix)
	replicasKey, reassignKey, stateKey := c.keys.replicas(topic, partition), c.keys.reassign(topic, partition), c.keys.state(topic, partition)
	keys, err := c.readPartitionKeys(ctx, topic, partition, op, rule)
	if err != nil {
		return Reassignment{}, err
	}
	replicasPair, movePair, statePair := keys[kindReplicas], keys[kindReassign], keys[kindState]
	if replicasPair == nil {
		return Reassignment{}, c.missingPartition(ctx, topic, partition, op, rule)
	}
	replicas, err := decodeReplicas(replicasKey, replicasPair.Value)
	if err != nil {
		return Reassignment{}, err
	}
	if movePair == nil {
		return Reassignment{}, fmt.Errorf("%w: %s/%d has replicas %v", ErrNoReassignment, topic, partition, replicas)
	}
	m, err := decodeReassignment(reassignKey, movePair.Value, replicas)
	if err != nil {
		return Reassignment{}, err
	}
	if m.Cancelled {
		return m, nil
	}
	if reassignIndex != nil && movePair.ModifyIndex != *reassignIndex {
		return Reassignment{}, fmt.Errorf("%w: %s/%d is moving to %v at index %d, the cancel was decided from index %d",
			ErrConflict, topic, partition, m.Target, movePair.ModifyIndex, *reassignIndex)
	}
	back := m.reverse()
	// Refused here rather than left to the leader: with no original
	// replica in the ISR none could take the leadership over, and the way
	// back would wait for one. The ISR may change after this read; the
	// leader then waits (it hands over only to an in-sync original).
	var isr []string
	if statePair != nil {
		st, err := decodeState(stateKey, statePair.Value)
		if err != nil {
			return Reassignment{}, err
		}
		isr = st.ISR
	}
	if !slices.ContainsFunc(back.Target, func(n string) bool { return slices.Contains(isr, n) }) {
		return Reassignment{}, fmt.Errorf("%w: %s/%d: ISR %v, original replicas %v: wait for one of them to catch up, or let the move finish",
			ErrCancelNotInSync, topic, partition, isr, back.Target)
	}
	ops := api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: replicasKey, Index: replicasPair.ModifyIndex, Value: encodeJSON(back.Union())}},
		{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: reassignKey, Index: movePair.ModifyIndex, Value: encodeJSON(back)}},
	}
	ok, resp, err := c.txn(ctx, ops, op, rule)
	if err != nil {
		return Reassignment{}, err
	}
	if !ok {
		return Reassignment{}, fmt.Errorf("%w: %s/%d changed while the cancel was written: %s", ErrConflict, topic, partition, txnErrors(resp))
	}
	c.log.Info("reassignment cancelled", "topic", topic, "partition", partition, "target", m.Target,
		"back_to", back.Target, "removing", back.Removing)
	return back, nil
}
