package replicate

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// parkF2 records F2's fetch at the leader's log end and parks it.
func parkF2(t *testing.T, l *Leader, now time.Time) {
	t.Helper()
	fetchOK(t, l, "F2", l.LogEndOffset(), now)
	if err := l.FollowerParked("F2", l.Epoch(), l.LogEndOffset()); err != nil {
		t.Fatal(err)
	}
}

// shrinkProposal ticks at now and returns the ISR the leader proposes, nil
// for none.
func shrinkProposal(l *Leader, now time.Time) []string {
	l.Tick(now)
	if rd := l.Ready(); rd.ISRProposal != nil {
		return rd.ISRProposal.ISR
	}
	return nil
}

// TestParkedFollowerStaysInSync: a follower whose fetch waits in a session
// at the leader's log end sends nothing while the partition is idle; when
// the log moves on after longer than lag time max, it is still in sync
// until lag time max has passed since the append, exactly as a follower
// that fetched at that moment, or since its session was last heard of if
// that was earlier.
func TestParkedFollowerStaysInSync(t *testing.T) {
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	cases := []struct {
		name string
		park bool
		// unparkAt is when the parked fetch ended (zero: never).
		unparkAt float64
		// tickAt is when the leader ticks, after an append at 60 s.
		tickAt float64
		out    bool
	}{
		{name: "not parked: lag from its last fetch", park: false, tickAt: 60.05, out: true},
		{name: "parked, not yet answered", park: true, tickAt: 60.05, out: false},
		{name: "parked, answered at 60: in sync until 70", park: true, unparkAt: 60, tickAt: 70, out: false},
		{name: "parked, answered at 60: out after 70", park: true, unparkAt: 60, tickAt: 70.01, out: true},
		{name: "session ended, last heard of at 58", park: true, unparkAt: 58, tickAt: 68.01, out: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, m := newTestLeader(t, leaderOpts{durability: DurabilityReplicated})
			fetchOK(t, l, "F1", 8, at(1))
			if c.park {
				parkF2(t, l, at(1))
			} else {
				fetchOK(t, l, "F2", 8, at(1))
			}
			l.Ready()
			// F1 keeps fetching; F2 sends nothing after its fetch at 1 s.
			appendAt(t, l, m, 1, at(60))
			fetchOK(t, l, "F1", 9, at(60))
			if c.unparkAt != 0 {
				if err := l.FollowerUnparked("F2", l.Epoch(), at(c.unparkAt)); err != nil {
					t.Fatal(err)
				}
			}
			fetchOK(t, l, "F1", 9, at(c.tickAt))
			isr := shrinkProposal(l, at(c.tickAt))
			if got := isr != nil && !slices.Contains(isr, "F2"); got != c.out {
				t.Fatalf("F2 proposed for removal: %t (proposal %v), want %t", got, isr, c.out)
			}
		})
	}
}

// TestParkRules: only a fetch at the leader's log end parks; the next fetch
// ends a park, so an unpark after it changes nothing; a dead follower is
// removed parked or not.
func TestParkRules(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

	l, m := newTestLeader(t, leaderOpts{durability: DurabilityReplicated})
	fetchOK(t, l, "F2", 5, at(1))
	for _, c := range []struct {
		id     string
		epoch  int32
		offset int64
		want   error
	}{
		{"F2", 4, 5, ErrInvalidInput}, // recorded at 5, the log ends at 8
		{"F2", 4, 8, ErrInvalidInput}, // its recorded fetch is not at 8
		{"F2", 3, 8, ErrFencedLeaderEpoch},
		{"F2", 5, 8, ErrUnknownLeaderEpoch},
		{"X", 4, 8, ErrNotReplica},
	} {
		if err := l.FollowerParked(c.id, c.epoch, c.offset); !errors.Is(err, c.want) {
			t.Errorf("FollowerParked(%s, %d, %d) = %v, want %v", c.id, c.epoch, c.offset, err, c.want)
		}
	}
	if err := l.FollowerUnparked("X", 4, at(1)); !errors.Is(err, ErrNotReplica) {
		t.Errorf("FollowerUnparked(stranger) = %v", err)
	}

	// A fetch after the park ends it: the follower behind the log end counts
	// by Kafka's rule again.
	fetchOK(t, l, "F1", 8, at(1))
	parkF2(t, l, at(1))
	appendAt(t, l, m, 2, at(1))
	fetchOK(t, l, "F2", 9, at(2)) // behind the log end (10)
	if err := l.FollowerUnparked("F2", 4, at(30)); err != nil {
		t.Fatal(err)
	}
	if got := progressOf(l, "F2").LastCaughtUp; !got.Equal(at(1)) {
		t.Errorf("an unpark after the next fetch moved last caught up to %s", got.Sub(t0))
	}
	fetchOK(t, l, "F1", 10, at(12))
	if isr := shrinkProposal(l, at(12)); !slices.Equal(isr, []string{"L", "F1"}) {
		t.Errorf("proposal %v, want F2 out", isr)
	}

	// Consul's word wins over a park.
	l, _ = newTestLeader(t, leaderOpts{durability: DurabilityReplicated})
	fetchOK(t, l, "F1", 8, at(1))
	parkF2(t, l, at(1))
	l.Ready()
	if err := l.SetDeadFollowers([]string{"F2"}, at(2)); err != nil {
		t.Fatal(err)
	}
	if rd := l.Ready(); rd.ISRProposal == nil || !slices.Equal(rd.ISRProposal.ISR, []string{"L", "F1"}) {
		t.Errorf("dead parked follower: proposal %+v, want [L F1]", rd.ISRProposal)
	}
}

