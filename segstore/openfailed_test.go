package segstore

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestOpenFailsWhenRecoveryWritesFail: every failed write of recovery's own
// (the cut of a torn tail, an fsync, the recovery point) fails Open with
// the cause, returns no log, keeps no descriptor open and retries no fsync;
// opened again without the fault, the log is whole.
//
// One of them could not come back as an error: recovery's writes go
// through the log's file cache, and an fsync that the cache runs to close a
// file its eviction chose fails the log instead. Here recovery rewrites the
// index of the recovery point's segment without an fsync of its own
// (nothing above the recovery point is in it), and the next segment's files
// evict it. Open returned the log, failed, with a nil error: its owner went
// on with a log that refuses every write, and recovery had written a
// recovery point after the failed fsync.
func TestOpenFailsWhenRecoveryWritesFail(t *testing.T) {
	index0 := segmentFileName(0, indexSuffix)
	tests := []struct {
		name  string
		fault func(seg1 int64) Fault
		// synced is a file whose failed fsync must not run again.
		synced func(seg1 int64) string
	}{
		{
			name:   "fsync of an evicted index",
			fault:  func(int64) Fault { return Fault{Op: OpSync, Path: index0} },
			synced: func(int64) string { return index0 },
		},
		{
			name:  "cut of the torn tail",
			fault: func(seg1 int64) Fault { return Fault{Op: OpTruncate, Path: segmentFileName(seg1, logSuffix)} },
		},
		{
			name:   "fsync of the cut segment",
			fault:  func(seg1 int64) Fault { return Fault{Op: OpSync, Path: segmentFileName(seg1, logSuffix)} },
			synced: func(seg1 int64) string { return segmentFileName(seg1, logSuffix) },
		},
		{
			name:  "recovery point",
			fault: func(int64) Fault { return Fault{Op: OpRename, Path: recoveryPointFile} },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "p0")
			opts := smallOptions(t, newClock())
			l := openLog(t, OSFS{}, dir, opts)
			for len(l.segments) < 2 {
				if _, _, err := l.AppendLeader(makeBatch(nil, batchSpec{epoch: 1, payload: 700}), 1); err != nil {
					t.Fatal(err)
				}
			}
			seg0, seg1 := l.segments[0], l.segments[1]
			// What a Checkpoint after a sync of the full first segment
			// writes, before the next append rolls.
			rp := logPosition{offset: seg0.next.Load(), segmentBase: seg0.base, pos: seg0.size.Load()}
			leo := l.LogEndOffset()
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if err := writeRecoveryPoint(OSFS{}, dir, rp); err != nil {
				t.Fatal(err)
			}
			// A torn batch at the end, for recovery to cut.
			f, err := os.OpenFile(filepath.Join(dir, segmentFileName(seg1.base, logSuffix)), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(makeBatch(nil, batchSpec{base: leo, epoch: 1, payload: 50})[:40]); err != nil {
				t.Fatal(err)
			}
			f.Close()

			ffs, err := NewFaultFS(root)
			if err != nil {
				t.Fatal(err)
			}
			opts.Files = NewFileCache(1)
			ffs.Inject(tt.fault(seg1.base))
			l2, err := Open(ffs, dir, opts)
			if err == nil {
				appendErr := l2.AppendFollower(makeBatch(nil, batchSpec{base: l2.LogEndOffset(), epoch: 1, payload: 10}), 1)
				l2.Close()
				t.Fatalf("Open returned a log and no error; its failure: %v; an append: %v", l2.failure.Load(), appendErr)
			}
			t.Logf("Open: %v", err)
			if l2 != nil {
				t.Fatalf("Open returned a log with its error %v", err)
			}
			if !errors.Is(err, ErrInjected) {
				t.Fatalf("Open's error %v does not wrap the injected fault", err)
			}
			if n := opts.Files.Open(); n != 0 {
				t.Fatalf("%d descriptors still open after a failed Open", n)
			}
			if tt.synced != nil {
				if n := ffs.SyncCalls(filepath.Join(dir, tt.synced(seg1.base))); n != 1 {
					t.Fatalf("the failed fsync of %s ran %d times, want once (never retried)", tt.synced(seg1.base), n)
				}
			}
			if got, _, err := (checkpointReader{fs: ffs, dir: dir}).recoveryPoint(); err != nil || got != rp {
				t.Fatalf("recovery point after the failed Open: %v (%v), want %v untouched", got, err, rp)
			}

			l3 := openLog(t, ffs, dir, opts)
			defer l3.Close()
			if l3.LogEndOffset() != leo {
				t.Fatalf("reopened at %d, the log ended at %d", l3.LogEndOffset(), leo)
			}
		})
	}
}
