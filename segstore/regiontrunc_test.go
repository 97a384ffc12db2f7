package segstore

import (
	"bytes"
	"errors"
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

// TestRegionAfterFailedLogIsReopened: a Region read above the synced
// offset (a follower's fetch, limit = LEO) stays open while the log fails,
// is reopened (Options.Reopen) and takes other batches at the same
// offsets. Bytes the failed log published and the reopened log no longer
// holds, cut by the reopen itself (what no fsync covered) or by a
// truncation before the failure, are never written again in the same
// file: reading the region gives the bytes it named or an error, never the
// new batches under the old positions.
func TestRegionAfterFailedLogIsReopened(t *testing.T) {
	seed := testSeed(t)
	// unsyncedTail appends six synced batches, then six more the region
	// starts at.
	unsyncedTail := func(t *testing.T, l *Log, rng *rand.Rand) ([][]byte, int64) {
		kept := appendN(t, l, rng, 6, 1, 200)
		if _, err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		from := l.LogEndOffset()
		appendN(t, l, rng, 6, 1, 200)
		return kept, from
	}
	for _, tc := range []struct {
		name string
		// prepare appends, and returns the batches the reopened log keeps
		// and the offset of the first one the region starts at, which the
		// reopened log must not hold.
		prepare func(t *testing.T, l *Log, rng *rand.Rand) (kept [][]byte, from int64)
		// fail makes the log fail, with the region from from open.
		fail func(t *testing.T, fsys *FaultFS, l *Log, rng *rand.Rand, from int64)
		// firstOpenFails: the first Open after the failure fails after
		// its cut (an fsync of its own), and the replica opens again.
		firstOpenFails bool
	}{
		{
			name:    "the reopen cuts a segment's unsynced tail",
			prepare: unsyncedTail,
			fail:    failSync,
		},
		{
			name:           "an Open that fails cuts a segment's unsynced tail before the reopen",
			prepare:        unsyncedTail,
			fail:           failSync,
			firstOpenFails: true,
		},
		{
			name: "the reopen cuts a segment no fsync covered",
			prepare: func(t *testing.T, l *Log, rng *rand.Rand) ([][]byte, int64) {
				appendN(t, l, rng, 6, 1, 200)
				return nil, 0
			},
			fail: failSync,
		},
		{
			name: "a truncation cut a segment before the log failed",
			prepare: func(t *testing.T, l *Log, rng *rand.Rand) ([][]byte, int64) {
				old := appendN(t, l, rng, 12, 1, 200)
				if _, err := l.Sync(); err != nil {
					t.Fatal(err)
				}
				return old[:6], record.Header(old[6]).BaseOffset()
			},
			fail: func(t *testing.T, fsys *FaultFS, l *Log, rng *rand.Rand, from int64) {
				if err := l.Truncate(from); err != nil {
					t.Fatal(err)
				}
				// The append rolls (the truncation cut the segment);
				// the reopen deletes that unsynced segment and ends the
				// log at the cut again.
				failSync(t, fsys, l, rng, from)
			},
		},
		{
			name: "a truncation at the first segment's start failed at its rename",
			prepare: func(t *testing.T, l *Log, rng *rand.Rand) ([][]byte, int64) {
				appendN(t, l, rng, 12, 1, 200)
				if _, err := l.Sync(); err != nil {
					t.Fatal(err)
				}
				return nil, 0
			},
			fail: func(t *testing.T, fsys *FaultFS, l *Log, _ *rand.Rand, from int64) {
				// The old file is emptied in place and synced; the
				// new files are not renamed over it.
				fsys.Inject(Fault{Op: OpRename, Path: ".log" + tmpSuffix})
				if err := l.Truncate(from); !errors.Is(err, ErrFailed) {
					t.Fatalf("truncate: %v, want the injected failure", err)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 57))
			clock := newClock()
			opts := smallOptions(t, clock)
			opts.SegmentBytes = 1 << 16
			fsys, dir, l := newFaultLog(t, opts)
			kept, from := tc.prepare(t, l, rng)
			region, want := openRegion(t, l, from)
			defer region.Close()
			if region.Len == 0 {
				t.Fatal("empty region")
			}
			tc.fail(t, fsys, l, rng, from)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			reopen := opts
			reopen.Reopen = l
			if tc.firstOpenFails {
				fsys.Inject(Fault{Op: OpSync, Path: ".log"})
				if _, err := Open(fsys, dir, reopen); err == nil {
					t.Fatal("open succeeded despite the injected fsync failure")
				}
				fsys.Clear()
			}
			l2 := openLog(t, fsys, dir, reopen)
			defer l2.Close()
			if got := readAll(t, l2, l2.LogEndOffset()); !slices.EqualFunc(got, kept, bytes.Equal) {
				t.Fatalf("reopened log holds %d batches, want %d", len(got), len(kept))
			}
			if err := l2.AssignEpoch(2, l2.LogEndOffset()); err != nil {
				t.Fatal(err)
			}
			more := appendN(t, l2, rng, 12, 2, 200)
			got, err := io.ReadAll(region)
			if err == nil && !bytes.Equal(got, want) {
				t.Fatalf("the region read %d bytes that are not the batches it held (epoch %d at its start), without an error", len(got), record.Header(got).LeaderEpoch())
			}
			wantLog := slices.Concat(kept, more)
			if got := readAll(t, l2, l2.LogEndOffset()); !slices.EqualFunc(got, wantLog, bytes.Equal) {
				t.Fatal("content after the reopen and append differs")
			}
			checkIndexes(t, l2)
		})
	}
}

