package partition

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/segstore"
)

// concurrentSyncDirs is an FS whose SyncDir takes a while and which
// records how many were in progress at once: every checkpoint file ends
// with one.
type concurrentSyncDirs struct {
	segstore.FS
	now, most atomic.Int64
}

func (f *concurrentSyncDirs) SyncDir(dir string) error {
	n := f.now.Add(1)
	defer f.now.Add(-1)
	for {
		most := f.most.Load()
		if n <= most || f.most.CompareAndSwap(most, n) {
			break
		}
	}
	time.Sleep(5 * time.Millisecond)
	return f.FS.SyncDir(dir)
}

// TestCheckpointsBoundedPerAgent: replicas whose checkpoints all come due
// at once (a failover's new leaderships) write at most
// checkpointConcurrency of them at a time, and every one gets written.
func TestCheckpointsBoundedPerAgent(t *testing.T) {
	const replicas = 4 * checkpointConcurrency
	root := t.TempDir()
	fsys := &concurrentSyncDirs{FS: segstore.OSFS{}}
	opts := segstore.Options{SegmentBytes: 1 << 20, IndexIntervalBytes: 256, IndexBytes: 4096, Logger: hclog.NewNullLogger()}
	deps := &Deps{Self: "n1", Log: hclog.NewNullLogger(), Now: time.Now, FS: fsys, LogOptions: opts,
		checkpoints: make(chan struct{}, checkpointConcurrency)}
	var all []*Replica
	for p := range replicas {
		dir := filepath.Join(root, fmt.Sprintf("t-%d", p))
		log, _, err := openPartitionLog(fsys, dir, opts, func() error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { log.Close() })
		appendLeader(t, log, 1, "a", "b")
		if _, err := log.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := log.SetHighWatermark(2); err != nil {
			t.Fatal(err)
		}
		if !log.CheckpointPending() {
			t.Fatalf("partition %d: nothing to checkpoint", p)
		}
		all = append(all, newReplica(deps, "t", p, "id", dir, log, false))
	}
	fsys.most.Store(0)

	var wg sync.WaitGroup
	for _, r := range all {
		wg.Go(r.checkpoint)
	}
	wg.Wait()
	if most := fsys.most.Load(); most > checkpointConcurrency || most < 2 {
		t.Errorf("%d checkpoint files synced at once, want between 2 and %d", most, checkpointConcurrency)
	}
	for _, r := range all {
		if r.logFailed || r.CurrentLog().CheckpointPending() {
			t.Errorf("partition %d: checkpoint not written (log failed %v)", r.partition, r.logFailed)
		}
	}
}