// TestParkedFollowerRejoins: a follower whose fetch reached the log end
// while a change was in flight (so that fetch proposed nothing) and then
// parked sends no other fetch; the next tick after the change proposes
// adding it, as its next fetch would have, and still does after an append
// passed its park, while its log meets the join rule.
func TestParkedFollowerRejoins(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, appendFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("append before the tick %t", appendFirst), func(t *testing.T) {
			l, m := newTestLeader(t, leaderOpts{durability: DurabilityReplicated})
			fetchOK(t, l, "F1", 8, at(1))
			l.Ready()
			// F2 never fetched: out at 11 s.
			if isr := shrinkProposal(l, at(11)); !slices.Equal(isr, []string{"L", "F1"}) {
				t.Fatalf("proposal %v, want F2 out", isr)
			}
			parkF2(t, l, at(12)) // with the shrink in flight: no proposal
			if rd := l.Ready(); rd.ISRProposal != nil {
				t.Fatalf("a proposal while one is in flight: %+v", rd.ISRProposal)
			}
			if err := l.ISRCommitted([]string{"L", "F1"}, nil, at(12)); err != nil {
				t.Fatal(err)
			}
			if appendFirst {
				fetchOK(t, l, "F1", 8, at(12))
				appendAt(t, l, m, 1, at(12)) // the HW stays at 8, F1's
			}
			if !l.TickNeeded() {
				t.Error("no tick needed with a parked follower that may join")
			}
			if isr := shrinkProposal(l, at(12)); !slices.Equal(isr, []string{"L", "F1", "F2"}) {
				t.Fatalf("proposal %v after the shrink, want F2 back", isr)
			}
		})
	}
}

