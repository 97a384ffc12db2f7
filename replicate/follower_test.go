package replicate

import (
	"errors"
	"slices"
	"testing"
)

func TestNewFollowerRejectsBadConfig(t *testing.T) {
	valid := func() FollowerConfig {
		return FollowerConfig{
			Self: "F", LeaderEpoch: 3, Durability: DurabilityFsync,
			LogEndOffset: 3, SyncedEndOffset: 2, HighWatermark: 1,
			EpochCache: logOf(recordsOf(1, "a"), recordsOf(3, "b", "c")),
		}
	}
	if _, err := NewFollower(valid()); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	tests := []struct {
		name   string
		change func(*FollowerConfig)
	}{
		{"empty self", func(c *FollowerConfig) { c.Self = "" }},
		{"negative epoch", func(c *FollowerConfig) { c.LeaderEpoch = -1 }},
		{"log newer than the leader", func(c *FollowerConfig) { c.LeaderEpoch = 2 }},
		{"unknown durability", func(c *FollowerConfig) { c.Durability = 9 }},
		{"negative log end", func(c *FollowerConfig) { c.LogEndOffset = -1 }},
		{"synced beyond log end", func(c *FollowerConfig) { c.SyncedEndOffset = 4 }},
		{"HW beyond log end", func(c *FollowerConfig) { c.HighWatermark = 4 }},
		{"no epoch cache", func(c *FollowerConfig) { c.EpochCache = nil }},
	}
	for _, tt := range tests {
		cfg := valid()
		tt.change(&cfg)
		if _, err := NewFollower(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: NewFollower = %v, want ErrInvalidConfig", tt.name, err)
		}
	}
}

