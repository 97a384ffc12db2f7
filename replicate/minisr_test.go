package replicate

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestSetMinInsyncReplicas raises min_insync_replicas above the ISR
// (acks=all refused, the pending write failed, the HW stopped) and lowers
// it again (writes pass, the HW follows the ISR).
func TestSetMinInsyncReplicas(t *testing.T) {
	l, m := newTestLeader(t, leaderOpts{isr: []string{"L", "F1"}, durability: DurabilityReplicated})
	fetchOK(t, l, "F1", 8, t0)
	wantHW(t, l, 8)
	last := appendTo(t, l, m, 1)
	if err := l.WaitAck(1, last, AcksAll, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 4} {
		if err := l.SetMinInsyncReplicas(n); !errors.Is(err, ErrInvalidInput) {
			t.Fatalf("SetMinInsyncReplicas(%d) = %v, want ErrInvalidInput", n, err)
		}
	}
	if err := l.SetMinInsyncReplicas(3); err != nil {
		t.Fatal(err)
	}
	if err := acksOf(l)[1]; !errors.Is(err, ErrNotEnoughReplicasAfterAppend) {
		t.Fatalf("pending acks=all write: %v, want ErrNotEnoughReplicasAfterAppend", err)
	}
	if err := l.CanAppend(AcksAll); !errors.Is(err, ErrNotEnoughReplicas) {
		t.Fatalf("CanAppend(acks=all) at min ISR 3 with ISR [L F1]: %v, want ErrNotEnoughReplicas", err)
	}
	if err := l.CanAppend(AcksLeader); err != nil {
		t.Fatalf("CanAppend(acks=1): %v", err)
	}
	fetchOK(t, l, "F1", m.logEnd(), t0)
	wantHW(t, l, 8) // below min ISR the HW stands still

	if err := l.SetMinInsyncReplicas(2); err != nil {
		t.Fatal(err)
	}
	wantHW(t, l, m.logEnd())
	if err := l.CanAppend(AcksAll); err != nil {
		t.Fatalf("CanAppend(acks=all) back at min ISR 2: %v", err)
	}
	wantProposal(t, l, nil)
}

// TestLoweredMinInsyncReplicasClearsTheELR: eligible leader replicas hold
// the committed log only while the HW stands still, so a lowered
// min_insync_replicas that lets it grow first writes the ISR again without
// them; until that commits, the HW waits.
func TestLoweredMinInsyncReplicasClearsTheELR(t *testing.T) {
	l, m := newTestLeader(t, leaderOpts{isr: []string{"L", "F1"}, durability: DurabilityReplicated, hw: 8})
	fetchOK(t, l, "F1", 8, t0)
	l.Ready()
	setDead(t, l, t0, "F1", "F2")
	rd := l.Ready()
	if rd.ISRProposal == nil || !slices.Equal(rd.ISRProposal.ISR, []string{"L"}) || len(rd.ISRProposal.ELR) != 1 {
		t.Fatalf("proposal %+v, want ISR [L] with F1 eligible", rd.ISRProposal)
	}
	if err := l.ISRCommitted(rd.ISRProposal.ISR, rd.ISRProposal.ELR, t0); err != nil {
		t.Fatal(err)
	}
	appendTo(t, l, m, 2)
	wantHW(t, l, 8)

	if err := l.SetMinInsyncReplicas(1); err != nil {
		t.Fatal(err)
	}
	rd = l.Ready()
	if rd.ISRProposal == nil || !slices.Equal(rd.ISRProposal.ISR, []string{"L"}) || len(rd.ISRProposal.ELR) != 0 {
		t.Fatalf("proposal %+v, want ISR [L] without an ELR", rd.ISRProposal)
	}
	wantHW(t, l, 8) // Consul still names F1 eligible
	if err := l.ISRCommitted(rd.ISRProposal.ISR, nil, t0); err != nil {
		t.Fatal(err)
	}
	wantHW(t, l, m.logEnd())
}

// TestELRClearedAfterAChangeInFlight: lowered while another ISR change is
// in flight (proposed with the ELR the old minimum gave), the clearing
// proposal follows that change's commit on the next tick.
func TestELRClearedAfterAChangeInFlight(t *testing.T) {
	l, m := newTestLeader(t, leaderOpts{isr: []string{"L", "F1"}, durability: DurabilityReplicated, hw: 8})
	fetchOK(t, l, "F1", 8, t0)
	l.Ready()
	setDead(t, l, t0, "F1", "F2")
	rd := l.Ready()
	if err := l.SetMinInsyncReplicas(1); err != nil {
		t.Fatal(err)
	}
	wantProposal(t, l, nil) // one change at a time
	if err := l.ISRCommitted(rd.ISRProposal.ISR, rd.ISRProposal.ELR, t0); err != nil {
		t.Fatal(err)
	}
	appendTo(t, l, m, 1)
	wantHW(t, l, 8)
	l.Tick(t0)
	wantProposal(t, l, []string{"L"})
}
