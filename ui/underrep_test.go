package ui

import "testing"

// TestUnderReplicatedDuringMoveCountsMembersNotSizes: a move adds d
// and removes a (replicas [a b c d], target [b c d]). d caught up and
// joined the ISR, but c (kept by the move) fell out: ISR [a b d]. The
// partition lacks an in-sync replica both before and after the move, yet
// the page calls it healthy because it compares ISR size with the replicas
// less the added ones (3 >= 3).
func TestUnderReplicatedDuringMoveCountsMembersNotSizes(t *testing.T) {
	st := State{Topics: []Topic{{Name: "t", ReplicationFactor: 3, MinInsyncReplicas: 2, Partitions: []Partition{{
		Partition: 0, Leader: "b", Replicas: []string{"a", "b", "c", "d"}, ISR: []string{"a", "b", "d"},
		Move: &Move{Target: []string{"b", "c", "d"}, Adding: []string{"d"}, Removing: []string{"a"}},
	}}}}}
	st.derive()
	p := st.Topics[0].Partitions[0]
	t.Logf("under_replicated=%v totals.under_replicated=%d", p.UnderReplicated, st.Totals.UnderReplicated)
	if !p.UnderReplicated {
		t.Fatalf("replica c is out of the ISR %v of replicas %v (move adding d), but the partition is not under-replicated", p.ISR, p.Replicas)
	}
}
