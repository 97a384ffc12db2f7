package replicate

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// wantProposal checks the proposal of the next Ready: want nil means none.
func wantProposal(t *testing.T, l *Leader, want []string) {
	t.Helper()
	rd := l.Ready()
	switch {
	case want == nil && rd.ISRProposal != nil:
		t.Fatalf("proposal %v, want none", rd.ISRProposal.ISR)
	case want != nil && rd.ISRProposal == nil:
		t.Fatalf("no proposal, want %v", want)
	case want != nil && (rd.ISRProposal.Epoch != l.Epoch() || !slices.Equal(rd.ISRProposal.ISR, want)):
		t.Fatalf("proposal %+v, want %v at epoch %d", *rd.ISRProposal, want, l.Epoch())
	}
}

func setDead(t *testing.T, l *Leader, now time.Time, ids ...string) {
	t.Helper()
	if err := l.SetDeadFollowers(ids, now); err != nil {
		t.Fatal(err)
	}
}

func commitISR(t *testing.T, l *Leader, now time.Time, isr ...string) {
	t.Helper()
	if err := l.ISRCommitted(isr, nil, now); err != nil {
		t.Fatal(err)
	}
}

func TestDeadFollowerRemovedAtOnce(t *testing.T) {
	soon := t0.Add(time.Second) // far below lag time max (10s)
	tests := []struct {
		name     string
		replicas []string
		isr      []string
		// fetches are at soon, at these offsets (the leader's log ends at 8).
		fetches map[string]int64
		dead    []string
		want    []string
	}{
		{
			name: "caught-up ISR follower", isr: []string{"L", "F1", "F2"},
			fetches: map[string]int64{"F1": 8, "F2": 8}, dead: []string{"F2"}, want: []string{"L", "F1"},
		},
		{
			name: "ISR follower that never fetched", isr: []string{"L", "F1", "F2"},
			fetches: map[string]int64{"F1": 8}, dead: []string{"F2"}, want: []string{"L", "F1"},
		},
		{
			name: "two dead followers", isr: []string{"L", "F1", "F2"},
			fetches: map[string]int64{"F1": 8, "F2": 8}, dead: []string{"F2", "F1"}, want: []string{"L"},
		},
		{
			name: "dead follower outside the ISR", isr: []string{"L", "F1"},
			fetches: map[string]int64{"F1": 8}, dead: []string{"F2"},
		},
		{
			name: "the leader itself and strangers are ignored", isr: []string{"L", "F1", "F2"},
			fetches: map[string]int64{"F1": 8, "F2": 8}, dead: []string{"L", "X"},
		},
		{
			name: "nobody dead", isr: []string{"L", "F1", "F2"},
			fetches: map[string]int64{"F1": 8, "F2": 8},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, m := newTestLeader(t, leaderOpts{replicas: tt.replicas, isr: tt.isr, durability: DurabilityReplicated, hw: 5})
			for _, id := range []string{"F1", "F2"} {
				if offset, ok := tt.fetches[id]; ok {
					fetchOK(t, l, id, offset, soon)
				}
			}
			l.Ready()
			setDead(t, l, soon, tt.dead...)
			wantProposal(t, l, tt.want)
			// Nothing else until the proposal is answered, and no
			// lag-based shrink before lag time max either.
			l.Tick(soon.Add(time.Second))
			wantProposal(t, l, nil)
			if tt.want == nil {
				return
			}
			// Until Consul has the smaller ISR, the HW waits for every
			// member of the committed one.
			hw := l.HighWatermark()
			appendTo(t, l, m, 2)
			for _, id := range tt.want[1:] {
				fetchOK(t, l, id, m.logEnd(), soon)
			}
			wantHW(t, l, hw)
			commitISR(t, l, soon, tt.want...)
			if len(tt.want) < 2 { // min ISR: the HW stays frozen
				wantHW(t, l, hw)
			} else {
				wantHW(t, l, m.logEnd())
			}
		})
	}
}

