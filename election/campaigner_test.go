package election

import (
	"slices"
	"testing"
	"time"
)

func TestCampaignerDecisions(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	free := PartitionMeta{State: PartitionState{Leader: "b", Epoch: 3, ISR: []string{"a", "b"}}}
	held := free
	held.LeaderSession = "other"
	mine := free
	mine.LeaderSession = "s1"
	outside := free
	outside.State.ISR = []string{"b", "c"}
	eligible := outside
	eligible.Replicas = []string{"a", "b", "c", "d"}
	eligible.State.ELR = []EligibleReplica{{Node: "d", LogEndOffset: 5}, {Node: "a", LogEndOffset: 9}}
	eligibleSecond := eligible
	eligibleSecond.State.ELR = []EligibleReplica{{Node: "d", LogEndOffset: 9}, {Node: "a", LogEndOffset: 5}}
	handedToOther := free
	handedToOther.Successor = "c"
	handedToSelf := free
	handedToSelf.Successor = "a"

	tests := []struct {
		name           string
		pm             PartitionMeta
		unclean        bool
		uncleanDelay   time.Duration
		session        string
		want           decision
		setFreeSinceMs int // >0: the key was seen free this long before
		isrDead        bool
	}{
		{name: "held by another session waits", pm: held, session: "s1", want: decision{}},
		{name: "free and in isr attempts", pm: free, session: "s1", want: decision{attempt: true, kind: electClean}},
		{name: "held by own session re-takes", pm: mine, session: "s1", want: decision{attempt: true, kind: electClean}},
		{name: "no usable session waits", pm: free, session: "", want: decision{}},
		{name: "outside isr, unclean off, never", pm: outside, session: "s1", want: decision{}},
		{name: "outside isr, unclean on, waits the delay", pm: outside, session: "s1", unclean: true,
			uncleanDelay: 5 * time.Second, want: decision{wakeAt: t0.Add(5 * time.Second)}},
		{name: "outside isr, unclean on, after the delay", pm: outside, session: "s1", unclean: true,
			uncleanDelay: 5 * time.Second, setFreeSinceMs: 5000, want: decision{attempt: true, kind: electUnclean}},
		{name: "eligible, an isr member alive, waits for the isr's death", pm: eligible, session: "s1", setFreeSinceMs: 5000,
			want: decision{watchLiveness: true}},
		{name: "eligible, longest log, isr dead, at once", pm: eligible, session: "s1", isrDead: true,
			setFreeSinceMs: 1, want: decision{attempt: true, kind: electEligible}},
		{name: "eligible, shorter log, waits its turn", pm: eligibleSecond, session: "s1", isrDead: true,
			setFreeSinceMs: 1, want: decision{wakeAt: t0.Add(eligibleStagger - time.Millisecond), watchLiveness: true}},
		{name: "eligible before unclean", pm: eligible, session: "s1", isrDead: true, unclean: true,
			uncleanDelay: 5 * time.Second, setFreeSinceMs: 1, want: decision{attempt: true, kind: electEligible}},
		{name: "handed over to another: holds back", pm: handedToOther, session: "s1", want: decision{wakeAt: t0.Add(HandoverHold)}},
		{name: "handed over to another: holds back from when the key was seen free", pm: handedToOther, session: "s1",
			setFreeSinceMs: 300, want: decision{wakeAt: t0.Add(HandoverHold - 300*time.Millisecond)}},
		{name: "handed over to another: campaigns after the hold", pm: handedToOther, session: "s1",
			setFreeSinceMs: int(HandoverHold / time.Millisecond), want: decision{attempt: true, kind: electClean}},
		{name: "handed over to self: at once", pm: handedToSelf, session: "s1", want: decision{attempt: true, kind: electClean}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cp := newCampaigner("a", time.Second)
			if tt.setFreeSinceMs > 0 {
				cp.freeSince = t0.Add(-time.Duration(tt.setFreeSinceMs) * time.Millisecond)
			}
			if got := cp.next(t0, tt.pm, tt.unclean, tt.uncleanDelay, tt.session, tt.isrDead); got != tt.want {
				t.Fatalf("next = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestCampaignerRetriesAfterLockDelay(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	free := PartitionMeta{State: PartitionState{ISR: []string{"a"}}}
	cp := newCampaigner("a", time.Second)
	if d := cp.next(t0, free, false, 0, "s1", false); !d.attempt {
		t.Fatalf("first look at a free key: %+v, want an attempt", d)
	}
	// Refused (lock delay): the next try is when the delay ends, counted
	// from when the key was first seen free.
	cp.refused(t0.Add(time.Millisecond))
	d := cp.next(t0.Add(2*time.Millisecond), free, false, 0, "s1", false)
	if want := t0.Add(time.Second); d.attempt || !d.wakeAt.Equal(want) {
		t.Fatalf("after refusal: %+v, want wake at %v", d, want)
	}
	if d := cp.next(t0.Add(time.Second), free, false, 0, "s1", false); !d.attempt {
		t.Fatalf("at the end of the lock delay: %+v, want an attempt", d)
	}
	// Refused again: a short backoff, not another lock delay.
	cp.refused(t0.Add(time.Second))
	d = cp.next(t0.Add(time.Second), free, false, 0, "s1", false)
	if d.attempt || d.wakeAt.Sub(t0.Add(time.Second)) > 100*time.Millisecond {
		t.Fatalf("second refusal: %+v, want a short backoff", d)
	}
	// Someone else took it: the free time resets.
	held := free
	held.LeaderSession = "other"
	cp.next(t0.Add(2*time.Second), held, false, 0, "s1", false)
	if !cp.freeSince.IsZero() {
		t.Fatalf("freeSince = %v after the key was seen held", cp.freeSince)
	}
}

func TestBackoffStaysWithinJitteredBounds(t *testing.T) {
	bo := newBackoff(100*time.Millisecond, time.Second)
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		w *= time.Millisecond
		d := bo.delay()
		if d < w-w/5 || d > w+w/5 {
			t.Fatalf("delay %d = %v, want %v ± 20%%", i, d, w)
		}
	}
	bo.reset()
	if d := bo.delay(); d > 120*time.Millisecond {
		t.Fatalf("after reset delay = %v, want about 100ms", d)
	}
}

func TestSuccessorHint(t *testing.T) {
	st := PartitionState{Leader: "a", Epoch: 4, ISR: []string{"a", "b"}}
	for _, tc := range []struct {
		name    string
		session string
		value   string
		want    string
	}{
		{"released with a successor", "", `{"node":"a","epoch":4,"successor":"b"}`, "b"},
		{"released without one", "", `{"node":"a","epoch":4}`, ""},
		{"held: the hint is spent", "s1", `{"node":"a","epoch":4,"successor":"b"}`, ""},
		{"left by an earlier epoch", "", `{"node":"a","epoch":3,"successor":"b"}`, ""},
		{"left by another leader", "", `{"node":"c","epoch":4,"successor":"b"}`, ""},
		{"naming the leader itself", "", `{"node":"a","epoch":4,"successor":"a"}`, ""},
		{"emptied by a transaction's unlock", "", ``, ""},
		{"not JSON", "", `n1`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := successorHint(tc.session, []byte(tc.value), st); got != tc.want {
				t.Fatalf("successorHint(%q, %s) = %q, want %q", tc.session, tc.value, got, tc.want)
			}
		})
	}
}

// TestCleanElectionISR: a clean election takes the previous leader out of
// the ISR when Consul reports it dead, only when the rest still reaches
// min_insync_replicas and no eligible replicas are recorded (the leader's
// own change records them); never the winner, never anyone else.
func TestCleanElectionISR(t *testing.T) {
	elr := []EligibleReplica{{Node: "d", LogEndOffset: 5}}
	abc := []string{"a", "b", "c"}
	for _, tc := range []struct {
		name       string
		st         PartitionState
		leaderDead bool
		minISR     int
		want       []string
	}{
		{"leader alive", PartitionState{Leader: "a", ISR: abc}, false, 2, abc},
		{"leader dead", PartitionState{Leader: "a", ISR: abc}, true, 2, []string{"b", "c"}},
		{"leader dead, min ISR 3: the leader's change records eligible replicas", PartitionState{Leader: "a", ISR: abc}, true, 3, abc},
		{"eligible replicas recorded", PartitionState{Leader: "a", ISR: abc, ELR: elr}, true, 1, abc},
		{"the winner was the leader", PartitionState{Leader: "b", ISR: abc}, true, 1, abc},
		{"no leader before", PartitionState{ISR: abc}, true, 1, abc},
		{"dead leader not in the ISR", PartitionState{Leader: "d", ISR: abc}, true, 1, abc},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := slices.Clone(tc.st.ISR)
			got := tc.st.cleanElectionISR("b", tc.leaderDead, tc.minISR)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("cleanElectionISR = %v, want %v", got, tc.want)
			}
			if !slices.Equal(tc.st.ISR, before) {
				t.Fatalf("the state's ISR changed to %v", tc.st.ISR)
			}
		})
	}
}
