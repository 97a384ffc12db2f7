package partition

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/consultest"
)

// TestDrainKeepsNoDeadReplicaInTarget: a partition n1, n2, n3 whose n3 is
// dead (not yet for replace_dead_after) has n2 drained. The drain's move
// must not keep the dead n3 in its target: the move would wait for n3 to
// join the ISR forever, and while it is in flight self-healing starts no
// other move, so n3 is never re-placed once it is due either.
func TestDrainKeepsNoDeadReplicaInTarget(t *testing.T) {
	srv := consultest.Start(t)
	for _, n := range []string{"n2", "n4", "n5"} {
		startElectionOnly(t, srv, n) // alive; n3 is never registered: dead
	}
	m, coord := startManager(t, srv, "n1", "cluster {\n  replace_dead_after = \"4s\"\n}\n", time.Now)
	createTopic(t, coord, "hs", [][]string{{"n1", "n2", "n3"}}, 1)
	waitLeading(t, m, "hs")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := coord.SetDraining(ctx, "n2", true); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var first []string
	waitFor(t, func() bool {
		pm, _ := coord.Metadata().Partition("hs", 0)
		if pm.Reassign != nil && first == nil {
			first = slices.Clone(pm.Reassign.Target)
		}
		return !slices.Contains(pm.Replicas, "n2") || pm.Reassign != nil
	}, "the drain's move started")
	t.Logf("drain's move target %v, %v after the drain", first, time.Since(start))
	// Well past n3's replace_dead_after: the partition must be on its way
	// off both n2 and n3.
	deadline := time.Now().Add(12 * time.Second)
	for {
		pm, _ := coord.Metadata().Partition("hs", 0)
		if pm.Reassign != nil && !slices.Contains(pm.Reassign.Target, "n3") && !slices.Contains(pm.Reassign.Target, "n2") {
			t.Logf("move target %v", pm.Reassign.Target)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("12 s on, the partition is %v with move %+v: the dead n3 stays a target replica, the move waits for it forever", pm.Replicas, pm.Reassign)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
