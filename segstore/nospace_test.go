package segstore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/logagent/logagent/record"
)

// TestNoSpaceLeavesLogUsable: an append or a checkpoint the file system
// refuses for want of space returns ErrNoSpace, leaves no byte of the
// refused write in the file, keeps the log usable (reads, later appends)
// and changes nothing that recovery sees.
func TestNoSpaceLeavesLogUsable(t *testing.T) {
	full := func(fsys *FaultFS) {
		fsys.Inject(Fault{Op: OpWrite, Err: syscall.ENOSPC, Partial: true, Sticky: true})
		fsys.Inject(Fault{Op: OpCreate, Err: syscall.ENOSPC, Sticky: true})
	}
	tests := []struct {
		name string
		// fill appends until the active segment has no room left for a
		// batch of this size, for the roll case.
		fillSegment bool
		op          func(rng *rand.Rand, l *Log) error
	}{
		{name: "leader append", op: func(rng *rand.Rand, l *Log) error {
			_, _, err := l.AppendLeader(makeBatch(rng, batchSpec{epoch: 1, payload: 300}), 1)
			return err
		}},
		{name: "follower append of a new epoch", op: func(rng *rand.Rand, l *Log) error {
			base := l.LogEndOffset()
			b1 := makeBatch(rng, batchSpec{base: base, epoch: 2, records: 2, payload: 100})
			b2 := makeBatch(rng, batchSpec{base: base + 2, epoch: 2, payload: 100})
			return l.AppendFollower(append(b1, b2...), 2)
		}},
		{name: "roll", fillSegment: true, op: func(rng *rand.Rand, l *Log) error {
			_, _, err := l.AppendLeader(makeBatch(rng, batchSpec{epoch: 1, payload: 300}), 1)
			return err
		}},
		{name: "truncate", op: func(rng *rand.Rand, l *Log) error {
			// The recovery point at the log end must be lowered first.
			return l.Truncate(2)
		}},
		{name: "retention", fillSegment: true, op: func(rng *rand.Rand, l *Log) error {
			_, err := l.ApplyRetention(l.LogEndOffset())
			return err
		}},
		{name: "checkpoint", op: func(rng *rand.Rand, l *Log) error {
			if err := l.SetHighWatermark(l.HighWatermark() - 1); err != nil {
				return err
			}
			return l.Checkpoint()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(testSeed(t), 40))
			clock := newClock()
			opts := smallOptions(t, clock)
			opts.RetentionBytes = 256
			fsys, dir, l := newFaultLog(t, opts)
			want := appendN(t, l, rng, 4, 1, 200)
			if tt.fillSegment {
				for l.active.size.Load()+int64(len(makeBatch(nil, batchSpec{payload: 300}))) <= opts.SegmentBytes {
					want = append(want, appendN(t, l, rng, 1, 1, 100)...)
				}
			}
			if _, err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := l.SetHighWatermark(l.LogEndOffset()); err != nil {
				t.Fatal(err)
			}
			if err := l.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			if tt.name == "retention" {
				// A second segment, so the first may go.
				want = append(want, appendN(t, l, rng, 2, 1, 300)...)
				if _, err := l.Sync(); err != nil {
					t.Fatal(err)
				}
				if err := l.SetHighWatermark(l.LogEndOffset()); err != nil {
					t.Fatal(err)
				}
			}
			leo, segments, epochs := l.LogEndOffset(), len(l.segments), l.EpochEntries()
			size := l.active.size.Load()
			files, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}

			full(fsys)
			err = tt.op(rng, l)
			if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrFailed) {
				t.Fatalf("err = %v, want ErrNoSpace wrapping ENOSPC, not ErrFailed", err)
			}
			if err := l.usable(); err != nil {
				t.Fatalf("log not usable after a refusal for space: %v", err)
			}
			if got := l.LogEndOffset(); got != leo {
				t.Fatalf("log end offset %d after the refusal, want %d", got, leo)
			}
			if got := l.EpochEntries(); !slices.Equal(got, epochs) {
				t.Fatalf("epoch cache %v after the refusal, want %v", got, epochs)
			}
			if len(l.segments) != segments {
				t.Fatalf("%d segments after the refusal, want %d", len(l.segments), segments)
			}
			if fi, err := os.Stat(l.active.logPath); err != nil || fi.Size() != size {
				t.Fatalf("active segment file holds %v bytes (%v), want %d: a refused write left bytes behind", fi.Size(), err, size)
			}
			after, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(after) != len(files) {
				t.Fatalf("directory holds %d entries after the refusal, %d before", len(after), len(files))
			}
			if got := readAll(t, l, l.LogEndOffset()); !slices.EqualFunc(got, want, bytes.Equal) {
				t.Fatalf("reads after the refusal: %d batches, want the %d written", len(got), len(want))
			}

			// Space comes back: the same log takes appends again.
			fsys.Clear()
			if err := tt.op(rng, l); err != nil {
				t.Fatalf("after space came back: %v", err)
			}
			if tt.name == "roll" && len(l.segments) != segments+1 {
				t.Fatalf("%d segments after the append that should roll, want %d", len(l.segments), segments+1)
			}
			if tt.name == "retention" && l.LogStartOffset() == 0 {
				t.Fatal("retention deleted nothing once space came back")
			}
			more := appendN(t, l, rng, 3, 3, 200)
			if _, err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			all := readAll(t, l, l.LogEndOffset())
			if len(all) < 3 || !slices.EqualFunc(all[len(all)-3:], more, bytes.Equal) {
				t.Fatalf("after space came back: %d batches, not ending with the 3 appended last", len(all))
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			end := l.LogEndOffset()
			l = openLog(t, OSFS{}, dir, opts)
			defer l.Close()
			if l.LogEndOffset() != end {
				t.Fatalf("reopened at %d, want %d", l.LogEndOffset(), end)
			}
			if got := readAll(t, l, end); !slices.EqualFunc(got, all, bytes.Equal) {
				t.Fatalf("after reopen: %d batches, want the %d written", len(got), len(all))
			}
			checkIndexes(t, l)
		})
	}
}

