package replicate

import (
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

func commitISR(t *testing.T, l *Leader, now time.Time, isr ...string) {
	t.Helper()
	if err := l.ISRCommitted(isr, now); err != nil {
		t.Fatal(err)
	}
}

// leaderTickForTests is about the agent's leader tick.
const leaderTickForTests = 50 * time.Millisecond

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
