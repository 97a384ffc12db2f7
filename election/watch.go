package election

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
)

// Snapshot is the topic metadata as of one Consul index. It is immutable;
// Changed is closed once a newer snapshot exists.
type Snapshot struct {
	// Index is the Consul index the data was read at; 0 until the first
	// read.
	Index   uint64
	topics  map[string]*TopicMeta
	deleted map[string]bool // topic IDs with a tombstone
	// draining holds the node ids of the agents being drained, each with
	// its drain key's ModifyIndex (drain.go).
	draining map[string]uint64
	changed  chan struct{}
}

// Deleted reports whether the topic incarnation with this ID was deleted
// through DeleteTopic (it has a tombstone). A topic that is absent without
// one may only be missing from a Consul that lost its data.
func (s *Snapshot) Deleted(topicID string) bool { return s.deleted[topicID] }

// TopicMeta is one topic as stored. Err is non-nil (ErrCorruptMetadata)
// when some of its keys are missing or undecodable; its partitions are then
// best effort and must not be led.
type TopicMeta struct {
	Config     TopicConfig
	Partitions []PartitionMeta
	Err        error
}

// PartitionMeta is one partition's keys.
type PartitionMeta struct {
	Topic     string
	Partition int
	Replicas  []string
	State     PartitionState
	// StateIndex is the ModifyIndex of the state key.
	StateIndex uint64
	// ReplicasIndex is the ModifyIndex of the replicas key.
	ReplicasIndex uint64
	// Reassign is the move in flight (docs/design.md §7.6), nil when there
	// is none; ReassignIndex is its key's ModifyIndex.
	Reassign      *Reassignment
	ReassignIndex uint64
	// LeaderSession is the session holding the leader key, "" when no one
	// holds it (no leader, or leader lost and not yet replaced).
	LeaderSession string
	// Successor, while the leader key is free, is the replica its last
	// leader handed the partition over to (Leadership.HandOver): the
	// other replicas hold back their campaigns for HandoverHold so that it
	// takes over. "" when there is no such hint.
	Successor string
	// leaderIndex is the leader key's ModifyIndex, 0 when it is absent.
	leaderIndex uint64
}

func emptySnapshot() *Snapshot {
	return &Snapshot{topics: map[string]*TopicMeta{}, changed: make(chan struct{})}
}

// Loaded reports whether the snapshot holds data read from Consul.
func (s *Snapshot) Loaded() bool { return s.Index > 0 }

// Changed is closed when a newer snapshot replaces this one.
func (s *Snapshot) Changed() <-chan struct{} { return s.changed }

// Topics lists the topic names, sorted.
func (s *Snapshot) Topics() []string {
	return slices.Sorted(maps.Keys(s.topics))
}

// Topic returns one topic's metadata; callers must not modify it.
func (s *Snapshot) Topic(name string) (*TopicMeta, bool) {
	t, ok := s.topics[name]
	return t, ok
}

// Partition returns one partition's metadata; its slices must not be
// modified.
func (s *Snapshot) Partition(topic string, partition int) (PartitionMeta, bool) {
	t, ok := s.topics[topic]
	if !ok || partition < 0 || partition >= len(t.Partitions) {
		return PartitionMeta{}, false
	}
	return t.Partitions[partition], true
}

// buildSnapshot decodes a KV listing of the topics prefix. A topic exists
// once its config key does; a topic with a missing or corrupt key carries
// the error instead of failing the whole snapshot.
func buildSnapshot(keys keyspace, index uint64, pairs api.KVPairs) *Snapshot {
	return buildSnapshotFrom(nil, keys, index, pairs)
}