// TestAppendEndsAParkedFollowersCatchUp: a parked follower counts as
// caught up until the leader's log moves past its fetch, not until its
// parked fetch is answered: a session's writer may take long to get to
// that answer (other partitions' answers before it on a slow link), and
// meanwhile acks=all writes waited on a follower that held none of them.
// Before, it counted as caught up for as long as the park lasted, and from
// the answer's time on: never removed while its answer did not go out.
func TestAppendEndsAParkedFollowersCatchUp(t *testing.T) {
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	cases := []struct {
		name string
		// unparkAt is when the parked fetch ended (zero: not yet).
		unparkAt float64
		// againAt is when the leader appends again (zero: never).
		againAt float64
		// fetchAt is when F2 fetches again at 8, behind the log end, from
		// elsewhere than the session that holds its park (zero: never).
		fetchAt float64
		tickAt  float64
		out     bool
	}{
		{name: "not answered: in sync until 70", tickAt: 70, out: false},
		{name: "not answered: out after 70", tickAt: 70.01, out: true},
		{name: "not answered, an hour later", tickAt: 3600, out: true},
		{name: "answered late at 69: out after 70 all the same", unparkAt: 69, tickAt: 70.01, out: true},
		{name: "answered after the tick", unparkAt: 75, tickAt: 70.01, out: true},
		{name: "appended again at 65: out after 70", againAt: 65, tickAt: 70.01, out: true},
		{name: "fetched again behind the log end at 65: in sync until 70", fetchAt: 65, tickAt: 70, out: false},
		{name: "fetched again behind the log end at 65: out after 70", fetchAt: 65, tickAt: 70.01, out: true},
		{name: "session ended, last heard of at 58: out after 68", unparkAt: 58, tickAt: 68.01, out: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, m := newTestLeader(t, leaderOpts{durability: DurabilityReplicated})
			fetchOK(t, l, "F1", 8, at(1))
			parkF2(t, l, at(1))
			l.Ready()
			if l.TickNeeded() {
				t.Fatal("tick needed with every follower at the log end")
			}
			// F2's park is passed at 60 s; F1 keeps fetching.
			appendAt(t, l, m, 1, at(60))
			fetchOK(t, l, "F1", 9, at(60))
			if got := progressOf(l, "F2").LastCaughtUp; !got.Equal(at(60)) {
				t.Errorf("F2 last caught up %s after the append at 60s, want 60s", got.Sub(t0))
			}
			if !l.TickNeeded() {
				t.Error("no tick needed with F2 in the ISR, behind the log end")
			}
			if c.againAt != 0 {
				appendAt(t, l, m, 1, at(c.againAt))
				fetchOK(t, l, "F1", 10, at(c.againAt))
			}
			if c.fetchAt != 0 {
				fetchOK(t, l, "F2", 8, at(c.fetchAt))
			}
			if c.unparkAt != 0 && c.unparkAt < c.tickAt {
				if err := l.FollowerUnparked("F2", l.Epoch(), at(c.unparkAt)); err != nil {
					t.Fatal(err)
				}
			}
			isr := shrinkProposal(l, at(c.tickAt))
			if got := isr != nil && !slices.Contains(isr, "F2"); got != c.out {
				t.Fatalf("F2 proposed for removal: %t (proposal %v), want %t", got, isr, c.out)
			}
			if c.unparkAt != 0 && c.unparkAt >= c.tickAt {
				if err := l.FollowerUnparked("F2", l.Epoch(), at(c.unparkAt)); err != nil {
					t.Fatal(err)
				}
				if got := progressOf(l, "F2").LastCaughtUp; !got.Equal(at(60)) {
					t.Errorf("F2 last caught up %s after its answer at %gs, want 60s", got.Sub(t0), c.unparkAt)
				}
			}
		})
	}
}

// TestDivergingFetchEndsThePark: a parked follower's next fetch ends its
// park even when the leader answers it with a diverging epoch (the follower's
// log changed under it: it is not at the log end any more). Before, only a
// fetch that recorded progress ended it: the follower counted as caught up
// for as long as it sent no fetch that matched the leader's log, and the
// agent, which forgets the park at any fetch, never reported its end.
func TestDivergingFetchEndsThePark(t *testing.T) {
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	cases := []struct {
		name   string
		tickAt float64
		out    bool
	}{
		{name: "caught up as of the diverging fetch at 20: in sync until 30", tickAt: 30, out: false},
		{name: "out after 30", tickAt: 30.01, out: true},
		{name: "an hour later", tickAt: 3600, out: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, m := newTestLeader(t, leaderOpts{durability: DurabilityReplicated})
			fetchOK(t, l, "F1", 8, at(1))
			parkF2(t, l, at(1))
			l.Ready()
			// F2's log no longer matches: epoch 1 ends at 3 in the
			// leader's log, F2 fetches at 4 with it.
			res, err := l.Fetch(FetchRequest{ReplicaID: "F2", FetchOffset: 4, CurrentLeaderEpoch: 4, LastFetchedEpoch: 1}, at(20))
			if err != nil || res.Diverging == nil {
				t.Fatalf("F2's fetch: %+v, %v; want a diverging answer", res, err)
			}
			appendTo(t, l, m, 1)
			fetchOK(t, l, "F1", 9, at(c.tickAt))
			if !l.TickNeeded() {
				t.Errorf("no tick needed with F2 in the ISR, behind the log end and not parked")
			}
			isr := shrinkProposal(l, at(c.tickAt))
			if got := isr != nil && !slices.Contains(isr, "F2"); got != c.out {
				t.Fatalf("F2 proposed for removal: %t (proposal %v), want %t", got, isr, c.out)
			}
		})
	}
}
