package replicate

import (
	"errors"
	"slices"
	"testing"
)

// TestReassignmentThroughTheLeader walks a move of L, F1, F2 to L, F1, N:
// the union's new replica is a follower outside the ISR at once, joins by
// the join rule, and the completion takes the ISR to exactly the target,
// after which the removed replica is a stranger.
func TestReassignmentThroughTheLeader(t *testing.T) {
	l, m := newTestLeader(t, leaderOpts{})
	fetchOK(t, l, "F1", 8, t0)
	fetchOK(t, l, "F2", 8, t0)
	wantHW(t, l, 8)
	if _, err := l.Fetch(FetchRequest{ReplicaID: "N", FetchOffset: 0, CurrentLeaderEpoch: 4, LastFetchedEpoch: UndefinedEpoch}, t0); !errors.Is(err, ErrNotReplica) {
		t.Fatalf("fetch by N before the move = %v, want ErrNotReplica", err)
	}
	if err := l.SetReplicas([]string{"L", "F1", "N", "F2"}); err != nil {
		t.Fatal(err)
	}
	if err := l.ProposeReassignment([]string{"L", "F1", "N"}, nil); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("completion before N is in the ISR = %v, want ErrInvalidInput", err)
	}
	// N fetches from the start: outside the ISR, it holds the HW back not
	// at all, and joins once it reaches both the HW and the epoch's start.
	fetchOK(t, l, "N", 0, t0)
	if l.HasReady() && l.Ready().ISRProposal != nil {
		t.Fatal("N proposed for the ISR at offset 0")
	}
	appendTo(t, l, m, 2)
	syncLeader(t, l, m)
	fetchOK(t, l, "F1", 10, t0)
	fetchOK(t, l, "F2", 10, t0)
	wantHW(t, l, 10)
	fetchOK(t, l, "N", 10, t0)
	rd := l.Ready()
	if rd.ISRProposal == nil || !slices.Equal(rd.ISRProposal.ISR, []string{"L", "F1", "N", "F2"}) || rd.ISRProposal.Replicas != nil {
		t.Fatalf("proposal after N caught up = %+v, want N added (and no replica change)", rd.ISRProposal)
	}
	if err := l.ProposeReassignment([]string{"L", "F1", "N"}, nil); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("completion with a change in flight = %v, want ErrInvalidInput", err)
	}
	if err := l.ISRCommitted(rd.ISRProposal.ISR, nil, t0); err != nil {
		t.Fatal(err)
	}
	if err := l.ProposeReassignment([]string{"L", "F1", "N"}, nil); err != nil {
		t.Fatal(err)
	}
	rd = l.Ready()
	if p := rd.ISRProposal; p == nil || !slices.Equal(p.ISR, []string{"L", "F1", "N"}) || len(p.ELR) != 0 || !slices.Equal(p.Replicas, []string{"L", "F1", "N"}) {
		t.Fatalf("completion proposal = %+v", rd.ISRProposal)
	}
	// Until the completion commits, F2 still counts for the HW.
	appendTo(t, l, m, 1)
	syncLeader(t, l, m)
	fetchOK(t, l, "F1", 11, t0)
	fetchOK(t, l, "N", 11, t0)
	wantHW(t, l, 10)
	if err := l.SetReplicas([]string{"L", "F1", "N"}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("dropping F2 before the completion commits = %v, want ErrInvalidInput", err)
	}
	if err := l.ISRCommitted([]string{"L", "F1", "N"}, nil, t0); err != nil {
		t.Fatal(err)
	}
	wantHW(t, l, 11)
	if err := l.SetReplicas([]string{"L", "F1", "N"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Fetch(FetchRequest{ReplicaID: "F2", FetchOffset: 11, CurrentLeaderEpoch: 4, LastFetchedEpoch: 4}, t0); !errors.Is(err, ErrNotReplica) {
		t.Fatalf("fetch by the removed F2 = %v, want ErrNotReplica", err)
	}
	if got := l.Replicas(); !slices.Equal(got, []string{"L", "F1", "N"}) {
		t.Fatalf("replicas %v", got)
	}
}

func TestSetReplicasAndProposeReassignmentRefuse(t *testing.T) {
	cases := []struct {
		name string
		// setup runs on a leader of L, F1, F2 (ISR all, min ISR 2)
		setup func(t *testing.T, l *Leader)
		call  func(l *Leader) error
	}{
		{"drop an ISR member", nil, func(l *Leader) error { return l.SetReplicas([]string{"L", "F1", "N"}) }},
		{"drop the leader", nil, func(l *Leader) error { return l.SetReplicas([]string{"F1", "F2"}) }},
		{"repeat a replica", nil, func(l *Leader) error { return l.SetReplicas([]string{"L", "F1", "F2", "F2"}) }},
		{"empty id", nil, func(l *Leader) error { return l.SetReplicas([]string{"L", "F1", "F2", ""}) }},
		{"drop a member of the change in flight", func(t *testing.T, l *Leader) {
			if err := l.SetReplicas([]string{"L", "F1", "F2", "N"}); err != nil {
				t.Fatal(err)
			}
			if err := l.ISRCommitted([]string{"L", "F1"}, nil, t0); err != nil {
				t.Fatal(err)
			}
			fetchOK(t, l, "N", 8, t0) // proposes adding N
		}, func(l *Leader) error { return l.SetReplicas([]string{"L", "F1", "F2"}) }},
		{"target outside the replicas", nil, func(l *Leader) error { return l.ProposeReassignment([]string{"L", "F1", "X"}, nil) }},
		{"target without the leader", nil, func(l *Leader) error { return l.ProposeReassignment([]string{"F1", "F2"}, nil) }},
		{"target below min ISR", nil, func(l *Leader) error { return l.ProposeReassignment([]string{"L"}, nil) }},
		{"target member outside the ISR", func(t *testing.T, l *Leader) {
			if err := l.ISRCommitted([]string{"L", "F1"}, nil, t0); err != nil {
				t.Fatal(err)
			}
		}, func(l *Leader) error { return l.ProposeReassignment([]string{"L", "F2"}, nil) }},
		// A cancelled move's way back to an original list smaller than
		// min ISR (raised while the move ran) would commit a replica set
		// the leader then refuses, and no leader could start on it.
		{"cancel back below min ISR", nil, func(l *Leader) error { return l.ProposeCancel([]string{"L"}) }},
		{"cancel back below a raised min ISR", func(t *testing.T, l *Leader) {
			if err := l.SetMinInsyncReplicas(3); err != nil {
				t.Fatal(err)
			}
		}, func(l *Leader) error { return l.ProposeCancel([]string{"L", "F1"}) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, _ := newTestLeader(t, leaderOpts{})
			if c.setup != nil {
				c.setup(t, l)
			}
			l.Ready()
			before, inFlight := l.Replicas(), l.InFlight()
			if err := c.call(l); !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("= %v, want ErrInvalidInput", err)
			}
			if got := l.Replicas(); !slices.Equal(got, before) {
				t.Fatalf("replicas changed to %v by a refused call", got)
			}
			if l.InFlight() != inFlight || l.Ready().ISRProposal != nil {
				t.Fatal("a refused call proposed a change")
			}
		})
	}
	l, _ := newTestLeader(t, leaderOpts{})
	l.Resign()
	if err := l.SetReplicas([]string{"L", "F1", "F2"}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("SetReplicas after resigning = %v", err)
	}
	if err := l.ProposeReassignment([]string{"L", "F1"}, nil); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("ProposeReassignment after resigning = %v", err)
	}
}

