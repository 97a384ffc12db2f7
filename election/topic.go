package election

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

var topicNamePattern = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// TopicConfig is a topic's settings as stored in Consul. Storage is opaque
// here: the agent puts its storage settings there as JSON.
type TopicConfig struct {
	// ID is set by CreateTopic: it tells a re-created topic from the one
	// deleted before it, whose epochs started again from 0.
	ID                    string
	Name                  string
	Partitions            int
	ReplicationFactor     int
	MinInsyncReplicas     int
	UncleanLeaderElection bool
	// UncleanDelay is how long a replica outside the ISR must have seen the
	// partition without a leader before it may take it (only with
	// UncleanLeaderElection), which leaves in-sync replicas time to win.
	UncleanDelay time.Duration
	Storage      json.RawMessage
}

// topicConfigJSON is the stored form of TopicConfig:
//
//	{"id":"9f0c...","name":"orders","partitions":3,"replication_factor":3,
//	 "min_insync_replicas":2,"unclean_leader_election":false,
//	 "unclean_delay":"30s","storage":{...}}
type topicConfigJSON struct {
	ID                    string          `json:"id"`
	Name                  string          `json:"name"`
	Partitions            int             `json:"partitions"`
	ReplicationFactor     int             `json:"replication_factor"`
	MinInsyncReplicas     int             `json:"min_insync_replicas"`
	UncleanLeaderElection bool            `json:"unclean_leader_election"`
	UncleanDelay          string          `json:"unclean_delay"`
	Storage               json.RawMessage `json:"storage,omitempty"`
}

func (tc TopicConfig) encode() ([]byte, error) {
	data, err := json.Marshal(topicConfigJSON{
		ID:                    tc.ID,
		Name:                  tc.Name,
		Partitions:            tc.Partitions,
		ReplicationFactor:     tc.ReplicationFactor,
		MinInsyncReplicas:     tc.MinInsyncReplicas,
		UncleanLeaderElection: tc.UncleanLeaderElection,
		UncleanDelay:          tc.UncleanDelay.String(),
		Storage:               tc.Storage,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidTopic, tc.Name, err)
	}
	return data, nil
}

func decodeTopicConfig(key string, value []byte) (TopicConfig, error) {
	var w topicConfigJSON
	if err := json.Unmarshal(value, &w); err != nil {
		return TopicConfig{}, fmt.Errorf("%w: %s: %v", ErrCorruptMetadata, key, err)
	}
	delay, err := time.ParseDuration(w.UncleanDelay)
	if err != nil {
		return TopicConfig{}, fmt.Errorf("%w: %s: unclean_delay: %v", ErrCorruptMetadata, key, err)
	}
	tc := TopicConfig{
		ID:                    w.ID,
		Name:                  w.Name,
		Partitions:            w.Partitions,
		ReplicationFactor:     w.ReplicationFactor,
		MinInsyncReplicas:     w.MinInsyncReplicas,
		UncleanLeaderElection: w.UncleanLeaderElection,
		UncleanDelay:          delay,
		Storage:               w.Storage,
	}
	if err := tc.validate(); err != nil {
		return TopicConfig{}, fmt.Errorf("%w: %s: %v", ErrCorruptMetadata, key, err)
	}
	return tc, nil
}

// ValidTopicName reports whether name can be a topic: 1 to 249 of
// [a-zA-Z0-9._-], and not "." or "..".
func ValidTopicName(name string) bool {
	return topicNamePattern.MatchString(name) && name != "." && name != ".."
}

func (tc TopicConfig) validate() error {
	var problems []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	check(ValidTopicName(tc.Name), "name %q must match %s and not be . or ..", tc.Name, topicNamePattern)
	check(tc.Partitions >= 1, "partitions %d must be at least 1", tc.Partitions)
	check(tc.ReplicationFactor >= 1, "replication factor %d must be at least 1", tc.ReplicationFactor)
	check(tc.MinInsyncReplicas >= 1 && tc.MinInsyncReplicas <= tc.ReplicationFactor,
		"min insync replicas %d must be within [1, replication factor %d]", tc.MinInsyncReplicas, tc.ReplicationFactor)
	check(tc.UncleanDelay >= 0, "unclean delay %s must not be negative", tc.UncleanDelay)
	check(len(tc.Storage) == 0 || json.Valid(tc.Storage), "storage must be JSON")
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}

