package replicate

import (
	"errors"
	"slices"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

// leaderLog is the log most leader tests use: epoch 1 at 0 (a, b, c),
// epoch 3 at 3 (d, e), then the leader's epoch 4 at 5 with three records:
// log end 8.
func leaderLog() *memLog {
	m := logOf(recordsOf(1, "a", "b", "c"), recordsOf(3, "d", "e"))
	m.assignEpoch(4)
	if err := m.append(recordsOf(4, "f", "g", "h")...); err != nil {
		panic(err)
	}
	m.sync()
	return m
}

// leaderOpts changes a test leader's config.
type leaderOpts struct {
	replicas   []string
	isr        []string
	elr        []EligibleReplica
	minISR     int
	durability Durability
	hw         int64
}

// newTestLeader returns leader "L" of epoch 4 over leaderLog, replicas L, F1,
// F2 (all in the ISR) and min ISR 2 unless opts say otherwise.
func newTestLeader(t *testing.T, opts leaderOpts) (*Leader, *memLog) {
	t.Helper()
	if opts.replicas == nil {
		opts.replicas = []string{"L", "F1", "F2"}
	}
	if opts.isr == nil {
		opts.isr = opts.replicas
	}
	if opts.minISR == 0 {
		opts.minISR = 2
	}
	m := leaderLog()
	l, err := NewLeader(LeaderConfig{
		Self:              "L",
		Epoch:             4,
		EpochStartOffset:  5,
		Replicas:          opts.replicas,
		ISR:               opts.isr,
		ELR:               opts.elr,
		MinInsyncReplicas: opts.minISR,
		LagTimeMax:        10 * time.Second,
		Durability:        opts.durability,
		LogEndOffset:      m.logEnd(),
		SyncedEndOffset:   m.synced,
		HighWatermark:     opts.hw,
		EpochCache:        m,
	}, t0)
	if err != nil {
		t.Fatal(err)
	}
	return l, m
}

func fetchOK(t *testing.T, l *Leader, replica string, offset int64, now time.Time) FetchResult {
	t.Helper()
	res, err := l.Fetch(FetchRequest{ReplicaID: replica, FetchOffset: offset, CurrentLeaderEpoch: l.Epoch(), LastFetchedEpoch: l.Epoch()}, now)
	if err != nil {
		t.Fatalf("fetch by %s at %d: %v", replica, offset, err)
	}
	if res.Diverging != nil {
		t.Fatalf("fetch by %s at %d diverges: %+v", replica, offset, *res.Diverging)
	}
	return res
}

// appendTo appends n records to the leader's log at t0, which only a
// parked follower's lag depends on (appendAt).
func appendTo(t *testing.T, l *Leader, m *memLog, n int) int64 {
	t.Helper()
	return appendAt(t, l, m, n, t0)
}

// appendAt appends n records to the leader's log at now.
func appendAt(t *testing.T, l *Leader, m *memLog, n int, now time.Time) int64 {
	t.Helper()
	for range n {
		if err := m.append(memRecord{Epoch: l.Epoch(), Value: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Appended(m.logEnd()-1, now); err != nil {
		t.Fatal(err)
	}
	return m.logEnd() - 1
}

func syncLeader(t *testing.T, l *Leader, m *memLog) {
	t.Helper()
	m.sync()
	if err := l.Synced(m.logEnd() - 1); err != nil {
		t.Fatal(err)
	}
}

func progressOf(l *Leader, id string) ReplicaStatus {
	for _, s := range l.Progress() {
		if s.ID == id {
			return s
		}
	}
	return ReplicaStatus{}
}

func wantHW(t *testing.T, l *Leader, want int64) {
	t.Helper()
	if got := l.HighWatermark(); got != want {
		t.Fatalf("high watermark %d, want %d", got, want)
	}
}

func TestNewLeaderRejectsBadConfig(t *testing.T) {
	valid := func() LeaderConfig {
		m := leaderLog()
		return LeaderConfig{
			Self: "L", Epoch: 4, EpochStartOffset: 5,
			Replicas: []string{"L", "F1", "F2"}, ISR: []string{"L", "F1"},
			MinInsyncReplicas: 2, LagTimeMax: time.Second, Durability: DurabilityFsync,
			LogEndOffset: 8, SyncedEndOffset: 8, HighWatermark: 3, EpochCache: m,
		}
	}
	if _, err := NewLeader(valid(), t0); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	tests := []struct {
		name   string
		change func(*LeaderConfig)
		want   error
	}{
		{"empty self", func(c *LeaderConfig) { c.Self = "" }, ErrInvalidConfig},
		{"negative epoch", func(c *LeaderConfig) { c.Epoch = -1 }, ErrInvalidConfig},
		{"self not a replica", func(c *LeaderConfig) { c.Self = "X"; c.ISR = append(c.ISR, "X") }, ErrInvalidConfig},
		{"self not in ISR", func(c *LeaderConfig) { c.ISR = []string{"F1", "F2"} }, ErrInvalidConfig},
		{"self not in ISR but for non-replicas", func(c *LeaderConfig) { c.ISR = []string{"F1", "X"} }, ErrInvalidConfig},
		{"eligible replica in the ISR", func(c *LeaderConfig) { c.ELR = []EligibleReplica{{ID: "F1"}} }, ErrInvalidConfig},
		{"replica twice", func(c *LeaderConfig) { c.Replicas = []string{"L", "F1", "F1"} }, ErrInvalidConfig},
		{"ISR member twice", func(c *LeaderConfig) { c.ISR = []string{"L", "L"} }, ErrInvalidConfig},
		{"empty replica id", func(c *LeaderConfig) { c.Replicas = []string{"L", ""} }, ErrInvalidConfig},
		{"min ISR zero", func(c *LeaderConfig) { c.MinInsyncReplicas = 0 }, ErrInvalidConfig},
		{"min ISR above replicas", func(c *LeaderConfig) { c.MinInsyncReplicas = 4 }, ErrInvalidConfig},
		{"no lag time", func(c *LeaderConfig) { c.LagTimeMax = 0 }, ErrInvalidConfig},
		{"unknown durability", func(c *LeaderConfig) { c.Durability = 7 }, ErrInvalidConfig},
		{"negative log end", func(c *LeaderConfig) { c.LogEndOffset = -1 }, ErrInvalidConfig},
		{"synced beyond log end", func(c *LeaderConfig) { c.SyncedEndOffset = 9 }, ErrInvalidConfig},
		{"HW beyond log end", func(c *LeaderConfig) { c.HighWatermark = 9 }, ErrInvalidConfig},
		{"epoch start beyond log end", func(c *LeaderConfig) { c.EpochStartOffset = 9 }, ErrInvalidConfig},
		{"no epoch cache", func(c *LeaderConfig) { c.EpochCache = nil }, ErrInvalidConfig},
		{"epoch not assigned in the cache", func(c *LeaderConfig) { c.Epoch = 5 }, ErrInconsistentLog},
		{"epoch start not the cache's", func(c *LeaderConfig) { c.EpochStartOffset = 4 }, ErrInconsistentLog},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid()
			tt.change(&cfg)
			if _, err := NewLeader(cfg, t0); !errors.Is(err, tt.want) {
				t.Fatalf("NewLeader = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestFetchValidation(t *testing.T) {
	// The leader's log: epoch 1 [0, 3), epoch 3 [3, 5), epoch 4 [5, 8).
	tests := []struct {
		name          string
		req           FetchRequest
		wantErr       error
		wantDiverging *EpochEndOffset
	}{
		{"stale epoch", FetchRequest{"F1", 8, 3, 3, false, false}, ErrFencedLeaderEpoch, nil},
		{"newer epoch", FetchRequest{"F1", 8, 5, 4, false, false}, ErrUnknownLeaderEpoch, nil},
		{"stranger", FetchRequest{"X", 8, 4, 4, false, false}, ErrNotReplica, nil},
		{"the leader itself", FetchRequest{"L", 8, 4, 4, false, false}, ErrNotReplica, nil},
		{"negative offset", FetchRequest{"F1", -1, 4, UndefinedEpoch, false, false}, ErrInvalidRequest, nil},
		{"last fetched epoch from the future", FetchRequest{"F1", 8, 4, 5, false, false}, ErrInvalidRequest, nil},
		{"last fetched epoch below undefined", FetchRequest{"F1", 0, 4, -2, false, false}, ErrInvalidRequest, nil},
		{"empty follower", FetchRequest{"F1", 0, 4, UndefinedEpoch, false, false}, nil, nil},
		{"empty follower beyond the log end", FetchRequest{"F1", 9, 4, UndefinedEpoch, false, false}, ErrOffsetOutOfRange, nil},
		{"inside epoch 1", FetchRequest{"F1", 2, 4, 1, false, false}, nil, nil},
		{"at the end of epoch 1", FetchRequest{"F1", 3, 4, 1, false, false}, nil, nil},
		{"past the end of epoch 1", FetchRequest{"F1", 4, 4, 1, false, false}, nil, &EpochEndOffset{1, 3}},
		{"epoch 2 the leader never had", FetchRequest{"F1", 3, 4, 2, false, false}, nil, &EpochEndOffset{1, 3}},
		{"at the end of epoch 3", FetchRequest{"F1", 5, 4, 3, false, false}, nil, nil},
		{"past the end of epoch 3", FetchRequest{"F1", 6, 4, 3, false, false}, nil, &EpochEndOffset{3, 5}},
		{"caught up in epoch 4", FetchRequest{"F1", 8, 4, 4, false, false}, nil, nil},
		{"ahead in epoch 4", FetchRequest{"F1", 9, 4, 4, false, false}, nil, &EpochEndOffset{4, 8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _ := newTestLeader(t, leaderOpts{})
			res, err := l.Fetch(tt.req, t0)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Fetch(%+v) error %v, want %v", tt.req, err, tt.wantErr)
			}
			recorded := progressOf(l, "F1").LogEndOffset
			switch {
			case err != nil || tt.wantDiverging != nil:
				if recorded != unknownOffset {
					t.Errorf("refused or diverging fetch recorded log end %d", recorded)
				}
			case recorded != tt.req.FetchOffset:
				t.Errorf("recorded log end %d, want the fetch offset %d", recorded, tt.req.FetchOffset)
			}
			if err != nil {
				return
			}
			if (res.Diverging == nil) != (tt.wantDiverging == nil) || (res.Diverging != nil && *res.Diverging != *tt.wantDiverging) {
				t.Fatalf("diverging %v, want %v", res.Diverging, tt.wantDiverging)
			}
			if res.LeaderEpoch != 4 || res.LogEndOffset != 8 {
				t.Errorf("result %+v, want epoch 4 and log end 8", res)
			}
		})
	}
}

func TestOffsetForEpoch(t *testing.T) {
	tests := []struct {
		name    string
		req     EpochRequest
		want    EpochEndOffset
		wantErr error
	}{
		{"below every epoch", EpochRequest{"F1", 4, 0}, EpochEndOffset{0, 0}, nil},
		{"epoch 1", EpochRequest{"F1", 4, 1}, EpochEndOffset{1, 3}, nil},
		{"unknown epoch 2", EpochRequest{"F1", 4, 2}, EpochEndOffset{1, 3}, nil},
		{"epoch 3", EpochRequest{"F1", 4, 3}, EpochEndOffset{3, 5}, nil},
		{"the leader's epoch ends at its log end", EpochRequest{"F1", 4, 4}, EpochEndOffset{4, 8}, nil},
		{"future epoch", EpochRequest{"F1", 4, 5}, EpochEndOffset{}, ErrInvalidRequest},
		{"negative epoch", EpochRequest{"F1", 4, -1}, EpochEndOffset{}, ErrInvalidRequest},
		{"stale leader epoch", EpochRequest{"F1", 3, 1}, EpochEndOffset{}, ErrFencedLeaderEpoch},
		{"newer leader epoch", EpochRequest{"F1", 5, 1}, EpochEndOffset{}, ErrUnknownLeaderEpoch},
		{"stranger", EpochRequest{"X", 4, 1}, EpochEndOffset{}, ErrNotReplica},
	}
	l, _ := newTestLeader(t, leaderOpts{})
	for _, tt := range tests {
		got, err := l.OffsetForEpoch(tt.req)
		if !errors.Is(err, tt.wantErr) || got != tt.want {
			t.Errorf("%s: OffsetForEpoch(%+v) = %+v, %v; want %+v, %v", tt.name, tt.req, got, err, tt.want, tt.wantErr)
		}
	}
}

// lyingCache answers every epoch with a fixed end offset, as a corrupt
// epoch cache might.
type lyingCache struct {
	EpochCache
	end int64
}

func (c lyingCache) EndOffsetForEpoch(epoch int32) (int32, int64, bool) {
	found, _, ok := c.EpochCache.EndOffsetForEpoch(epoch)
	return found, c.end, ok
}

func TestLeaderDetectsInconsistentEpochCache(t *testing.T) {
	m := leaderLog()
	l, err := NewLeader(LeaderConfig{
		Self: "L", Epoch: 4, EpochStartOffset: 5, Replicas: []string{"L", "F1"}, ISR: []string{"L", "F1"},
		MinInsyncReplicas: 1, LagTimeMax: time.Second, LogEndOffset: 8, SyncedEndOffset: 8,
		EpochCache: m,
	}, t0)
	if err != nil {
		t.Fatal(err)
	}
	l.cache = lyingCache{m, 20} // epoch 1 "ends" beyond the log end
	if _, err := l.Fetch(FetchRequest{"F1", 3, 4, 1, false, false}, t0); !errors.Is(err, ErrInconsistentLog) {
		t.Errorf("Fetch over a corrupt cache: %v, want ErrInconsistentLog", err)
	}
	if _, err := l.OffsetForEpoch(EpochRequest{"F1", 4, 1}); !errors.Is(err, ErrInconsistentLog) {
		t.Errorf("OffsetForEpoch over a corrupt cache: %v, want ErrInconsistentLog", err)
	}
}

func TestHighWatermarkIsMinimumOverISR(t *testing.T) {
	tests := []struct {
		durability Durability
		// HW after each step: F1 at 12, F2 at 10, leader fsyncs, F2 at 12.
		want [4]int64
	}{
		{DurabilityFsync, [4]int64{0, 8, 10, 12}},
		{DurabilityReplicated, [4]int64{0, 10, 10, 12}},
	}
	for _, tt := range tests {
		t.Run(tt.durability.String(), func(t *testing.T) {
			l, m := newTestLeader(t, leaderOpts{durability: tt.durability})
			appendTo(t, l, m, 4) // log end 12, fsynced to 8
			fetchOK(t, l, "F1", 12, t0)
			wantHW(t, l, tt.want[0]) // F2 has not fetched in this epoch
			fetchOK(t, l, "F2", 10, t0)
			wantHW(t, l, tt.want[1])
			syncLeader(t, l, m)
			wantHW(t, l, tt.want[2])
			fetchOK(t, l, "F2", 12, t0)
			wantHW(t, l, tt.want[3])
			if rd := l.Ready(); !rd.HighWatermarkChanged || rd.HighWatermark != 12 {
				t.Errorf("Ready HW %d (changed %t), want 12", rd.HighWatermark, rd.HighWatermarkChanged)
			}
		})
	}
}

func TestHighWatermarkNeverDecreases(t *testing.T) {
	l, m := newTestLeader(t, leaderOpts{durability: DurabilityReplicated})
	fetchOK(t, l, "F1", 8, t0)
	fetchOK(t, l, "F2", 8, t0)
	wantHW(t, l, 8)
	l.Ready()
	// F2 restarted with less (a lost disk, or truncation of uncommitted
	// records after an unclean election): the HW must not follow it down.
	fetchOK(t, l, "F2", 3, t0)
	appendTo(t, l, m, 2)
	fetchOK(t, l, "F1", 10, t0)
	wantHW(t, l, 8)
	if rd := l.Ready(); rd.HighWatermarkChanged {
		t.Errorf("Ready reports a HW change to %d", rd.HighWatermark)
	}
	fetchOK(t, l, "F2", 10, t0)
	wantHW(t, l, 10)
}

func TestHighWatermarkFrozenBelowMinISR(t *testing.T) {
	l, m := newTestLeader(t, leaderOpts{
		replicas: []string{"L", "F1"}, isr: []string{"L"}, minISR: 2, durability: DurabilityReplicated, hw: 5,
	})
	appendTo(t, l, m, 2)
	wantHW(t, l, 5) // alone, the leader would have 10 replicated to "all" the ISR
	fetchOK(t, l, "F1", 10, t0)
	rd := l.Ready()
	if rd.ISRProposal == nil || !slices.Equal(rd.ISRProposal.ISR, []string{"L", "F1"}) {
		t.Fatalf("proposal %+v, want ISR [L F1]", rd.ISRProposal)
	}
	wantHW(t, l, 5) // the maximal ISR has 2 members, the committed ISR 1
	if err := l.ISRCommitted(rd.ISRProposal.ISR, rd.ISRProposal.ELR, t0); err != nil {
		t.Fatal(err)
	}
	wantHW(t, l, 10)

	// Shrinking below the minimum freezes the HW again, though the maximal
	// ISR has everything.
	if err := l.ISRCommitted([]string{"L"}, nil, t0); err != nil {
		t.Fatal(err)
	}
	appendTo(t, l, m, 2)
	fetchOK(t, l, "F1", 12, t0)
	wantHW(t, l, 10)
}

func TestISRShrinkAfterLagTimeMax(t *testing.T) {
	l, m := newTestLeader(t, leaderOpts{durability: DurabilityReplicated}) // lag time max 10s
	fetchOK(t, l, "F1", 8, t0.Add(time.Second))
	fetchOK(t, l, "F2", 5, t0.Add(time.Second))
	wantHW(t, l, 5)
	l.Ready()

	l.Tick(t0.Add(10 * time.Second)) // F2 was last caught up at t0 (leadership start)
	if rd := l.Ready(); rd.ISRProposal != nil {
		t.Fatalf("proposal at exactly lag time max: %+v", rd.ISRProposal)
	}
	l.Tick(t0.Add(10*time.Second + time.Millisecond))
	rd := l.Ready()
	if rd.ISRProposal == nil || rd.ISRProposal.Epoch != 4 || !slices.Equal(rd.ISRProposal.ISR, []string{"L", "F1"}) {
		t.Fatalf("proposal %+v, want [L F1] at epoch 4", rd.ISRProposal)
	}

	// Until Consul has the smaller ISR, the HW still waits for F2.
	appendTo(t, l, m, 2)
	fetchOK(t, l, "F1", 10, t0.Add(11*time.Second))
	wantHW(t, l, 5)
	if err := l.ISRCommitted(rd.ISRProposal.ISR, rd.ISRProposal.ELR, t0.Add(11*time.Second)); err != nil {
		t.Fatal(err)
	}
	wantHW(t, l, 10)
	if !slices.Equal(l.ISR(), []string{"L", "F1"}) {
		t.Errorf("ISR %v after commit", l.ISR())
	}

	// A follower at the leader's log end stays in sync however long it is
	// idle.
	l.Tick(t0.Add(time.Hour))
	if rd := l.Ready(); rd.ISRProposal != nil {
		t.Errorf("idle caught-up follower proposed for removal: %+v", rd.ISRProposal)
	}
}

func TestLastCaughtUpRule(t *testing.T) {
	l, m := newTestLeader(t, leaderOpts{durability: DurabilityReplicated})
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	steps := []struct {
		appendRecords int
		fetchOffset   int64
		now           time.Time
		want          time.Time
	}{
		// At the leader's log end: caught up now.
		{0, 8, at(1), at(1)},
		// Behind the log end (12), but at where it was at the previous
		// fetch (8): caught up as of that fetch.
		{4, 10, at(2), at(1)},
		{4, 12, at(3), at(2)},
		// Behind where the log ended at the previous fetch (16): no change.
		{4, 14, at(4), at(2)},
		// Back at the log end.
		{0, 20, at(5), at(5)},
	}
	for i, s := range steps {
		if s.appendRecords > 0 {
			appendTo(t, l, m, s.appendRecords)
		}
		fetchOK(t, l, "F1", s.fetchOffset, s.now)
		if got := progressOf(l, "F1").LastCaughtUp; !got.Equal(s.want) {
			t.Fatalf("step %d (fetch %d at %s): last caught up %s, want %s", i, s.fetchOffset, s.now.Sub(t0), got.Sub(t0), s.want.Sub(t0))
		}
	}
}

func TestISRExpansion(t *testing.T) {
	// The leader's epoch 4 starts at 5; its log ends at 8 (12 after F1's
	// step appends). F1 is in the ISR, F2 is not.
	tests := []struct {
		name     string
		hw       int64 // checkpointed HW the leader starts with
		f1Fetch  int64
		f2Fetch  int64
		wantHW   int64
		proposed bool
	}{
		{"below the HW and the epoch start", 0, 8, 4, 8, false},
		{"at the epoch start, below the HW", 0, 8, 6, 8, false},
		{"at the HW", 0, 8, 8, 8, true},
		{"at the HW, below the epoch start", 3, 3, 4, 3, false},
		{"at the HW and the epoch start", 3, 3, 5, 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _ := newTestLeader(t, leaderOpts{isr: []string{"L", "F1"}, durability: DurabilityReplicated, hw: tt.hw})
			fetchOK(t, l, "F1", tt.f1Fetch, t0)
			wantHW(t, l, tt.wantHW)
			fetchOK(t, l, "F2", tt.f2Fetch, t0)
			rd := l.Ready()
			if tt.proposed != (rd.ISRProposal != nil) {
				t.Fatalf("proposal %+v, want one: %t", rd.ISRProposal, tt.proposed)
			}
			if tt.proposed && !slices.Equal(rd.ISRProposal.ISR, []string{"L", "F1", "F2"}) {
				t.Fatalf("proposal %v, want [L F1 F2]", rd.ISRProposal.ISR)
			}
		})
	}

	t.Run("joins the HW at once", func(t *testing.T) {
		l, m := newTestLeader(t, leaderOpts{isr: []string{"L", "F1"}, durability: DurabilityReplicated})
		fetchOK(t, l, "F1", 8, t0)
		fetchOK(t, l, "F2", 8, t0) // proposed
		appendTo(t, l, m, 4)
		fetchOK(t, l, "F1", 12, t0)
		wantHW(t, l, 8) // waits for F2 before Consul has it
		fetchOK(t, l, "F2", 12, t0)
		wantHW(t, l, 12)
		// A failed proposal drops F2 from the maximal ISR.
		if err := l.ISRProposalFailed(); err != nil {
			t.Fatal(err)
		}
		appendTo(t, l, m, 4)
		fetchOK(t, l, "F1", 16, t0)
		wantHW(t, l, 16)
	})
}

func TestOneISRProposalInFlight(t *testing.T) {
	l, m := newTestLeader(t, leaderOpts{
		replicas: []string{"L", "F1", "F2", "F3"}, isr: []string{"L", "F1", "F2"}, durability: DurabilityReplicated,
	})
	later := t0.Add(time.Minute)
	fetchOK(t, l, "F1", 8, later)
	l.Tick(later) // F2 never fetched
	rd := l.Ready()
	if rd.ISRProposal == nil || !slices.Equal(rd.ISRProposal.ISR, []string{"L", "F1"}) {
		t.Fatalf("proposal %+v, want [L F1]", rd.ISRProposal)
	}
	fetchOK(t, l, "F3", 8, later) // caught up, but a proposal is in flight
	l.Tick(later)
	if rd := l.Ready(); rd.ISRProposal != nil {
		t.Fatalf("second proposal in flight: %+v", rd.ISRProposal)
	}
	if err := l.ISRProposalFailed(); err != nil {
		t.Fatal(err)
	}
	if err := l.ISRProposalFailed(); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("second ISRProposalFailed: %v, want ErrInvalidInput", err)
	}
	l.Tick(later)
	if rd := l.Ready(); rd.ISRProposal == nil || !slices.Equal(rd.ISRProposal.ISR, []string{"L", "F1"}) {
		t.Fatalf("after the failure: proposal %+v, want [L F1] again", rd.ISRProposal)
	}
	if err := l.ISRCommitted([]string{"F1", "L"}, nil, later); err != nil {
		t.Fatal(err)
	}
	appendTo(t, l, m, 1)
	fetchOK(t, l, "F3", 8, later) // F3 at the HW (8) and the epoch start (5)
	if rd := l.Ready(); rd.ISRProposal == nil || !slices.Equal(rd.ISRProposal.ISR, []string{"L", "F1", "F3"}) {
		t.Fatalf("proposal %+v, want [L F1 F3]", rd.ISRProposal)
	}
}

func TestISRCommittedRejectsBadISR(t *testing.T) {
	l, _ := newTestLeader(t, leaderOpts{})
	for _, isr := range [][]string{{"F1", "F2"}, {"F1", "X"}, {"L", "L"}} {
		if err := l.ISRCommitted(isr, nil, t0); !errors.Is(err, ErrInvalidInput) {
			t.Errorf("ISRCommitted(%v) = %v, want ErrInvalidInput", isr, err)
		}
	}
}

// TestISRCommittedRefusalChangesNothing: a refused ISRCommitted (an
// eligible replica that is in the ISR) changes nothing, as
// every refused input must (doc.go, "The Ready contract"). Before, the
// followers the refused ISR would add were already marked caught up at
// now when the eligible replicas were checked.
func TestISRCommittedRefusalChangesNothing(t *testing.T) {
	tests := []struct {
		name string
		elr  []EligibleReplica
	}{
		{"an eligible replica in the ISR", []EligibleReplica{{ID: "F1", LogEndOffset: 8}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _ := newTestLeader(t, leaderOpts{isr: []string{"L", "F1"}})
			before := l.Progress()
			if err := l.ISRCommitted([]string{"L", "F1", "F2"}, tt.elr, t0.Add(time.Hour)); !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("ISRCommitted with ELR %v = %v, want ErrInvalidInput", tt.elr, err)
			}
			if after := l.Progress(); !slices.Equal(after, before) {
				t.Errorf("a refused ISRCommitted changed the progress:\nbefore %+v\nafter  %+v", before, after)
			}
			if got := l.ISR(); !slices.Equal(got, []string{"L", "F1"}) {
				t.Errorf("ISR %v after a refused ISRCommitted", got)
			}
		})
	}
}

func TestCanAppend(t *testing.T) {
	tests := []struct {
		name   string
		isr    []string
		acks   Acks
		resign bool
		want   error
	}{
		{"acks=all at min ISR", []string{"L", "F1"}, AcksAll, false, nil},
		{"acks=all below min ISR", []string{"L"}, AcksAll, false, ErrNotEnoughReplicas},
		{"acks=1 below min ISR", []string{"L"}, AcksLeader, false, nil},
		{"resigned", []string{"L", "F1", "F2"}, AcksLeader, true, ErrNotLeader},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _ := newTestLeader(t, leaderOpts{isr: tt.isr})
			if tt.resign {
				l.Resign()
			}
			if err := l.CanAppend(tt.acks); !errors.Is(err, tt.want) {
				t.Fatalf("CanAppend(%s) = %v, want %v", tt.acks, err, tt.want)
			}
		})
	}
}

// acksOf drains Ready and returns the ack outcomes by id.
func acksOf(l *Leader) map[AckID]error {
	out := make(map[AckID]error)
	for _, a := range l.Ready().Acks {
		out[a.ID] = a.Err
	}
	return out
}

func TestAcksWaitForTheirCondition(t *testing.T) {
	tests := []struct {
		durability Durability
		// when the acks=1 write finishes: right after the append, or after
		// the leader's fsync
		leaderAckAfterAppend bool
	}{
		{DurabilityFsync, false},
		{DurabilityReplicated, true},
	}
	for _, tt := range tests {
		t.Run(tt.durability.String(), func(t *testing.T) {
			l, m := newTestLeader(t, leaderOpts{durability: tt.durability})
			last := appendTo(t, l, m, 2)
			if err := l.WaitAck(1, last, AcksAll, time.Time{}); err != nil {
				t.Fatal(err)
			}
			if err := l.WaitAck(2, last, AcksLeader, time.Time{}); err != nil {
				t.Fatal(err)
			}
			got := acksOf(l)
			if _, done := got[2]; done != tt.leaderAckAfterAppend {
				t.Fatalf("acks=1 done after append: %t, want %t", done, tt.leaderAckAfterAppend)
			}
			syncLeader(t, l, m)
			for id, err := range acksOf(l) {
				got[id] = err
			}
			if err, done := got[2]; !done || err != nil {
				t.Fatalf("acks=1 after fsync: done %t, err %v", done, err)
			}
			if _, done := got[1]; done {
				t.Fatal("acks=all done before any follower fetched")
			}
			fetchOK(t, l, "F1", last+1, t0)
			fetchOK(t, l, "F2", last, t0)
			if _, done := acksOf(l)[1]; done {
				t.Fatal("acks=all done with the HW at its last offset")
			}
			fetchOK(t, l, "F2", last+1, t0)
			if err, done := acksOf(l)[1]; !done || err != nil {
				t.Fatalf("acks=all once the HW passed it: done %t, err %v", done, err)
			}
		})
	}
}

func TestNotEnoughReplicasAfterAppend(t *testing.T) {
	l, m := newTestLeader(t, leaderOpts{isr: []string{"L", "F1"}, minISR: 2, durability: DurabilityReplicated})
	fetchOK(t, l, "F1", 8, t0)
	if err := l.CanAppend(AcksAll); err != nil {
		t.Fatal(err)
	}
	last := appendTo(t, l, m, 1)
	if err := l.WaitAck(1, last, AcksAll, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitAck(2, last, AcksLeader, time.Time{}); err != nil {
		t.Fatal(err)
	}
	acksOf(l)
	l.Tick(t0.Add(time.Minute)) // F1 stopped fetching
	rd := l.Ready()
	if rd.ISRProposal == nil {
		t.Fatal("no shrink proposal")
	}
	if err := l.ISRCommitted(rd.ISRProposal.ISR, rd.ISRProposal.ELR, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := acksOf(l)[1]; !errors.Is(err, ErrNotEnoughReplicasAfterAppend) {
		t.Fatalf("acks=all outcome %v, want ErrNotEnoughReplicasAfterAppend", err)
	}
	// Registered while the ISR is already too small: answered at once.
	last = appendTo(t, l, m, 1)
	if err := l.WaitAck(3, last, AcksAll, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := acksOf(l)[3]; !errors.Is(err, ErrNotEnoughReplicasAfterAppend) {
		t.Fatalf("acks=all outcome %v, want ErrNotEnoughReplicasAfterAppend", err)
	}
	if err := l.CanAppend(AcksAll); !errors.Is(err, ErrNotEnoughReplicas) {
		t.Fatalf("CanAppend after the shrink: %v, want ErrNotEnoughReplicas", err)
	}
}

func TestResignFailsPendingAcks(t *testing.T) {
	l, m := newTestLeader(t, leaderOpts{})
	last := appendTo(t, l, m, 3)
	for id, acks := range map[AckID]Acks{1: AcksAll, 2: AcksAll, 3: AcksLeader} {
		if err := l.WaitAck(id, last, acks, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	fetchOK(t, l, "F1", 9, t0)
	l.Tick(t0.Add(time.Minute))
	l.Ready() // a shrink proposal, never answered
	l.Resign()
	rd := l.Ready()
	if rd.ISRProposal != nil {
		t.Errorf("proposal after resigning: %+v", rd.ISRProposal)
	}
	if len(rd.Acks) != 3 {
		t.Fatalf("%d ack outcomes after resigning, want 3", len(rd.Acks))
	}
	for _, a := range rd.Acks {
		if !errors.Is(a.Err, ErrNotLeader) {
			t.Errorf("ack %d outcome %v, want ErrNotLeader", a.ID, a.Err)
		}
	}
	inputs := map[string]error{
		"CanAppend":         l.CanAppend(AcksLeader),
		"Appended":          l.Appended(last+1, t0),
		"Synced":            l.Synced(last),
		"WaitAck":           l.WaitAck(4, last, AcksAll, time.Time{}),
		"ISRCommitted":      l.ISRCommitted([]string{"L"}, nil, t0),
		"SetDeadFollowers":  l.SetDeadFollowers([]string{"F1"}, t0),
		"ISRProposalFailed": l.ISRProposalFailed(),
	}
	_, inputs["Fetch"] = l.Fetch(FetchRequest{"F1", 9, 4, 4, false, false}, t0)
	_, inputs["OffsetForEpoch"] = l.OffsetForEpoch(EpochRequest{"F1", 4, 4})
	for name, err := range inputs {
		if !errors.Is(err, ErrNotLeader) {
			t.Errorf("%s after resigning: %v, want ErrNotLeader", name, err)
		}
	}
	l.Tick(t0.Add(time.Hour))
	if l.HasReady() {
		t.Errorf("output after resigning: %+v", l.Ready())
	}
}

func TestAckTimeout(t *testing.T) {
	l, m := newTestLeader(t, leaderOpts{})
	last := appendTo(t, l, m, 1)
	if _, ok := l.NextAckDeadline(); ok {
		t.Fatal("a deadline with no ack awaited")
	}
	if err := l.WaitAck(2, last, AcksAll, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.NextAckDeadline(); ok {
		t.Fatal("a deadline with only an ack without one awaited")
	}
	if err := l.WaitAck(3, last, AcksAll, t0.Add(7*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitAck(1, last, AcksAll, t0.Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if d, ok := l.NextAckDeadline(); !ok || !d.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("next ack deadline %v %t, want the earliest, %v", d, ok, t0.Add(5*time.Second))
	}
	l.Tick(t0.Add(5*time.Second - time.Nanosecond))
	if got := acksOf(l); len(got) != 0 {
		t.Fatalf("outcomes before the deadline: %v", got)
	}
	l.Tick(t0.Add(5 * time.Second))
	got := acksOf(l)
	if err, done := got[1]; !done || !errors.Is(err, ErrAckTimeout) {
		t.Fatalf("ack 1 at its deadline: done %t, err %v; want ErrAckTimeout", done, err)
	}
	if _, done := got[2]; done {
		t.Fatal("ack without a deadline timed out")
	}
	if d, ok := l.NextAckDeadline(); !ok || !d.Equal(t0.Add(7*time.Second)) {
		t.Fatalf("next ack deadline after the first timed out: %v %t, want %v", d, ok, t0.Add(7*time.Second))
	}
}

func TestWaitAckRejectsMisuse(t *testing.T) {
	l, m := newTestLeader(t, leaderOpts{})
	last := appendTo(t, l, m, 1)
	if err := l.WaitAck(1, last, AcksAll, time.Time{}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		id         AckID
		lastOffset int64
		acks       Acks
	}{
		{"duplicate id", 1, last, AcksAll},
		{"acks=0", 2, last, AcksNone},
		{"not appended yet", 3, last + 1, AcksAll},
		{"negative offset", 4, -1, AcksLeader},
	}
	for _, tt := range tests {
		if err := l.WaitAck(tt.id, tt.lastOffset, tt.acks, time.Time{}); !errors.Is(err, ErrInvalidInput) {
			t.Errorf("%s: WaitAck = %v, want ErrInvalidInput", tt.name, err)
		}
	}
	if err := l.Appended(last-1, t0); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("Appended below the log end: %v, want ErrInvalidInput", err)
	}
	if err := l.Synced(last + 1); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("Synced beyond the log end: %v, want ErrInvalidInput", err)
	}
}

// TestDataLossFollowerLeavesISR: a follower whose fetch says it lost its
// data leaves the ISR at once (no lag_time_max wait), is not admitted while
// it says so, and is admitted again by the usual rule once it fetches
// without the flag; the HW never goes back meanwhile.
func TestDataLossFollowerLeavesISR(t *testing.T) {
	l, _ := newTestLeader(t, leaderOpts{hw: 8})
	lost := func(offset int64, epoch int32) FetchRequest {
		return FetchRequest{ReplicaID: "F2", FetchOffset: offset, CurrentLeaderEpoch: 4, LastFetchedEpoch: epoch, DataLoss: true}
	}
	res, err := l.Fetch(lost(0, UndefinedEpoch), t0)
	if err != nil {
		t.Fatal(err)
	}
	if res.EpochStartOffset != 5 {
		t.Errorf("epoch start offset %d in the answer, want 5", res.EpochStartOffset)
	}
	rd := l.Ready()
	if rd.ISRProposal == nil || !slices.Equal(rd.ISRProposal.ISR, []string{"L", "F1"}) {
		t.Fatalf("after a data-loss fetch: proposal %+v, want ISR [L F1] at once", rd.ISRProposal)
	}
	if err := l.ISRCommitted([]string{"L", "F1"}, nil, t0); err != nil {
		t.Fatal(err)
	}
	// Caught up but still flagged: not admitted.
	if _, err := l.Fetch(lost(8, 4), t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if rd := l.Ready(); rd.ISRProposal != nil {
		t.Fatalf("a follower still flagging data loss was proposed: %+v", rd.ISRProposal)
	}
	if l.HighWatermark() != 8 {
		t.Fatalf("HW %d, want 8", l.HighWatermark())
	}
	// Without the flag, the ISR-join rule admits it.
	fetchOK(t, l, "F2", 8, t0.Add(2*time.Second))
	if rd := l.Ready(); rd.ISRProposal == nil || !slices.Equal(rd.ISRProposal.ISR, []string{"L", "F1", "F2"}) {
		t.Fatalf("after catching up without the flag: proposal %+v, want [L F1 F2]", rd.ISRProposal)
	}
}

// TestEligibleLeaderReplicas: a follower removed by a change that takes the
// ISR below min_insync_replicas joins the ELR (the HW stops growing, so it
// keeps every committed record); one removed while the ISR stays at min
// does not; a follower that lost its data never does; a change that brings
// the ISR back to min empties the ELR.
func TestEligibleLeaderReplicas(t *testing.T) {
	l, _ := newTestLeader(t, leaderOpts{hw: 8})
	fetchOK(t, l, "F1", 8, t0)
	fetchOK(t, l, "F2", 8, t0)
	l.Ready()
	commit := func(want []string, wantELR []EligibleReplica) {
		t.Helper()
		rd := l.Ready()
		if rd.ISRProposal == nil || !slices.Equal(rd.ISRProposal.ISR, want) || !slices.Equal(rd.ISRProposal.ELR, wantELR) {
			t.Fatalf("proposal %+v, want ISR %v ELR %v", rd.ISRProposal, want, wantELR)
		}
		if err := l.ISRCommitted(rd.ISRProposal.ISR, rd.ISRProposal.ELR, t0); err != nil {
			t.Fatal(err)
		}
	}
	// F2 dies: ISR [L F1] is still at min 2, F2 may fall behind the HW.
	if err := l.SetDeadFollowers([]string{"F2"}, t0); err != nil {
		t.Fatal(err)
	}
	commit([]string{"L", "F1"}, nil)
	// F1 dies too: ISR [L] is below min, the HW freezes at 8, F1 has it.
	if err := l.SetDeadFollowers([]string{"F1", "F2"}, t0); err != nil {
		t.Fatal(err)
	}
	commit([]string{"L"}, []EligibleReplica{{ID: "F1", LogEndOffset: 8}})
	if got := l.ELR(); !slices.Equal(got, []EligibleReplica{{ID: "F1", LogEndOffset: 8}}) {
		t.Fatalf("ELR %v after the commit", got)
	}
	// F2 comes back and catches up: ISR [L F2] reaches min, the ELR empties.
	if err := l.SetDeadFollowers([]string{"F1"}, t0); err != nil {
		t.Fatal(err)
	}
	fetchOK(t, l, "F2", 8, t0.Add(time.Second))
	commit([]string{"L", "F2"}, nil)

	// A follower that lost its data leaves the ISR but is never eligible.
	l2, _ := newTestLeader(t, leaderOpts{hw: 8, isr: []string{"L", "F1"}})
	if _, err := l2.Fetch(FetchRequest{ReplicaID: "F1", FetchOffset: 0, CurrentLeaderEpoch: 4, LastFetchedEpoch: UndefinedEpoch, DataLoss: true}, t0); err != nil {
		t.Fatal(err)
	}
	if rd := l2.Ready(); rd.ISRProposal == nil || !slices.Equal(rd.ISRProposal.ISR, []string{"L"}) || len(rd.ISRProposal.ELR) != 0 {
		t.Fatalf("data-loss shrink: proposal %+v, want ISR [L] and no ELR", rd.ISRProposal)
	}
}

// TestDataLossFollowerAlreadyCaughtUpStays: a follower that flags data loss
// but whose log already meets the ISR-join rule (a replica created after
// the partition's first election, before anything was written) holds every
// committed record: it stays in the ISR.
func TestDataLossFollowerAlreadyCaughtUpStays(t *testing.T) {
	m := logOf()
	m.assignEpoch(1)
	l, err := NewLeader(LeaderConfig{
		Self: "L", Epoch: 1, EpochStartOffset: 0, Replicas: []string{"L", "F1", "F2"}, ISR: []string{"L", "F1", "F2"},
		MinInsyncReplicas: 2, LagTimeMax: 10 * time.Second, Durability: DurabilityFsync, EpochCache: m,
	}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Fetch(FetchRequest{ReplicaID: "F2", FetchOffset: 0, CurrentLeaderEpoch: 1, LastFetchedEpoch: UndefinedEpoch, DataLoss: true}, t0); err != nil {
		t.Fatal(err)
	}
	l.Tick(t0.Add(time.Second))
	if rd := l.Ready(); rd.ISRProposal != nil {
		t.Fatalf("a caught-up follower flagging data loss was removed: %+v", rd.ISRProposal)
	}
}

// TestSuccessors: only ISR followers with the leader's whole log, alive,
// without data loss and not being removed may take a handover.
func TestSuccessors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, l *Leader, m *memLog)
		want  []string
	}{
		{"none has fetched in this epoch", func(*testing.T, *Leader, *memLog) {}, nil},
		{"both at the log end, in replica order", func(t *testing.T, l *Leader, _ *memLog) {
			fetchOK(t, l, "F2", 8, t0)
			fetchOK(t, l, "F1", 8, t0)
		}, []string{"F1", "F2"}},
		{"one behind", func(t *testing.T, l *Leader, _ *memLog) {
			fetchOK(t, l, "F1", 7, t0)
			fetchOK(t, l, "F2", 8, t0)
		}, []string{"F2"}},
		{"the log moved on after the fetches", func(t *testing.T, l *Leader, m *memLog) {
			fetchOK(t, l, "F1", 8, t0)
			fetchOK(t, l, "F2", 8, t0)
			appendTo(t, l, m, 1)
		}, nil},
		{"dead", func(t *testing.T, l *Leader, _ *memLog) {
			fetchOK(t, l, "F1", 8, t0)
			fetchOK(t, l, "F2", 8, t0)
			if err := l.SetDeadFollowers([]string{"F1"}, t0); err != nil {
				t.Fatal(err)
			}
		}, []string{"F2"}},
		{"flagging data loss", func(t *testing.T, l *Leader, _ *memLog) {
			fetchOK(t, l, "F1", 8, t0)
			if _, err := l.Fetch(FetchRequest{ReplicaID: "F2", FetchOffset: 8, CurrentLeaderEpoch: 4, LastFetchedEpoch: 4, DataLoss: true}, t0); err != nil {
				t.Fatal(err)
			}
		}, []string{"F1"}},
		{"being removed by the change in flight", func(t *testing.T, l *Leader, _ *memLog) {
			fetchOK(t, l, "F1", 8, t0)
			l.Tick(t0.Add(11 * time.Second)) // F2 never fetched: proposed for removal
			if rd := l.Ready(); rd.ISRProposal == nil || !slices.Equal(rd.ISRProposal.ISR, []string{"L", "F1"}) {
				t.Fatalf("proposal %+v, want [L F1]", rd.ISRProposal)
			}
			fetchOK(t, l, "F2", 8, t0.Add(11*time.Second))
		}, []string{"F1"}},
		{"its agent stopping too", func(t *testing.T, l *Leader, _ *memLog) {
			fetchOK(t, l, "F1", 8, t0)
			if _, err := l.Fetch(FetchRequest{ReplicaID: "F2", FetchOffset: 8, CurrentLeaderEpoch: 4, LastFetchedEpoch: 4, Retiring: true}, t0); err != nil {
				t.Fatal(err)
			}
		}, []string{"F1"}},
		{"outside the ISR", func(t *testing.T, l *Leader, _ *memLog) {
			fetchOK(t, l, "F1", 8, t0)
			fetchOK(t, l, "F2", 8, t0)
			if err := l.ISRCommitted([]string{"L", "F1"}, nil, t0); err != nil {
				t.Fatal(err)
			}
		}, []string{"F1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, m := newTestLeader(t, leaderOpts{})
			tc.setup(t, l, m)
			if got := l.Successors(); !slices.Equal(got, tc.want) {
				t.Fatalf("Successors() = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAwaitingAcks: a leader awaits acks from a write's WaitAck until the
// HW passes it, or it times out, and not after.
func TestAwaitingAcks(t *testing.T) {
	for _, tt := range []struct {
		name   string
		settle func(l *Leader, m *memLog, last int64)
	}{
		{"acknowledged", func(l *Leader, m *memLog, last int64) {
			syncLeader(t, l, m)
			fetchOK(t, l, "F1", last+1, t0)
			fetchOK(t, l, "F2", last+1, t0)
		}},
		{"timed out", func(l *Leader, _ *memLog, last int64) { l.Tick(t0.Add(2 * time.Second)) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l, m := newTestLeader(t, leaderOpts{})
			if l.AwaitingAcks() {
				t.Fatal("a new leader awaits acks")
			}
			last := appendTo(t, l, m, 1)
			if err := l.WaitAck(1, last, AcksAll, t0.Add(time.Second)); err != nil {
				t.Fatal(err)
			}
			if !l.AwaitingAcks() {
				t.Fatal("a write waits for its ack, but AwaitingAcks is false")
			}
			tt.settle(l, m, last)
			l.Ready()
			if l.AwaitingAcks() {
				t.Fatal("still awaiting acks after the write was settled")
			}
		})
	}
}

// TestDivergingFetchForgetsTheRecordedPosition: a follower that fetched at 8
// in this epoch, then fetches with a log that no longer matches the leader's
// (its log changed under it: records lost, older ones back), no longer holds
// what it reported. Its recorded log end is forgotten, as at the start of
// the epoch, and the fetch's flags are taken: the HW does not move on the
// position it disowned, a data-loss flag removes it from the ISR at once,
// and it is no successor. Before, the diverging fetch changed nothing: the
// stale 8 still counted.
func TestDivergingFetchForgetsTheRecordedPosition(t *testing.T) {
	// The leader's log: epoch 1 [0, 3), epoch 3 [3, 5), epoch 4 [5, 8).
	// F1's log now ends at 4 with a record of epoch 2, which the leader
	// never had.
	diverging := func(dataLoss bool) FetchRequest {
		return FetchRequest{ReplicaID: "F1", FetchOffset: 4, CurrentLeaderEpoch: 4, LastFetchedEpoch: 2, DataLoss: dataLoss}
	}
	tests := []struct {
		name         string
		dataLoss     bool
		wantHW       int64
		wantProposal []string
		wantSucc     []string
	}{
		{name: "without the flag", dataLoss: false, wantHW: 5, wantProposal: nil, wantSucc: []string{"F2"}},
		{name: "with the data-loss flag", dataLoss: true, wantHW: 5, wantProposal: []string{"L", "F2"}, wantSucc: []string{"F2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _ := newTestLeader(t, leaderOpts{durability: DurabilityReplicated})
			fetchOK(t, l, "F1", 8, t0)
			fetchOK(t, l, "F2", 5, t0)
			wantHW(t, l, 5)
			l.Ready()
			res, err := l.Fetch(diverging(tt.dataLoss), t0.Add(time.Second))
			if err != nil || res.Diverging == nil || *res.Diverging != (EpochEndOffset{1, 3}) {
				t.Fatalf("F1's fetch: %+v, %v; want diverging at epoch 1 ending at 3", res, err)
			}
			if got := progressOf(l, "F1").LogEndOffset; got != unknownOffset {
				t.Errorf("F1's recorded log end %d after a diverging fetch, want unknown", got)
			}
			var proposal []string
			if rd := l.Ready(); rd.ISRProposal != nil {
				proposal = rd.ISRProposal.ISR
			}
			if !slices.Equal(proposal, tt.wantProposal) {
				t.Errorf("proposal %v after the diverging fetch, want %v", proposal, tt.wantProposal)
			}
			// F2 reaches the log end: only F1's disowned 8 would let the HW
			// pass 5.
			fetchOK(t, l, "F2", 8, t0.Add(2*time.Second))
			wantHW(t, l, tt.wantHW)
			if got := l.Successors(); !slices.Equal(got, tt.wantSucc) {
				t.Errorf("successors %v, want %v", got, tt.wantSucc)
			}
		})
	}
}