// TestFollowerReconcilesByEpoch runs the follower's truncation against a real
// leader and checks every truncation point, then lets it catch up.
func TestFollowerReconcilesByEpoch(t *testing.T) {
	tests := []struct {
		name        string
		leaderEpoch int32 // the leader's new epoch, above every epoch in both logs
		leader      *memLog
		follower    *memLog
		followerHW  int64
		// truncations is every Truncation offset, in order.
		truncations []int64
		// diverged is the last fetched epoch of every fetch the leader
		// answered with a diverging epoch, in order.
		diverged []int32
	}{
		{
			name:        "empty follower fetches at once",
			leaderEpoch: 2,
			leader:      logOf(recordsOf(1, "a", "b")),
			follower:    logOf(),
		},
		{
			name:        "same log",
			leaderEpoch: 2,
			leader:      logOf(recordsOf(1, "a", "b", "c")),
			follower:    logOf(recordsOf(1, "a", "b", "c")),
		},
		{
			name:        "uncommitted tail of the same epoch",
			leaderEpoch: 2,
			leader:      logOf(recordsOf(1, "a", "b")),
			follower:    logOf(recordsOf(1, "a", "b", "c", "d")),
			diverged:    []int32{1},
			truncations: []int64{2},
		},
		{
			name:        "behind in the same epoch",
			leaderEpoch: 2,
			leader:      logOf(recordsOf(1, "a", "b", "c", "d")),
			follower:    logOf(recordsOf(1, "a", "b")),
		},
		{
			name:        "an epoch the leader never had",
			leaderEpoch: 4,
			leader:      logOf(recordsOf(1, "a", "b"), recordsOf(3, "c")),
			follower:    logOf(recordsOf(1, "a", "b"), recordsOf(2, "x", "y")),
			diverged:    []int32{2},
			truncations: []int64{2},
		},
		{
			// KIP-279: the leader answers epoch 2, which the follower never
			// had; it cuts after its own epoch 1 and names that one in its
			// next fetch.
			name:        "an epoch each side never had",
			leaderEpoch: 4,
			leader:      logOf(recordsOf(1, "a", "b"), recordsOf(2, "c", "d")),
			follower:    logOf(recordsOf(1, "a", "b", "x"), recordsOf(3, "y")),
			diverged:    []int32{3, 1},
			truncations: []int64{3, 2},
		},
		{
			// The follower's HW (1) is stale: truncating to it would lose
			// records the leader has committed.
			name:        "never to the local HW",
			leaderEpoch: 2,
			leader:      logOf(recordsOf(1, "a", "b", "c")),
			follower:    logOf(recordsOf(1, "a", "b", "c")),
			followerHW:  1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t, DurabilityFsync, 1, "L", "F")
			c.nodes["L"].log, c.nodes["F"].log = tt.leader, tt.follower
			tt.follower.hw = tt.followerHW
			c.epoch = tt.leaderEpoch - 1
			c.elect("L")
			f := c.follow("F")

			var diverged []int32
			var truncations []int64
			for {
				rd := f.Ready()
				if rd.Fetch != nil {
					if f.LogEndOffset() > 0 && rd.Fetch.LastFetchedEpoch == UndefinedEpoch {
						t.Errorf("fetch %+v from a non-empty log without an epoch", *rd.Fetch)
					}
					res, err := c.leader().leader.Fetch(*rd.Fetch, c.now)
					if err != nil {
						t.Fatal(err)
					}
					if res.Diverging == nil {
						if err := f.FetchFailed(); err != nil { // give it back to the cluster
							t.Fatal(err)
						}
						break
					}
					diverged = append(diverged, rd.Fetch.LastFetchedEpoch)
					if err := f.FetchResponded(res); err != nil {
						t.Fatal(err)
					}
					continue
				}
				switch {
				case rd.Truncate != nil:
					truncations = append(truncations, rd.Truncate.Offset)
					tt.follower.truncate(rd.Truncate.Offset)
					if err := f.Truncated(tt.follower.logEnd()); err != nil {
						t.Fatal(err)
					}
				default:
					t.Fatalf("follower stuck: %+v", rd)
				}
				if len(diverged) > 10 {
					t.Fatalf("the logs keep diverging: %v", diverged)
				}
			}
			if !slices.Equal(diverged, tt.diverged) || !slices.Equal(truncations, tt.truncations) {
				t.Fatalf("diverged at %v and truncated to %v; want %v and %v", diverged, truncations, tt.diverged, tt.truncations)
			}
			if tt.follower.hw > tt.follower.logEnd() {
				t.Fatalf("follower HW %d above its log end %d", tt.follower.hw, tt.follower.logEnd())
			}
			c.replicate(3, "F")
			if !slices.Equal(tt.follower.records, tt.leader.records) {
				t.Fatalf("after catching up: follower %v, leader %v", tt.follower, tt.leader)
			}
			if f.HighWatermark() != tt.leader.logEnd() {
				t.Fatalf("follower HW %d, want %d", f.HighWatermark(), tt.leader.logEnd())
			}
		})
	}
}

// fetchingFollower returns a follower of epoch 1 over an empty log, with its
// first fetch in flight.
func fetchingFollower(t *testing.T, durability Durability) (*Follower, *memLog) {
	t.Helper()
	m := logOf()
	f, err := NewFollower(FollowerConfig{Self: "F", LeaderEpoch: 1, Durability: durability, EpochCache: m})
	if err != nil {
		t.Fatal(err)
	}
	rd := f.Ready()
	if rd.Fetch == nil || *rd.Fetch != (FetchRequest{ReplicaID: "F", FetchOffset: 0, CurrentLeaderEpoch: 1, LastFetchedEpoch: UndefinedEpoch}) {
		t.Fatalf("first output %+v, want a fetch at 0", rd)
	}
	return f, m
}