// failSync fails the log with a failed fsync of its segment.
func failSync(t *testing.T, fsys *FaultFS, l *Log, rng *rand.Rand, _ int64) {
	t.Helper()
	appendN(t, l, rng, 1, 1, 200)
	fsys.Inject(Fault{Op: OpSync, Path: ".log"})
	if _, err := l.Sync(); !errors.Is(err, ErrFailed) {
		t.Fatalf("sync: %v, want the injected failure", err)
	}
}

// TestReopenThatCutNothingDoesNotRoll: the rule above costs a segment only
// when bytes were cut. A reopen after a failure that left nothing unsynced
// appends to the segment it found.
func TestReopenThatCutNothingDoesNotRoll(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 58))
	clock := newClock()
	opts := smallOptions(t, clock)
	opts.SegmentBytes = 1 << 16
	fsys, dir, l := newFaultLog(t, opts)
	appendN(t, l, rng, 6, 1, 200)
	if _, err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	fsys.Inject(Fault{Op: OpSync, Path: ".index"})
	if err := l.Checkpoint(); !errors.Is(err, ErrFailed) {
		t.Fatalf("checkpoint: %v, want the injected failure", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	reopen := opts
	reopen.Reopen = l
	l2 := openLog(t, fsys, dir, reopen)
	defer l2.Close()
	appendN(t, l2, rng, 1, 1, 200)
	if n := len(l2.segments); n != 1 {
		t.Fatalf("%d segments after a reopen that cut nothing and one append, want 1", n)
	}
}

// TestRegionOfASegmentAFailedTruncationDetached: a truncation takes the
// segments after its cut out of the log before it deletes them; one that
// fails in between leaves them on disk. A Region of such a segment, which
// an earlier truncation cut (its appends roll), must not read the batches
// the reopened log appends there once it is the last segment again
// (TestCrashRecoveryAfterReopen, seed 425737: Close handed on only the
// segments still in the list, and the reopened log appended in place).
func TestRegionOfASegmentAFailedTruncationDetached(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 61))
	clock := newClock()
	opts := smallOptions(t, clock)
	fsys, dir, l := newFaultLog(t, opts)
	old := appendN(t, l, rng, 30, 1, 200)
	if _, err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if len(l.segments) < 2 {
		t.Fatalf("%d segments, want at least 2", len(l.segments))
	}
	second := l.segments[1].base
	i := slices.IndexFunc(old, func(b []byte) bool { return record.Header(b).BaseOffset() > second })
	from := record.Header(old[i]).BaseOffset()
	region, want := openRegion(t, l, from)
	defer region.Close()
	// Inside the second segment: its next append rolls, unsynced.
	if err := l.Truncate(from); err != nil {
		t.Fatal(err)
	}
	appendN(t, l, rng, 2, 1, 200)
	// In the first segment, failing at the file's truncation: the
	// second segment is out of the list, not deleted.
	fsys.Inject(Fault{Op: OpTruncate, Path: ".log"})
	if err := l.Truncate(record.Header(old[1]).BaseOffset()); !errors.Is(err, ErrFailed) {
		t.Fatalf("truncate: %v, want the injected failure", err)
	}
	l2 := reopenFailedLog(t, fsys, dir, opts, l)
	defer l2.Close()
	// The reopen deleted the unsynced third segment: the second is last.
	kept := old[:i]
	if got := readAll(t, l2, l2.LogEndOffset()); !slices.EqualFunc(got, kept, bytes.Equal) {
		t.Fatalf("reopened log holds %d batches, want %d", len(got), len(kept))
	}
	if err := l2.AssignEpoch(2, l2.LogEndOffset()); err != nil {
		t.Fatal(err)
	}
	// Batches of one size: enough of them to cover the region's bytes
	// if they went to its file.
	more := appendN(t, l2, rng, len(want)/len(old[0])+1, 2, 200)
	got, err := io.ReadAll(region)
	if err == nil && !bytes.Equal(got, want) {
		t.Fatalf("the region read %d bytes that are not the batches it held (epoch %d at its start), without an error", len(got), record.Header(got).LeaderEpoch())
	}
	if got := readAll(t, l2, l2.LogEndOffset()); !slices.EqualFunc(got, slices.Concat(kept, more), bytes.Equal) {
		t.Fatal("content after the reopen and append differs")
	}
	checkIndexes(t, l2)
}

// openRegion reads a Region from offset up to the log end (a follower's
// fetch) and the bytes it names now.
func openRegion(t *testing.T, l *Log, from int64) (*Region, []byte) {
	t.Helper()
	region, err := l.Read(from, 1<<20, l.LogEndOffset())
	if err != nil {
		t.Fatal(err)
	}
	want, err := l.ReadBytes(from, 1<<20, l.LogEndOffset())
	if err != nil {
		region.Close()
		t.Fatal(err)
	}
	if region.Len != int64(len(want)) {
		region.Close()
		t.Fatalf("region of %d bytes, ReadBytes gave %d", region.Len, len(want))
	}
	return region, want
}

// reopenFailedLog closes the failed log l and opens it again as the agent
// does (Options.Reopen = l), with no fault armed.
func reopenFailedLog(t *testing.T, fsys *FaultFS, dir string, opts Options, l *Log) *Log {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	fsys.Clear()
	opts.Reopen = l
	return openLog(t, fsys, dir, opts)
}
