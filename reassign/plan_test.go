package reassign

import (
	"slices"
	"testing"
)

// TestNext covers every state a leader can find a move in, including each
// crash point of docs/design.md §7.6 as the next leader (or the restarted
// one) sees it: the move's whole state is in Consul, so a crash point is a
// State here.
func TestNext(t *testing.T) {
	move := Move{Target: []string{"n1", "n2", "n4"}, Adding: []string{"n4"}, Removing: []string{"n3"}}
	union := []string{"n1", "n2", "n4", "n3"}
	cases := []struct {
		name string
		s    State
		want Step
	}{
		{"metadata not yet the union (the start txn not yet seen by this leader's state machine)",
			State{Self: "n1", Move: move, Replicas: []string{"n1", "n2", "n3"}, ISR: []string{"n1", "n2", "n3"}},
			Step{Kind: Wait}},
		{"adding: the new replica is catching up",
			State{Self: "n1", Move: move, Replicas: union, ISR: []string{"n1", "n2", "n3"}},
			Step{Kind: Wait, Waiting: []string{"n4"}}},
		{"leader killed while adding: n2 leads, n4 not yet in the ISR",
			State{Self: "n2", Move: move, Replicas: union, ISR: []string{"n2", "n3"}},
			Step{Kind: Wait, Waiting: []string{"n1", "n4"}}},
		{"new replica killed after it joined: it left the ISR again",
			State{Self: "n1", Move: move, Replicas: union, ISR: []string{"n1", "n2", "n3"}, Successors: []string{"n2", "n3"}},
			Step{Kind: Wait, Waiting: []string{"n4"}}},
		{"everything in the ISR, an ISR change in flight",
			State{Self: "n1", Move: move, Replicas: union, ISR: union, InFlight: true},
			Step{Kind: Wait}},
		{"complete: the leader stays",
			State{Self: "n1", Move: move, Replicas: union, ISR: union},
			Step{Kind: Complete, Target: move.Target}},
		{"complete with the removed replica already out of the ISR (dead)",
			State{Self: "n4", Move: move, Replicas: union, ISR: []string{"n1", "n2", "n4"}},
			Step{Kind: Complete, Target: move.Target}},
		{"Consul restarted, the added replica won the election",
			State{Self: "n4", Move: move, Replicas: union, ISR: []string{"n4", "n1", "n2", "n3"}},
			Step{Kind: Complete, Target: move.Target}},
		{"the leader is removed: hand over to a target successor, target order",
			State{Self: "n3", Move: move, Replicas: union, ISR: union, Successors: []string{"n4", "n2"}},
			Step{Kind: HandOver, To: []string{"n2", "n4"}}},
		{"the leader is removed: no target replica holds its whole log yet",
			State{Self: "n3", Move: move, Replicas: union, ISR: union, Successors: nil},
			Step{Kind: Wait}},
		{"the leader is removed, a handover under way",
			State{Self: "n3", Move: move, Replicas: union, ISR: union, Successors: []string{"n1"}, HandingOver: true},
			Step{Kind: Wait}},
		{"the leader is removed, not every target replica in the ISR: no handover yet",
			State{Self: "n3", Move: move, Replicas: union, ISR: []string{"n1", "n2", "n3"}, Successors: []string{"n1", "n2"}},
			Step{Kind: Wait, Waiting: []string{"n4"}}},
		{"killed during the handover, the removed replica won again",
			State{Self: "n3", Move: move, Replicas: union, ISR: union, Successors: []string{"n1", "n2", "n4"}},
			Step{Kind: HandOver, To: []string{"n1", "n2", "n4"}}},
		{"completion outcome unknown, committed: the state machine already follows the target",
			State{Self: "n1", Move: move, Replicas: move.Target, ISR: move.Target},
			Step{Kind: Wait}},
		{"a move that only removes (RF 3 to 2)",
			State{Self: "n1", Move: Move{Target: []string{"n1", "n2"}, Removing: []string{"n3"}}, Replicas: []string{"n1", "n2", "n3"}, ISR: []string{"n1", "n2", "n3"}},
			Step{Kind: Complete, Target: []string{"n1", "n2"}}},
		{"a kept replica died during the move: complete without it",
			State{Self: "n1", Move: move, Replicas: union, ISR: []string{"n1", "n4"}, Dead: []string{"n2", "n3"}, MinISR: 2},
			Step{Kind: Complete, Target: move.Target, DeadKept: []string{"n2"}}},
		{"an added replica dead: wait for it",
			State{Self: "n1", Move: move, Replicas: union, ISR: []string{"n1", "n2"}, Dead: []string{"n3", "n4"}, MinISR: 2},
			Step{Kind: Wait, Waiting: []string{"n4"}}},
		{"a kept replica out of the ISR but alive: wait for it",
			State{Self: "n1", Move: move, Replicas: union, ISR: []string{"n1", "n4"}, Dead: []string{"n3"}, MinISR: 2},
			Step{Kind: Wait, Waiting: []string{"n2"}}},
		{"a kept replica dead, the removed one in sync: completing would take the ISR below min_insync_replicas",
			State{Self: "n1", Move: move, Replicas: union, ISR: []string{"n1", "n4", "n3"}, Dead: []string{"n2"}, MinISR: 3},
			Step{Kind: Wait, Waiting: []string{"n2"}}},
		{"a kept replica dead, the removed one in sync, min_insync_replicas still met after",
			State{Self: "n1", Move: move, Replicas: union, ISR: []string{"n1", "n4", "n3"}, Dead: []string{"n2"}, MinISR: 2},
			Step{Kind: Complete, Target: move.Target, DeadKept: []string{"n2"}}},
		{"a kept replica dead, the ISR already below min_insync_replicas: complete, it goes no lower",
			State{Self: "n1", Move: move, Replicas: union, ISR: []string{"n1", "n4"}, Dead: []string{"n2", "n3"}, MinISR: 3},
			Step{Kind: Complete, Target: move.Target, DeadKept: []string{"n2"}}},
		{"a shrink with a kept replica dead and only the leader in sync: wait (the removed one may be an eligible leader)",
			State{Self: "n1", Move: Move{Target: []string{"n1", "n2"}, Removing: []string{"n3"}}, Replicas: []string{"n1", "n2", "n3"},
				ISR: []string{"n1"}, Dead: []string{"n2", "n3"}, MinISR: 2},
			Step{Kind: Wait, Waiting: []string{"n2"}}},
		{"a reorder with a kept replica dead: complete, nothing removed",
			State{Self: "n1", Move: Move{Target: []string{"n2", "n1", "n3"}}, Replicas: []string{"n2", "n1", "n3"},
				ISR: []string{"n1", "n2"}, Dead: []string{"n3"}, MinISR: 2},
			Step{Kind: Complete, Target: []string{"n2", "n1", "n3"}, DeadKept: []string{"n3"}}},
		{"a kept replica dead, the leader removed: hand over first",
			State{Self: "n3", Move: move, Replicas: union, ISR: []string{"n1", "n4", "n3"}, Dead: []string{"n2"}, MinISR: 2, Successors: []string{"n4", "n1"}},
			Step{Kind: HandOver, To: []string{"n1", "n4"}}},
		{"a move to all new replicas, the old leader still leads",
			State{Self: "n1", Move: Move{Target: []string{"n4", "n5"}, Adding: []string{"n4", "n5"}, Removing: []string{"n1", "n2"}},
				Replicas: []string{"n4", "n5", "n1", "n2"}, ISR: []string{"n1", "n2", "n4"}, Successors: []string{"n2", "n4"}},
			Step{Kind: Wait, Waiting: []string{"n5"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Next(c.s)
			if got.Kind != c.want.Kind || !slices.Equal(got.Waiting, c.want.Waiting) || !slices.Equal(got.To, c.want.To) || !slices.Equal(got.Target, c.want.Target) || !slices.Equal(got.DeadKept, c.want.DeadKept) {
				t.Fatalf("Next = %+v (%s), want %+v (%s)", got, got.Kind, c.want, c.want.Kind)
			}
			if got.Kind == Wait && got.Reason == "" {
				t.Errorf("a wait without a reason")
			}
			// Safety: a completion only ever with the leader and every
			// added replica in the committed ISR; a target replica
			// outside it is a dead one the move kept.
			if got.Kind == Complete {
				for _, id := range got.Target {
					if !slices.Contains(c.s.ISR, id) && (slices.Contains(c.s.Move.Adding, id) || !slices.Contains(c.s.Dead, id) || !slices.Contains(got.DeadKept, id)) {
						t.Errorf("completion with %s outside the ISR %v, not a dead kept replica", id, c.s.ISR)
					}
				}
				if !slices.Contains(got.Target, c.s.Self) {
					t.Errorf("completion that removes the leader %s", c.s.Self)
				}
			}
		})
	}
}

// TestNextCancel: the way back of a cancelled move of [n1 n2 n3] to
// [n4 n2 n3] (target the original list, removing the added n4) completes
// without waiting for every original replica to be in the ISR, waits for an
// ISR change in flight, and hands the leadership back to an original
// replica first when the added one leads.
func TestNextCancel(t *testing.T) {
	back := Move{Target: []string{"n1", "n2", "n3"}, Removing: []string{"n4"}, Cancel: true}
	union := []string{"n1", "n2", "n3", "n4"}
	cases := []struct {
		name string
		s    State
		want Step
	}{
		{"metadata not yet the way back's union",
			State{Self: "n1", Move: back, Replicas: []string{"n4", "n2", "n3", "n1"}, ISR: []string{"n1", "n2", "n3"}},
			Step{Kind: Wait}},
		{"the added replica still catching up: complete at once",
			State{Self: "n1", Move: back, Replicas: union, ISR: []string{"n1", "n2", "n3"}},
			Step{Kind: Complete, Target: back.Target}},
		{"the added replica dead, an original one dead too (the one a heal replaced): complete",
			State{Self: "n2", Move: back, Replicas: union, ISR: []string{"n2", "n3"}},
			Step{Kind: Complete, Target: back.Target}},
		{"an ISR change in flight",
			State{Self: "n1", Move: back, Replicas: union, ISR: union, InFlight: true},
			Step{Kind: Wait}},
		{"the added replica leads: hand back to an original successor",
			State{Self: "n4", Move: back, Replicas: union, ISR: union, Successors: []string{"n3", "n2"}},
			Step{Kind: HandOver, To: []string{"n2", "n3"}}},
		{"the added replica leads, no original replica holds its whole log",
			State{Self: "n4", Move: back, Replicas: union, ISR: []string{"n4", "n1"}, Successors: nil},
			Step{Kind: Wait}},
		{"the added replica leads, a handover under way",
			State{Self: "n4", Move: back, Replicas: union, ISR: union, Successors: []string{"n1"}, HandingOver: true},
			Step{Kind: Wait}},
		{"a cancelled reorder: nothing to remove",
			State{Self: "n1", Move: Move{Target: []string{"n1", "n2"}, Cancel: true}, Replicas: []string{"n1", "n2"}, ISR: []string{"n1"}},
			Step{Kind: Complete, Target: []string{"n1", "n2"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Next(c.s)
			if got.Kind != c.want.Kind || !slices.Equal(got.Waiting, c.want.Waiting) || !slices.Equal(got.To, c.want.To) || !slices.Equal(got.Target, c.want.Target) {
				t.Fatalf("Next = %+v (%s), want %+v (%s)", got, got.Kind, c.want, c.want.Kind)
			}
			if got.Kind == Wait && got.Reason == "" {
				t.Errorf("a wait without a reason")
			}
			if got.Kind == Complete && !slices.Contains(got.Target, c.s.Self) {
				t.Errorf("a way back that removes the leader %s", c.s.Self)
			}
		})
	}
}
