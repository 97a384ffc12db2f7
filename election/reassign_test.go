package election

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/logagent/logagent/internal/consultest"
)

func TestReassignmentLists(t *testing.T) {
	cases := []struct {
		name                    string
		replicas, target        []string
		adding, removing, union []string
	}{
		{"replace one", []string{"n1", "n2", "n3"}, []string{"n1", "n2", "n4"}, []string{"n4"}, []string{"n3"}, []string{"n1", "n2", "n4", "n3"}},
		{"new preferred leader", []string{"n1", "n2", "n3"}, []string{"n4", "n2", "n1"}, []string{"n4"}, []string{"n3"}, []string{"n4", "n2", "n1", "n3"}},
		{"grow", []string{"n1"}, []string{"n1", "n2"}, []string{"n2"}, []string{}, []string{"n1", "n2"}},
		{"shrink", []string{"n1", "n2", "n3"}, []string{"n2", "n3"}, []string{}, []string{"n1"}, []string{"n2", "n3", "n1"}},
		{"all new", []string{"n1", "n2"}, []string{"n3", "n4"}, []string{"n3", "n4"}, []string{"n1", "n2"}, []string{"n3", "n4", "n1", "n2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := NewReassignment(c.replicas, c.target)
			if !slices.Equal(m.Adding, c.adding) || !slices.Equal(m.Removing, c.removing) || !slices.Equal(m.Union(), c.union) {
				t.Fatalf("move %+v union %v; want adding %v removing %v union %v", m, m.Union(), c.adding, c.removing, c.union)
			}
			value, _ := json.Marshal(m)
			if _, err := decodeReassignment("k", value, m.Union()); err != nil {
				t.Fatalf("decode of its own encoding: %v", err)
			}
		})
	}
	// What the watch must refuse: a move beside replicas that are not its
	// union, or whose lists contradict each other.
	bad := []struct {
		name, value string
		replicas    []string
	}{
		{"replicas not the union", `{"target":["n1","n2","n4"],"adding":["n4"],"removing":["n3"]}`, []string{"n1", "n2", "n3"}},
		{"removing in the target", `{"target":["n1","n2"],"adding":[],"removing":["n2"]}`, []string{"n1", "n2", "n2"}},
		{"adding outside the target", `{"target":["n1","n2"],"adding":["n5"],"removing":[]}`, []string{"n1", "n2"}},
		{"repeated target", `{"target":["n1","n1"],"adding":[],"removing":[]}`, []string{"n1", "n1"}},
		{"empty target", `{"target":[],"adding":[],"removing":["n1"]}`, []string{"n1"}},
		{"not JSON", `{`, []string{"n1"}},
	}
	for _, b := range bad {
		if _, err := decodeReassignment("k", []byte(b.value), b.replicas); !errors.Is(err, ErrCorruptMetadata) {
			t.Errorf("%s: decode = %v, want ErrCorruptMetadata", b.name, err)
		}
	}
}

