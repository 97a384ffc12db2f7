package partition

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/logagent/logagent/election"
)

// TestMovesWaitingOnADeadAgentTakeNoHealingSlot: two moves in flight add
// the dead n3 (a drain's added agent that died during them), so they wait
// for it for ever. They must not take the cluster's two healing slots
// (reassign.MaxHealing): c/0, whose n3 is due to be re-placed, is
// re-placed. Before, every re-placing in the cluster waited behind them.
func TestMovesWaitingOnADeadAgentTakeNoHealingSlot(t *testing.T) {
	_, m, coord := startHealing(t, []string{"n2", "n4", "n5"}, "2s", time.Now) // n3 dead
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, topic := range []string{"a", "b"} {
		createTopic(t, coord, topic, [][]string{{"n1", "n2", "n4"}}, 1)
		waitLeading(t, m, topic)
		// n2 moves to the dead n3: the move waits for n3.
		if _, _, err := coord.StartReassign(ctx, topic, 0, []string{"n1", "n3", "n4"}); err != nil {
			t.Fatalf("move of %s/0: %v", topic, err)
		}
	}
	waitThirdPartitionHealed(t, m, coord)
	for _, topic := range []string{"a", "b"} {
		if pm, _ := coord.Metadata().Partition(topic, 0); pm.Reassign == nil || !slices.Equal(pm.Reassign.Target, []string{"n1", "n3", "n4"}) {
			t.Errorf("%s/0's move is %+v, want the operator's, still waiting", topic, pm.Reassign)
		}
	}
}

// TestMovesWaitingOnADeadKeptReplicaForMinISRTakeNoHealingSlot: two
// operator moves shrink [n1 n2 n3] to [n1 n3] while n3 is dead and n2 in
// the ISR: completing without n3 would take the ISR from [n1 n2] to [n1],
// below min_insync_replicas 2, so each waits for n3 to come back
// (reassign.Next). Such a move cannot complete, and must not take a
// healing slot: c/0, whose n3 is due to be re-placed, is re-placed.
// Before, a move keeping a dead agent always counted, and the two held
// both slots.
func TestMovesWaitingOnADeadKeptReplicaForMinISRTakeNoHealingSlot(t *testing.T) {
	// n2 never fetches: a lag_time_max past the test keeps it in the ISR,
	// as a live follower in sync would be.
	_, m, coord := startHealingHCL(t, []string{"n2", "n4", "n5"}, "2s", "replication {\n  lag_time_max = \"60s\"\n}\n", time.Now) // n3 dead
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, topic := range []string{"a", "b"} {
		createTopic(t, coord, topic, [][]string{{"n1", "n2", "n3"}}, 2)
		waitLeading(t, m, topic)
		if _, _, err := coord.StartReassign(ctx, topic, 0, []string{"n1", "n3"}); err != nil {
			t.Fatalf("move of %s/0: %v", topic, err)
		}
	}
	waitThirdPartitionHealed(t, m, coord)
	for _, topic := range []string{"a", "b"} {
		if pm, _ := coord.Metadata().Partition(topic, 0); pm.Reassign == nil || !slices.Equal(pm.Reassign.Target, []string{"n1", "n3"}) || !slices.Contains(pm.State.ISR, "n2") {
			t.Errorf("%s/0's move is %+v, ISR %v: want the operator's, still waiting, n2 in the ISR", topic, pm.Reassign, pm.State.ISR)
		}
	}
}

// waitThirdPartitionHealed creates c/0 on n1, n2 and the dead n3, and waits
// up to 15 s for its n3 to be re-placed while the moves of the test hold
// whatever slots they hold.
func waitThirdPartitionHealed(t *testing.T, m *Manager, coord *election.Client) {
	t.Helper()
	createTopic(t, coord, "c", [][]string{{"n1", "n2", "n3"}}, 1)
	waitLeading(t, m, "c")
	deadline := time.Now().Add(15 * time.Second)
	for {
		pm, _ := coord.Metadata().Partition("c", 0)
		if pm.Reassign != nil && !slices.Contains(pm.Reassign.Target, "n3") {
			t.Logf("c/0 moving to %v", pm.Reassign.Target)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("15 s on, c/0 is %v with move %+v: its dead n3 is not re-placed while two moves wait for n3", pm.Replicas, pm.Reassign)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
