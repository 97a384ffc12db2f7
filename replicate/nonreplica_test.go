package replicate

import (
	"slices"
	"testing"
	"time"
)

// TestNonReplicasInConsulISRAreTakenOut: Consul's ISR or ELR names a node
// that is no replica (an operator's edit, a bug, a move racing a stale ISR
// write). NewLeader and ISRCommitted refused it, and the agent stepped
// down each time, so every election met the same state again and the epoch
// climbed (agent/partition's TestNonReplicaInConsulISRIsRepaired). The
// leader, in the ISR, takes the rest as committed and proposes Consul's
// state without the non-replicas, again on the next Tick if that fails;
// its HW grows only once that change commits, as for any shrink.
func TestNonReplicasInConsulISRAreTakenOut(t *testing.T) {
	tests := []struct {
		name string
		// Consul's state, and min_insync_replicas
		isr    []string
		elr    []EligibleReplica
		minISR int
		// the state proposed, and what it takes out
		wantISR         []string
		wantELR         []EligibleReplica
		wantNonReplicas []string
	}{
		{"an isr naming a non-replica", []string{"L", "F1", "X", "F2"}, nil, 2,
			[]string{"L", "F1", "F2"}, nil, []string{"X"}},
		{"an isr naming an empty id", []string{"L", "", "F1", "F2"}, nil, 2,
			[]string{"L", "F1", "F2"}, nil, []string{""}},
		{"an elr naming a non-replica", []string{"L", "F1", "F2"}, []EligibleReplica{{ID: "X", LogEndOffset: 5}}, 2,
			[]string{"L", "F1", "F2"}, nil, []string{"X"}},
		{"an elr naming a non-replica beside an eligible replica", []string{"L", "F1"}, []EligibleReplica{{ID: "F2", LogEndOffset: 8}, {ID: "X", LogEndOffset: 8}}, 3,
			[]string{"L", "F1"}, []EligibleReplica{{ID: "F2", LogEndOffset: 8}}, []string{"X"}},
		{"both naming non-replicas", []string{"Y", "L", "F1", "X"}, []EligibleReplica{{ID: "X", LogEndOffset: 5}, {ID: "Z"}}, 2,
			[]string{"L", "F1"}, nil, []string{"Y", "X", "Z"}},
	}
	for _, tt := range tests {
		for _, atElection := range []bool{true, false} {
			name := tt.name + ", committed"
			if atElection {
				name = tt.name + ", at the election"
			}
			t.Run(name, func(t *testing.T) {
				var l *Leader
				if atElection {
					l, _ = newTestLeader(t, leaderOpts{isr: tt.isr, elr: tt.elr, minISR: tt.minISR, hw: 3})
				} else {
					l, _ = newTestLeader(t, leaderOpts{isr: tt.wantISR, elr: tt.wantELR, minISR: tt.minISR, hw: 3})
					if rd := l.Ready(); rd.ISRProposal != nil {
						t.Fatalf("a leader of a clean state proposed %+v", *rd.ISRProposal)
					}
					if err := l.ISRCommitted(tt.isr, tt.elr, t0); err != nil {
						t.Fatalf("ISRCommitted(%v, %v) = %v, want the non-replicas left out", tt.isr, tt.elr, err)
					}
				}
				if got := l.ISR(); !slices.Equal(got, tt.wantISR) {
					t.Fatalf("ISR %v, want %v", got, tt.wantISR)
				}
				for _, id := range tt.wantISR[1:] {
					fetchOK(t, l, id, 8, t0)
				}
				want := func(what string) ISRProposal {
					t.Helper()
					rd := l.Ready()
					if rd.ISRProposal == nil {
						t.Fatalf("%s: no proposal, want ISR %v ELR %v without %v", what, tt.wantISR, tt.wantELR, tt.wantNonReplicas)
					}
					p := *rd.ISRProposal
					if !slices.Equal(p.ISR, tt.wantISR) || !slices.Equal(p.ELR, tt.wantELR) || !slices.Equal(p.NonReplicas, tt.wantNonReplicas) {
						t.Fatalf("%s: proposal %+v, want ISR %v ELR %v without %v", what, p, tt.wantISR, tt.wantELR, tt.wantNonReplicas)
					}
					// Consul may still elect from the state naming them:
					// the HW waits as for any shrink.
					wantHW(t, l, 3)
					return p
				}
				want("first")
				if err := l.ISRProposalFailed(); err != nil {
					t.Fatal(err)
				}
				if !l.TickNeeded() {
					t.Fatal("TickNeeded false after the repair failed")
				}
				l.Tick(t0.Add(time.Second))
				p := want("after a failure, on the next Tick")
				if err := l.ISRCommitted(p.ISR, p.ELR, t0.Add(time.Second)); err != nil {
					t.Fatal(err)
				}
				if rd := l.Ready(); rd.ISRProposal != nil {
					t.Fatalf("after the repair committed: proposal %+v", *rd.ISRProposal)
				}
				if len(tt.wantISR) >= tt.minISR && len(tt.wantELR) == 0 {
					wantHW(t, l, 8)
				} else {
					wantHW(t, l, 3)
				}
			})
		}
	}
}
