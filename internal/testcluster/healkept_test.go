package testcluster

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestSelfHealingMoveWhoseKeptReplicaDies: a partition [n1 n2 n3] whose
// n3 is killed for good is re-placed by a self-healing move, and n2, a
// replica that move keeps, is killed while the new replica catches up. The
// move completes once the new replica is in the ISR, n2 outside it, and n2
// is then re-placed in turn: the partition ends on n1 and the two agents
// that were spare, full ISR, every acknowledged write on all three. Before,
// the move waited for the dead n2 for ever, and no other move of the
// partition (n2's re-placing among them) could start: the partition stayed
// on one live replica, refusing acks=all writes, until n2 came back.
func TestSelfHealingMoveWhoseKeptReplicaDies(t *testing.T) {
	const topic = "keptdies"
	c := startSlowHealing(t, 3*time.Second)
	leader, _ := createReplicatedTopic(t, c, topic)
	if leader.NodeID != "n1" {
		t.Fatalf("%s leads, want n1 (the preferred replica)", leader.NodeID)
	}
	preload(t, leader, topic, 2<<20)
	load, stopLoad := runAckLoad(t, []*Agent{leader}, topic, 1)
	defer stopLoad()

	n2, n3 := agentsNamed(c, []string{"n2"})[0], agentsNamed(c, []string{"n3"})[0]
	n3.Kill()
	killed := time.Now()
	var first []string
	c.WaitFor(60*time.Second, "the self-healing move of n3's replica", func() bool {
		m, err := moveOf(leader, topic, 0)
		if err != nil || m.Move == nil {
			return false
		}
		first = m.Move.Target
		return true
	})
	added := slices.DeleteFunc(slices.Clone(first), func(id string) bool { return id == "n1" || id == "n2" })
	if len(added) != 1 || !slices.Equal(first, []string{"n1", "n2", added[0]}) {
		t.Fatalf("self-healing move to %v, want n3 replaced in its place", first)
	}
	c.WaitFor(30*time.Second, added[0]+"'s catch-up under way", func() bool {
		sent, inSync, ok := catchUpOf(c, topic, 0, added[0])
		return ok && sent >= 64<<10 && !inSync
	})
	n2.Kill()
	n2Killed := time.Now()
	t.Logf("n3 killed; self-healing move to %v %s later; n2 killed during it", first, n2Killed.Sub(killed).Round(time.Millisecond))

	// The move completes without the dead n2. n2 is due for re-placing by
	// then, so the next move (the one that removes n2) may start within
	// milliseconds: either shows the first one complete.
	c.WaitFor(60*time.Second, fmt.Sprintf("the move to %v complete, n2 outside the ISR", first), func() bool {
		m, err := moveOf(leader, topic, 0)
		if err != nil {
			return false
		}
		if m.Move == nil {
			return slices.Equal(m.Replicas, first)
		}
		return slices.Contains(m.Move.Removing, "n2")
	})
	completed := time.Now()
	// Then n2 is re-placed on the other spare agent.
	spare := "n4"
	if added[0] == "n4" {
		spare = "n5"
	}
	final := []string{"n1", spare, added[0]}
	waitMoveDone(t, c, topic, 0, final, 90*time.Second)
	t.Logf("the move completed %s after n2's death, n2 re-placed %s after that: %v, full ISR",
		completed.Sub(n2Killed).Round(time.Millisecond), time.Since(completed).Round(time.Millisecond), final)
	time.Sleep(time.Second)
	stopLoad()
	hw := waitTargetsAt(t, c, topic, 0, agentsNamed(c, final), 30*time.Second)
	compareReplicas(t, agentsNamed(c, final), topic, 0, hw)
	l, _ := c.WaitLeader(topic, 0, 30*time.Second)
	load.checkAcked(t, l, topic)
	t.Logf("%d writes acknowledged, %d not (acks=all is refused while n1 is the only replica in sync)", len(load.acked), len(load.failed))
}

// startSlowHealing starts five agents with cluster.replace_dead_after set
// and moves throttled to 256 KiB/s, so that a move of 2 MiB is under way
// for about 8 s.
func startSlowHealing(t *testing.T, replaceAfter time.Duration) *Cluster {
	return Start(t, Options{Agents: 5, HCL: fmt.Sprintf(`
replication {
  reassign_max_bytes_per_second = "256KiB"
}
cluster {
  replace_dead_after = %q
}
`, replaceAfter)})
}
