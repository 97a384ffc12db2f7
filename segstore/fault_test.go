package segstore

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/logagent/logagent/record"
)

func newFaultLog(t *testing.T, opts Options) (*FaultFS, string, *Log) {
	t.Helper()
	root := t.TempDir()
	fsys, err := NewFaultFS(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "p0")
	return fsys, dir, openLog(t, fsys, dir, opts)
}

// TestFsyncErrorIsFatal: after a failed fsync the log refuses everything,
// every caller waiting on that fsync sees the error, and the fsync is never
// retried.
func TestFsyncErrorIsFatal(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 20))
	clock := newClock()
	opts := smallOptions(t, clock)
	opts.SegmentBytes = 1 << 20
	opts.IndexBytes = 1 << 12
	fsys, dir, l := newFaultLog(t, opts)
	kept := appendN(t, l, rng, 10, 1, 100)
	if _, err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	logPath := l.active.logPath
	syncsBefore := fsys.SyncCalls(logPath)
	appendN(t, l, rng, 10, 1, 100)

	fsys.Inject(Fault{Op: OpSync, Path: logPath})
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = l.Sync()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, ErrFailed) {
			t.Fatalf("sync caller %d: %v, want ErrFailed", i, err)
		}
	}
	if _, err := l.Sync(); !errors.Is(err, ErrFailed) || !errors.Is(err, ErrInjected) {
		t.Fatalf("sync after failure: %v, want ErrFailed wrapping the fsync error", err)
	}
	var fe *FailedError
	if _, err := l.Sync(); !errors.As(err, &fe) || !errors.Is(fe.Err, ErrInjected) {
		t.Fatalf("not a FailedError with the cause: %v", err)
	}
	calls := []struct {
		name string
		call func() error
	}{
		{"append leader", func() error { _, _, err := l.AppendLeader(makeBatch(rng, batchSpec{epoch: 1}), 1); return err }},
		{"append follower", func() error {
			return l.AppendFollower(makeBatch(rng, batchSpec{base: l.LogEndOffset(), epoch: 1}), 1)
		}},
		{"sync", func() error { _, err := l.Sync(); return err }},
		{"checkpoint", l.Checkpoint},
		{"truncate", func() error { return l.Truncate(1) }},
		{"truncate fully", func() error { return l.TruncateFully(100) }},
		{"retention", func() error { _, err := l.ApplyRetention(5); return err }},
		{"read", func() error { _, err := l.Read(0, 100, 10); return err }},
		{"assign epoch", func() error { return l.AssignEpoch(2, l.LogEndOffset()) }},
	}
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, ErrFailed) {
			t.Errorf("%s on a failed log: %v, want ErrFailed", c.name, err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatalf("close of a failed log: %v", err)
	}
	if got := fsys.SyncCalls(logPath) - syncsBefore; got != 1 {
		t.Fatalf("the log file saw %d fsyncs after the failure point, want exactly the one that failed", got)
	}

	// Reopening recovers from disk; the batches synced before are there.
	l = openLog(t, OSFS{}, dir, opts)
	defer l.Close()
	got := readAll(t, l, l.LogEndOffset())
	if len(got) < len(kept) || !slices.EqualFunc(got[:len(kept)], kept, bytes.Equal) {
		t.Fatalf("after reopen: %d batches, the %d synced ones not all there", len(got), len(kept))
	}
}

