package partition

import (
	"errors"
	"slices"
	"strings"
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
			appendOne(t, r)
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

// TestFetchBelowLogStartEndsThePark: a follower's fetch parked on session 1,
// then retention moves the log start past what the follower has, and the
// follower (its agent restarted, on session 2) fetches below the log start.
// The loop refused that fetch before it ended the park: session 1's park
// stayed in the state machine, the follower caught up, until session 1
// ended it or the follower sent a fetch the leader took. Like any fetch it
// must end the park.
func TestFetchBelowLogStartEndsThePark(t *testing.T) {
	r, clock, leader, fr := parkedFollower(t) // lag_time_max 10 s

	// Three batches, each in a segment of its own (segments of 1 MiB).
	reply := make(chan ProduceOutcome, 1)
	for i := range 3 {
		r.onProduce(&produceRequest{batch: testBatch(t, []string{strings.Repeat("v", 600<<10)}), acks: replicate.AcksLeader, epoch: AnyEpoch, reply: reply})
		if out := <-reply; out.Err != nil {
			t.Fatalf("produce %d: %+v", i, out)
		}
	}
	// n2 catches up on session 1 and is parked there at the log end.
	fetch := func(offset, knownHW int64, session uint64) LeaderFetchOutcome {
		r.onLeaderFetch(&leaderFetchRequest{
			req:     replicate.FetchRequest{ReplicaID: "n2", FetchOffset: offset, CurrentLeaderEpoch: 1, LastFetchedEpoch: 1},
			session: session, knownHW: knownHW, reply: fr,
		})
		return <-fr
	}
	if out := fetch(3, 0, 1); out.Err != nil || out.Parked {
		t.Fatalf("n2's fetch at 3: %+v, want an answer", out)
	}
	if out := fetch(3, 3, 1); out.Err != nil || !out.Parked {
		t.Fatalf("n2's fetch at 3 knowing the HW: %+v, want it parked", out)
	}
	log := r.CurrentLog()
	if n, err := log.DeleteBefore(3); err != nil || n == 0 || log.LogStartOffset() == 0 {
		t.Fatalf("DeleteBefore(3): %d segments deleted, %v, log start %d", n, err, log.LogStartOffset())
	}

	// n2's agent restarted with less than the log start: its fetch, on
	// session 2, is below the log start.
	clock.t = clock.t.Add(5 * time.Second)
	var oor *OutOfRangeError
	if out := fetch(0, 0, 2); !errors.As(out.Err, &oor) {
		t.Fatalf("n2's fetch at 0 below the log start %d: %+v, want out of range", log.LogStartOffset(), out)
	}

	// The log moves on; n2 sends nothing the leader takes, and session 1,
	// still alive (it dies up to lag_time_max/2 after its last sign of
	// life), does not end the park.
	r.onProduce(&produceRequest{batch: testBatch(t, []string{"a"}), acks: replicate.AcksLeader, epoch: AnyEpoch, reply: reply})
	if out := <-reply; out.Err != nil {
		t.Fatalf("produce: %+v", out)
	}
	for _, after := range []time.Duration{5 * time.Second, 10*time.Second + time.Millisecond} {
		leader.Tick(clock.t.Add(after))
		rd := leader.Ready()
		out := rd.ISRProposal != nil && slices.Equal(rd.ISRProposal.ISR, []string{"n1"})
		if want := after > 10*time.Second; out != want {
			t.Fatalf("%s after the fetch below the log start: proposal %+v, want n2 out: %t", after, rd.ISRProposal, want)
		}
	}
	if r.HoldsPark("n2", 1) {
		t.Fatal("session 1 still holds n2's park after n2's fetch on session 2")
	}
}
