package partition

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/internal/consultest"
	"github.com/logagent/logagent/replicate"
)

// steppedClock is a replica clock that moves only when the test steps it,
// safe for the replica loops that read it.
type steppedClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *steppedClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *steppedClock) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestStalledHealingMoveFreesItsSlot: two partitions ha and hb, each on
// n1 and the dead n3, and a third, op, that an operator moves onto n2 (an
// election client alone: it never opens a replica, so the move never
// completes), which holds one of the cluster's two healing slots. Once n3
// has been dead for replace_dead_after, one of ha and hb is re-placed onto
// n2, the only candidate, and holds the other slot: that move never
// completes either, and the other partition waits. Before the fix it
// waited for ever (until an operator cancelled a move); now, once n2 has
// made no progress for replace_dead_after, the leader cancels its own
// self-healing move, and the waiting partition is re-placed. The
// operator's move is never cancelled, and the cancelled partition does
// not go back to n2.
func TestStalledHealingMoveFreesItsSlot(t *testing.T) {
	srv := consultest.Start(t)
	startElectionOnly(t, srv, "n2") // alive; n3 is never registered: dead
	const after = time.Minute
	clock := &steppedClock{t: time.Now()}
	m, coord := startManager(t, srv, "n1", "cluster {\n  replace_dead_after = \"1m\"\n}\n", clock.now)
	createTopic(t, coord, "op", [][]string{{"n1"}}, 1)
	createTopic(t, coord, "ha", [][]string{{"n1", "n3"}}, 1)
	createTopic(t, coord, "hb", [][]string{{"n1", "n3"}}, 1)
	for _, topic := range []string{"op", "ha", "hb"} {
		waitLeading(t, m, topic)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, _, err := coord.StartReassign(ctx, "op", 0, []string{"n1", "n2"}); err != nil {
		t.Fatal(err)
	}
	// The leaders have seen n3 dead once they drop it from the ISR.
	waitFor(t, func() bool {
		for _, topic := range []string{"ha", "hb"} {
			if pm, _ := coord.Metadata().Partition(topic, 0); slices.Contains(pm.State.ISR, "n3") {
				return false
			}
		}
		return true
	}, "the leaders to drop the dead n3 from the ISR")
	operatorMove := func() *election.Reassignment {
		pm, _ := coord.Metadata().Partition("op", 0)
		return pm.Reassign
	}
	waitFor(t, func() bool { return operatorMove() != nil }, "the metadata to show the operator's move")
	if mv := operatorMove(); mv.Healing {
		t.Fatalf("the operator's move is %+v, marked as self-healing's", mv)
	}

	clock.step(after)
	var first, waiting string
	waitFor(t, func() bool {
		for _, pair := range [][2]string{{"ha", "hb"}, {"hb", "ha"}} {
			if pm, _ := coord.Metadata().Partition(pair[0], 0); pm.Reassign != nil {
				first, waiting = pair[0], pair[1]
				return true
			}
		}
		return false
	}, "n3 re-placed in ha or hb")
	pm, _ := coord.Metadata().Partition(first, 0)
	if !pm.Reassign.Healing || !slices.Equal(pm.Reassign.Target, []string{"n1", "n2"}) {
		t.Fatalf("%s's move is %+v, want self-healing's to n1, n2", first, pm.Reassign)
	}
	// Both slots are held (op and first): waiting has no move.
	time.Sleep(500 * time.Millisecond)
	if pm, _ := coord.Metadata().Partition(waiting, 0); pm.Reassign != nil {
		t.Fatalf("%s moved (%+v) while op's and %s's moves held both healing slots", waiting, pm.Reassign, first)
	}
	// The leader follows n2 in first, and has looked at its progress (the
	// loop looks after each event: the second read comes after it).
	r := m.Get(first, 0)
	waitFor(t, func() bool {
		return slices.ContainsFunc(r.Progress(ctx), func(s replicate.ReplicaStatus) bool { return s.ID == "n2" })
	}, "the leader of "+first+" to follow n2")
	r.Progress(ctx)

	clock.step(after)
	deadline := time.Now().Add(15 * time.Second)
	for {
		if pm, _ := coord.Metadata().Partition(waiting, 0); pm.Reassign != nil {
			t.Logf("%s re-placed: %v", waiting, pm.Reassign.Target)
			break
		}
		if time.Now().After(deadline) {
			pm, _ := coord.Metadata().Partition(first, 0)
			t.Fatalf("n2 made no progress for replace_dead_after (%s), yet %s's self-healing move %+v still holds its slot and %s was never re-placed", after, first, pm.Reassign, waiting)
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitFor(t, func() bool {
		pm, _ := coord.Metadata().Partition(first, 0)
		return pm.Reassign == nil
	}, first+"'s way back to complete")
	if pm, _ := coord.Metadata().Partition(first, 0); !slices.Equal(pm.Replicas, []string{"n1", "n3"}) {
		t.Fatalf("%s after its stalled move was cancelled: replicas %v, want back on n1, n3 (not onto n2 again)", first, pm.Replicas)
	}
	if mv := operatorMove(); mv == nil || mv.Cancelled || !slices.Equal(mv.Target, []string{"n1", "n2"}) {
		t.Fatalf("the operator's stalled move is %+v: it must be left in flight, never cancelled but by an operator", mv)
	}
}