// TestCancelThroughTheLeader: the way back of a cancelled move of L, F1, F2
// to L, F1, N: with N in the ISR the change takes the ISR and the replica
// set back to L, F1, F2, and N is a stranger after it; with N still
// catching up and F2 out of the ISR it needs neither (the ISR left is L,
// F1); and it refuses a target without the leader or outside the replicas,
// and a change in flight.
func TestCancelThroughTheLeader(t *testing.T) {
	l, _ := newTestLeader(t, leaderOpts{})
	fetchOK(t, l, "F1", 8, t0)
	fetchOK(t, l, "F2", 8, t0)
	if err := l.SetReplicas([]string{"L", "F1", "N", "F2"}); err != nil {
		t.Fatal(err)
	}
	fetchOK(t, l, "N", 8, t0)
	rd := l.Ready()
	if rd.ISRProposal == nil || !slices.Contains(rd.ISRProposal.ISR, "N") {
		t.Fatalf("proposal after N caught up = %+v", rd.ISRProposal)
	}
	if err := l.ProposeCancel([]string{"L", "F1", "F2"}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("cancel with a change in flight = %v, want ErrInvalidInput", err)
	}
	if err := l.ISRCommitted(rd.ISRProposal.ISR, nil, t0); err != nil {
		t.Fatal(err)
	}
	for _, target := range [][]string{{"F1", "F2"}, {"L", "F1", "X"}} {
		if err := l.ProposeCancel(target); !errors.Is(err, ErrInvalidInput) {
			t.Errorf("cancel to %v = %v, want ErrInvalidInput", target, err)
		}
	}
	if err := l.ProposeCancel([]string{"L", "F1", "F2"}); err != nil {
		t.Fatal(err)
	}
	rd = l.Ready()
	if p := rd.ISRProposal; p == nil || !slices.Equal(p.ISR, []string{"L", "F1", "F2"}) || len(p.ELR) != 0 || !slices.Equal(p.Replicas, []string{"L", "F1", "F2"}) {
		t.Fatalf("cancel proposal = %+v", rd.ISRProposal)
	}
	if err := l.ISRCommitted(rd.ISRProposal.ISR, rd.ISRProposal.ELR, t0); err != nil {
		t.Fatal(err)
	}
	if err := l.SetReplicas([]string{"L", "F1", "F2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Fetch(FetchRequest{ReplicaID: "N", FetchOffset: 8, CurrentLeaderEpoch: 4, LastFetchedEpoch: 4}, t0); !errors.Is(err, ErrNotReplica) {
		t.Fatalf("fetch by the removed N = %v, want ErrNotReplica", err)
	}

	// N never caught up, and F2 is out of the ISR (dead): the way back
	// still completes, leaving the ISR it had less nothing of the target.
	l, m := newTestLeader(t, leaderOpts{})
	fetchOK(t, l, "F1", 8, t0)
	if err := l.SetReplicas([]string{"L", "F1", "N", "F2"}); err != nil {
		t.Fatal(err)
	}
	if err := l.ISRCommitted([]string{"L", "F1"}, nil, t0); err != nil {
		t.Fatal(err)
	}
	fetchOK(t, l, "N", 0, t0)
	appendTo(t, l, m, 1)
	l.Ready()
	if err := l.ProposeCancel([]string{"L", "F1", "F2"}); err != nil {
		t.Fatal(err)
	}
	if p := l.Ready().ISRProposal; p == nil || !slices.Equal(p.ISR, []string{"L", "F1"}) || !slices.Equal(p.Replicas, []string{"L", "F1", "F2"}) {
		t.Fatalf("cancel proposal without N and F2 in the ISR = %+v", p)
	}
}

// TestReassignmentLeavesADeadKeptReplicaOut: a move of L, F1, F2 to
// L, F1, N (replacing the dead F2) whose kept F1 dies once N is in the ISR
// completes with F1 outside the ISR, and only for a replica Consul says is
// dead: the move waited for F1 for ever.
func TestReassignmentLeavesADeadKeptReplicaOut(t *testing.T) {
	l, _ := newTestLeader(t, leaderOpts{})
	fetchOK(t, l, "F1", 8, t0)
	fetchOK(t, l, "F2", 8, t0)
	wantHW(t, l, 8)
	commit := func(want []string) {
		t.Helper()
		rd := l.Ready()
		if rd.ISRProposal == nil || !slices.Equal(rd.ISRProposal.ISR, want) {
			t.Fatalf("proposal %+v, want ISR %v", rd.ISRProposal, want)
		}
		if err := l.ISRCommitted(rd.ISRProposal.ISR, rd.ISRProposal.ELR, t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.SetDeadFollowers([]string{"F2"}, t0); err != nil {
		t.Fatal(err)
	}
	commit([]string{"L", "F1"})
	if err := l.SetReplicas([]string{"L", "F1", "N", "F2"}); err != nil {
		t.Fatal(err)
	}
	fetchOK(t, l, "N", 8, t0)
	commit([]string{"L", "F1", "N"})
	target := []string{"L", "F1", "N"}

	// F1 alive: no completion leaves it out.
	if err := l.ProposeReassignment(target, []string{"F1"}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("completion leaving out a live F1 = %v, want ErrInvalidInput", err)
	}
	if err := l.SetDeadFollowers([]string{"F2", "F1"}, t0); err != nil {
		t.Fatal(err)
	}
	commit([]string{"L", "N"})
	if err := l.ProposeReassignment(target, nil); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("completion with F1 outside the ISR, not left out = %v, want ErrInvalidInput", err)
	}
	for _, out := range [][]string{{"N"}, {"F2"}} {
		if err := l.ProposeReassignment(target, out); !errors.Is(err, ErrInvalidInput) {
			t.Fatalf("completion leaving out %v = %v, want ErrInvalidInput", out, err)
		}
	}
	if err := l.ProposeReassignment(target, []string{"F1"}); err != nil {
		t.Fatal(err)
	}
	p := l.Ready().ISRProposal
	if p == nil || !slices.Equal(p.ISR, []string{"L", "N"}) || len(p.ELR) != 0 || !slices.Equal(p.Replicas, target) {
		t.Fatalf("completion proposal = %+v, want ISR [L N], no ELR, replicas %v", p, target)
	}
}