// validateAssignment checks one replica list per partition, each with
// ReplicationFactor distinct valid node ids.
func (tc TopicConfig) validateAssignment(assignment [][]string) error {
	if len(assignment) != tc.Partitions {
		return fmt.Errorf("assignment has %d partitions, topic %d", len(assignment), tc.Partitions)
	}
	for p, replicas := range assignment {
		if len(replicas) != tc.ReplicationFactor {
			return fmt.Errorf("partition %d has %d replicas, replication factor is %d", p, len(replicas), tc.ReplicationFactor)
		}
		seen := make(map[string]bool, len(replicas))
		for _, node := range replicas {
			if !nodeIDPattern.MatchString(node) || seen[node] {
				return fmt.Errorf("partition %d: replica %q is invalid or repeated", p, node)
			}
			seen[node] = true
		}
	}
	return nil
}

// AssignReplicas spreads partitions over nodes as Kafka does: the sorted
// nodes are taken round-robin for each partition's first (preferred leader)
// replica, and the followers are placed at a shift from it that grows every
// full round, so both leaders and follower pairs spread evenly.
func AssignReplicas(nodes []string, partitions, replicationFactor int) ([][]string, error) {
	sorted, err := assignableNodes(nodes, partitions, replicationFactor)
	if err != nil {
		return nil, err
	}
	return assignRange(sorted, 0, 0, partitions, replicationFactor), nil
}

// AssignAddedPartitions places the partitions that raising a topic from
// len(existing) to partitions adds, as Kafka's CreatePartitions does: the
// round of AssignReplicas goes on where the existing partitions left off,
// starting from the agent that holds partition 0's first replica, so the
// new preferred leaders continue the spread instead of piling onto the
// first agents. Over the nodes the topic was created on, the result is the
// tail of what AssignReplicas(nodes, partitions) gives.
func AssignAddedPartitions(nodes []string, existing [][]string, partitions, replicationFactor int) ([][]string, error) {
	if len(existing) == 0 || partitions <= len(existing) {
		return nil, fmt.Errorf("%w: adding partitions to %d means going from %d", ErrInvalidTopic, len(existing), partitions)
	}
	sorted, err := assignableNodes(nodes, partitions, replicationFactor)
	if err != nil {
		return nil, err
	}
	start := 0
	if len(existing[0]) > 0 {
		// An agent gone since then leaves the round at its first place.
		start = max(0, slices.Index(sorted, existing[0][0]))
	}
	return assignRange(sorted, start, len(existing), partitions, replicationFactor), nil
}

// assignableNodes is nodes sorted and without repeats, checked to hold
// replicationFactor of them.
func assignableNodes(nodes []string, partitions, replicationFactor int) ([]string, error) {
	sorted := slices.Clone(nodes)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	switch {
	case partitions < 1 || replicationFactor < 1:
		return nil, fmt.Errorf("%w: %d partitions, replication factor %d", ErrInvalidTopic, partitions, replicationFactor)
	case replicationFactor > len(sorted):
		return nil, fmt.Errorf("%w: replication factor %d, %d agents", ErrNotEnoughAgents, replicationFactor, len(sorted))
	}
	return sorted, nil
}

// assignRange is Kafka's rack-unaware placement of partitions [from, to):
// partition p's first replica is sorted[(p+start) mod n], its followers at
// a shift that grows every full round (p/n rounds have gone by).
func assignRange(sorted []string, start, from, to, replicationFactor int) [][]string {
	n := len(sorted)
	assignment := make([][]string, 0, to-from)
	for p := from; p < to; p++ {
		shift := p / n
		first := (p + start) % n
		replicas := make([]string, 0, replicationFactor)
		replicas = append(replicas, sorted[first])
		for j := range replicationFactor - 1 {
			replicas = append(replicas, sorted[(first+1+(shift+j)%(n-1))%n])
		}
		assignment = append(assignment, replicas)
	}
	return assignment
}