// buildSnapshotFrom is buildSnapshot reusing prev's decoded partitions
// whose keys did not change: a listing of thousands of partitions changes
// in a few of them at a time, and decoding every key of every listing was
// the watch's largest cost (docs/design.md §6). A partition is reused when
// its topic is the same incarnation (config id), prev decoded that topic
// without error, and each of its keys has the ModifyIndex (and, for the
// leader key, the session) prev decoded: Consul bumps a key's ModifyIndex
// on every write, a lock release included.
func buildSnapshotFrom(prev *Snapshot, keys keyspace, index uint64, pairs api.KVPairs) *Snapshot {
	if prev != nil && index < prev.Index {
		// Consul's index went backwards (its state was reset or restored):
		// equal indexes may now name other values.
		prev = nil
	}
	configs := map[string]*api.KVPair{}
	parts := map[string]map[int]*partitionKeys{}
	deleted, draining := map[string]bool{}, map[string]uint64{}
	for _, pair := range pairs {
		topic, p, kind := keys.parse(pair.Key)
		if kind == kindUnknown {
			continue
		}
		if kind == kindDraining {
			draining[topic] = pair.ModifyIndex
			continue
		}
		if kind == kindTombstone {
			deleted[topic] = true
			continue
		}
		if kind == kindConfig {
			configs[topic] = pair
			continue
		}
		if parts[topic] == nil {
			parts[topic] = map[int]*partitionKeys{}
		}
		pk := parts[topic][p]
		if pk == nil {
			pk = &partitionKeys{}
			parts[topic][p] = pk
		}
		switch kind {
		case kindReplicas:
			pk.replicas = pair
		case kindState:
			pk.state = pair
		case kindLeader:
			pk.leader = pair
		case kindReassign:
			pk.reassign = pair
		}
	}

	snap := &Snapshot{Index: index, topics: make(map[string]*TopicMeta, len(configs)), deleted: deleted, draining: draining, changed: make(chan struct{})}
	for name, configPair := range configs {
		tm := &TopicMeta{}
		snap.topics[name] = tm
		tc, err := decodeTopicConfig(configPair.Key, configPair.Value)
		if err != nil {
			tm.Err = err
			continue
		}
		tm.Config = tc
		tm.Partitions = make([]PartitionMeta, tc.Partitions)
		var reusable []PartitionMeta
		if prev != nil {
			if was, ok := prev.topics[name]; ok && was.Err == nil && was.Config.ID == tc.ID {
				reusable = was.Partitions
			}
		}
		for p := range tc.Partitions {
			pk := parts[name][p]
			if p < len(reusable) && pk.unchangedSince(reusable[p]) {
				tm.Partitions[p] = reusable[p]
				continue
			}
			pm := PartitionMeta{Topic: name, Partition: p}
			switch {
			case pk == nil || pk.replicas == nil:
				tm.Err = corruptMissing(keys.replicas(name, p))
			case pk.state == nil:
				tm.Err = corruptMissing(keys.state(name, p))
			}
			if pk != nil && pk.replicas != nil {
				if pm.Replicas, err = decodeReplicas(pk.replicas.Key, pk.replicas.Value); err != nil {
					tm.Err = err
				}
				pm.ReplicasIndex = pk.replicas.ModifyIndex
			}
			if pk != nil && pk.reassign != nil {
				m, err := decodeReassignment(pk.reassign.Key, pk.reassign.Value, pm.Replicas)
				if err != nil {
					tm.Err = err
				} else {
					pm.Reassign, pm.ReassignIndex = &m, pk.reassign.ModifyIndex
				}
			}
			if pk != nil && pk.state != nil {
				if pm.State, err = decodeState(pk.state.Key, pk.state.Value); err != nil {
					tm.Err = err
				}
				pm.StateIndex = pk.state.ModifyIndex
			}
			if pk != nil && pk.leader != nil {
				pm.LeaderSession = pk.leader.Session
				pm.Successor = successorHint(pk.leader.Session, pk.leader.Value, pm.State)
				pm.leaderIndex = pk.leader.ModifyIndex
			}
			tm.Partitions[p] = pm
		}
		// Fewer replicas than min_insync_replicas (a hand edit: creation,
		// alter and moves refuse it) make every leader's state machine
		// refuse to lead: elected again and again, the epoch climbed and
		// the partition took no writes.
		for p, pm := range tm.Partitions {
			if n := len(pm.Replicas); n > 0 && n < tc.MinInsyncReplicas {
				tm.Err = fmt.Errorf("%w: %s: %d replicas %q, fewer than the topic's min_insync_replicas %d",
					ErrCorruptMetadata, keys.replicas(name, p), n, pm.Replicas, tc.MinInsyncReplicas)
			}
		}
	}
	return snap
}

// partitionKeys are one partition's keys in a listing.
type partitionKeys struct {
	replicas, state, leader, reassign *api.KVPair
}

// unchangedSince reports whether every key is as pm was decoded from:
// present with the same ModifyIndex (and leader session), or absent where
// pm had none. A partition missing its replicas or state key never is.
func (pk *partitionKeys) unchangedSince(pm PartitionMeta) bool {
	if pk == nil || pk.replicas == nil || pk.state == nil ||
		pk.replicas.ModifyIndex != pm.ReplicasIndex || pk.state.ModifyIndex != pm.StateIndex {
		return false
	}
	if (pk.reassign == nil) != (pm.Reassign == nil) || (pk.reassign != nil && pk.reassign.ModifyIndex != pm.ReassignIndex) {
		return false
	}
	if pk.leader == nil {
		return pm.leaderIndex == 0
	}
	return pk.leader.ModifyIndex == pm.leaderIndex && pk.leader.Session == pm.LeaderSession
}

