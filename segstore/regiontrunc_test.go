package segstore

import (
	"bytes"
	"io"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/logagent/logagent/record"
)

// TestRegionAfterTruncateAndAppend: a Region read above the high watermark
// (a follower's fetch, limit = LEO) stays open while the log truncates
// at or below its start and appends other batches at the same offsets.
// Reading it gives the bytes it named or an error, never the new batches
// under the old region's positions; the log holds what it should, also
// after a reopen.
func TestRegionAfterTruncateAndAppend(t *testing.T) {
	seed := testSeed(t)
	for _, tc := range []struct {
		name string
		// cut picks the index of the batch truncated at.
		cut func(l *Log, batches [][]byte) int
	}{
		{"inside a segment", func(*Log, [][]byte) int { return 4 }},
		{"at a later segment's start", func(l *Log, batches [][]byte) int {
			return slices.IndexFunc(batches, func(b []byte) bool { return record.Header(b).BaseOffset() == l.segments[1].base })
		}},
		{"at the first segment's start", func(*Log, [][]byte) int { return 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 56))
			clock := newClock()
			opts := smallOptions(t, clock)
			dir := t.TempDir()
			l := openLog(t, OSFS{}, dir, opts)
			old := appendN(t, l, rng, 60, 1, 100)
			if len(l.segments) < 2 {
				t.Fatalf("%d segments, want at least 2", len(l.segments))
			}
			i := tc.cut(l, old)
			from := record.Header(old[i]).BaseOffset()
			region, err := l.Read(from, 1<<20, l.LogEndOffset())
			if err != nil {
				t.Fatal(err)
			}
			defer region.Close()
			want := slices.Concat(old[i : i+int(region.Len)/len(old[i])]...)
			if region.Len != int64(len(want)) {
				t.Fatalf("region of %d bytes, want %d", region.Len, len(want))
			}
			if err := l.Truncate(from); err != nil {
				t.Fatal(err)
			}
			if err := l.AssignEpoch(2, l.LogEndOffset()); err != nil {
				t.Fatal(err)
			}
			more := appendN(t, l, rng, 30, 2, 100)
			got, err := io.ReadAll(region)
			if err == nil && !bytes.Equal(got, want) {
				t.Fatalf("the region read %d bytes that are not the batches it held (epoch %d at its start), without an error", len(got), record.Header(got).LeaderEpoch())
			}
			wantLog := slices.Concat(old[:i], more)
			if got := readAll(t, l, l.LogEndOffset()); !slices.EqualFunc(got, wantLog, bytes.Equal) {
				t.Fatal("content after truncate and append differs")
			}
			checkIndexes(t, l)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = openLog(t, OSFS{}, dir, opts)
			defer l.Close()
			if got := readAll(t, l, l.LogEndOffset()); !slices.EqualFunc(got, wantLog, bytes.Equal) {
				t.Fatal("content after a reopen differs")
			}
			checkIndexes(t, l)
		})
	}
}