func TestWriteAndMetadataErrorsAreFatal(t *testing.T) {
	tests := []struct {
		name  string
		fault func(l *Log) Fault
		op    func(t *testing.T, l *Log) error
	}{
		{
			name:  "torn write",
			fault: func(l *Log) Fault { return Fault{Op: OpWrite, Path: ".log", Partial: true} },
			op: func(t *testing.T, l *Log) error {
				_, _, err := l.AppendLeader(makeBatch(nil, batchSpec{epoch: 1, payload: 500}), 1)
				return err
			},
		},
		{
			name:  "rename of a checkpoint",
			fault: func(l *Log) Fault { return Fault{Op: OpRename} },
			op:    func(t *testing.T, l *Log) error { return l.Checkpoint() },
		},
		{
			name:  "directory fsync after a roll",
			fault: func(l *Log) Fault { return Fault{Op: OpSyncDir} },
			op: func(t *testing.T, l *Log) error {
				for l.active.base == 0 {
					if _, _, err := l.AppendLeader(makeBatch(nil, batchSpec{epoch: 1, payload: 500}), 1); err != nil {
						return err
					}
				}
				_, err := l.Sync()
				return err
			},
		},
		{
			name:  "segment creation",
			fault: func(l *Log) Fault { return Fault{Op: OpCreate, Path: ".log"} },
			op: func(t *testing.T, l *Log) error {
				for range 100 {
					if _, _, err := l.AppendLeader(makeBatch(nil, batchSpec{epoch: 1, payload: 500}), 1); err != nil {
						return err
					}
				}
				return nil
			},
		},
		{
			name:  "truncation",
			fault: func(l *Log) Fault { return Fault{Op: OpTruncate, Path: ".log"} },
			op:    func(t *testing.T, l *Log) error { return l.Truncate(2) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newClock()
			fsys, dir, l := newFaultLog(t, smallOptions(t, clock))
			want := appendN(t, l, rand.New(rand.NewPCG(1, 2)), 5, 1, 100)
			if _, err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			fsys.Inject(tt.fault(l))
			err := tt.op(t, l)
			if !errors.Is(err, ErrFailed) || !errors.Is(err, ErrInjected) {
				t.Fatalf("err = %v, want ErrFailed wrapping the injected error", err)
			}
			if _, _, err := l.AppendLeader(makeBatch(nil, batchSpec{epoch: 1}), 1); !errors.Is(err, ErrFailed) {
				t.Fatalf("append after failure: %v", err)
			}
			l.Close()
			l = openLog(t, OSFS{}, dir, smallOptions(t, clock))
			defer l.Close()
			got := readAll(t, l, l.LogEndOffset())
			if len(got) < len(want) || !slices.EqualFunc(got[:len(want)], want, bytes.Equal) {
				t.Fatalf("after reopen: %d batches, the synced ones missing", len(got))
			}
			checkIndexes(t, l)
		})
	}
}

// buildClosedLog makes a closed log of several segments and returns its
// batches.
func buildClosedLog(t *testing.T, dir string, opts Options) [][]byte {
	t.Helper()
	l := openLog(t, OSFS{}, dir, opts)
	batches := appendN(t, l, rand.New(rand.NewPCG(3, 4)), 60, 1, 150)
	if len(l.segments) < 4 {
		t.Fatalf("%d segments", len(l.segments))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return batches
}

func segmentFiles(t *testing.T, dir, suffix string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+suffix))
	if err != nil || len(m) == 0 {
		t.Fatalf("glob: %v %v", m, err)
	}
	slices.Sort(m)
	return m
}

func flipByte(t *testing.T, path string, fromEnd int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[int64(len(b))-fromEnd] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func truncateFile(t *testing.T, path string, by int64) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, max(fi.Size()-by, 0)); err != nil {
		t.Fatal(err)
	}
}

