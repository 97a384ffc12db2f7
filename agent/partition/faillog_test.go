package partition

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/segstore"
)

// fakeNow is a settable clock for the loop's decisions (Deps.Now).
type fakeNow struct{ t time.Time }

func (c *fakeNow) now() time.Time { return c.t }

// faultFSReplica is a replica of t/0 with a log on a FaultFS and a fake
// clock, its syncer started and its loop not: the test drives it. deps
// gets the FS, the clock, the log options and a null logger.
func faultFSReplica(t *testing.T, deps *Deps) (*Replica, *segstore.FaultFS, *fakeNow) {
	t.Helper()
	r, fsys, clock := newFaultFSReplica(t, deps)
	r.startSyncer(r.CurrentLog())
	t.Cleanup(func() {
		r.cancel()
		if !r.logFailed {
			close(r.syncerStop)
			r.CurrentLog().Close()
		}
	})
	return r, fsys, clock
}

// newFaultFSReplica is faultFSReplica without the syncer and the cleanup,
// for a test that starts the replica's loop (start) and stops it.
func newFaultFSReplica(t *testing.T, deps *Deps) (*Replica, *segstore.FaultFS, *fakeNow) {
	t.Helper()
	root := t.TempDir()
	fsys, err := segstore.NewFaultFS(root)
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeNow{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	opts := segstore.Options{SegmentBytes: 1 << 20, IndexIntervalBytes: 256, IndexBytes: 4096, Logger: hclog.NewNullLogger()}
	deps.Log, deps.Now, deps.FS, deps.LogOptions = hclog.NewNullLogger(), clock.now, fsys, opts
	dir := filepath.Join(root, "t-0")
	log, _, err := openPartitionLog(fsys, dir, opts, func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	return newReplica(deps, "t", 0, "id", dir, log, false), fsys, clock
}

// TestFailedLogRecovery drives one replica's failure handling by hand: a
// second failure report for a log already failed (a queued sync answering
// after a failed reopen) is ignored instead of panicking; the reopen cuts
// what no successful fsync covered and keeps the high watermark; a reopened
// replica holds back its campaigns, longer after each failure, until its
// log has held up for failBackoffReset.
func TestFailedLogRecovery(t *testing.T) {
	r, fsys, clock := faultFSReplica(t, &Deps{Self: "n1"})
	log := r.CurrentLog()

	appendLeader(t, log, 1, "a", "b")
	synced, err := log.Sync()
	if err != nil || synced != 2 {
		t.Fatalf("sync: %d, %v", synced, err)
	}
	if err := log.SetHighWatermark(2); err != nil {
		t.Fatal(err)
	}
	appendLeader(t, log, 1, "c", "d")
	fsys.Inject(segstore.Fault{Op: segstore.OpSync, Path: ".log"})
	_, syncErr := log.Sync()
	if !errors.Is(syncErr, segstore.ErrFailed) {
		t.Fatalf("sync: %v, want the injected failure", syncErr)
	}

	r.failLog(fmt.Errorf("fsync: %w", syncErr))
	if !r.logFailed {
		t.Fatal("log not marked failed")
	}
	// The reopen fails (the parent directory cannot be synced) and the
	// failed log stays current...
	fsys.Inject(segstore.Fault{Op: segstore.OpSyncDir, Sticky: true})
	r.reopen()
	if !r.logFailed || r.CurrentLog() != log {
		t.Fatal("a failed reopen replaced the log")
	}
	// ...when the sync result of that log arrives: a second failure.
	r.onSyncResult(syncResult{log: log, err: syncErr})

	fsys.Clear()
	clock.t = clock.t.Add(reopenBackoff)
	r.reopen()
	if r.logFailed {
		t.Fatal("reopen did not succeed")
	}
	reopened := r.CurrentLog()
	if reopened.LogEndOffset() != 2 || reopened.HighWatermark() != 2 {
		t.Fatalf("reopened log: end %d, high watermark %d; want 2 and 2 (the synced batch, its committed offsets)",
			reopened.LogEndOffset(), reopened.HighWatermark())
	}
	if r.dataLoss {
		t.Fatal("a cut above the high watermark counted as data loss")
	}
	if want := clock.t.Add(failBackoffMin); !r.campaignRetryAt.Equal(want) {
		t.Fatalf("campaigns held until %v, want %v", r.campaignRetryAt, want)
	}

	// Failures in a row double the hold, up to failBackoffMax.
	holds := []time.Duration{}
	for range 7 {
		clock.t = clock.t.Add(10 * time.Second)
		r.failLog(errors.New("injected"))
		clock.t = clock.t.Add(reopenBackoff)
		r.reopen()
		if r.logFailed {
			t.Fatal("reopen did not succeed")
		}
		holds = append(holds, r.campaignRetryAt.Sub(clock.t))
	}
	want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second, 30 * time.Second}
	if !slices.Equal(holds, want) {
		t.Fatalf("campaign holds %v, want %v", holds, want)
	}
	// A log that held up long enough starts over at the minimum.
	clock.t = clock.t.Add(failBackoffReset)
	r.failLog(errors.New("injected"))
	r.reopen()
	if got := r.campaignRetryAt.Sub(clock.t); got != failBackoffMin {
		t.Fatalf("campaign hold %v after a long healthy run, want %v", got, failBackoffMin)
	}
}
