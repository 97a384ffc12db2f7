package segstore

import (
	"slices"
	"testing"
)

func TestEpochCacheAssign(t *testing.T) {
	tests := []struct {
		name    string
		start   []EpochEntry
		epoch   int32
		offset  int64
		changed bool
		want    []EpochEntry
	}{
		{"first", nil, 3, 0, true, []EpochEntry{{3, 0}}},
		{"same epoch later", []EpochEntry{{3, 0}}, 3, 10, false, []EpochEntry{{3, 0}}},
		{"same epoch earlier replaces", []EpochEntry{{1, 0}, {3, 10}}, 3, 5, true, []EpochEntry{{1, 0}, {3, 5}}},
		{"new epoch", []EpochEntry{{3, 0}}, 5, 10, true, []EpochEntry{{3, 0}, {5, 10}}},
		{"drops stale later starts", []EpochEntry{{1, 0}, {2, 10}, {4, 20}}, 3, 15, true, []EpochEntry{{1, 0}, {2, 10}, {3, 15}}},
		{"drops higher epochs", []EpochEntry{{1, 0}, {5, 10}}, 3, 12, true, []EpochEntry{{1, 0}, {3, 12}}},
		{"same start replaces", []EpochEntry{{1, 0}, {2, 10}}, 3, 10, true, []EpochEntry{{1, 0}, {3, 10}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c epochCache
			c.reset(tt.start)
			if got := c.assign(tt.epoch, tt.offset); got != tt.changed {
				t.Errorf("assign changed = %v, want %v", got, tt.changed)
			}
			if got, _ := c.snapshot(); !slices.Equal(got, tt.want) {
				t.Errorf("entries = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestEpochCacheEndOffsetFor follows Kafka's LeaderEpochFileCacheTest cases.
func TestEpochCacheEndOffsetFor(t *testing.T) {
	entries := []EpochEntry{{1, 0}, {2, 10}, {4, 25}}
	const leo = 40
	tests := []struct {
		asked     int32
		wantEpoch int32
		wantEnd   int64
	}{
		{4, 4, leo},                          // latest epoch: the log end
		{2, 2, 25},                           // known epoch: the next one's start
		{3, 2, 25},                           // unknown epoch: the floor epoch, the next start
		{1, 1, 10},                           // first epoch
		{0, 0, 0},                            // below every epoch: asked epoch, first start
		{5, UndefinedEpoch, UndefinedOffset}, // above the latest
		{UndefinedEpoch, UndefinedEpoch, UndefinedOffset},
	}
	var c epochCache
	c.reset(entries)
	for _, tt := range tests {
		e, end := c.endOffsetFor(tt.asked, leo)
		if e != tt.wantEpoch || end != tt.wantEnd {
			t.Errorf("endOffsetFor(%d) = (%d, %d), want (%d, %d)", tt.asked, e, end, tt.wantEpoch, tt.wantEnd)
		}
	}
	var empty epochCache
	if e, end := empty.endOffsetFor(1, leo); e != UndefinedEpoch || end != UndefinedOffset {
		t.Errorf("empty cache: (%d, %d)", e, end)
	}
}

func TestEpochCacheTruncate(t *testing.T) {
	base := []EpochEntry{{1, 0}, {2, 10}, {4, 25}}
	tests := []struct {
		name    string
		fromEnd bool
		offset  int64
		want    []EpochEntry
	}{
		{"end inside", true, 20, []EpochEntry{{1, 0}, {2, 10}}},
		{"end at start", true, 25, []EpochEntry{{1, 0}, {2, 10}}},
		{"end past", true, 30, base},
		{"end all", true, 0, nil},
		{"start inside", false, 12, []EpochEntry{{2, 12}, {4, 25}}},
		{"start at entry", false, 10, []EpochEntry{{2, 10}, {4, 25}}},
		{"start at zero", false, 0, base},
		{"start past last", false, 30, []EpochEntry{{4, 30}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c epochCache
			c.reset(base)
			if tt.fromEnd {
				c.truncateFromEnd(tt.offset)
			} else {
				c.truncateFromStart(tt.offset)
			}
			if got, _ := c.snapshot(); !slices.Equal(got, tt.want) {
				t.Errorf("entries = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEpochZeroIsAnEpoch(t *testing.T) {
	l := openLog(t, OSFS{}, t.TempDir(), smallOptions(t, newClock()))
	defer l.Close()
	if _, _, err := l.AppendLeader(makeBatch(nil, batchSpec{payload: 10}), 0); err != nil {
		t.Fatal(err)
	}
	if got := l.EpochEntries(); !slices.Equal(got, []EpochEntry{{0, 0}}) {
		t.Fatalf("epochs %v", got)
	}
	if e, end := l.EndOffsetForEpoch(0); e != 0 || end != 1 {
		t.Fatalf("EndOffsetForEpoch(0) = %d, %d", e, end)
	}
}
