package partition

import (
	"fmt"
	"path/filepath"
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

	for _, r := range all {
		r.checkpoint() // as each loop would: it returns at once
	}
	for _, r := range all {
		r.onCheckpointResult(waitCheckpointResult(t, r))
	}
	if most := fsys.most.Load(); most > checkpointConcurrency || most < 2 {
		t.Errorf("%d checkpoint files synced at once, want between 2 and %d", most, checkpointConcurrency)
	}
	for _, r := range all {
		if r.logFailed || r.checkpointing || r.CurrentLog().CheckpointPending() {
			t.Errorf("partition %d: checkpoint not written (log failed %v, still checkpointing %v)", r.partition, r.logFailed, r.checkpointing)
		}
	}
}

// TestCheckpointWaitsOffTheLoop: a replica whose checkpoint waits for a
// slot is not held up by it (the loop goes on serving), starts no second
// one meanwhile, gets the result once a slot frees, and a stopped replica's
// waiting checkpoint ends without one.
func TestCheckpointWaitsOffTheLoop(t *testing.T) {
	root := t.TempDir()
	opts := segstore.Options{SegmentBytes: 1 << 20, IndexIntervalBytes: 256, IndexBytes: 4096, Logger: hclog.NewNullLogger()}
	slots := make(chan struct{}, 1)
	deps := &Deps{Self: "n1", Log: hclog.NewNullLogger(), Now: time.Now, FS: segstore.OSFS{}, LogOptions: opts, checkpoints: slots}
	replica := func(p int) *Replica {
		dir := filepath.Join(root, fmt.Sprintf("t-%d", p))
		log, _, err := openPartitionLog(deps.FS, dir, opts, func() error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { log.Close() })
		appendLeader(t, log, 1, "a")
		if err := log.SetHighWatermark(1); err != nil {
			t.Fatal(err)
		}
		return newReplica(deps, "t", p, "id", dir, log, false)
	}
	r := replica(0)
	slots <- struct{}{} // every slot taken
	r.checkpoint()
	if !r.checkpointing {
		t.Fatal("no checkpoint under way")
	}
	r.checkpoint() // due again while the first waits
	select {
	case ev := <-r.events:
		t.Fatalf("a result (%+v) while every slot was taken", ev)
	case <-time.After(50 * time.Millisecond):
	}
	<-slots
	r.onCheckpointResult(waitCheckpointResult(t, r))
	if r.checkpointing || r.CurrentLog().CheckpointPending() {
		t.Fatalf("checkpoint not written: checkpointing %v", r.checkpointing)
	}
	select {
	case ev := <-r.events:
		t.Fatalf("a second checkpoint ran: %+v", ev)
	case <-time.After(50 * time.Millisecond):
	}

	stopped := replica(1)
	slots <- struct{}{}
	stopped.checkpoint()
	stopped.cancel()
	stopped.tasks.Wait()
	<-slots
	select {
	case ev := <-stopped.events:
		t.Fatalf("a stopped replica's checkpoint answered %+v", ev)
	default:
	}
}

func waitCheckpointResult(t *testing.T, r *Replica) checkpointResult {
	t.Helper()
	select {
	case ev := <-r.events:
		res, ok := ev.(checkpointResult)
		if !ok {
			t.Fatalf("partition %d: event %T, want a checkpointResult", r.partition, ev)
		}
		return res
	case <-time.After(10 * time.Second):
		t.Fatalf("partition %d: no checkpoint result", r.partition)
	}
	return checkpointResult{}
}