// CreateTopic stores a topic's config and, for each partition, its replicas
// and an initial state (no leader, epoch 0, ISR = replicas). Every key is
// created with cas index 0, so an existing topic is never overwritten
// (ErrTopicExists); the config goes in the last transaction, so watchers see
// the topic only when it is complete. Up to 31 partitions fit in one atomic
// transaction; beyond that a failure can leave partition keys without a
// config, which DeleteTopic removes.
func (c *Client) CreateTopic(ctx context.Context, tc TopicConfig, assignment [][]string) error {
	if err := tc.validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidTopic, err)
	}
	if err := tc.validateAssignment(assignment); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalidTopic, tc.Name, err)
	}
	if tc.ID == "" {
		tc.ID = randomHex(16)
	}
	config, err := tc.encode()
	if err != nil {
		return err
	}
	var ops api.TxnOps
	for p, replicas := range assignment {
		state := PartitionState{Leader: "", Epoch: 0, ISR: replicas}
		ops = append(ops,
			&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: c.keys.replicas(tc.Name, p), Value: encodeJSON(replicas)}},
			&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: c.keys.state(tc.Name, p), Value: encodeJSON(state)}},
		)
	}
	ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: c.keys.config(tc.Name), Value: config}})

	for chunk := range slices.Chunk(ops, maxOpsPerTxn) {
		ok, resp, err := c.txn(ctx, chunk, fmt.Sprintf("create topic %q", tc.Name), keyRule(c.keys.prefix))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: %s (%s)", ErrTopicExists, tc.Name, txnErrors(resp))
		}
	}
	c.log.Info("created topic", "topic", tc.Name, "id", tc.ID, "partitions", tc.Partitions,
		"replication_factor", tc.ReplicationFactor)
	return nil
}

// TopicChange decides a topic's new settings from what AlterTopic read:
// its config and each partition's replica list. It answers the new config
// and, when that raises Partitions, the replica lists of the partitions
// it adds (one per new partition, in order). Its error ends AlterTopic as
// it is.
type TopicChange func(tc TopicConfig, replicas [][]string) (TopicConfig, [][]string, error)

// AlterTopic changes a topic's settings (min_insync_replicas, Storage) and
// adds partitions, never removes them. It reads the config and the replica
// lists consistently, asks change for the new ones, and writes them in
// transactions of at most 64 operations, each guarded by the config's
// index as read: every new partition's keys are created with cas index 0
// (after a delete-tree of its directory, which clears what a crashed
// earlier attempt may have left there), and the config, raised last, is
// written with a cas at that index. So two alters cannot both win (the
// loser gets ErrConflict), a topic deleted or re-created meanwhile is not
// changed, and until the last transaction the topic stays as it was:
// watchers ignore partition keys beyond its count.
func (c *Client) AlterTopic(ctx context.Context, name string, change TopicChange) (TopicConfig, error) {
	if !ValidTopicName(name) {
		return TopicConfig{}, fmt.Errorf("%w: name %q", ErrInvalidTopic, name)
	}
	op, rule := fmt.Sprintf("alter topic %q", name), keyRule(c.keys.prefix)
	old, configIndex, replicas, fewest, err := c.readTopic(ctx, name, op, rule)
	if err != nil {
		return TopicConfig{}, err
	}
	tc, added, err := change(old, replicas)
	if err != nil {
		return TopicConfig{}, err
	}
	if err := checkAlter(old, tc, added); err != nil {
		return TopicConfig{}, fmt.Errorf("%w: %s: %v", ErrInvalidTopic, name, err)
	}
	if err := checkMinISRFits(old, tc, fewest); err != nil {
		return TopicConfig{}, fmt.Errorf("%w: %s: %v", ErrInvalidTopic, name, err)
	}
	config, err := tc.encode()
	if err != nil {
		return TopicConfig{}, err
	}
	// One group of operations per new partition, never split: a
	// transaction either creates a partition whole or not at all.
	var groups []api.TxnOps
	for i, rs := range added {
		p := old.Partitions + i
		state := PartitionState{Leader: "", Epoch: 0, ISR: rs}
		groups = append(groups, api.TxnOps{
			{KV: &api.KVTxnOp{Verb: api.KVDeleteTree, Key: c.keys.partitionRoot(name, p)}},
			{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: c.keys.replicas(name, p), Value: encodeJSON(rs)}},
			{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: c.keys.state(name, p), Value: encodeJSON(state)}},
		})
	}
	guard := &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: c.keys.config(name), Index: configIndex}}
	txns := []api.TxnOps{{guard}}
	for _, g := range groups {
		// Each transaction is its guard and whole groups; the last one's
		// guard becomes the config's cas, one operation too.
		if last := txns[len(txns)-1]; len(last)+len(g) > maxOpsPerTxn {
			txns = append(txns, api.TxnOps{guard})
		}
		txns[len(txns)-1] = append(txns[len(txns)-1], g...)
	}
	// The last transaction's guard is the config's own cas, its last
	// operation: the topic grows only once every new partition is there.
	last := &txns[len(txns)-1]
	*last = append((*last)[1:], &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: c.keys.config(name), Value: config, Index: configIndex}})
	for _, ops := range txns {
		ok, resp, err := c.txn(ctx, ops, op, rule)
		if err != nil {
			return TopicConfig{}, err
		}
		if !ok {
			return TopicConfig{}, fmt.Errorf("%w: topic %q changed while being altered: %s", ErrConflict, name, txnErrors(resp))
		}
	}
	c.log.Info("altered topic", "topic", name, "id", tc.ID, "partitions", tc.Partitions, "partitions_were", old.Partitions,
		"min_insync_replicas", tc.MinInsyncReplicas, "storage", string(tc.Storage))
	return tc, nil
}