// TestDamageBelowRecoveryPoint: damage to data that was durable is reported
// as data loss (or cut on request), never silently cut.
func TestDamageBelowRecoveryPoint(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, dir string)
	}{
		{"flipped byte at the end of a sealed segment", func(t *testing.T, dir string) {
			flipByte(t, segmentFiles(t, dir, logSuffix)[1], 3)
		}},
		{"sealed segment cut short", func(t *testing.T, dir string) {
			truncateFile(t, segmentFiles(t, dir, logSuffix)[1], 10)
		}},
		{"middle segment missing", func(t *testing.T, dir string) {
			os.Remove(segmentFiles(t, dir, logSuffix)[2])
		}},
		{"flipped byte just below the recovery point", func(t *testing.T, dir string) {
			logs := segmentFiles(t, dir, logSuffix)
			flipByte(t, logs[len(logs)-1], 3)
		}},
		{"last segment cut short", func(t *testing.T, dir string) {
			logs := segmentFiles(t, dir, logSuffix)
			truncateFile(t, logs[len(logs)-1], 1)
		}},
		{"last segment missing", func(t *testing.T, dir string) {
			logs := segmentFiles(t, dir, logSuffix)
			os.Remove(logs[len(logs)-1])
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newClock()
			opts := smallOptions(t, clock)
			dir := t.TempDir()
			batches := buildClosedLog(t, dir, opts)
			tt.damage(t, dir)

			_, err := Open(OSFS{}, dir, opts)
			var loss *DataLossError
			if !errors.As(err, &loss) || !errors.Is(err, ErrDataLoss) {
				t.Fatalf("open: %v, want a DataLossError", err)
			}
			t.Logf("reported: %v", loss)

			opts.RepairDataLoss = true
			l := openLog(t, OSFS{}, dir, opts)
			defer l.Close()
			if l.DataLoss() == nil || l.DataLoss().Offset != loss.Offset {
				t.Fatalf("repaired log reports %v, Open reported %v", l.DataLoss(), loss)
			}
			got := readAll(t, l, l.LogEndOffset())
			if l.LogEndOffset() != loss.Offset || !slices.EqualFunc(got, batches[:len(got)], bytes.Equal) {
				t.Fatalf("repaired log ends at %d with %d batches; loss at %d", l.LogEndOffset(), len(got), loss.Offset)
			}
			checkIndexes(t, l)
		})
	}
}

// TestDamagedIndexIsRebuilt: an index that does not match its log is not
// data loss: Open rebuilds it.
func TestDamagedIndexIsRebuilt(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"garbage entry", func(t *testing.T, path string) { flipByte(t, path, 2) }},
		{"entries lost", func(t *testing.T, path string) { truncateFile(t, path, 16) }},
		{"missing", func(t *testing.T, path string) { os.Remove(path) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newClock()
			opts := smallOptions(t, clock)
			dir := t.TempDir()
			batches := buildClosedLog(t, dir, opts)
			idx := segmentFiles(t, dir, indexSuffix)
			tt.damage(t, idx[1])
			tt.damage(t, idx[len(idx)-1])
			l := openLog(t, OSFS{}, dir, opts)
			defer l.Close()
			if got := readAll(t, l, l.LogEndOffset()); !slices.EqualFunc(got, batches, bytes.Equal) {
				t.Fatal("content differs")
			}
			checkIndexes(t, l)
		})
	}
}

// TestMisplacedIndexEntryIsNotFollowed: a sealed segment's index entry
// that is not the last has its position moved one byte into its batch (the
// entries still increase, so Open keeps the index: it checks the last
// entry only). Reads of every offset, one batch or many, still return whole
// batches: the bound of a read was walked from the entry unchecked, and
// every read through it failed.
func TestMisplacedIndexEntryIsNotFollowed(t *testing.T) {
	opts := smallOptions(t, newClock())
	dir := t.TempDir()
	batches := buildClosedLog(t, dir, opts)
	idx := segmentFiles(t, dir, indexSuffix)[1]
	b, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 4*indexEntrySize {
		t.Fatalf("setup: an index of %d bytes", len(b))
	}
	b[2*indexEntrySize+7]++ // the third entry's position, plus one
	if err := os.WriteFile(idx, b, 0o644); err != nil {
		t.Fatal(err)
	}
	l := openLog(t, OSFS{}, dir, opts)
	defer l.Close()
	for _, maxBytes := range []int64{1, 300, 1 << 20} {
		for off := l.LogStartOffset(); off < l.LogEndOffset(); off++ {
			region, err := l.ReadBytes(off, maxBytes, l.LogEndOffset())
			if err != nil {
				t.Fatalf("read at %d (max %d bytes): %v", off, maxBytes, err)
			}
			if _, err := record.SplitBatches(region, 0); err != nil {
				t.Fatalf("read at %d (max %d bytes): %v", off, maxBytes, err)
			}
		}
	}
	if got := readAll(t, l, l.LogEndOffset()); !slices.EqualFunc(got, batches, bytes.Equal) {
		t.Fatal("content differs")
	}
}