// TestReopenAfterFsyncErrorCutsUnsynced: after a failed fsync the page
// cache still holds the appended batches, and a reopen in the same process
// reads them back as valid. Open with Reopen set must keep only what a
// successful fsync covered, and carry the high watermark over from the
// failed log instead of the older checkpoint, never above what it kept.
func TestReopenAfterFsyncErrorCutsUnsynced(t *testing.T) {
	tests := []struct {
		name string
		// hwAhead sets the high watermark past the synced offset, as a
		// follower's may be (min of the leader's and its own log end).
		hwAhead bool
	}{
		{name: "high watermark below the synced offset"},
		{name: "high watermark past the synced offset", hwAhead: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(testSeed(t), 41))
			clock := newClock()
			opts := smallOptions(t, clock)
			opts.SegmentBytes = 1 << 16
			fsys, dir, l := newFaultLog(t, opts)
			kept := appendN(t, l, rng, 6, 1, 200)
			if err := l.Checkpoint(); err != nil { // a recovery point below the synced offset
				t.Fatal(err)
			}
			kept = append(kept, appendN(t, l, rng, 4, 1, 200)...)
			synced, err := l.Sync()
			if err != nil {
				t.Fatal(err)
			}
			hw := synced - 2
			appendN(t, l, rng, 5, 1, 200)
			if tt.hwAhead {
				hw = l.LogEndOffset() - 1
			}
			if err := l.SetHighWatermark(hw); err != nil {
				t.Fatal(err)
			}
			fsys.Inject(Fault{Op: OpSync, Path: ".log"})
			if _, err := l.Sync(); !errors.Is(err, ErrFailed) {
				t.Fatalf("sync: %v, want the injected failure", err)
			}
			unsyncedEnd := l.LogEndOffset()
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}

			reopen := opts
			reopen.Reopen = l
			l2 := openLog(t, fsys, dir, reopen)
			defer l2.Close()
			if got := l2.LogEndOffset(); got != synced {
				t.Fatalf("reopened log ends at %d, want the synced offset %d (it held %d in the page cache)", got, synced, unsyncedEnd)
			}
			if got := readAll(t, l2, l2.LogEndOffset()); !slices.EqualFunc(got, kept, bytes.Equal) {
				t.Fatalf("reopened log holds %d batches, want the %d synced ones", len(got), len(kept))
			}
			if got, want := l2.HighWatermark(), min(hw, synced); got != want {
				t.Fatalf("high watermark %d after the reopen, want %d", got, want)
			}
			checkIndexes(t, l2)
		})
	}
}

