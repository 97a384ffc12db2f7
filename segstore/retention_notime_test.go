package segstore

import (
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// TestRetentionOfSegmentWithoutTimestamps: a segment whose batches carry
// no timestamp at or after 1970 (-1, a record's "no timestamp") is as old
// as its file's last write for time retention, as Kafka's
// LogSegment.largestTimestamp has it: it was deleted at the first
// retention run after it was sealed, whatever the retention, its newest
// timestamp -1 being older than any deadline.
func TestRetentionOfSegmentWithoutTimestamps(t *testing.T) {
	tests := []struct {
		name      string
		timestamp func(now time.Time) int64
		written   time.Duration // before now, the sealed segment's mtime
		deleted   bool
		reopen    bool // the segment's newest timestamp comes from a walk
	}{
		{"no timestamp, written within the retention", func(time.Time) int64 { return -1 }, 10 * time.Minute, false, false},
		{"no timestamp, written before the retention", func(time.Time) int64 { return -1 }, 2 * time.Hour, true, false},
		{"no timestamp, reopened, written within the retention", func(time.Time) int64 { return -1 }, 10 * time.Minute, false, true},
		{"no timestamp, reopened, written before the retention", func(time.Time) int64 { return -1 }, 2 * time.Hour, true, true},
		{"timestamp before 1970, written within the retention", func(time.Time) int64 { return -5000 }, 10 * time.Minute, false, false},
		{"old timestamps, written within the retention", func(now time.Time) int64 { return now.Add(-2 * time.Hour).UnixMilli() }, 10 * time.Minute, true, false},
		{"new timestamps, written before the retention", func(now time.Time) int64 { return now.Add(-10 * time.Minute).UnixMilli() }, 2 * time.Hour, false, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(testSeed(t), uint64(i)))
			clock := newClock()
			opts := smallOptions(t, clock)
			opts.Retention = time.Hour
			dir := t.TempDir()
			l := openLog(t, OSFS{}, dir, opts)
			for len(l.segments) < 2 {
				b := makeBatch(rng, batchSpec{epoch: 1, payload: 300, timestamp: tt.timestamp(clock.Now())})
				if _, _, err := l.AppendLeader(b, 1); err != nil {
					t.Fatal(err)
				}
			}
			if tt.reopen {
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				l = openLog(t, OSFS{}, dir, opts)
			}
			defer l.Close()
			first := l.segments[0]
			mtime := clock.Now().Add(-tt.written)
			if err := os.Chtimes(first.logPath, mtime, mtime); err != nil {
				t.Fatal(err)
			}
			want := 0
			if tt.deleted {
				want = 1
			}
			n, err := l.ApplyRetention(l.LogEndOffset())
			if err != nil || n != want {
				t.Fatalf("retention deleted %d segments (%v), want %d", n, err, want)
			}
			if want == 0 && l.LogStartOffset() != 0 {
				t.Fatalf("log start %d", l.LogStartOffset())
			}
		})
	}
}