// receive appends n records of epoch 1 as the answer to the fetch in flight.
func receive(t *testing.T, f *Follower, m *memLog, n int, leaderHW int64) {
	t.Helper()
	if n > 0 {
		if err := m.append(recordsOf(1, slices.Repeat([]string{"r"}, n)...)...); err != nil {
			t.Fatal(err)
		}
		if err := f.Appended(m.logEnd() - 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.FetchResponded(FetchResult{LeaderEpoch: 1, HighWatermark: leaderHW, LogEndOffset: 100}); err != nil {
		t.Fatal(err)
	}
}

func TestFollowerHighWatermark(t *testing.T) {
	tests := []struct {
		durability Durability
		// HW after: 10 records with leader HW 5; fsync; 10 more with leader
		// HW 25; fsync; then an answer with leader HW 8 (a new leader
		// behind).
		want [5]int64
	}{
		{DurabilityFsync, [5]int64{0, 5, 10, 20, 20}},
		{DurabilityReplicated, [5]int64{5, 5, 20, 20, 20}},
	}
	for _, tt := range tests {
		t.Run(tt.durability.String(), func(t *testing.T) {
			f, m := fetchingFollower(t, tt.durability)
			check := func(step int) {
				t.Helper()
				if got := f.HighWatermark(); got != tt.want[step] {
					t.Fatalf("step %d: HW %d, want %d", step, got, tt.want[step])
				}
			}
			receive(t, f, m, 10, 5)
			check(0)
			m.sync()
			if err := f.Synced(9); err != nil {
				t.Fatal(err)
			}
			check(1)
			if rd := f.Ready(); !rd.HighWatermarkChanged || rd.HighWatermark != 5 || rd.Fetch == nil || rd.Fetch.FetchOffset != 10 {
				t.Fatalf("Ready %+v, want HW 5 and a fetch at 10", rd)
			}
			receive(t, f, m, 10, 25)
			check(2)
			m.sync()
			if err := f.Synced(19); err != nil {
				t.Fatal(err)
			}
			check(3)
			f.Ready()
			receive(t, f, m, 0, 8)
			check(4)
		})
	}
}

func TestFollowerFetchesOnlyWhenDurable(t *testing.T) {
	tests := []struct {
		durability Durability
		// fetchBeforeSync: the next fetch goes out before the fsync
		fetchBeforeSync bool
	}{
		{DurabilityFsync, false},
		{DurabilityReplicated, true},
	}
	for _, tt := range tests {
		t.Run(tt.durability.String(), func(t *testing.T) {
			f, m := fetchingFollower(t, tt.durability)
			receive(t, f, m, 3, 0)
			if got := f.HasReady(); got != tt.fetchBeforeSync {
				t.Fatalf("HasReady before fsync = %t, want %t", got, tt.fetchBeforeSync)
			}
			if rd := f.Ready(); (rd.Fetch != nil) != tt.fetchBeforeSync {
				t.Fatalf("fetch before fsync: %+v", rd.Fetch)
			}
			if tt.fetchBeforeSync {
				return
			}
			m.sync()
			if err := f.Synced(2); err != nil {
				t.Fatal(err)
			}
			if rd := f.Ready(); rd.Fetch == nil || rd.Fetch.FetchOffset != 3 || rd.Fetch.LastFetchedEpoch != 1 {
				t.Fatalf("after fsync: %+v, want a fetch at 3 with last epoch 1", rd.Fetch)
			}
		})
	}
}

func TestFollowerTruncatesOnDivergingFetch(t *testing.T) {
	f, m := fetchingFollower(t, DurabilityReplicated)
	receive(t, f, m, 4, 0) // epoch 1: 0..3
	if rd := f.Ready(); rd.Fetch == nil {
		t.Fatal("no fetch")
	}
	// The leader says epoch 1 ends at 2 in its log.
	if err := f.FetchResponded(FetchResult{LeaderEpoch: 1, Diverging: &EpochEndOffset{1, 2}}); err != nil {
		t.Fatal(err)
	}
	rd := f.Ready()
	if rd.Truncate == nil || *rd.Truncate != (Truncation{Offset: 2}) {
		t.Fatalf("after a diverging answer: %+v, want a truncation to 2", rd)
	}
	m.truncate(2)
	if err := f.Truncated(2); err != nil {
		t.Fatal(err)
	}
	if rd := f.Ready(); rd.Fetch == nil || *rd.Fetch != (FetchRequest{"F", 2, 1, 1, false, false}) {
		t.Fatalf("after truncating: %+v, want a fetch at 2", rd.Fetch)
	}
}

func TestFollowerFetchOutOfRange(t *testing.T) {
	tests := []struct {
		name                   string
		leaderStart, leaderEnd int64
		want                   Truncation
		wantFetch              FetchRequest
	}{
		{"beyond the leader's log end", 0, 4, Truncation{Offset: 4}, FetchRequest{"F", 4, 1, 1, false, false}},
		{"below the leader's log start", 20, 30, Truncation{Offset: 20, Restart: true}, FetchRequest{"F", 20, 1, UndefinedEpoch, false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, m := fetchingFollower(t, DurabilityFsync)
			receive(t, f, m, 10, 2)
			m.sync()
			if err := f.Synced(9); err != nil {
				t.Fatal(err)
			}
			f.Ready()
			if err := f.FetchOutOfRange(tt.leaderStart, tt.leaderEnd); err != nil {
				t.Fatal(err)
			}
			rd := f.Ready()
			if rd.Truncate == nil || *rd.Truncate != tt.want {
				t.Fatalf("truncation %+v, want %+v", rd.Truncate, tt.want)
			}
			if tt.want.Restart {
				m.records, m.epochs = nil, nil // the memLog cannot start above 0
				if err := f.Truncated(tt.want.Offset - 1); !errors.Is(err, ErrInvalidInput) {
					t.Fatalf("restart at the wrong offset: %v, want ErrInvalidInput", err)
				}
			} else {
				m.truncate(tt.want.Offset)
			}
			if err := f.Truncated(tt.want.Offset); err != nil {
				t.Fatal(err)
			}
			rd = f.Ready()
			if rd.Fetch == nil || *rd.Fetch != tt.wantFetch {
				t.Fatalf("next fetch %+v, want %+v", rd.Fetch, tt.wantFetch)
			}
			if tt.want.Restart && f.HighWatermark() != tt.want.Offset {
				t.Fatalf("HW %d after restarting at %d", f.HighWatermark(), tt.want.Offset)
			}
		})
	}

	f, m := fetchingFollower(t, DurabilityReplicated)
	receive(t, f, m, 10, 2)
	f.Ready()
	if err := f.FetchOutOfRange(0, 20); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("out of range within the leader's log: %v, want ErrInvalidInput", err)
	}
}

func TestFollowerRejectsMisuse(t *testing.T) {
	// started is a follower of epoch 2 over a log of epoch 1; its first
	// Ready is the fetch.
	started := func(t *testing.T) (*Follower, *memLog) {
		m := logOf(recordsOf(1, "a", "b"))
		f, err := NewFollower(FollowerConfig{Self: "F", LeaderEpoch: 2, LogEndOffset: 2, SyncedEndOffset: 2, EpochCache: m})
		if err != nil {
			t.Fatal(err)
		}
		return f, m
	}
	tests := []struct {
		name string
		do   func(*testing.T) error
	}{
		{"diverging answer before the fetch is out", func(t *testing.T) error {
			f, _ := started(t)
			return f.FetchResponded(FetchResult{LeaderEpoch: 2, Diverging: &EpochEndOffset{1, 2}})
		}},
		{"diverging at an epoch after the last fetched", func(t *testing.T) error {
			f, _ := started(t)
			f.Ready()
			return f.FetchResponded(FetchResult{LeaderEpoch: 2, Diverging: &EpochEndOffset{2, 2}})
		}},
		{"diverging at a negative offset", func(t *testing.T) error {
			f, _ := started(t)
			f.Ready()
			return f.FetchResponded(FetchResult{LeaderEpoch: 2, Diverging: &EpochEndOffset{1, -1}})
		}},
		{"truncated without a truncation", func(t *testing.T) error {
			f, _ := started(t)
			return f.Truncated(2)
		}},
		{"truncated beyond the asked offset", func(t *testing.T) error {
			f, _ := started(t)
			f.Ready()
			if err := f.FetchResponded(FetchResult{LeaderEpoch: 2, Diverging: &EpochEndOffset{1, 1}}); err != nil {
				t.Fatal(err)
			}
			f.Ready()
			return f.Truncated(2)
		}},
		{"append before the fetch is out", func(t *testing.T) error {
			f, _ := started(t)
			return f.Appended(2)
		}},
		{"fetch answer while truncating", func(t *testing.T) error {
			f, _ := started(t)
			f.Ready()
			if err := f.FetchResponded(FetchResult{LeaderEpoch: 2, Diverging: &EpochEndOffset{1, 1}}); err != nil {
				t.Fatal(err)
			}
			f.Ready()
			return f.FetchResponded(FetchResult{LeaderEpoch: 2})
		}},
		{"fetch failure without a fetch", func(t *testing.T) error {
			f, _ := fetchingFollower(t, DurabilityFsync)
			receive(t, f, logOf(), 0, 0)
			return f.FetchFailed()
		}},
		{"fetch answer from another epoch", func(t *testing.T) error {
			f, _ := fetchingFollower(t, DurabilityFsync)
			return f.FetchResponded(FetchResult{LeaderEpoch: 2})
		}},
		{"diverging epoch the log never had", func(t *testing.T) error {
			f, _ := fetchingFollower(t, DurabilityFsync)
			return f.FetchResponded(FetchResult{LeaderEpoch: 1, Diverging: &EpochEndOffset{0, 0}})
		}},
		{"append below the log end", func(t *testing.T) error {
			f, m := fetchingFollower(t, DurabilityReplicated)
			receive(t, f, m, 2, 0)
			f.Ready()
			return f.Appended(0)
		}},
		{"sync beyond the log end", func(t *testing.T) error {
			f, _ := started(t)
			return f.Synced(2)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.do(t); !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("got %v, want ErrInvalidInput", err)
			}
		})
	}
}