// TestIndexReservedBeforeUse: the active index is sparse past its entries,
// and writing a hole through its mapping on a full file system raises
// SIGBUS. The appender reserves blocks ahead (fallocate), before the write
// that needs them; out of space there, the append is refused with
// ErrNoSpace and nothing changes.
func TestIndexReservedBeforeUse(t *testing.T) {
	clock := newClock()
	opts := smallOptions(t, clock)
	opts.SegmentBytes = 1 << 20
	opts.IndexBytes = 1 << 20
	opts.IndexIntervalBytes = 1 // an entry for every batch but the first
	fsys, _, l := newFaultLog(t, opts)
	defer l.Close()
	appendOne := func() {
		t.Helper()
		if _, _, err := l.AppendLeader(makeBatch(nil, batchSpec{epoch: 1}), 1); err != nil {
			t.Fatal(err)
		}
	}
	appendOne() // reserves the first chunk
	fsys.Inject(Fault{Op: OpAllocate, Err: syscall.ENOSPC, Sticky: true})
	var err error
	for range 2 * reserveChunk / indexEntrySize {
		if _, _, err = l.AppendLeader(makeBatch(nil, batchSpec{epoch: 1}), 1); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrNoSpace) || errors.Is(err, ErrFailed) {
		t.Fatalf("err = %v, want ErrNoSpace once the reserved chunk is used up", err)
	}
	if got, want := l.active.index.entries(), reserveChunk/indexEntrySize; got != want {
		t.Fatalf("refused at %d index entries, want %d: the index was written past what was reserved", got, want)
	}
	leo := l.LogEndOffset()
	if got := l.active.size.Load(); got != leo*int64(len(makeBatch(nil, batchSpec{}))) {
		t.Fatalf("segment holds %d bytes for %d batches", got, leo)
	}
	// Room for less than a chunk: the append reserves what it needs.
	fsys.Clear()
	fsys.Inject(Fault{Op: OpAllocate, Err: syscall.ENOSPC})
	appendOne()
	if l.LogEndOffset() != leo+1 {
		t.Fatalf("log end offset %d after space came back, want %d", l.LogEndOffset(), leo+1)
	}
	if got, want := l.active.index.reserved, int64(l.active.index.entries())*indexEntrySize; got != want {
		t.Fatalf("reserved %d index bytes with no room for a chunk, want %d", got, want)
	}
	checkIndexes(t, l)
}

