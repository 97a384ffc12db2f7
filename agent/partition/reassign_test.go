package partition

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/consultest"
	"github.com/logagent/logagent/replicate"
)

// TestReassignDrivenByTheLeader runs a move of n1, n2, n3 to n1, n2, n4
// through a leading replica whose followers' fetches are made at its loop
// (as the peer API does): the added n4 may fetch as soon as the metadata
// shows the union, its answers count against the catch-up throttle while
// it is outside the ISR (the ISR's never do), the move does not complete
// before n4 is in the ISR, and once it does the replicas and the ISR are
// the target and the removed n3 is a stranger.
func TestReassignDrivenByTheLeader(t *testing.T) {
	srv := consultest.Start(t)
	for _, n := range []string{"n2", "n3", "n4"} {
		startElectionOnly(t, srv, n) // registered: alive, as their agents would be
	}
	m, coord := startManager(t, srv, "n1", "", time.Now)
	createTopic(t, coord, "mv", [][]string{{"n1", "n2", "n3"}}, 2)
	r := waitLeading(t, m, "mv")
	epoch := r.CurrentView().Epoch
	for _, n := range []string{"n2", "n3"} {
		follow(t, r, n, 0, epoch)
	}
	if out := r.Produce(testBatch(t, []string{"a", "b", "c"}), replicate.AcksLeader, AnyEpoch, time.Now().Add(5*time.Second), 6*time.Second); out.Err != nil {
		t.Fatal(out.Err)
	}
	leo := r.CurrentLog().LogEndOffset()
	fetch := func(node string, offset int64) LeaderFetchOutcome {
		last := epoch
		if offset == 0 {
			last = replicate.UndefinedEpoch
		}
		return r.LeaderFetch(replicate.FetchRequest{ReplicaID: node, FetchOffset: offset, CurrentLeaderEpoch: epoch, LastFetchedEpoch: last})
	}
	for _, n := range []string{"n2", "n3"} {
		if out := fetch(n, leo); out.Err != nil || out.Throttled {
			t.Fatalf("ISR member %s's fetch: %v, throttled %t", n, out.Err, out.Throttled)
		}
	}
	if out := fetch("n4", 0); !errors.Is(out.Err, replicate.ErrNotReplica) {
		t.Fatalf("n4's fetch before the move = %v, want ErrNotReplica", out.Err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := coord.StartReassign(ctx, "mv", 0, []string{"n1", "n2", "n4"}); err != nil {
		t.Fatal(err)
	}
	var out LeaderFetchOutcome
	waitFor(t, func() bool { out = fetch("n4", 0); return out.Err == nil }, "n4 accepted as a follower")
	if !out.Throttled {
		t.Fatal("n4's catch-up fetch is not throttled")
	}
	if o := fetch("n2", leo); o.Throttled {
		t.Fatal("an ISR member's fetch is throttled during the move")
	}
	// Not before n4 is in the ISR.
	time.Sleep(300 * time.Millisecond)
	if pm, _ := coord.Metadata().Partition("mv", 0); pm.Reassign == nil || !slices.Equal(pm.Replicas, []string{"n1", "n2", "n4", "n3"}) {
		t.Fatalf("with n4 outside the ISR the move is %+v, replicas %v; want it in flight over the union", pm.Reassign, pm.Replicas)
	}
	out = fetch("n4", leo)
	if out.Err != nil {
		t.Fatal(out.Err)
	}
	waitFor(t, func() bool {
		pm, _ := coord.Metadata().Partition("mv", 0)
		return pm.Reassign == nil && slices.Equal(pm.Replicas, []string{"n1", "n2", "n4"}) && slices.Equal(pm.State.ISR, []string{"n1", "n2", "n4"})
	}, "the move complete")
	waitFor(t, func() bool { return errors.Is(fetch("n3", leo).Err, replicate.ErrNotReplica) }, "n3 refused as a stranger")
	if o := fetch("n4", leo); o.Err != nil || o.Throttled {
		t.Fatalf("n4's fetch once in the ISR: %v, throttled %t", o.Err, o.Throttled)
	}
	if v := r.CurrentView(); v.Role != RoleLeader || v.Epoch != epoch {
		t.Fatalf("the move changed the leadership: %+v, want leading at epoch %d", v, epoch)
	}
}

// TestReassignDeadAddedReplicaStaysOut: a replica a move adds whose agent
// Consul reports dead is not admitted to the ISR however far it fetched,
// as no dead follower is (docs/design.md §7): the leader applies the
// liveness to the replicas the move adds too, so the move waits.
func TestReassignDeadAddedReplicaStaysOut(t *testing.T) {
	srv := consultest.Start(t)
	startElectionOnly(t, srv, "n2") // n4 is never registered: dead
	m, coord := startManager(t, srv, "n1", "", time.Now)
	createTopic(t, coord, "mvdead", [][]string{{"n1", "n2"}}, 1)
	r := waitLeading(t, m, "mvdead")
	epoch := r.CurrentView().Epoch
	follow(t, r, "n2", 0, epoch)
	if out := r.Produce(testBatch(t, []string{"a"}), replicate.AcksLeader, AnyEpoch, time.Now().Add(5*time.Second), 6*time.Second); out.Err != nil {
		t.Fatal(out.Err)
	}
	leo := r.CurrentLog().LogEndOffset()
	follow(t, r, "n2", leo, epoch)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := coord.StartReassign(ctx, "mvdead", 0, []string{"n1", "n2", "n4"}); err != nil {
		t.Fatal(err)
	}
	fetch := func() error {
		return r.LeaderFetch(replicate.FetchRequest{ReplicaID: "n4", FetchOffset: leo, CurrentLeaderEpoch: epoch, LastFetchedEpoch: epoch}).Err
	}
	waitFor(t, func() bool { return fetch() == nil }, "n4 accepted as a follower")
	for range 10 {
		if err := fetch(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if v := r.CurrentView(); slices.Contains(v.ISR, "n4") {
		t.Fatalf("n4, reported dead, joined the ISR %v", v.ISR)
	}
	if pm, _ := coord.Metadata().Partition("mvdead", 0); pm.Reassign == nil {
		t.Fatalf("the move completed with a dead added replica: replicas %v isr %v", pm.Replicas, pm.State.ISR)
	}
}