func TestFollowerDetectsInconsistentEpochCache(t *testing.T) {
	m := logOf(recordsOf(1, "a", "b"))
	f, err := NewFollower(FollowerConfig{Self: "F", LeaderEpoch: 2, LogEndOffset: 2, SyncedEndOffset: 2, EpochCache: lyingCache{m, 5}})
	if err != nil {
		t.Fatal(err)
	}
	f.Ready()
	if err := f.FetchResponded(FetchResult{LeaderEpoch: 2, Diverging: &EpochEndOffset{1, 2}}); !errors.Is(err, ErrInconsistentLog) {
		t.Fatalf("own epoch ending beyond the log end: %v, want ErrInconsistentLog", err)
	}
}

func TestFollowerDetectsTruncationThatKeptAnEpoch(t *testing.T) {
	m := logOf(recordsOf(1, "a", "b", "x"), recordsOf(3, "y"))
	f, err := NewFollower(FollowerConfig{Self: "F", LeaderEpoch: 4, LogEndOffset: 4, SyncedEndOffset: 4, EpochCache: m})
	if err != nil {
		t.Fatal(err)
	}
	f.Ready()
	// The leader has no epoch 3; its epoch 2 is unknown here, so the
	// follower cuts after its epoch 1 and will name it in its next fetch.
	if err := f.FetchResponded(FetchResult{LeaderEpoch: 4, Diverging: &EpochEndOffset{2, 4}}); err != nil {
		t.Fatal(err)
	}
	if rd := f.Ready(); rd.Truncate == nil || *rd.Truncate != (Truncation{Offset: 3}) {
		t.Fatalf("output %+v, want a truncation to 3", rd)
	}
	// The log reports the cut but its cache still has epoch 3.
	if err := f.Truncated(3); !errors.Is(err, ErrInconsistentLog) {
		t.Fatalf("Truncated with epoch 3 kept: %v, want ErrInconsistentLog", err)
	}
}

// TestFetchOutOfRangeBadBounds: an offset_out_of_range answer whose bounds
// are no log ([-1, -5), or a start past the end) is refused, not turned
// into a truncation: the log refused a cut at -5 and the replica failed it.
func TestFetchOutOfRangeBadBounds(t *testing.T) {
	for _, tc := range []struct{ start, end int64 }{{-1, -5}, {-1, 20}, {30, 20}} {
		f, m := fetchingFollower(t, DurabilityReplicated)
		receive(t, f, m, 10, 2)
		f.Ready()
		if err := f.FetchOutOfRange(tc.start, tc.end); !errors.Is(err, ErrInvalidInput) {
			t.Errorf("FetchOutOfRange(%d, %d) = %v, next output %+v; want ErrInvalidInput", tc.start, tc.end, err, f.Ready().Truncate)
		}
	}
}