// TestReopenOnFullDisk: a log that failed is reopened while its disk is
// full. Recovery cannot write its checkpoints; it keeps the recovery point
// it found, opens, and serves what it kept; once space is back the next
// Checkpoint catches up and a later Open finds everything.
func TestReopenOnFullDisk(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 42))
	clock := newClock()
	opts := smallOptions(t, clock)
	opts.SegmentBytes = 1 << 16
	fsys, dir, l := newFaultLog(t, opts)
	appendN(t, l, rng, 5, 1, 200)
	if err := l.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	appendN(t, l, rng, 5, 2, 200)
	synced, err := l.Sync()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetHighWatermark(synced); err != nil {
		t.Fatal(err)
	}
	want := readAll(t, l, synced)
	appendN(t, l, rng, 3, 2, 200)
	fsys.Inject(Fault{Op: OpSync, Path: ".log"})
	if _, err := l.Sync(); !errors.Is(err, ErrFailed) {
		t.Fatalf("sync: %v, want the injected failure", err)
	}
	l.Close()

	// Full: no new file (checkpoints are written to new temporary files),
	// no append to a segment. Rewriting index blocks that exist, as
	// recovery does, still works, as on a real file system without
	// copy-on-write.
	fsys.Inject(Fault{Op: OpWrite, Path: ".log", Err: syscall.ENOSPC, Sticky: true})
	fsys.Inject(Fault{Op: OpCreate, Err: syscall.ENOSPC, Sticky: true})
	reopen := opts
	reopen.Reopen = l
	l2, err := Open(fsys, dir, reopen)
	if err != nil {
		t.Fatalf("open on a full disk: %v", err)
	}
	if l2.LogEndOffset() != synced || l2.HighWatermark() != synced {
		t.Fatalf("opened at end %d, high watermark %d; want %d and %d", l2.LogEndOffset(), l2.HighWatermark(), synced, synced)
	}
	if got := readAll(t, l2, l2.HighWatermark()); !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("serves %d batches, want the %d committed", len(got), len(want))
	}
	if err := l2.Checkpoint(); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("checkpoint on the full disk: %v, want ErrNoSpace", err)
	}

	fsys.Clear()
	more := appendN(t, l2, rng, 2, 3, 200)
	if _, err := l2.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := l2.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	end := l2.LogEndOffset()
	// A crash now (no Close) recovers from the checkpoints written after
	// space came back.
	l3 := crashAndReopen(t, fsys, l2, opts, rand.New(rand.NewPCG(testSeed(t), 43)))
	defer l3.Close()
	if got := readAll(t, l3, l3.LogEndOffset()); l3.LogEndOffset() != end || !slices.EqualFunc(got, append(want, more...), bytes.Equal) {
		t.Fatalf("after the crash: end %d (want %d), %d batches (want %d)", l3.LogEndOffset(), end, len(got), len(want)+len(more))
	}
	checkIndexes(t, l3)
}