func TestDeadFollowerAtMinISR(t *testing.T) {
	// Exactly as TestNotEnoughReplicasAfterAppend, but removed for being
	// dead, a second after it last fetched, instead of after lag time max.
	l, m := newTestLeader(t, leaderOpts{isr: []string{"L", "F1"}, minISR: 2, durability: DurabilityReplicated})
	soon := t0.Add(time.Second)
	fetchOK(t, l, "F1", 8, t0)
	wantHW(t, l, 8)
	last := appendTo(t, l, m, 1)
	if err := l.WaitAck(1, last, AcksAll, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitAck(2, last, AcksLeader, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if got := acksOf(l); got[2] != nil || len(got) != 1 {
		t.Fatalf("acks %v, want only the acks=1 write, done", got)
	}
	setDead(t, l, soon, "F1")
	wantProposal(t, l, []string{"L"})
	// The HW still counts F1 while Consul has the old ISR: no ack yet.
	if got := acksOf(l); len(got) != 0 {
		t.Fatalf("acks %v before the shrink committed", got)
	}
	commitISR(t, l, soon, "L")
	if err := acksOf(l)[1]; !errors.Is(err, ErrNotEnoughReplicasAfterAppend) {
		t.Fatalf("acks=all outcome %v, want ErrNotEnoughReplicasAfterAppend", err)
	}
	wantHW(t, l, 8) // frozen below min ISR
	if err := l.CanAppend(AcksAll); !errors.Is(err, ErrNotEnoughReplicas) {
		t.Fatalf("CanAppend after the shrink: %v, want ErrNotEnoughReplicas", err)
	}
	if err := l.CanAppend(AcksLeader); err != nil {
		t.Fatalf("CanAppend(acks=1) after the shrink: %v", err)
	}
}

func TestDeadSetChangesWhileProposalInFlight(t *testing.T) {
	soon := t0.Add(time.Second)
	t.Run("dead while a lag shrink is in flight", func(t *testing.T) {
		l, _ := newTestLeader(t, leaderOpts{durability: DurabilityReplicated})
		late := t0.Add(time.Minute)
		fetchOK(t, l, "F2", 8, late) // F1 never fetched
		l.Tick(late)
		wantProposal(t, l, []string{"L", "F2"})
		setDead(t, l, late, "F2")
		wantProposal(t, l, nil)
		commitISR(t, l, late, "L", "F2")
		l.Tick(late.Add(leaderTickForTests))
		wantProposal(t, l, []string{"L"})
	})
	t.Run("dead while its expansion is in flight", func(t *testing.T) {
		l, m := newTestLeader(t, leaderOpts{isr: []string{"L", "F1"}, durability: DurabilityReplicated})
		fetchOK(t, l, "F1", 8, soon)
		fetchOK(t, l, "F2", 8, soon)
		wantProposal(t, l, []string{"L", "F1", "F2"})
		setDead(t, l, soon, "F2")
		wantProposal(t, l, nil)
		// A pending addition keeps counting for the HW.
		appendTo(t, l, m, 1)
		fetchOK(t, l, "F1", 9, soon)
		wantHW(t, l, 8)
		commitISR(t, l, soon, "L", "F1", "F2")
		l.Tick(soon)
		wantProposal(t, l, []string{"L", "F1"})
		wantHW(t, l, 8)
		commitISR(t, l, soon, "L", "F1")
		wantHW(t, l, 9)
	})
	t.Run("alive again before the shrink commits", func(t *testing.T) {
		l, m := newTestLeader(t, leaderOpts{durability: DurabilityReplicated})
		fetchOK(t, l, "F1", 8, soon)
		fetchOK(t, l, "F2", 8, soon)
		setDead(t, l, soon, "F2")
		wantProposal(t, l, []string{"L", "F1"})
		setDead(t, l, soon)
		wantProposal(t, l, nil)
		// Consul wrote the shrink: F2 is out, and comes back by catching
		// up like any follower outside the ISR.
		commitISR(t, l, soon, "L", "F1")
		appendTo(t, l, m, 1)
		fetchOK(t, l, "F1", 9, soon)
		wantHW(t, l, 9)
		fetchOK(t, l, "F2", 9, soon)
		wantProposal(t, l, []string{"L", "F1", "F2"})
	})
	t.Run("the shrink fails while still dead", func(t *testing.T) {
		l, _ := newTestLeader(t, leaderOpts{durability: DurabilityReplicated})
		fetchOK(t, l, "F1", 8, soon)
		setDead(t, l, soon, "F2")
		wantProposal(t, l, []string{"L", "F1"})
		if err := l.ISRProposalFailed(); err != nil {
			t.Fatal(err)
		}
		l.Tick(soon)
		wantProposal(t, l, []string{"L", "F1"})
	})
}

// leaderTickForTests is about the agent's leader tick.
const leaderTickForTests = 50 * time.Millisecond

func TestDeadFollowerRejoinsByCatchingUpOnly(t *testing.T) {
	l, m := newTestLeader(t, leaderOpts{durability: DurabilityReplicated})
	soon := t0.Add(time.Second)
	fetchOK(t, l, "F1", 8, soon)
	fetchOK(t, l, "F2", 8, soon)
	setDead(t, l, soon, "F2")
	wantProposal(t, l, []string{"L", "F1"})
	commitISR(t, l, soon, "L", "F1")

	// Consul still calls F2 dead: however far it fetches, it stays out.
	appendTo(t, l, m, 2)
	fetchOK(t, l, "F1", 10, soon)
	fetchOK(t, l, "F2", 10, soon)
	wantProposal(t, l, nil)
	wantHW(t, l, 10)

	// Alive again: that alone adds nobody...
	setDead(t, l, soon)
	wantProposal(t, l, nil)
	l.Tick(soon)
	wantProposal(t, l, nil)
	// ...catching up does, and then it counts for the HW at once.
	appendTo(t, l, m, 1)
	fetchOK(t, l, "F2", 10, soon) // at the HW, behind the log end (11)
	wantProposal(t, l, []string{"L", "F1", "F2"})
	fetchOK(t, l, "F1", 11, soon)
	wantHW(t, l, 10)
}

// TestExpansionCommitRefreshesLastCaughtUp is issue 13 j: a follower added
// to the ISR while behind the leader's log end must not be removed again by
// the next Tick because of a lastCaughtUp from before it joined.
func TestExpansionCommitRefreshesLastCaughtUp(t *testing.T) {
	l, m := newTestLeader(t, leaderOpts{isr: []string{"L", "F1"}, durability: DurabilityReplicated})
	fetchOK(t, l, "F1", 8, t0)
	appendTo(t, l, m, 4) // log end 12, HW 8
	// F2 reaches the HW, not the log end: it never was caught up in this
	// epoch.
	fetchOK(t, l, "F2", 8, t0.Add(time.Second))
	wantProposal(t, l, []string{"L", "F1", "F2"})
	if got := progressOf(l, "F2").LastCaughtUp; !got.IsZero() {
		t.Fatalf("F2 last caught up %s before joining, want never", got.Sub(t0))
	}
	committed := t0.Add(2 * time.Second)
	commitISR(t, l, committed, "L", "F1", "F2")
	if got := progressOf(l, "F2").LastCaughtUp; !got.Equal(committed) {
		t.Fatalf("F2 last caught up %s after joining, want the commit time %s", got.Sub(t0), committed.Sub(t0))
	}
	fetchOK(t, l, "F1", 12, committed)
	l.Tick(committed.Add(leaderTickForTests))
	wantProposal(t, l, nil)
	// lag time max still applies from there.
	l.Tick(committed.Add(10*time.Second + time.Millisecond))
	wantProposal(t, l, []string{"L", "F1"})
}