// TestTornTailIsCut: above the recovery point a torn or corrupt tail is an
// interrupted write and is cut, with every later segment.
func TestTornTailIsCut(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, dir string)
		// keep is how many of the batches appended after the checkpoint
		// survive, counted from the end of the log (negative: dropped).
		dropped int
	}{
		{"torn last batch", func(t *testing.T, dir string) {
			logs := segmentFiles(t, dir, logSuffix)
			truncateFile(t, logs[len(logs)-1], 7)
		}, 1},
		{"corrupt last batch", func(t *testing.T, dir string) {
			logs := segmentFiles(t, dir, logSuffix)
			flipByte(t, logs[len(logs)-1], 1)
		}, 1},
		{"zeros after the last batch", func(t *testing.T, dir string) {
			logs := segmentFiles(t, dir, logSuffix)
			f, _ := os.OpenFile(logs[len(logs)-1], os.O_APPEND|os.O_WRONLY, 0)
			f.Write(make([]byte, 300))
			f.Close()
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newClock()
			opts := smallOptions(t, clock)
			dir := t.TempDir()
			l := openLog(t, OSFS{}, dir, opts)
			rng := rand.New(rand.NewPCG(5, 6))
			batches := appendN(t, l, rng, 20, 1, 150)
			if _, err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := l.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			batches = append(batches, appendN(t, l, rng, 10, 1, 150)...)
			// Abandon the log without closing it cleanly: a crash.
			l.failure.Store(&FailedError{Err: errors.New("test crash")})
			l.Close()
			tt.damage(t, dir)
			l = openLog(t, OSFS{}, dir, opts)
			defer l.Close()
			got := readAll(t, l, l.LogEndOffset())
			want := batches[:len(batches)-tt.dropped]
			if !slices.EqualFunc(got, want, bytes.Equal) {
				t.Fatalf("%d batches after recovery, want %d", len(got), len(want))
			}
			if last := record.Header(want[len(want)-1]); l.LogEndOffset() != last.NextOffset() {
				t.Fatalf("LEO %d, want %d", l.LogEndOffset(), last.NextOffset())
			}
			checkIndexes(t, l)
		})
	}
}

// TestReadIOErrorIsNotCorruption: a read that cannot open a segment's file
// (the cache closed its idle descriptor; descriptors ran out) fails with
// the I/O error, not as corrupt data: it reported "corrupt data in ... at
// position 0" (ErrCorrupt) and logged that the index did not match the
// log before walking the segment again.
func TestReadIOErrorIsNotCorruption(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 62))
	opts := smallOptions(t, newClock())
	fsys, _, l := newFaultLog(t, opts)
	defer l.Close()
	batches := appendN(t, l, rng, 60, 1, 200)
	if len(l.segments) < 4 {
		t.Fatalf("%d segments, want at least 4 (the cache holds 3 files)", len(l.segments))
	}
	// The middle of the first segment: its file was closed when later
	// segments were written, and an index entry comes before the batch.
	first := l.segments[0]
	i := slices.IndexFunc(batches, func(b []byte) bool { return record.Header(b).NextOffset() >= l.segments[1].base }) - 1
	fsys.Inject(Fault{Op: OpOpen, Path: segmentFileName(first.base, logSuffix), Sticky: true})
	_, err := l.ReadBytes(record.Header(batches[i]).BaseOffset(), 1<<20, l.LogEndOffset())
	if err == nil || errors.Is(err, ErrCorrupt) || !errors.Is(err, ErrInjected) {
		t.Fatalf("read of a segment whose file cannot be opened: %v; want the open's error, not ErrCorrupt", err)
	}
	fsys.Clear()
	if got, err := l.ReadBytes(record.Header(batches[i]).BaseOffset(), 1<<20, l.LogEndOffset()); err != nil || !bytes.HasPrefix(got, batches[i]) {
		t.Fatalf("read again: %d bytes, %v", len(got), err)
	}
}