// TestNoSpaceAfterATruncation: after a truncation the next append must not
// write where the cut bytes were (regiontrunc_test.go): a cut at the first
// segment's start gives that segment new files, a cut inside a segment makes
// the next append roll, a cut at a later segment's start goes on at the end
// of the segment before. On a full disk each of them is refused with
// ErrNoSpace, never a failed log (which would cost the partition an
// election), and the log goes on once space is back. A crash after each step
// recovers what was fsynced by then.
func TestNoSpaceAfterATruncation(t *testing.T) {
	seed := testSeed(t)
	cuts := []struct {
		name string
		// cut picks the index of the batch truncated at.
		cut func(l *Log, batches [][]byte) int
	}{
		{"at the first segment's start", func(*Log, [][]byte) int { return 0 }},
		{"inside a segment", func(*Log, [][]byte) int { return 4 }},
		{"at a later segment's start", func(l *Log, batches [][]byte) int {
			return slices.IndexFunc(batches, func(b []byte) bool { return record.Header(b).BaseOffset() == l.segments[1].base })
		}},
	}
	// The steps, a crash after each.
	const (
		crashAfterFullTruncate = iota // Truncate on the full disk
		crashAfterFullAppend          // an append on the full disk
		crashAfterSpaceBack           // Truncate again, appends, Sync
	)
	steps := []string{"a truncation on a full disk", "an append on a full disk", "space came back"}
	for _, tc := range cuts {
		for crashAt, step := range steps {
			t.Run(fmt.Sprintf("%s/crash after %s", tc.name, step), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 44))
				opts := smallOptions(t, newClock())
				fsys, _, l := newFaultLog(t, opts)
				// Not checkpointed: the truncation has no recovery point
				// to lower, so what it needs on the full disk is its own.
				old := appendN(t, l, rng, 30, 1, 200)
				if len(l.segments) < 2 {
					t.Fatalf("%d segments, want at least 2", len(l.segments))
				}
				if _, err := l.Sync(); err != nil {
					t.Fatal(err)
				}
				i := tc.cut(l, old)
				from := record.Header(old[i]).BaseOffset()
				refusesTruncate := i == 0
				// want is what the log holds after each step, all of it
				// fsynced.
				var want [][]byte
				crash := func() {
					t.Helper()
					l := crashAndReopen(t, fsys, l, opts, rand.New(rand.NewPCG(seed, 45)))
					defer l.Close()
					if got := readAll(t, l, l.LogEndOffset()); !slices.EqualFunc(got, want, bytes.Equal) {
						t.Fatalf("after a crash: %d batches, want the %d fsynced", len(got), len(want))
					}
					checkIndexes(t, l)
					checkEpochs(t, l, want)
				}
				noSpace := func(op string, err error) {
					t.Helper()
					if !errors.Is(err, ErrNoSpace) || errors.Is(err, ErrFailed) {
						t.Fatalf("%s on a full disk: %v, want ErrNoSpace, not ErrFailed", op, err)
					}
					if err := l.usable(); err != nil {
						t.Fatalf("log not usable after %s was refused for space: %v", op, err)
					}
					if got := readAll(t, l, l.LogEndOffset()); !slices.EqualFunc(got, want, bytes.Equal) {
						t.Fatalf("after %s was refused: %d batches, want %d", op, len(got), len(want))
					}
					checkEpochs(t, l, want)
				}

				fsys.Inject(Fault{Op: OpWrite, Err: syscall.ENOSPC, Partial: true, Sticky: true})
				fsys.Inject(Fault{Op: OpCreate, Err: syscall.ENOSPC, Sticky: true})
				err := l.Truncate(from)
				if refusesTruncate {
					want = old
					noSpace("the truncation", err)
				} else if want = old[:i]; err != nil {
					t.Fatalf("truncate on a full disk: %v", err)
				}
				if crashAt == crashAfterFullTruncate {
					crash()
					return
				}
				_, _, err = l.AppendLeader(makeBatch(rng, batchSpec{epoch: 2, payload: 200}), 2)
				noSpace("an append", err)
				if crashAt == crashAfterFullAppend {
					crash()
					return
				}

				fsys.Clear()
				if err := l.Truncate(from); err != nil {
					t.Fatalf("truncate once space is back: %v", err)
				}
				want = append(slices.Clip(old[:i]), appendN(t, l, rng, 20, 2, 200)...)
				if _, err := l.Sync(); err != nil {
					t.Fatal(err)
				}
				if got := readAll(t, l, l.LogEndOffset()); !slices.EqualFunc(got, want, bytes.Equal) {
					t.Fatalf("once space is back: %d batches, want %d", len(got), len(want))
				}
				checkIndexes(t, l)
				crash()
			})
		}
	}
}

