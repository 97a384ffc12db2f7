package segstore

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// blockCheckpointFS is a FaultFS whose first creation of a checkpoint's
// temporary file, once armed, blocks until released, and which counts the
// checkpoint files renamed into place.
type blockCheckpointFS struct {
	*FaultFS
	mu      sync.Mutex
	armed   bool
	renames int
	entered chan struct{}
	release chan struct{}
}

func (g *blockCheckpointFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	g.mu.Lock()
	block := g.armed && flag&os.O_CREATE != 0 && strings.HasSuffix(name, tmpSuffix)
	if block {
		g.armed = false
	}
	g.mu.Unlock()
	if block {
		close(g.entered)
		<-g.release
	}
	return g.FaultFS.OpenFile(name, flag, perm)
}

func (g *blockCheckpointFS) Rename(oldpath, newpath string) error {
	err := g.FaultFS.Rename(oldpath, newpath)
	if err == nil && strings.HasSuffix(oldpath, tmpSuffix) {
		g.mu.Lock()
		g.renames++
		g.mu.Unlock()
	}
	return err
}

func (g *blockCheckpointFS) checkpointRenames() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.renames
}

// TestCloseOfAFailedLogWaitsForACheckpointInFlight: the agent writes a
// log's checkpoint off the replica's loop, and the loop closes a log that
// failed (an fsync error of its syncer) without waiting for it, then opens
// the directory again with Options.Reopen. Close of a failed log skipped
// metaMu, the lock of the checkpoint files, so it returned while that
// Checkpoint was still replacing them: the old log wrote recovery-point,
// hw-checkpoint and leader-epoch-checkpoint (and their .tmp files, which
// the new Open removes) beside the recovery of the new one. Close must
// return only once no checkpoint of the log is writing.
func TestCloseOfAFailedLogWaitsForACheckpointInFlight(t *testing.T) {
	root := t.TempDir()
	ffs, err := NewFaultFS(root)
	if err != nil {
		t.Fatal(err)
	}
	g := &blockCheckpointFS{FaultFS: ffs, entered: make(chan struct{}), release: make(chan struct{})}
	opts := smallOptions(t, newClock())
	opts.Files = NewFileCache(1024) // no eviction fsyncs
	dir := filepath.Join(root, "p0")
	l := openLog(t, g, dir, opts)
	for i := range 3 {
		if _, _, err := l.AppendLeader(makeBatch(nil, batchSpec{epoch: 1, payload: 100}), 1); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if _, err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := l.SetHighWatermark(l.LogEndOffset()); err != nil {
		t.Fatal(err)
	}

	// The replica's checkpoint, off its loop: it blocks in its first file.
	g.mu.Lock()
	g.armed = true
	g.mu.Unlock()
	checkpointDone := make(chan error, 1)
	go func() { checkpointDone <- l.Checkpoint() }()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the checkpoint never wrote a file")
	}

	// Meanwhile the syncer's fsync fails: the log fails, and the loop
	// closes it.
	if _, _, err := l.AppendLeader(makeBatch(nil, batchSpec{epoch: 1, payload: 100}), 1); err != nil {
		t.Fatal(err)
	}
	ffs.Inject(Fault{Op: OpSync, Path: l.active.logPath})
	if _, err := l.Sync(); err == nil {
		t.Fatal("the injected fsync error did not fail the sync")
	}
	closeDone := make(chan error, 1)
	go func() { closeDone <- l.Close() }()
	renamesAtClose := -1
	select {
	case <-closeDone:
		// Close returned with the checkpoint still in its first file.
		renamesAtClose = g.checkpointRenames()
		close(g.release)
	case <-time.After(500 * time.Millisecond):
		// Close waits for the checkpoint: let it go on.
		close(g.release)
		<-closeDone
		renamesAtClose = g.checkpointRenames()
	}
	err = <-checkpointDone
	t.Logf("checkpoint: %v; checkpoint files replaced: %d when Close returned, %d in all", err, renamesAtClose, g.checkpointRenames())
	if after := g.checkpointRenames() - renamesAtClose; after > 0 {
		t.Fatalf("the closed log replaced %d checkpoint files after Close returned, when its owner may already be recovering the directory", after)
	}
	if err := l.Checkpoint(); err != ErrClosed {
		t.Fatalf("Checkpoint after Close: %v, want ErrClosed", err)
	}
}
