package election

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/logagent/logagent/internal/consultest"
	"github.com/logagent/logagent/internal/testseed"
)

func TestAssignAddedPartitions(t *testing.T) {
	three := []string{"n1", "n2", "n3"}
	tests := []struct {
		name       string
		nodes      []string
		existing   [][]string
		partitions int
		rf         int
		want       [][]string
		wantErr    error
	}{
		{
			name: "3 to 6 on the same agents continues the round", nodes: three,
			existing:   [][]string{{"n1", "n2", "n3"}, {"n2", "n3", "n1"}, {"n3", "n1", "n2"}},
			partitions: 6, rf: 3,
			want: [][]string{{"n1", "n3", "n2"}, {"n2", "n1", "n3"}, {"n3", "n2", "n1"}},
		},
		{
			name: "2 to 4 starts after partition 1", nodes: three,
			existing:   [][]string{{"n1", "n2"}, {"n2", "n3"}},
			partitions: 4, rf: 2,
			want: [][]string{{"n3", "n1"}, {"n1", "n3"}},
		},
		{
			name: "the round starts at partition 0's first replica", nodes: []string{"n1", "n2", "n3", "n4"},
			existing:   [][]string{{"n3", "n4"}},
			partitions: 3, rf: 2,
			want: [][]string{{"n4", "n1"}, {"n1", "n2"}},
		},
		{
			name: "partition 0's first replica gone: from the first agent", nodes: []string{"n2", "n3"},
			existing:   [][]string{{"n1", "n2"}, {"n2", "n1"}},
			partitions: 4, rf: 2,
			want: [][]string{{"n2", "n3"}, {"n3", "n2"}},
		},
		{
			name: "rf above the agents", nodes: []string{"n1"},
			existing: [][]string{{"n1", "n2"}}, partitions: 2, rf: 2, wantErr: ErrNotEnoughAgents,
		},
		{
			name: "no growth", nodes: three,
			existing: [][]string{{"n1"}, {"n2"}}, partitions: 2, rf: 1, wantErr: ErrInvalidTopic,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := AssignAddedPartitions(tt.nodes, tt.existing, tt.partitions, tt.rf)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && fmt.Sprint(got) != fmt.Sprint(tt.want)) {
				t.Fatalf("AssignAddedPartitions = %v, %v; want %v, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// On the agents a topic was created on, growing it places the new
// partitions exactly where creating it at the larger count would have, so
// the spread AssignReplicas guarantees holds after any number of alters.
func TestAssignAddedPartitionsExtendsTheCreation(t *testing.T) {
	rng := testseed.Rand(t)
	for range 200 {
		n := 1 + rng.IntN(9)
		rf := 1 + rng.IntN(n)
		nodes := make([]string, n)
		for i := range nodes {
			nodes[i] = fmt.Sprintf("n%02d", i)
		}
		total := 2 + rng.IntN(60)
		before := 1 + rng.IntN(total-1)
		existing, err := AssignReplicas(nodes, before, rf)
		if err != nil {
			t.Fatal(err)
		}
		added, err := AssignAddedPartitions(nodes, existing, total, rf)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := AssignReplicas(nodes, total, rf)
		if got := append(existing, added...); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("n=%d rf=%d %d->%d: %v, want %v", n, rf, before, total, got, want)
		}
	}
}

func TestCheckAlter(t *testing.T) {
	old := TopicConfig{ID: "x", Name: "t", Partitions: 2, ReplicationFactor: 2, MinInsyncReplicas: 1, UncleanDelay: time.Second}
	with := func(f func(*TopicConfig)) TopicConfig {
		tc := old
		f(&tc)
		return tc
	}
	tests := []struct {
		name  string
		tc    TopicConfig
		added [][]string
		ok    bool
	}{
		{"unchanged", old, nil, true},
		{"min insync up", with(func(tc *TopicConfig) { tc.MinInsyncReplicas = 2 }), nil, true},
		{"min insync above rf", with(func(tc *TopicConfig) { tc.MinInsyncReplicas = 3 }), nil, false},
		{"storage", with(func(tc *TopicConfig) { tc.Storage = []byte(`{"retention_bytes":1}`) }), nil, true},
		{"grow", with(func(tc *TopicConfig) { tc.Partitions = 3 }), [][]string{{"a", "b"}}, true},
		{"grow without replicas", with(func(tc *TopicConfig) { tc.Partitions = 3 }), nil, false},
		{"grow with short replicas", with(func(tc *TopicConfig) { tc.Partitions = 3 }), [][]string{{"a"}}, false},
		{"replicas without growth", old, [][]string{{"a", "b"}}, false},
		{"shrink", with(func(tc *TopicConfig) { tc.Partitions = 1 }), nil, false},
		{"rf", with(func(tc *TopicConfig) { tc.ReplicationFactor = 3 }), nil, false},
		{"id", with(func(tc *TopicConfig) { tc.ID = "y" }), nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := checkAlter(old, tt.tc, tt.added); (err == nil) != tt.ok {
				t.Fatalf("checkAlter = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// growTo is a TopicChange that adds partitions placed by
// AssignAddedPartitions over nodes.
func growTo(partitions int, nodes []string) TopicChange {
	return func(tc TopicConfig, replicas [][]string) (TopicConfig, [][]string, error) {
		added, err := AssignAddedPartitions(nodes, replicas, partitions, tc.ReplicationFactor)
		tc.Partitions = partitions
		return tc, added, err
	}
}

// TestAlterTopic grows a topic over several transactions, changes its
// settings, and shows the guard: an alter that read an older config, or a
// topic re-created meanwhile, is refused without a change.
func TestAlterTopic(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	a := newTestClient(t, srv, "a")
	register(t, a)
	ctx := context.Background()
	nodes := []string{"a", "b", "c"}
	first, _ := AssignReplicas(nodes, 3, 2)
	createTopic(t, a, "grow", first)

	// 3 to 40: 37 partitions of 3 operations are two transactions.
	tc, err := a.AlterTopic(ctx, "grow", growTo(40, nodes))
	if err != nil || tc.Partitions != 40 {
		t.Fatalf("AlterTopic(40) = %+v, %v", tc, err)
	}
	want, _ := AssignReplicas(nodes, 40, 2)
	waitFor(t, 5*time.Second, "40 partitions in the metadata", func() bool {
		tm, ok := a.Metadata().Topic("grow")
		return ok && tm.Err == nil && len(tm.Partitions) == 40
	})
	tm, _ := a.Metadata().Topic("grow")
	for p, pm := range tm.Partitions {
		if !slices.Equal(pm.Replicas, want[p]) || !slices.Equal(pm.State.ISR, want[p]) || pm.State.Epoch != 0 && p >= 3 {
			t.Fatalf("partition %d: %+v, want replicas %v", p, pm, want[p])
		}
	}

	tc, err = a.AlterTopic(ctx, "grow", func(tc TopicConfig, _ [][]string) (TopicConfig, [][]string, error) {
		tc.MinInsyncReplicas, tc.Storage = 2, []byte(`{"retention_bytes":1024}`)
		return tc, nil, nil
	})
	if err != nil || tc.MinInsyncReplicas != 2 {
		t.Fatalf("AlterTopic(settings) = %+v, %v", tc, err)
	}
	waitFor(t, 5*time.Second, "the new settings in the metadata", func() bool {
		tm, ok := a.Metadata().Topic("grow")
		return ok && tm.Config.MinInsyncReplicas == 2 && string(tm.Config.Storage) == `{"retention_bytes":1024}`
	})

	// Another writer changes the config between the read and the write.
	_, err = a.AlterTopic(ctx, "grow", func(tc TopicConfig, replicas [][]string) (TopicConfig, [][]string, error) {
		if _, err := a.AlterTopic(ctx, "grow", growTo(41, nodes)); err != nil {
			t.Errorf("the concurrent alter: %v", err)
		}
		return growTo(45, nodes)(tc, replicas)
	})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("AlterTopic over a config changed meanwhile = %v, want ErrConflict", err)
	}
	// The topic deleted and re-created meanwhile is not grown.
	_, err = a.AlterTopic(ctx, "grow", func(tc TopicConfig, replicas [][]string) (TopicConfig, [][]string, error) {
		if err := a.DeleteTopic(ctx, "grow"); err != nil {
			t.Errorf("delete: %v", err)
		}
		createTopic(t, a, "grow", first)
		return growTo(44, nodes)(tc, replicas)
	})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("AlterTopic over a re-created topic = %v, want ErrConflict", err)
	}
	pairs, _, err := a.api.KV().List(a.keys.topicRoot("grow"), &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, pair := range pairs {
		if _, p, kind := a.keys.parse(pair.Key); kind != kindConfig && p >= 3 {
			t.Fatalf("the refused alter wrote %s", pair.Key)
		}
	}

	if _, err := a.AlterTopic(ctx, "grow", growTo(2, nodes)); !errors.Is(err, ErrInvalidTopic) {
		t.Fatalf("AlterTopic(2) = %v, want ErrInvalidTopic (partitions can only be added)", err)
	}
	if _, err := a.AlterTopic(ctx, "none", growTo(2, nodes)); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("AlterTopic(unknown topic) = %v, want ErrUnknownTopic", err)
	}
}

// TestAlterTopicAfterAHalfDoneAlter leaves what an alter that crashed
// after its first transactions leaves, partition keys beyond the config's
// count (here with a leader epoch and replica lists of their own): the
// topic works at its old count, and a retry replaces them and succeeds.
func TestAlterTopicAfterAHalfDoneAlter(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	a := newTestClient(t, srv, "a")
	register(t, a)
	ctx := context.Background()
	nodes := []string{"a", "b"}
	first, _ := AssignReplicas(nodes, 2, 2)
	createTopic(t, a, "half", first)
	for p := 2; p < 5; p++ {
		for key, value := range map[string]string{
			a.keys.replicas("half", p): `["b","a"]`,
			a.keys.state("half", p):    `{"leader":"b","epoch":5,"isr":["b"]}`,
			a.keys.reassign("half", p): `{"target":["b"],"adding":[],"removing":["a"]}`,
		} {
			if _, err := a.api.KV().Put(&api.KVPair{Key: key, Value: []byte(value)}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}

	snap, err := a.SyncMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tm, ok := snap.Topic("half")
	if !ok || tm.Err != nil || len(tm.Partitions) != 2 {
		t.Fatalf("with keys beyond the count the topic is %+v", tm)
	}
	if _, ok := snap.Partition("half", 2); ok {
		t.Fatal("the snapshot has a partition beyond the config's count")
	}
	if l := campaign(t, a, "half", 1); l.Epoch() != 1 {
		t.Fatalf("partition 1 led at epoch %d, want 1", l.Epoch())
	}
	if _, err := a.Campaign(ctx, "half", 2); !errors.Is(err, ErrUnknownPartition) {
		t.Fatalf("Campaign(half/2) = %v, want ErrUnknownPartition", err)
	}

	// The retry, to fewer partitions than the crashed attempt wrote.
	if _, err := a.AlterTopic(ctx, "half", growTo(4, nodes)); err != nil {
		t.Fatalf("retry: %v", err)
	}
	want, _ := AssignReplicas(nodes, 4, 2)
	waitFor(t, 5*time.Second, "4 partitions", func() bool {
		tm, ok := a.Metadata().Topic("half")
		return ok && tm.Err == nil && len(tm.Partitions) == 4
	})
	for p := 2; p < 4; p++ {
		pm, _ := a.Metadata().Partition("half", p)
		if !slices.Equal(pm.Replicas, want[p]) || pm.State.Epoch != 0 || pm.State.Leader != "" || pm.Reassign != nil {
			t.Fatalf("partition %d after the retry: %+v, want fresh with replicas %v", p, pm, want[p])
		}
	}
	if l := campaign(t, a, "half", 3); l.Epoch() != 1 {
		t.Fatalf("new partition 3 led at epoch %d, want 1", l.Epoch())
	}
}

// TestAlterMinISRAboveAMovedPartitionsReplicas: a partition move may give
// a partition fewer replicas than the replication factor (docs/design.md
// §7.6), and min_insync_replicas may be raised up to the replication
// factor. Raised above the replicas of such a partition, no leader of it
// could start (replicate.NewLeader refuses min_insync_replicas above the
// replicas: the partition is unleadable from its next election on, its
// leader resigning and campaigning again each second), and a move in
// flight to that few replicas never completes. The alter is refused,
// naming the partition, whether the move completed or is in flight, or a
// cancel would bring the partition back to that few; a raise the replicas
// allow passes.
func TestAlterMinISRAboveAMovedPartitionsReplicas(t *testing.T) {
	t.Parallel()
	_, admin, a := startRegistered(t)
	ctx := context.Background()
	minISR := func(n int) TopicChange {
		return func(tc TopicConfig, _ [][]string) (TopicConfig, [][]string, error) {
			tc.MinInsyncReplicas = n
			return tc, nil, nil
		}
	}
	configMinISR := func() int {
		t.Helper()
		pair, _, err := admin.KV().Get(a.keys.config("sh"), &api.QueryOptions{RequireConsistent: true})
		if err != nil || pair == nil {
			t.Fatalf("read the config: %v, %v", pair, err)
		}
		tc, err := decodeTopicConfig(pair.Key, pair.Value)
		if err != nil {
			t.Fatal(err)
		}
		return tc.MinInsyncReplicas
	}
	createTopic(t, a, "sh", [][]string{{"a", "b", "c"}, {"a", "b", "c"}}, func(tc *TopicConfig) { tc.MinInsyncReplicas = 1 })

	// In flight: partition 1 moving to a, b.
	if _, _, err := a.StartReassign(ctx, "sh", 1, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AlterTopic(ctx, "sh", minISR(3)); !errors.Is(err, ErrInvalidTopic) || !strings.Contains(err.Error(), "partition 1") {
		t.Fatalf("min_insync_replicas 3 with partition 1 moving to 2 replicas = %v, want ErrInvalidTopic naming partition 1", err)
	}
	// Completed: partition 1 on a, b (what the completion writes).
	if _, err := admin.KV().Delete(a.keys.reassign("sh", 1), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.KV().Put(&api.KVPair{Key: a.keys.replicas("sh", 1), Value: []byte(`["a","b"]`)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AlterTopic(ctx, "sh", minISR(3)); !errors.Is(err, ErrInvalidTopic) || !strings.Contains(err.Error(), "partition 1") {
		t.Fatalf("min_insync_replicas 3 with partition 1 on 2 replicas = %v, want ErrInvalidTopic naming partition 1", err)
	}
	if got := configMinISR(); got != 1 {
		t.Fatalf("the refused alters left min_insync_replicas %d, want 1", got)
	}
	// Growing back: a cancel would leave 2.
	if _, _, err := a.StartReassign(ctx, "sh", 1, []string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AlterTopic(ctx, "sh", minISR(3)); !errors.Is(err, ErrInvalidTopic) {
		t.Fatalf("min_insync_replicas 3 with partition 1 moving from 2 replicas = %v, want ErrInvalidTopic", err)
	}
	// What the replicas allow passes.
	if tc, err := a.AlterTopic(ctx, "sh", minISR(2)); err != nil || tc.MinInsyncReplicas != 2 {
		t.Fatalf("min_insync_replicas 2 = %+v, %v", tc, err)
	}
}

// TestAlterMinISRRacingAShrinkingMove: an alter raising
// min_insync_replicas checks every partition's replicas and moves as it
// read them, and its write was guarded by the config's index only; a move
// started between its read and its write (shrinking a partition, which
// checked the target against the min_insync_replicas it read) left the
// config's check unchanged. Both committed: min_insync_replicas 3 with a
// move to 2 replicas in flight, the state the alter exists to refuse. A
// leader that completes the move before it learns the new setting writes
// replicas that no leader can start on (replicate.NewLeader refuses
// min_insync_replicas above the replicas): from the partition's next
// election on, each winner resigns and the epoch climbs. A start that
// leaves a partition fewer replicas now writes the config at the index it
// checked, so the alter decided before it fails its cas, and read again
// it is refused.
func TestAlterMinISRRacingAShrinkingMove(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	a := newTestClient(t, srv, "a")
	register(t, a)
	ctx := context.Background()
	createTopic(t, a, "race", [][]string{{"a", "b", "c"}, {"a", "b", "c"}}, func(tc *TopicConfig) { tc.MinInsyncReplicas = 2 })
	configIndex := func() uint64 {
		t.Helper()
		pair, _, err := srv.Client().KV().Get(a.keys.config("race"), &api.QueryOptions{RequireConsistent: true})
		if err != nil || pair == nil {
			t.Fatalf("read the config: %v, %v", pair, err)
		}
		return pair.ModifyIndex
	}
	minISR3 := func(tc TopicConfig, _ [][]string) (TopicConfig, [][]string, error) {
		tc.MinInsyncReplicas = 3
		return tc, nil, nil
	}

	// A move that keeps the count leaves the config alone.
	before := configIndex()
	if _, _, err := a.StartReassign(ctx, "race", 1, []string{"b", "c", "a"}); err != nil {
		t.Fatal(err)
	}
	if after := configIndex(); after != before {
		t.Fatalf("a move keeping 3 replicas wrote the config (index %d to %d)", before, after)
	}

	_, err := a.AlterTopic(ctx, "race", func(tc TopicConfig, replicas [][]string) (TopicConfig, [][]string, error) {
		// Between the alter's read and its write.
		if _, _, err := a.StartReassign(ctx, "race", 0, []string{"a", "b"}); err != nil {
			t.Errorf("the move's start: %v", err)
		}
		return minISR3(tc, replicas)
	})
	if !errors.Is(err, ErrConflict) {
		tc, _, _, fewest, rerr := a.readTopic(ctx, "race", "read", keyRule(a.keys.prefix))
		t.Fatalf("alter to min_insync_replicas 3 racing a move of partition 0 to 2 replicas = %v (config now %+v, fewest replicas %v, %v), want ErrConflict", err, tc, fewest, rerr)
	}
	if _, err := a.AlterTopic(ctx, "race", minISR3); !errors.Is(err, ErrInvalidTopic) || !strings.Contains(err.Error(), "partition 0") {
		t.Fatalf("the alter again = %v, want ErrInvalidTopic naming partition 0 (moving to 2 replicas)", err)
	}
}