// TestNoSpaceForTheSegmentOfAFullTruncation: TruncateFully (a follower
// below the leader's log start) needs a new segment at the new start. A
// disk that still takes the checkpoints but not that segment's files
// (other partitions filled it meanwhile) refuses the truncation with
// ErrNoSpace and leaves the log as it was, never failed; once space is
// back it goes through. A crash after either step recovers what was
// fsynced by then.
func TestNoSpaceForTheSegmentOfAFullTruncation(t *testing.T) {
	seed := testSeed(t)
	for _, crashAfterRefusal := range []bool{true, false} {
		name := "crash after space came back"
		if crashAfterRefusal {
			name = "crash after the refusal"
		}
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 47))
			opts := smallOptions(t, newClock())
			fsys, _, l := newFaultLog(t, opts)
			want := appendN(t, l, rng, 30, 1, 200)
			if _, err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := l.SetHighWatermark(l.LogEndOffset()); err != nil {
				t.Fatal(err)
			}
			if err := l.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			newStart := l.LogEndOffset() + 100
			wantStart := int64(0)
			crash := func() {
				t.Helper()
				l := crashAndReopen(t, fsys, l, opts, rand.New(rand.NewPCG(seed, 48)))
				defer l.Close()
				if got := l.LogStartOffset(); got != wantStart {
					t.Fatalf("after a crash the log starts at %d, want %d", got, wantStart)
				}
				if got := readAll(t, l, l.LogEndOffset()); !slices.EqualFunc(got, want, bytes.Equal) {
					t.Fatalf("after a crash: %d batches, want the %d fsynced", len(got), len(want))
				}
				checkIndexes(t, l)
				checkEpochs(t, l, want)
			}

			fsys.Inject(Fault{Op: OpCreate, Path: segmentFileName(newStart, logSuffix), Err: syscall.ENOSPC, Sticky: true})
			err := l.TruncateFully(newStart)
			if !errors.Is(err, ErrNoSpace) || errors.Is(err, ErrFailed) {
				t.Fatalf("TruncateFully on a full disk: %v, want ErrNoSpace, not ErrFailed", err)
			}
			if err := l.usable(); err != nil {
				t.Fatalf("log not usable after a refusal for space: %v", err)
			}
			if l.LogStartOffset() != wantStart {
				t.Fatalf("log starts at %d after the refusal, want %d", l.LogStartOffset(), wantStart)
			}
			if got := readAll(t, l, l.LogEndOffset()); !slices.EqualFunc(got, want, bytes.Equal) {
				t.Fatalf("after the refusal: %d batches, want %d", len(got), len(want))
			}
			if crashAfterRefusal {
				crash()
				return
			}

			fsys.Clear()
			if err := l.TruncateFully(newStart); err != nil {
				t.Fatalf("TruncateFully once space is back: %v", err)
			}
			if l.LogStartOffset() != newStart || l.LogEndOffset() != newStart {
				t.Fatalf("log [%d, %d) after TruncateFully(%d)", l.LogStartOffset(), l.LogEndOffset(), newStart)
			}
			wantStart = newStart
			want = nil
			for range 20 {
				b := makeBatch(rng, batchSpec{base: l.LogEndOffset(), epoch: 2, payload: 200})
				if err := l.AppendFollower(b, 2); err != nil {
					t.Fatal(err)
				}
				want = append(want, b)
			}
			if _, err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			checkIndexes(t, l)
			crash()
		})
	}
}

// TestNoSpaceRenamingACheckpoint: rename(2) is refused for space (ENOSPC,
// EDQUOT) when the directory has no room for the new entry. A checkpoint
// refused there is refused like one whose write was: the file in place
// stays, its temporary file is removed, the call returns ErrNoSpace and
// the log stays usable; the next Checkpoint writes it.
func TestNoSpaceRenamingACheckpoint(t *testing.T) {
	seed := testSeed(t)
	for _, name := range []string{epochCheckpointFile, hwCheckpointFile, recoveryPointFile} {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 49))
			opts := smallOptions(t, newClock())
			fsys, dir, l := newFaultLog(t, opts)
			want := appendN(t, l, rng, 5, 1, 200)
			if _, err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := l.SetHighWatermark(l.LogEndOffset()); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, name)
			before, err := os.ReadFile(path)
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}

			fsys.Inject(Fault{Op: OpRename, Path: name + tmpSuffix, Err: syscall.ENOSPC})
			err = l.Checkpoint()
			if !errors.Is(err, ErrNoSpace) || errors.Is(err, ErrFailed) {
				t.Fatalf("checkpoint whose rename is refused for space: %v, want ErrNoSpace, not ErrFailed", err)
			}
			if err := l.usable(); err != nil {
				t.Fatalf("log not usable after a refusal for space: %v", err)
			}
			if after, err := os.ReadFile(path); !bytes.Equal(after, before) || (err != nil && !os.IsNotExist(err)) {
				t.Fatalf("%s holds %q (%v) after the refusal, %q before", name, after, err, before)
			}
			if _, err := os.Stat(path + tmpSuffix); !os.IsNotExist(err) {
				t.Fatalf("the refused checkpoint's temporary file is still there (%v)", err)
			}

			if err := l.Checkpoint(); err != nil {
				t.Fatalf("checkpoint once space is back: %v", err)
			}
			if l.CheckpointPending() {
				t.Fatal("checkpoint pending after a checkpoint that succeeded")
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = openLog(t, OSFS{}, dir, opts)
			defer l.Close()
			if got := readAll(t, l, l.LogEndOffset()); !slices.EqualFunc(got, want, bytes.Equal) {
				t.Fatalf("after a reopen: %d batches, want %d", len(got), len(want))
			}
			if l.HighWatermark() != l.LogEndOffset() {
				t.Fatalf("high watermark %d after a reopen, want %d", l.HighWatermark(), l.LogEndOffset())
			}
		})
	}
}