func corruptMissing(key string) error {
	return &missingKeyError{key: key}
}

// missingKeyError is ErrCorruptMetadata for a key a topic must have.
type missingKeyError struct{ key string }

func (e *missingKeyError) Error() string { return "election: corrupt metadata: missing key " + e.key }
func (e *missingKeyError) Is(target error) bool {
	return target == ErrCorruptMetadata
}

// Metadata returns the latest snapshot, starting the watch on first use.
// Before the first read from Consul it is empty and not Loaded.
func (c *Client) Metadata() *Snapshot {
	c.startWatch()
	return c.snapshot.Load()
}

// WaitMetadata returns the first snapshot at or above minIndex (1 means
// any loaded snapshot), or ctx's error.
func (c *Client) WaitMetadata(ctx context.Context, minIndex uint64) (*Snapshot, error) {
	for {
		snap := c.Metadata()
		if snap.Index >= max(minIndex, 1) {
			return snap, nil
		}
		if err := c.waitChange(ctx, snap.Changed()); err != nil {
			return nil, err
		}
	}
}

// syncMinGap bounds how often SyncMetadata asks Consul: requests for topics
// that do not exist must not turn into a stream of Consul reads.
const syncMinGap = 200 * time.Millisecond

// SyncMetadata returns a snapshot at least as new as what Consul holds now:
// it reads Consul's index for the topics consistently and waits for the
// watch to reach it. A caller that does not find a topic another agent just
// created uses it before answering "unknown topic". Calls closer together
// than syncMinGap return the current snapshot without asking Consul.
func (c *Client) SyncMetadata(ctx context.Context) (*Snapshot, error) {
	c.syncMu.Lock()
	now := c.clock.Now()
	recent := now.Sub(c.lastSync) < syncMinGap
	if !recent {
		c.lastSync = now
	}
	c.syncMu.Unlock()
	if recent {
		return c.Metadata(), nil
	}
	callCtx, cancel := c.callContext(ctx)
	_, meta, err := c.api.KV().Keys(c.keys.topicsRoot(), "/", (&api.QueryOptions{RequireConsistent: true}).WithContext(callCtx))
	cancel()
	if err != nil {
		return nil, consulError(err, "read the metadata index", keyReadRule(c.keys.prefix))
	}
	return c.WaitMetadata(ctx, meta.LastIndex)
}

func (c *Client) startWatch() {
	c.watchOnce.Do(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		// Close waits for the goroutines only after setting closed: none
		// may start after that.
		if !c.closed {
			c.wg.Go(c.watchLoop)
		}
	})
}

// watchGapPerKey spaces the metadata watch's queries by the size of its
// last listing: Consul encodes, and the agent decodes, every key of the
// prefix on every change, and with thousands of partitions changing at
// once (a creation, a failover) three agents listing at the 50 ms minimum
// kept Consul too busy to answer the agents' check passes in time (their
// leases lapsed, and thousands of leaderships were lost and won again).
// 20 µs a key: 40,000 keys (10,000 partitions) wait 0.8 s more.
const watchGapPerKey = 20 * time.Microsecond

// watchLoop is the one blocking query on the topics prefix.
func (c *Client) watchLoop() {
	var keys atomic.Int64
	gap := func() time.Duration { return c.cfg.WatchMinGap + time.Duration(keys.Load())*watchGapPerKey }
	c.blockingLoop("metadata", gap, func(ctx context.Context, waitIndex uint64) (uint64, func(uint64), error) {
		pairs, meta, err := c.listTopics(ctx, waitIndex)
		if err == nil {
			keys.Store(int64(len(pairs)))
		}
		if err == nil && meta.ResultsFilteredByACLs {
			err = &PermissionError{Op: "watch " + c.keys.topicsRoot(), Rule: keyReadRule(c.keys.prefix),
				Consul: "results filtered by ACLs"}
		}
		if err != nil {
			return 0, nil, err
		}
		return meta.LastIndex, func(index uint64) { c.publish(buildSnapshotFrom(c.snapshot.Load(), c.keys, index, pairs)) }, nil
	})
}

