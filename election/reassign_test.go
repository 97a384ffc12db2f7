package election

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/logagent/logagent/internal/consultest"
	"github.com/logagent/logagent/internal/testseed"
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
	_, admin, a := startRegistered(t)
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

// lostAnswerTransport sends a transaction on to Consul and, once armed,
// loses the answer of the first one whose operations name a key ending in
// suffix: the transaction commits, the caller gets an error, as after a
// timeout or a connection reset on the way back.
type lostAnswerTransport struct {
	mu     sync.Mutex
	suffix string
}

func (l *lostAnswerTransport) arm(suffix string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.suffix = suffix
}

func (l *lostAnswerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	l.mu.Lock()
	lose := false
	if l.suffix != "" && req.Method == http.MethodPut && req.URL.Path == "/v1/txn" && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			l.mu.Unlock()
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		if lose = bytes.Contains(body, []byte(l.suffix+`"`)); lose {
			l.suffix = ""
		}
	}
	l.mu.Unlock()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || !lose {
		return resp, err
	}
	resp.Body.Close()
	return nil, errors.New("connection reset by peer (test: the answer was lost)")
}

// TestStartReassignRetriedAfterALostAnswer: a start whose transaction
// committed but whose answer was lost fails (the API's 503, retriable);
// its retry finds its own move in flight. It was refused
// ErrReassignInProgress (409 reassignment_in_progress, "the partition is
// being moved already"), the caller told its own move was another's; it
// is answered as the start, and writes nothing. A start to another target,
// or to the target of a cancel's way back, is still refused.
func TestStartReassignRetriedAfterALostAnswer(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	admin := srv.Client()
	lost := &lostAnswerTransport{}
	a := newTestClient(t, srv, "a", func(cfg *Config) { cfg.Consul.HttpClient = &http.Client{Transport: lost} })
	register(t, a)
	ctx := context.Background()
	createTopic(t, a, "rt", [][]string{{"a", "b", "c"}})

	lost.arm("/rt/0/reassign")
	if _, _, err := a.StartReassign(ctx, "rt", 0, []string{"a", "b", "d"}); err == nil {
		t.Fatal("a start whose answer was lost succeeded")
	}
	if moveKey(t, admin, "rt", 0) == nil {
		t.Fatal("the start whose answer was lost did not commit: the test proves nothing")
	}
	pair, _, err := admin.KV().Get(testPrefix+"topics/rt/0/reassign", nil)
	if err != nil {
		t.Fatal(err)
	}
	m, done, err := a.StartReassign(ctx, "rt", 0, []string{"a", "b", "d"})
	if err != nil || done {
		t.Fatalf("the retry of a start that committed = done %t, %v; want its move, as started", done, err)
	}
	if !slices.Equal(m.Target, []string{"a", "b", "d"}) || !slices.Equal(m.Adding, []string{"d"}) || !slices.Equal(m.Removing, []string{"c"}) {
		t.Fatalf("the retry answered %+v, want the move to a,b,d", m)
	}
	if again, _, _ := admin.KV().Get(testPrefix+"topics/rt/0/reassign", nil); again == nil || again.ModifyIndex != pair.ModifyIndex {
		t.Fatalf("the retry wrote the move again: %+v", again)
	}

	if _, _, err := a.StartReassign(ctx, "rt", 0, []string{"a", "b", "e"}); !errors.Is(err, ErrReassignInProgress) {
		t.Fatalf("a start to another target while the move is in flight = %v, want ErrReassignInProgress", err)
	}
	if _, err := a.CancelReassign(ctx, "rt", 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.StartReassign(ctx, "rt", 0, []string{"a", "b", "c"}); !errors.Is(err, ErrReassignInProgress) {
		t.Fatalf("a start to the target of the way back in flight = %v, want ErrReassignInProgress", err)
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

// moveKey reads the partition's reassign key as stored, nil when absent.
func moveKey(t *testing.T, admin *api.Client, topic string, partition int) *Reassignment {
	t.Helper()
	pair, _, err := admin.KV().Get(keyspace{prefix: testPrefix}.reassign(topic, partition), &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if pair == nil {
		return nil
	}
	var m Reassignment
	if err := json.Unmarshal(pair.Value, &m); err != nil {
		t.Fatal(err)
	}
	return &m
}

// TestCancelReassign runs the cancel's transaction against a real Consul:
// nothing in flight is ErrNoReassignment; a move of [a b c] to [a b d]
// goes back to [a b c] in its order with d to remove (the replicas key its
// union, the leader's completion of the way back then writes [a b c] and
// the ISR less d); a second cancel answers the way back and writes
// nothing; a move with no original replica in the ISR is
// ErrCancelNotInSync; a move stored without "from" goes back to its union
// less what it adds.
func TestCancelReassign(t *testing.T) {
	t.Parallel()
	_, admin, a := startRegistered(t)
	createTopic(t, a, "cx", [][]string{{"a", "b", "c"}, {"a", "b", "c"}})
	ctx := context.Background()
	la := campaign(t, a, "cx", 0)

	if _, err := a.CancelReassign(ctx, "cx", 0); !errors.Is(err, ErrNoReassignment) {
		t.Fatalf("cancel with nothing in flight = %v, want ErrNoReassignment", err)
	}
	if _, err := a.CancelReassign(ctx, "cx", 5); !errors.Is(err, ErrUnknownPartition) {
		t.Fatalf("cancel of partition 5 = %v, want ErrUnknownPartition", err)
	}
	if _, err := a.CancelReassign(ctx, "nope", 0); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("cancel of an unknown topic = %v, want ErrUnknownTopic", err)
	}
	m, _, err := a.StartReassign(ctx, "cx", 0, []string{"a", "b", "d"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.From, []string{"a", "b", "c"}) {
		t.Fatalf("the move keeps from %v, want [a b c]", m.From)
	}
	pm := waitPartition(t, a, "cx", 0, func(pm PartitionMeta) bool { return pm.Reassign != nil })
	if err := a.ProposeISR(ctx, "cx", 0, la.Epoch(), []string{"a", "b", "c", "d"}, nil); err != nil {
		t.Fatal(err)
	}
	back, err := a.CancelReassign(ctx, "cx", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := Reassignment{Target: []string{"a", "b", "c"}, Adding: []string{}, Removing: []string{"d"}, Cancelled: true}
	if got := moveKey(t, admin, "cx", 0); got == nil || !slices.Equal(got.Target, want.Target) || !slices.Equal(got.Removing, want.Removing) || len(got.Adding) != 0 || !got.Cancelled {
		t.Fatalf("reassign key after the cancel = %+v, want %+v", got, want)
	}
	if got := consulReplicas(t, admin, "cx", 0); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Fatalf("replicas after the cancel = %v, want the way back's union", got)
	}
	if again, err := a.CancelReassign(ctx, "cx", 0); err != nil || !again.Cancelled || !slices.Equal(again.Target, back.Target) {
		t.Fatalf("a second cancel = %+v, %v; want the way back", again, err)
	}
	// The completion decided from the move's snapshot is refused: the
	// cancel changed both keys it guards.
	if err := a.CompleteReassign(ctx, "cx", 0, la.Epoch(), *pm.Reassign, pm.ReplicasIndex, pm.ReassignIndex, []string{"a", "b", "d"}, nil); !errors.Is(err, ErrConflict) {
		t.Fatalf("the move's completion after the cancel = %v, want ErrConflict", err)
	}
	pm = waitPartition(t, a, "cx", 0, func(pm PartitionMeta) bool { return pm.Reassign != nil && pm.Reassign.Cancelled })
	if err := a.CompleteReassign(ctx, "cx", 0, la.Epoch(), *pm.Reassign, pm.ReplicasIndex, pm.ReassignIndex, []string{"a", "b", "c"}, nil); err != nil {
		t.Fatalf("the way back's completion: %v", err)
	}
	if got := consulReplicas(t, admin, "cx", 0); !slices.Equal(got, []string{"a", "b", "c"}) || moveKey(t, admin, "cx", 0) != nil {
		t.Fatalf("after the way back: replicas %v, move %+v", got, moveKey(t, admin, "cx", 0))
	}
	if st := consulState(t, admin, "cx", 0); !slices.Equal(st.ISR, []string{"a", "b", "c"}) {
		t.Fatalf("ISR after the way back = %v", st.ISR)
	}
	if _, err := a.CancelReassign(ctx, "cx", 0); !errors.Is(err, ErrNoReassignment) {
		t.Fatalf("cancel after the way back = %v, want ErrNoReassignment", err)
	}

	// Partition 1, [a b c] moving to [d e], with only the added d in the
	// ISR (as a leader that crashed and an added replica that won would
	// leave it): no original replica could lead.
	campaign(t, a, "cx", 1)
	if _, _, err := a.StartReassign(ctx, "cx", 1, []string{"d", "e"}); err != nil {
		t.Fatal(err)
	}
	waitPartition(t, a, "cx", 1, func(pm PartitionMeta) bool { return pm.Reassign != nil })
	stateKey := keyspace{prefix: testPrefix}.state("cx", 1)
	st := consulState(t, admin, "cx", 1)
	st.ISR = []string{"d"}
	if _, err := admin.KV().Put(&api.KVPair{Key: stateKey, Value: encodeJSON(st)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CancelReassign(ctx, "cx", 1); !errors.Is(err, ErrCancelNotInSync) {
		t.Fatalf("cancel with no original replica in the ISR = %v, want ErrCancelNotInSync", err)
	}
	if got := moveKey(t, admin, "cx", 1); got == nil || got.Cancelled {
		t.Fatalf("a refused cancel wrote %+v", got)
	}

	// A move stored without "from" (by an agent before it was kept).
	reassignKey := keyspace{prefix: testPrefix}.reassign("cx", 1)
	if _, err := admin.KV().Put(&api.KVPair{Key: reassignKey, Value: []byte(`{"target":["d","e"],"adding":["d","e"],"removing":["a","b","c"]}`)}, nil); err != nil {
		t.Fatal(err)
	}
	st.ISR = []string{"b", "d"}
	if _, err := admin.KV().Put(&api.KVPair{Key: stateKey, Value: encodeJSON(st)}, nil); err != nil {
		t.Fatal(err)
	}
	if back, err := a.CancelReassign(ctx, "cx", 1); err != nil || !slices.Equal(back.Target, []string{"a", "b", "c"}) || !slices.Equal(back.Removing, []string{"d", "e"}) {
		t.Fatalf("cancel of a move without from = %+v, %v; want back to [a b c] removing [d e]", back, err)
	}
}

// TestCancelRacesCompletion: a cancel and the leader's completion of the
// same move, sent at once, many times over (each round a new move of its
// own partition): exactly one commits every time, and the keys are what
// the winner wrote: replicas the target and no move (the completion), or
// the way back's union and the way back (the cancel). The loser gets
// ErrConflict; the cancel, read again, ErrNoReassignment when the
// completion won. The cancel reads three keys before its transaction and
// the completion writes at once, so the completion starts after a seeded
// random delay within the time a cancel takes, for both to win some rounds.
func TestCancelRacesCompletion(t *testing.T) {
	t.Parallel()
	const rounds = 32
	rng := testseed.Rand(t)
	_, admin, a := startRegistered(t)
	assignment := make([][]string, rounds)
	for i := range assignment {
		assignment[i] = []string{"a", "b", "c"}
	}
	createTopic(t, a, "race", assignment)
	ctx := context.Background()
	// How long a cancel takes here, first measured on one that finds
	// nothing, then the longest either side took in a round: on a loaded
	// machine the calls slow down, and delays scaled to a quiet one's
	// would leave the race to whichever call is faster.
	began := time.Now()
	if _, err := a.CancelReassign(ctx, "race", 0); !errors.Is(err, ErrNoReassignment) {
		t.Fatal(err)
	}
	callTakes := time.Since(began)
	wins := map[string]int{}
	for p := range rounds {
		l := campaign(t, a, "race", p)
		if _, _, err := a.StartReassign(ctx, "race", p, []string{"a", "b", "d"}); err != nil {
			t.Fatal(err)
		}
		pm := waitPartition(t, a, "race", p, func(pm PartitionMeta) bool { return pm.Reassign != nil })
		if err := a.ProposeISR(ctx, "race", p, l.Epoch(), []string{"a", "b", "c", "d"}, nil); err != nil {
			t.Fatal(err)
		}
		var cancelErr, completeErr error
		var cancelTook, completeTook time.Duration
		// Either side starts late, by up to twice a call's time: both
		// orders and the overlaps between them.
		var cancelDelay, completeDelay time.Duration
		if delay := time.Duration(rng.Int64N(int64(2 * callTakes))); rng.IntN(2) == 0 {
			cancelDelay = delay
		} else {
			completeDelay = delay
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			time.Sleep(cancelDelay)
			began := time.Now()
			_, cancelErr = a.CancelReassign(ctx, "race", p)
			cancelTook = time.Since(began)
		})
		wg.Go(func() {
			<-start
			time.Sleep(completeDelay)
			began := time.Now()
			completeErr = a.CompleteReassign(ctx, "race", p, l.Epoch(), *pm.Reassign, pm.ReplicasIndex, pm.ReassignIndex, []string{"a", "b", "d"}, nil)
			completeTook = time.Since(began)
		})
		close(start)
		wg.Wait()
		callTakes = max(callTakes, cancelTook, completeTook)
		replicas, move := consulReplicas(t, admin, "race", p), moveKey(t, admin, "race", p)
		switch {
		case completeErr == nil && cancelErr != nil:
			wins["completion"]++
			if !errors.Is(cancelErr, ErrConflict) && !errors.Is(cancelErr, ErrNoReassignment) {
				t.Errorf("round %d: the losing cancel = %v, want ErrConflict or ErrNoReassignment", p, cancelErr)
			}
			if !slices.Equal(replicas, []string{"a", "b", "d"}) || move != nil {
				t.Errorf("round %d: the completion won, but replicas %v, move %+v", p, replicas, move)
			}
			if _, err := a.CancelReassign(ctx, "race", p); !errors.Is(err, ErrNoReassignment) {
				t.Errorf("round %d: the cancel read again = %v, want ErrNoReassignment", p, err)
			}
		case cancelErr == nil && completeErr != nil:
			wins["cancel"]++
			if !errors.Is(completeErr, ErrConflict) {
				t.Errorf("round %d: the losing completion = %v, want ErrConflict", p, completeErr)
			}
			if !slices.Equal(replicas, []string{"a", "b", "c", "d"}) || move == nil || !move.Cancelled || !slices.Equal(move.Target, []string{"a", "b", "c"}) {
				t.Errorf("round %d: the cancel won, but replicas %v, move %+v", p, replicas, move)
			}
		default:
			t.Errorf("round %d: cancel %v, completion %v: not exactly one winner (replicas %v, move %+v)", p, cancelErr, completeErr, replicas, move)
		}
	}
	t.Logf("%d rounds (either side up to %s after the other began): %v", rounds, 2*callTakes, wins)
	if wins["cancel"] == 0 || wins["completion"] == 0 {
		t.Errorf("one side won every round (%v): the race was not exercised", wins)
	}
}

// TestStartReassignFrom: a start whose target was chosen from the metadata
// (self-healing, a drain) is refused, and writes nothing, once the
// partition is not what it was chosen from: its replicas key moved on (a
// move completed meanwhile), or the topic was deleted and created again
// under its name (another topic id, replicas key written anew). Chosen
// from the partition as it is, it starts.
func TestStartReassignFrom(t *testing.T) {
	t.Parallel()
	_, admin, a := startRegistered(t)
	ctx := context.Background()
	createTopic(t, a, "hf", [][]string{{"a", "b", "c"}})
	decided := decidedFrom(t, a, "hf", func(PartitionMeta) bool { return true })

	// Replicas moved on: what a move of c to e, completed, leaves.
	if _, err := admin.KV().Put(&api.KVPair{Key: testPrefix + "topics/hf/0/replicas", Value: []byte(`["a","b","e"]`)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.StartReassignFrom(ctx, "hf", 0, decided, []string{"a", "b", "d"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("a start decided from replicas a,b,c over a,b,e = %v, want ErrConflict", err)
	}
	noMoveWritten(t, admin, "hf", "replicas moved on")

	// The topic created again, with the same replicas.
	if err := a.DeleteTopic(ctx, "hf"); err != nil {
		t.Fatal(err)
	}
	createTopic(t, a, "hf", [][]string{{"a", "b", "c"}})
	current := decidedFrom(t, a, "hf", func(pm PartitionMeta) bool { return pm.ReplicasIndex > decided.ReplicasIndex })
	if current.TopicID == decided.TopicID {
		t.Fatalf("the topic created again has the old id %s", current.TopicID)
	}
	if _, _, err := a.StartReassignFrom(ctx, "hf", 0, decided, []string{"a", "b", "d"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("a start decided for the deleted topic, on the new one = %v, want ErrConflict", err)
	}
	// The right index of another incarnation is still another one.
	if _, _, err := a.StartReassignFrom(ctx, "hf", 0, DecidedFrom{TopicID: decided.TopicID, ReplicasIndex: current.ReplicasIndex}, []string{"a", "b", "d"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("a start naming the deleted topic's id = %v, want ErrConflict", err)
	}
	noMoveWritten(t, admin, "hf", "topic created again")

	// Decided from the partition as it is: the move starts.
	m, done, err := a.StartReassignFrom(ctx, "hf", 0, current, []string{"a", "b", "d"})
	if err != nil || done || !slices.Equal(m.Target, []string{"a", "b", "d"}) {
		t.Fatalf("a start decided from the current metadata = %+v, done %t, %v", m, done, err)
	}
	if got := consulReplicas(t, admin, "hf", 0); !slices.Equal(got, []string{"a", "b", "d", "c"}) {
		t.Fatalf("replicas after the start = %v, want the union", got)
	}
}

// TestStartReassignFromACancelledDrain: a move that re-places a drained
// replica, decided from metadata that shows the drain, is refused and
// writes nothing once the drain is cancelled (or cancelled and set again:
// decided anew); decided from the drain as it is, it starts. Before, a
// leader whose metadata still showed a drain the operator had just
// cancelled moved the partition off that agent all the same.
func TestStartReassignFromACancelledDrain(t *testing.T) {
	t.Parallel()
	_, admin, a := startRegistered(t)
	ctx := context.Background()
	createTopic(t, a, "hd", [][]string{{"a", "b", "c"}})
	// drained sets the drain of b and decides from the metadata once it
	// shows a drain key written after index after.
	drained := func(after uint64) DecidedFrom {
		t.Helper()
		if err := a.SetDraining(ctx, "b", true); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the drain of b in the metadata", func() bool { return a.Metadata().DrainIndex("b") > after })
		d := decidedFrom(t, a, "hd", func(PartitionMeta) bool { return true })
		d.Draining = map[string]uint64{"b": a.Metadata().DrainIndex("b")}
		return d
	}
	target := []string{"a", "d", "c"}

	decided := drained(0)
	if err := a.SetDraining(ctx, "b", false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.StartReassignFrom(ctx, "hd", 0, decided, target); !errors.Is(err, ErrConflict) {
		t.Fatalf("a drain's move after the drain was cancelled = %v, want ErrConflict", err)
	}
	noMoveWritten(t, admin, "hd", "drain cancelled")

	again := drained(decided.Draining["b"])
	if _, _, err := a.StartReassignFrom(ctx, "hd", 0, decided, target); !errors.Is(err, ErrConflict) {
		t.Fatalf("a drain's move decided from the cancelled drain, after a new one = %v, want ErrConflict", err)
	}
	noMoveWritten(t, admin, "hd", "drain set again")

	m, done, err := a.StartReassignFrom(ctx, "hd", 0, again, target)
	if err != nil || done || !slices.Equal(m.Target, target) {
		t.Fatalf("a drain's move decided from the drain as it is = %+v, done %t, %v", m, done, err)
	}
}

// TestStartReassignFromOntoAnAgentDrainedSince: a leader re-places a dead
// replica onto d, chosen among agents not being drained, while an
// operator drains d (logagent node drain d). The start went through: the
// partition was copied onto d, then off it again by the drain's move. It
// is ErrConflict, and the next decision sees the drain.
func TestStartReassignFromOntoAnAgentDrainedSince(t *testing.T) {
	t.Parallel()
	_, admin, a := startRegistered(t)
	ctx := context.Background()
	createTopic(t, a, "hn", [][]string{{"a", "b", "c"}})
	decided := decidedFrom(t, a, "hn", func(PartitionMeta) bool { return true })
	decided.Healing = true
	if err := a.SetDraining(ctx, "d", true); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.StartReassignFrom(ctx, "hn", 0, decided, []string{"a", "b", "d"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("a move onto d decided before d's drain = %v, want ErrConflict", err)
	}
	noMoveWritten(t, admin, "hn", "the added agent drained")
	m, done, err := a.StartReassignFrom(ctx, "hn", 0, decided, []string{"a", "b", "e"})
	if err != nil || done || !slices.Equal(m.Adding, []string{"e"}) {
		t.Fatalf("a move onto e, not drained = %+v, done %t, %v", m, done, err)
	}
}

// noMoveWritten fails the test if partition 0 of topic has a reassign key.
func noMoveWritten(t *testing.T, admin *api.Client, topic, what string) {
	t.Helper()
	if pair, _, _ := admin.KV().Get(testPrefix+"topics/"+topic+"/0/reassign", nil); pair != nil {
		t.Fatalf("%s: a move was written: %s", what, pair.Value)
	}
}

// decidedFrom waits until c's metadata shows partition 0 of topic as ok
// accepts, and returns what a target chosen from it is decided from.
func decidedFrom(t *testing.T, c *Client, topic string, ok func(PartitionMeta) bool) DecidedFrom {
	t.Helper()
	pm := waitPartition(t, c, topic, 0, ok)
	tm, _ := c.Metadata().Topic(topic)
	return DecidedFrom{TopicID: tm.Config.ID, ReplicasIndex: pm.ReplicasIndex}
}

// hookTransport runs action once, the first time it is armed and sees a
// GET of a KV path ending in one of suffixes, before sending that request
// on.
type hookTransport struct {
	mu       sync.Mutex
	suffixes []string
	action   func()
}

func (h *hookTransport) arm(action func(), suffixes ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.suffixes, h.action = suffixes, action
}

func (h *hookTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	h.mu.Lock()
	var action func()
	if h.action != nil && req.Method == http.MethodGet && strings.HasPrefix(req.URL.Path, "/v1/kv/") &&
		slices.ContainsFunc(h.suffixes, func(s string) bool { return strings.HasSuffix(req.URL.Path, s) }) {
		action, h.action = h.action, nil
	}
	h.mu.Unlock()
	if action != nil {
		action()
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestReassignReadsThePartitionAtOneIndex: StartReassign and
// CancelReassign decide from a partition's replicas and reassign keys
// together (a move's key is valid only beside replicas that are its
// union). Read one after the other, a cancel or a completion and a new
// move committed between the two reads paired the replicas of one state
// with the move of another: a start racing a cancel, and a cancel racing a
// completion and the next move, were refused ErrCorruptMetadata ("replicas
// ... are not the union"), an operator told the topic is corrupt and
// self-healing logging it. Read at one index, the start finds the way back
// in flight (ErrReassignInProgress) and the cancel the next move, which it
// cancels.
func TestReassignReadsThePartitionAtOneIndex(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	admin := srv.Client()
	hook := &hookTransport{}
	a := newTestClient(t, srv, "a", func(cfg *Config) { cfg.Consul.HttpClient = &http.Client{Transport: hook} })
	b := newTestClient(t, srv, "b")
	register(t, a)
	ctx := context.Background()

	createTopic(t, a, "rs", [][]string{{"a", "b", "c"}})
	if _, _, err := b.StartReassign(ctx, "rs", 0, []string{"a", "b", "d"}); err != nil {
		t.Fatal(err)
	}
	// The move is cancelled between the start's reads of the replicas
	// and of the move (or before its one read of both).
	hook.arm(func() {
		if _, err := b.CancelReassign(ctx, "rs", 0); err != nil {
			t.Errorf("the concurrent cancel: %v", err)
		}
	}, "/rs/0/reassign", "/rs/0/")
	if _, _, err := a.StartReassign(ctx, "rs", 0, []string{"a", "b", "e"}); !errors.Is(err, ErrReassignInProgress) {
		t.Errorf("a start racing a cancel = %v, want ErrReassignInProgress (the way back in flight)", err)
	}

	createTopic(t, a, "rc", [][]string{{"a", "b", "c"}})
	if _, _, err := b.StartReassign(ctx, "rc", 0, []string{"a", "b", "d"}); err != nil {
		t.Fatal(err)
	}
	// The move completes (what the completion writes to these keys) and
	// the next one starts, between the cancel's reads (or before its one
	// read).
	hook.arm(func() {
		if _, err := admin.KV().Put(&api.KVPair{Key: testPrefix + "topics/rc/0/replicas", Value: []byte(`["a","b","d"]`)}, nil); err != nil {
			t.Error(err)
		}
		if _, err := admin.KV().Delete(testPrefix+"topics/rc/0/reassign", nil); err != nil {
			t.Error(err)
		}
		if _, _, err := b.StartReassign(ctx, "rc", 0, []string{"a", "b", "e"}); err != nil {
			t.Errorf("the next move: %v", err)
		}
	}, "/rc/0/reassign", "/rc/0/")
	back, err := a.CancelReassign(ctx, "rc", 0)
	if err != nil {
		t.Fatalf("a cancel racing a completion and the next move = %v, want that move cancelled", err)
	}
	if !slices.Equal(back.Target, []string{"a", "b", "d"}) || !slices.Equal(back.Removing, []string{"e"}) {
		t.Fatalf("the cancel's way back = %+v, want back to a,b,d removing e", back)
	}
}

// TestReassignOfATopicDeletedMeanwhile: a start or a cancel reads the
// topic's config, then lists the partition's keys. A topic deleted between
// the two is ErrUnknownTopic (the API's 404): the start took the missing
// replicas key for corrupt metadata, which the API answered 503
// service_unavailable, and a client retried it for ever.
func TestReassignOfATopicDeletedMeanwhile(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	hook := &hookTransport{}
	a := newTestClient(t, srv, "a", func(cfg *Config) { cfg.Consul.HttpClient = &http.Client{Transport: hook} })
	register(t, a)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call func(topic string) error
	}{
		{"start", func(topic string) error {
			_, _, err := a.StartReassign(ctx, topic, 0, []string{"a", "b", "d"})
			return err
		}},
		{"cancel", func(topic string) error {
			_, err := a.CancelReassign(ctx, topic, 0)
			return err
		}},
	} {
		topic := "gone-" + tc.name
		createTopic(t, a, topic, [][]string{{"a", "b", "c"}})
		hook.arm(func() {
			if err := a.DeleteTopic(ctx, topic); err != nil {
				t.Errorf("the concurrent deletion: %v", err)
			}
		}, "/"+topic+"/0/")
		if err := tc.call(topic); !errors.Is(err, ErrUnknownTopic) {
			t.Errorf("a %s whose topic is deleted after its config read = %v, want ErrUnknownTopic", tc.name, err)
		}
	}
}

// TestCancelReassignFrom: a self-healing move is marked as such (its
// leader cancels it when it stalls, an operator's never), and the leader's
// cancel is of the move it decided from only: once that move is gone and
// an operator's is in flight, the cancel is ErrConflict and writes
// nothing.
func TestCancelReassignFrom(t *testing.T) {
	t.Parallel()
	_, admin, a := startRegistered(t)
	ctx := context.Background()
	createTopic(t, a, "cf", [][]string{{"a", "b", "c"}})
	from := decidedFrom(t, a, "cf", func(PartitionMeta) bool { return true })
	from.Healing = true
	m, _, err := a.StartReassignFrom(ctx, "cf", 0, from, []string{"a", "b", "d"})
	if err != nil || !m.Healing {
		t.Fatalf("a self-healing start = %+v, %v; want a move marked healing", m, err)
	}
	healing := waitPartition(t, a, "cf", 0, func(pm PartitionMeta) bool { return pm.Reassign != nil })
	if !healing.Reassign.Healing {
		t.Fatalf("the metadata shows the self-healing move as %+v, not healing", healing.Reassign)
	}
	// An operator cancels it and starts a move of their own.
	if _, err := a.CancelReassign(ctx, "cf", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.KV().Put(&api.KVPair{Key: testPrefix + "topics/cf/0/replicas", Value: []byte(`["a","b","c"]`)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.KV().Delete(testPrefix+"topics/cf/0/reassign", nil); err != nil {
		t.Fatal(err)
	}
	op, _, err := a.StartReassign(ctx, "cf", 0, []string{"a", "b", "e"})
	if err != nil || op.Healing {
		t.Fatalf("an operator's start = %+v, %v; want a move not marked healing", op, err)
	}
	if _, err := a.CancelReassignFrom(ctx, "cf", 0, healing.ReassignIndex); !errors.Is(err, ErrConflict) {
		t.Fatalf("a cancel decided from the self-healing move, of the operator's = %v, want ErrConflict", err)
	}
	now := waitPartition(t, a, "cf", 0, func(pm PartitionMeta) bool {
		return pm.Reassign != nil && !pm.Reassign.Cancelled && slices.Contains(pm.Reassign.Target, "e")
	})
	if got := consulReplicas(t, admin, "cf", 0); !slices.Equal(got, []string{"a", "b", "e", "c"}) {
		t.Fatalf("replicas after the refused cancel = %v, want the operator's union", got)
	}
	back, err := a.CancelReassignFrom(ctx, "cf", 0, now.ReassignIndex)
	if err != nil || !back.Cancelled || !slices.Equal(back.Target, []string{"a", "b", "c"}) {
		t.Fatalf("a cancel decided from the move in flight = %+v, %v; want its way back", back, err)
	}
}
