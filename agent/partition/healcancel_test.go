package partition

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestCancelledHealingMoveIsNotStartedAgain: a partition n1, n3 whose n3
// is dead has n3 re-placed onto n2 (alive, like n4, with no replica: the
// lower id). An operator cancels that move (partition move -cancel: the
// copy is slower than they can wait for, say). The way back done, the
// leader re-placed n3 at once onto n2 again, the fewest replicas now that
// n2 had just lost this one: the copy began again from nothing and the
// cancel was undone. As after a cancel of its own of a stalled move, the
// leader now leaves the agents the cancelled move added out of the
// partition's next re-placing for replace_dead_after: n3 goes to n4.
func TestCancelledHealingMoveIsNotStartedAgain(t *testing.T) {
	const after = time.Minute
	clock := &steppedClock{t: time.Now()}
	_, m, coord := startHealing(t, []string{"n2", "n4"}, after.String(), clock.now) // n3 dead
	createTopic(t, coord, "hc", [][]string{{"n1", "n3"}}, 1)
	waitLeading(t, m, "hc")
	// The leader has seen n3 dead once it drops it from the ISR.
	waitFor(t, func() bool {
		pm, _ := coord.Metadata().Partition("hc", 0)
		return !slices.Contains(pm.State.ISR, "n3")
	}, "the leader to drop the dead n3 from the ISR")

	clock.step(after)
	waitFor(t, func() bool {
		pm, _ := coord.Metadata().Partition("hc", 0)
		return pm.Reassign != nil
	}, "n3 re-placed")
	pm, _ := coord.Metadata().Partition("hc", 0)
	if !pm.Reassign.Healing || !slices.Equal(pm.Reassign.Target, []string{"n1", "n2"}) {
		t.Fatalf("the first re-placing is %+v, want self-healing's to n1, n2", pm.Reassign)
	}
	first := pm.ReassignIndex
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	back, err := coord.CancelReassign(ctx, "hc", 0)
	if err != nil {
		t.Fatal(err)
	}
	// A move after the way back (the metadata may still show the first).
	waitFor(t, func() bool {
		pm, _ := coord.Metadata().Partition("hc", 0)
		return pm.Reassign != nil && !pm.Reassign.Cancelled && pm.ReassignIndex > first
	}, "n3 re-placed after the cancel")
	pm, _ = coord.Metadata().Partition("hc", 0)
	if !slices.Equal(pm.Reassign.Target, []string{"n1", "n4"}) {
		t.Fatalf("after an operator cancelled the move of n3 to n2, the leader started %+v: want n3 re-placed onto n4, not the cancelled move again", pm.Reassign)
	}
	if !back.Healing {
		t.Fatalf("the way back of a self-healing move is %+v, not marked healing", back)
	}
}