// blockingLoop runs one blocking query until the client closes: read asks
// Consul, blocking on waitIndex, and returns the index of its answer and
// how to publish it. Index rules (as Consul documents them): start at 0; a
// result whose index did not grow is not a change; an index that went
// backwards (Consul's state was reset) means the result is a fresh start;
// the index sent is at least 1. After an error the next query does not
// block (index 0): Consul may have restarted without its data, and a wait
// on an index it has not reached yet would last the whole wait time.
// The same holds when the client sees other signs of such a restart (its
// session or check unknown to Consul): resetWatches abandons the queries in
// flight, and the next ones start at 0. Nothing is published from a failed
// read. Successive queries start at least gap() apart (WatchMinGap or
// more), and errors back off. read must use ctx for its query.
func (c *Client) blockingLoop(what string, gap func() time.Duration, read func(ctx context.Context, waitIndex uint64) (uint64, func(index uint64), error)) {
	bo := newBackoff(100*time.Millisecond, 5*time.Second)
	var waitIndex, lastIndex uint64
	var lastStart time.Time
	seen := c.watchGeneration()
	for {
		if wait := gap() - c.clock.Now().Sub(lastStart); wait > 0 {
			if !c.sleep(c.ctx, wait) {
				return
			}
		}
		lastStart = c.clock.Now()
		if gen := c.watchGeneration(); gen != seen {
			seen, waitIndex = gen, 0
		}
		ctx, finish := c.blockingQuery(seen)
		index, publish, err := read(ctx, waitIndex)
		stale := finish()
		if c.ctx.Err() != nil {
			return
		}
		if stale {
			c.log.Info("consul may have lost its state; " + what + " watch starts again from index 0")
			continue
		}
		if err != nil {
			c.logConsulError(what+" watch failed", err)
			waitIndex = 0
			c.sleep(c.ctx, bo.delay())
			continue
		}
		bo.reset()
		newIndex := max(index, 1)
		waitIndex = newIndex
		switch {
		case newIndex == lastIndex:
			continue
		case newIndex < lastIndex:
			c.log.Info("consul index went backwards; "+what+" read afresh", "was", lastIndex, "now", newIndex)
		}
		lastIndex = newIndex
		publish(newIndex)
	}
}

// blockingQuery returns the context of one blocking query made with a wait
// index of reset generation gen: it bounds the query to a Consul that
// stopped answering (the wait plus Consul's jitter, wait/16, plus a normal
// call), and resetWatches cancels it. finish releases it and reports
// whether a reset came since gen: the answer is then to be dropped.
func (c *Client) blockingQuery(gen uint64) (ctx context.Context, finish func() (stale bool)) {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.WatchWait+c.cfg.WatchWait/16+watchTimeoutPadding)
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	if c.watchGen != gen {
		cancel()
	}
	if c.watchCancels == nil {
		c.watchCancels = map[uint64]context.CancelFunc{}
	}
	c.nextQueryID++
	id := c.nextQueryID
	c.watchCancels[id] = cancel
	return ctx, func() bool {
		c.watchMu.Lock()
		defer c.watchMu.Unlock()
		delete(c.watchCancels, id)
		cancel()
		return c.watchGen != gen
	}
}

func (c *Client) watchGeneration() uint64 {
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	return c.watchGen
}

// resetWatches makes every watch abandon its blocking query and read again
// from index 0: called when Consul shows it lost state (it no longer knows
// this agent's session or check), since a query waiting on an index the
// restarted Consul has not reached would wait its whole wait time.
func (c *Client) resetWatches() {
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	c.watchGen++
	for _, cancel := range c.watchCancels {
		cancel()
	}
}

func (c *Client) listTopics(ctx context.Context, index uint64) (api.KVPairs, *api.QueryMeta, error) {
	q := (&api.QueryOptions{WaitIndex: index, WaitTime: c.cfg.WatchWait}).WithContext(ctx)
	pairs, meta, err := c.api.KV().List(c.keys.topicsRoot(), q)
	if err != nil {
		return nil, nil, consulError(err, "watch "+c.keys.topicsRoot(), keyReadRule(c.keys.prefix))
	}
	return pairs, meta, nil
}

// publish makes snap current, wakes its watchers, and ends leaderships the
// snapshot shows lost.
func (c *Client) publish(snap *Snapshot) {
	old := c.snapshot.Swap(snap)
	close(old.changed)
	c.wakeChanged(old, snap)
	for name, tm := range snap.topics {
		if tm.Err == nil {
			continue
		}
		// Logged when it first appears, not on every change of the prefix.
		if was, ok := old.topics[name]; !ok || was.Err == nil || was.Err.Error() != tm.Err.Error() {
			c.log.Error("topic metadata unusable", "topic", name, "error", tm.Err)
		}
	}
	c.checkLeaderships(snap)
	// It may show a key held by the session without a leadership (stray.go).
	c.wakeStrays()
}