// crashAndReopen crashes fsys under l (what no fsync covered may be lost),
// closes l, and opens what a crash left, rebuilt by rng, on the real disk.
func crashAndReopen(t *testing.T, fsys *FaultFS, l *Log, opts Options, rng *rand.Rand) *Log {
	t.Helper()
	fsys.Crash()
	l.Close()
	crashed := filepath.Join(t.TempDir(), "p0")
	if err := fsys.Reconstruct(filepath.Dir(crashed), rng); err != nil {
		t.Fatal(err)
	}
	return openLog(t, OSFS{}, crashed, opts)
}

// TestNoSpaceToRebuildAnIndex: Open finds indexes it must rebuild (lost
// entries, in a sealed segment and in the active one) on a full disk, where
// a rebuilt index larger than its file cannot be written. The indexes only
// speed up reads, so Open proceeds without them rather than keep the
// partition offline until space returns: it serves every batch, refuses
// appends for space, and once space is back the next Open rebuilds them.
func TestNoSpaceToRebuildAnIndex(t *testing.T) {
	clock := newClock()
	opts := smallOptions(t, clock)
	root := t.TempDir()
	dir := filepath.Join(root, "p0")
	batches := buildClosedLog(t, dir, opts)
	idx := segmentFiles(t, dir, indexSuffix)
	truncateFile(t, idx[1], 1<<20)
	truncateFile(t, idx[len(idx)-1], 1<<20)

	fsys, err := NewFaultFS(root)
	if err != nil {
		t.Fatal(err)
	}
	fsys.Inject(Fault{Op: OpWrite, Err: syscall.ENOSPC, Sticky: true})
	fsys.Inject(Fault{Op: OpAllocate, Err: syscall.ENOSPC, Sticky: true})
	fsys.Inject(Fault{Op: OpCreate, Err: syscall.ENOSPC, Sticky: true})
	l, err := Open(fsys, dir, opts)
	if err != nil {
		t.Fatalf("open on a full disk: %v", err)
	}
	if got := readAll(t, l, l.LogEndOffset()); !slices.EqualFunc(got, batches, bytes.Equal) {
		t.Fatal("content differs on the full disk")
	}
	if _, _, err := l.AppendLeader(makeBatch(nil, batchSpec{epoch: 1}), 1); !errors.Is(err, ErrNoSpace) || errors.Is(err, ErrFailed) {
		t.Fatalf("append on the full disk: %v, want ErrNoSpace", err)
	}
	fsys.Clear()
	more := makeBatch(nil, batchSpec{epoch: 1, payload: 150})
	if _, _, err := l.AppendLeader(more, 1); err != nil {
		t.Fatalf("append once space is back: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, fsys, dir, opts)
	defer l.Close()
	if got := readAll(t, l, l.LogEndOffset()); !slices.EqualFunc(got, append(batches, more), bytes.Equal) {
		t.Fatal("content differs after space came back")
	}
	checkIndexes(t, l)
}
