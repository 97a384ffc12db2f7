package partition

import (
	"slices"
	"testing"
	"time"

	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/replicate"
)

// TestUnparkDoesNotWaitForABusyLoop: a session's writer ends a woken
// fetch's park (Unpark) before it answers it, for every partition of the
// session in turn. Unpark was an event on the loop's queue, and the writer
// waited while that queue was full (a burst of produces to the partition):
// every other partition's answer on the session waited behind one busy
// loop. Unpark now returns at once, and the loop takes it before anything
// else it does with the follower: its next fetch, or its wake-up.
func TestUnparkDoesNotWaitForABusyLoop(t *testing.T) {
	r, clock, leader, _ := parkedFollower(t) // lag_time_max 10 s
	// The log moves on, which wakes the session.
	appended := clock.t
	appendOne(t, r)

	// The loop is busy: its queue is full (the loop of this test never
	// runs, so it stays full).
	for len(r.events) < cap(r.events) {
		r.events <- progressRequest{}
	}
	at := clock.t.Add(time.Second)
	unparked := make(chan struct{})
	go func() {
		r.Unpark("n2", 1, 1, at)
		close(unparked)
	}()
	select {
	case <-unparked:
	case <-time.After(5 * time.Second):
		// Let the blocked Unpark go, so the test ends.
		for len(r.events) > 0 {
			<-r.events
		}
		<-unparked
		t.Fatal("Unpark waited for the partition's busy loop: the session's writer, and every other partition's answer, waited with it")
	}
	for len(r.events) > 0 {
		<-r.events
	}

	// The loop takes the unpark before anything else it does for a
	// follower (here a stranger's fetch, which it refuses): n2 is not
	// parked any more, caught up as of the append that woke the session
	// (not of the answer, at), and leaves the ISR lag_time_max after it.
	takeUnparks(t, r)
	if r.HoldsPark("n2", 1) {
		t.Fatal("the loop still holds n2's park after taking its unpark")
	}
	for _, after := range []time.Duration{10 * time.Second, 10*time.Second + time.Millisecond} {
		leader.Tick(appended.Add(after))
		rd := leader.Ready()
		out := rd.ISRProposal != nil && slices.Equal(rd.ISRProposal.ISR, []string{"n1"})
		if want := after > 10*time.Second; out != want {
			t.Fatalf("%s after the append: proposal %+v, want n2 out: %t", after, rd.ISRProposal, want)
		}
	}
}

// TestUnparkTakenBeforeTheNextFetch: the unpark a session queued before it
// answered reaches the state machine before the follower's next fetch,
// which the loop may take first: n2's park ends as of the answer, and the
// next fetch (behind the log end) counts from there.
func TestUnparkTakenBeforeTheNextFetch(t *testing.T) {
	r, clock, leader, fr := parkedFollower(t)
	r.Unpark("n2", 1, 1, clock.t)
	// The follower's next fetch, on the same session, reaches the loop
	// before the loop took its wake-up: the unpark goes first, or, taken
	// after, it would end the new park the session holds.
	r.onLeaderFetch(&leaderFetchRequest{
		req:     replicate.FetchRequest{ReplicaID: "n2", FetchOffset: 0, CurrentLeaderEpoch: 1, LastFetchedEpoch: replicate.UndefinedEpoch},
		session: 1, knownHW: 0, reply: fr,
	})
	if out := <-fr; out.Err != nil || !out.Parked {
		t.Fatalf("n2's next fetch: %+v, want it parked", out)
	}
	takeUnparks(t, r)
	if !r.HoldsPark("n2", 1) {
		t.Fatal("n2's new park was ended by the unpark of the one before it")
	}
	// No ISR change: n2 is parked, caught up.
	leader.Tick(clock.t.Add(time.Minute))
	if rd := leader.Ready(); rd.ISRProposal != nil {
		t.Fatalf("proposal %+v with n2 parked", rd.ISRProposal)
	}
}

// takeUnparks has the loop take what it has queued for the followers' parks,
// as it does before any fetch: here a fetch of n3, no replica, refused.
func takeUnparks(t *testing.T, r *Replica) {
	t.Helper()
	fr := make(chan LeaderFetchOutcome, 1)
	r.onLeaderFetch(&leaderFetchRequest{
		req:   replicate.FetchRequest{ReplicaID: "n3", FetchOffset: 0, CurrentLeaderEpoch: 1, LastFetchedEpoch: replicate.UndefinedEpoch},
		reply: fr,
	})
	if out := <-fr; out.Err == nil {
		t.Fatalf("a fetch of n3, no replica: %+v, want a refusal", out)
	}
}

// parkedFollower is a replica leading epoch 1 by hand (lag_time_max 10 s)
// whose follower n2's fetch at the log end is parked by session 1; fr is
// the channel its fetches are answered on.
func parkedFollower(t *testing.T) (*Replica, *fakeNow, *replicate.Leader, chan LeaderFetchOutcome) {
	t.Helper()
	r, _, clock := faultFSReplica(t, &Deps{Self: "n1", Config: &config.Config{}, Durability: replicate.DurabilityReplicated})
	leader := leadByHand(t, r, clock)
	fr := make(chan LeaderFetchOutcome, 1)
	r.onLeaderFetch(&leaderFetchRequest{
		req:     replicate.FetchRequest{ReplicaID: "n2", FetchOffset: 0, CurrentLeaderEpoch: 1, LastFetchedEpoch: replicate.UndefinedEpoch},
		session: 1, knownHW: 0, reply: fr,
	})
	if out := <-fr; out.Err != nil || !out.Parked {
		t.Fatalf("n2's fetch at the log end: %+v, want it parked", out)
	}
	return r, clock, leader, fr
}

// appendOne has the leader's loop append one record, acks=1, as a produce
// does.
func appendOne(t *testing.T, r *Replica) {
	t.Helper()
	reply := make(chan ProduceOutcome, 1)
	r.onProduce(&produceRequest{batch: testBatch(t, []string{"a"}), acks: replicate.AcksLeader, epoch: AnyEpoch, reply: reply})
	if out := <-reply; out.Err != nil {
		t.Fatalf("produce: %+v", out)
	}
}