// readTopic reads a topic's config, its index and every partition's
// replica list in one consistent listing, and each partition's fewest
// replicas: its count, or with a move in flight the fewer of the move's
// target and the list it started from (where a cancel takes it back).
func (c *Client) readTopic(ctx context.Context, name, op, rule string) (TopicConfig, uint64, [][]string, []int, error) {
	callCtx, cancel := c.callContext(ctx)
	defer cancel()
	pairs, _, err := c.api.KV().List(c.keys.topicRoot(name), (&api.QueryOptions{RequireConsistent: true}).WithContext(callCtx))
	if err != nil {
		return TopicConfig{}, 0, nil, nil, consulError(err, op, rule)
	}
	var configPair *api.KVPair
	found, moves := map[int]*api.KVPair{}, map[int]*api.KVPair{}
	for _, pair := range pairs {
		topic, p, kind := c.keys.parse(pair.Key)
		switch {
		case topic != name:
		case kind == kindConfig:
			configPair = pair
		case kind == kindReplicas:
			found[p] = pair
		case kind == kindReassign:
			moves[p] = pair
		}
	}
	if configPair == nil {
		return TopicConfig{}, 0, nil, nil, fmt.Errorf("%w: %s", ErrUnknownTopic, name)
	}
	tc, err := decodeTopicConfig(configPair.Key, configPair.Value)
	if err != nil {
		return TopicConfig{}, 0, nil, nil, err
	}
	replicas, fewest := make([][]string, tc.Partitions), make([]int, tc.Partitions)
	for p := range tc.Partitions {
		pair := found[p]
		if pair == nil {
			return TopicConfig{}, 0, nil, nil, corruptMissing(c.keys.replicas(name, p))
		}
		if replicas[p], err = decodeReplicas(pair.Key, pair.Value); err != nil {
			return TopicConfig{}, 0, nil, nil, err
		}
		fewest[p] = len(replicas[p])
		// A move key that does not decode makes the topic's metadata
		// corrupt for every agent already; it does not stop an alter.
		if mp := moves[p]; mp != nil {
			if m, err := decodeReassignment(mp.Key, mp.Value, replicas[p]); err == nil {
				fewest[p] = min(len(m.Target), len(m.Original()))
			}
		}
	}
	return tc, configPair.ModifyIndex, replicas, fewest, nil
}

