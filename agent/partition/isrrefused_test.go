package partition

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/internal/consultest"
	"github.com/logagent/logagent/replicate"
)

// TestCommittedISRRefusedStepsDown: a leader's ISR change loses its cas to
// a state Consul holds at the leader's own epoch that its state machine
// refuses to take as committed (an ISR without the leader; one naming a
// non-replica was too, until the leader took such members out instead,
// TestNonReplicaInConsulISRIsRepaired). The leader logged the refusal and
// went on leading with the proposal in flight for good: the follower that died
// was never dropped from the ISR, and an acks=all write waiting on it
// timed out under a leader still leading, as every later one would. It
// must step down instead (its HW does not count the ISR Consul elects
// from), failing the write as not leader, and give the lock back, so that
// another member of Consul's ISR takes over at once.
func TestCommittedISRRefusedStepsDown(t *testing.T) {
	tests := []struct {
		name string
		// Consul's ISR and ELR at the leader's epoch
		isr []string
		elr []election.EligibleReplica
	}{
		{"an isr without the leader", []string{"n2", "n3"}, nil},
		// Taking n9 out leaves an ISR without the leader: still refused.
		{"an isr without the leader but for a non-replica", []string{"n2", "n9"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := consultest.Start(t)
			n2, n3 := startElectionOnly(t, srv, "n2"), startElectionOnly(t, srv, "n3")
			m, coord := startManager(t, srv, "n1", "", time.Now)
			const topic = "isrref"
			createTopic(t, coord, topic, [][]string{{"n1", "n2", "n3"}}, 2)
			r := waitLeading(t, m, topic)
			epoch := r.CurrentView().Epoch
			follow(t, r, "n2", 0, epoch)
			follow(t, r, "n3", 0, epoch)

			// An acks=all write that n2 fetches and n3 does not: the HW
			// waits for n3 until it leaves the ISR.
			acked := appendAcksAll(t, r, "a")
			follow(t, r, "n2", 1, epoch)

			if st := writeConsulState(t, srv, topic, func(st *election.PartitionState) { st.ISR, st.ELR = tt.isr, tt.elr }); st.Leader != "n1" || st.Epoch != epoch {
				t.Fatalf("state %+v, want n1 leading at epoch %d", st, epoch)
			}

			// n3's agent goes: the leader proposes dropping it, its cas
			// meets the state above, which it reads back.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := n3.Deregister(ctx); err != nil {
				t.Fatal(err)
			}
			out := <-acked
			if !errors.Is(out.Err, replicate.ErrNotLeader) {
				v := r.CurrentView()
				t.Fatalf("acks=all write answered %v (role %v, epoch %d, ISR %v, n3 dead); want not leader: the leader must step down from a committed ISR %v, ELR %v it refuses",
					out.Err, v.Role, v.Epoch, v.ISR, tt.isr, tt.elr)
			}
			// The write is failed inside the step-down, before the replica's
			// view says it.
			waitFor(t, func() bool {
				v := r.CurrentView()
				return v.Role != RoleLeader || v.Epoch != epoch
			}, "n1 to stop leading at the epoch whose committed ISR it refused")

			// The lock was given back: n2, in Consul's ISR, takes over.
			l, err := n2.CampaignAs(ctx, topic, 0, election.Candidate{LogEpoch: election.NoEpoch})
			if err != nil {
				t.Fatalf("n2's campaign: %v", err)
			}
			if l.Epoch() <= epoch {
				t.Fatalf("n2 leads at epoch %d, want above %d", l.Epoch(), epoch)
			}
		})
	}
}