// TestReassign runs a move's two transactions against a real Consul: the
// start writes the union and the move (refusing bad targets and a second
// move), the completion is guarded by the leader's session and the indexes
// of the keys it decided from.
func TestReassign(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	admin := srv.Client()
	a := newTestClient(t, srv, "a")
	register(t, a)
	createTopic(t, a, "mv", [][]string{{"a", "b", "c"}}, func(tc *TopicConfig) { tc.MinInsyncReplicas = 2 })
	ctx := context.Background()
	la := campaign(t, a, "mv", 0)

	for _, target := range [][]string{{"a", "a", "b"}, {"a"}, {}, {"a", "b", "no/slash"}} {
		if _, _, err := a.StartReassign(ctx, "mv", 0, target); !errors.Is(err, ErrInvalidTopic) {
			t.Errorf("StartReassign(%v) = %v, want ErrInvalidTopic", target, err)
		}
	}
	if _, _, err := a.StartReassign(ctx, "mv", 3, []string{"a", "b"}); !errors.Is(err, ErrUnknownPartition) {
		t.Errorf("StartReassign of partition 3 = %v, want ErrUnknownPartition", err)
	}
	if _, _, err := a.StartReassign(ctx, "nope", 0, []string{"a", "b"}); !errors.Is(err, ErrUnknownTopic) {
		t.Errorf("StartReassign of an unknown topic = %v, want ErrUnknownTopic", err)
	}
	if _, done, err := a.StartReassign(ctx, "mv", 0, []string{"a", "b", "c"}); err != nil || !done {
		t.Errorf("StartReassign to the replicas = done %t, %v; want done", done, err)
	}
	if pair, _, _ := admin.KV().Get(testPrefix+"topics/mv/0/reassign", nil); pair != nil {
		t.Fatalf("a move to the same replicas wrote %s", pair.Value)
	}

	m, done, err := a.StartReassign(ctx, "mv", 0, []string{"a", "b", "d"})
	if err != nil || done {
		t.Fatalf("StartReassign = %+v, done %t, %v", m, done, err)
	}
	if got := consulReplicas(t, admin, "mv", 0); !slices.Equal(got, []string{"a", "b", "d", "c"}) {
		t.Fatalf("replicas during the move = %v, want the union", got)
	}
	if _, _, err := a.StartReassign(ctx, "mv", 0, []string{"a", "b", "e"}); !errors.Is(err, ErrReassignInProgress) {
		t.Fatalf("second StartReassign = %v, want ErrReassignInProgress", err)
	}
	pm := waitPartition(t, a, "mv", 0, func(pm PartitionMeta) bool { return pm.Reassign != nil })
	if !slices.Equal(pm.Reassign.Target, []string{"a", "b", "d"}) || !slices.Equal(pm.Reassign.Adding, []string{"d"}) ||
		!slices.Equal(pm.Reassign.Removing, []string{"c"}) || !slices.Equal(pm.Replicas, []string{"a", "b", "d", "c"}) {
		t.Fatalf("snapshot of the move = %+v", pm)
	}

	staleSnap := a.Metadata()
	// The added replica joins the ISR through the ordinary ISR change.
	if err := a.ProposeISR(ctx, "mv", 0, la.Epoch(), []string{"a", "b", "c", "d"}, nil); err != nil {
		t.Fatalf("ISR with the added replica: %v", err)
	}
	if err := a.CompleteReassign(ctx, "mv", 0, la.Epoch(), *pm.Reassign, pm.ReplicasIndex, pm.ReassignIndex, []string{"a", "b", "c"}, nil); !errors.Is(err, ErrInvalidTopic) {
		t.Fatalf("completion keeping a removed replica = %v, want ErrInvalidTopic", err)
	}
	// Decided from a stale snapshot: nothing is written.
	if err := a.CompleteReassign(ctx, "mv", 0, la.Epoch(), *pm.Reassign, pm.ReplicasIndex, pm.ReassignIndex-1, []string{"a", "b", "d"}, nil); !errors.Is(err, ErrConflict) {
		t.Fatalf("completion at a stale reassign index = %v, want ErrConflict", err)
	}
	if got := consulReplicas(t, admin, "mv", 0); !slices.Equal(got, []string{"a", "b", "d", "c"}) {
		t.Fatalf("replicas after a refused completion = %v", got)
	}
	if err := a.CompleteReassign(ctx, "mv", 0, la.Epoch()+1, *pm.Reassign, pm.ReplicasIndex, pm.ReassignIndex, []string{"a", "b", "d"}, nil); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("completion at another epoch = %v, want ErrNotLeader", err)
	}
	if err := a.CompleteReassign(ctx, "mv", 0, la.Epoch(), *pm.Reassign, pm.ReplicasIndex, pm.ReassignIndex, []string{"a", "b", "d"}, nil); err != nil {
		t.Fatalf("CompleteReassign: %v", err)
	}
	if got := consulReplicas(t, admin, "mv", 0); !slices.Equal(got, []string{"a", "b", "d"}) {
		t.Fatalf("replicas after the move = %v", got)
	}
	if st := consulState(t, admin, "mv", 0); !slices.Equal(st.ISR, []string{"a", "b", "d"}) || st.Leader != "a" || st.Epoch != la.Epoch() {
		t.Fatalf("state after the move = %+v", st)
	}
	if pair, _, _ := admin.KV().Get(testPrefix+"topics/mv/0/reassign", nil); pair != nil {
		t.Fatalf("the move's key outlived it: %s", pair.Value)
	}
	if got := la.State(); !slices.Equal(got.ISR, []string{"a", "b", "d"}) {
		t.Fatalf("leader's view after the move = %+v", got)
	}
	waitPartition(t, a, "mv", 0, func(pm PartitionMeta) bool { return pm.Reassign == nil && len(pm.Replicas) == 3 })

	// An ISR change validated against metadata from before the completion
	// (a watch behind it: the snapshot of the move, put back) must not
	// write a removed replica into the ISR beside replicas that lack it.
	current := a.snapshot.Load()
	a.snapshot.Store(staleSnap)
	err = a.ProposeISR(ctx, "mv", 0, la.Epoch(), []string{"a", "b", "d", "c"}, nil)
	a.snapshot.Store(current)
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("ISR change from a snapshot older than the replicas = %v, want ErrConflict", err)
	}
	if st := consulState(t, admin, "mv", 0); !slices.Equal(st.ISR, []string{"a", "b", "d"}) {
		t.Fatalf("state after the stale ISR change = %+v", st)
	}

	// A move whose replicas key is not its union makes the topic corrupt.
	if _, err := admin.KV().Put(&api.KVPair{Key: testPrefix + "topics/mv/0/reassign", Value: []byte(`{"target":["a","b","e"],"adding":["e"],"removing":["d"]}`)}, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		tm, ok := a.Metadata().Topic("mv")
		if ok && errors.Is(tm.Err, ErrCorruptMetadata) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a move beside replicas that are not its union: topic %+v, want ErrCorruptMetadata", tm)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func consulReplicas(t *testing.T, admin *api.Client, topic string, partition int) []string {
	t.Helper()
	pair, _, err := admin.KV().Get(keyspace{prefix: testPrefix}.replicas(topic, partition), &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil {
		t.Fatalf("read replicas: %v (%v)", err, pair)
	}
	var replicas []string
	if err := json.Unmarshal(pair.Value, &replicas); err != nil {
		t.Fatal(err)
	}
	return replicas
}

// waitPartition waits until c's metadata shows the partition as ok says.
func waitPartition(t *testing.T, c *Client, topic string, partition int, ok func(PartitionMeta) bool) PartitionMeta {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pm, found := c.Metadata().Partition(topic, partition)
		if found && ok(pm) {
			return pm
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%d never reached the wanted metadata: %+v", topic, partition, pm)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