// checkMinISRFits refuses a min_insync_replicas raised above the replicas
// of a partition (fewest, per partition, as readTopic counts them): a
// partition move may leave fewer replicas than the replication factor
// (docs/design.md §7.6), and a leader cannot start with min_insync_replicas
// above its replicas (the partition would be unleadable from its next
// election on), nor a move to that few complete. A setting that does not
// rise is not checked: an alter of the retention alone still passes.
func checkMinISRFits(old, tc TopicConfig, fewest []int) error {
	if tc.MinInsyncReplicas <= old.MinInsyncReplicas {
		return nil
	}
	for p, n := range fewest {
		if n < tc.MinInsyncReplicas {
			return fmt.Errorf("min insync replicas %d is above the %d replicas of partition %d (a partition move gave it fewer than the replication factor, or is moving it to or from that few): move it to at least %d replicas first",
				tc.MinInsyncReplicas, n, p, tc.MinInsyncReplicas)
		}
	}
	return nil
}

// checkAlter allows what AlterTopic may change: more partitions, with one
// valid replica list for each new one, min_insync_replicas and Storage.
func checkAlter(old, tc TopicConfig, added [][]string) error {
	if err := tc.validate(); err != nil {
		return err
	}
	if tc.ID != old.ID || tc.Name != old.Name || tc.ReplicationFactor != old.ReplicationFactor ||
		tc.UncleanLeaderElection != old.UncleanLeaderElection || tc.UncleanDelay != old.UncleanDelay {
		return fmt.Errorf("only partitions, min insync replicas and storage can change")
	}
	if tc.Partitions < old.Partitions {
		return fmt.Errorf("partitions can only be added: %d is fewer than %d", tc.Partitions, old.Partitions)
	}
	grown := tc
	grown.Partitions = tc.Partitions - old.Partitions
	if grown.Partitions == 0 {
		if len(added) > 0 {
			return fmt.Errorf("%d replica lists for no new partition", len(added))
		}
		return nil
	}
	return grown.validateAssignment(added)
}

// DeleteTopic removes a topic's config and every key under it in one
// transaction. Leaders of its partitions see their leadership lost.
func (c *Client) DeleteTopic(ctx context.Context, name string) error {
	if !ValidTopicName(name) {
		return fmt.Errorf("%w: name %q", ErrInvalidTopic, name)
	}
	op, rule := fmt.Sprintf("delete topic %q", name), keyRule(c.keys.prefix)
	pair, err := c.getConsistent(ctx, c.keys.config(name), op, rule)
	if err != nil {
		return err
	}
	if pair == nil {
		// Partition keys left by a failed creation go anyway.
		callCtx, cancel := c.callContext(ctx)
		defer cancel()
		if _, err := c.api.KV().DeleteTree(c.keys.topicRoot(name), c.writeOptions(callCtx)); err != nil {
			return consulError(err, op, rule)
		}
		return fmt.Errorf("%w: %s", ErrUnknownTopic, name)
	}
	tc, err := decodeTopicConfig(pair.Key, pair.Value)
	if err != nil {
		return err
	}
	// The tombstone names the incarnation read above; check-index makes sure
	// it is still the one being deleted.
	ops := api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: pair.Key, Index: pair.ModifyIndex}},
		{KV: &api.KVTxnOp{Verb: api.KVDeleteTree, Key: c.keys.topicRoot(name)}},
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: c.keys.tombstone(tc.ID), Value: encodeJSON(map[string]string{"topic": name})}},
	}
	ok, resp, err := c.txn(ctx, ops, op, rule)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: topic %q changed while being deleted: %s", ErrConflict, name, txnErrors(resp))
	}
	c.log.Info("deleted topic", "topic", name, "topic_id", tc.ID)
	return nil
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	// crypto/rand.Read never returns an error (Go 1.24+).
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// txnErrors formats the reasons Consul gave for rolling a txn back.
func txnErrors(resp *api.TxnResponse) string {
	if resp == nil || len(resp.Errors) == 0 {
		return "rolled back"
	}
	parts := make([]string, 0, len(resp.Errors))
	for _, e := range resp.Errors {
		parts = append(parts, fmt.Sprintf("op %d: %s", e.OpIndex, e.What))
	}
	return strings.Join(parts, "; ")
}
