package partition

import (
	"slices"
	"testing"
	"time"

	"github.com/logagent/logagent/replicate"
)

// TestRefusedFetchEndsThePark: a follower's fetch parked on one session,
// then the follower (its agent restarted, on another session) sends a fetch
// the leader state machine refuses. The loop forgets the park at any fetch,
// so the first session's unpark no longer reaches the state machine; the
// refused fetch must end the park there too. Before, the state machine kept
// the follower parked, caught up however long it sent nothing the leader
// took: it stayed in the ISR, and the HW waited for it, for ever.
func TestRefusedFetchEndsThePark(t *testing.T) {
	cases := []struct {
		name string
		req  replicate.FetchRequest
	}{
		{"beyond the log end", replicate.FetchRequest{ReplicaID: "n2", FetchOffset: 5, CurrentLeaderEpoch: 1, LastFetchedEpoch: replicate.UndefinedEpoch}},
		{"a stale leader epoch", replicate.FetchRequest{ReplicaID: "n2", FetchOffset: 0, CurrentLeaderEpoch: 0, LastFetchedEpoch: replicate.UndefinedEpoch}},
		{"a last fetched epoch from the future", replicate.FetchRequest{ReplicaID: "n2", FetchOffset: 0, CurrentLeaderEpoch: 1, LastFetchedEpoch: 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, clock, leader, fr := parkedFollower(t) // lag_time_max 10 s

			clock.t = clock.t.Add(5 * time.Second)
			r.onLeaderFetch(&leaderFetchRequest{req: c.req, session: 2, reply: fr})
			if out := <-fr; out.Err == nil {
				t.Fatalf("fetch %+v: %+v, want a refusal", c.req, out)
			}
			// Session 1 ends: it no longer holds the park.
			r.onUnpark(unparkRequest{replicaID: "n2", epoch: 1, session: 1, at: clock.t})

			// The log moves on; n2 sends nothing the leader takes.
			reply := make(chan ProduceOutcome, 1)
			r.onProduce(&produceRequest{batch: testBatch(t, []string{"a"}), acks: replicate.AcksLeader, epoch: AnyEpoch, reply: reply})
			if out := <-reply; out.Err != nil {
				t.Fatalf("produce: %+v", out)
			}
			for _, after := range []time.Duration{5 * time.Second, 10*time.Second + time.Millisecond} {
				now := clock.t.Add(after)
				if !leader.TickNeeded() {
					t.Errorf("%s after the refused fetch: no tick needed, with n2 in the ISR behind the log end", after)
				}
				leader.Tick(now)
				rd := leader.Ready()
				out := rd.ISRProposal != nil && slices.Equal(rd.ISRProposal.ISR, []string{"n1"})
				if want := after > 10*time.Second; out != want {
					t.Fatalf("%s after the refused fetch: proposal %+v, want n2 out: %t", after, rd.ISRProposal, want)
				}
			}
		})
	}
}
