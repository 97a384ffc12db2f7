package partition

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"
)

// gatedSyncFS holds the first fsync of a segment file after arm until
// release, so a test can truncate the log while a group commit is in flight.
type gatedSyncFS struct {
	segstore.OSFS
	mu      sync.Mutex
	armed   bool
	held    chan struct{} // closed when a sync is held
	release chan struct{}
	syncs   int // segment-file syncs since arm
}

func (g *gatedSyncFS) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.held, g.release, g.syncs = true, make(chan struct{}), make(chan struct{}), 0
}

func (g *gatedSyncFS) OpenFile(name string, flag int, perm os.FileMode) (segstore.File, error) {
	f, err := g.OSFS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &gatedFile{File: f, fs: g}, nil
}

type gatedFile struct {
	segstore.File
	fs *gatedSyncFS
}

func (f *gatedFile) Sync() error {
	g := f.fs
	g.mu.Lock()
	g.syncs++
	hold := g.armed
	g.armed = false
	held, release := g.held, g.release
	g.mu.Unlock()
	if hold {
		close(held)
		<-release
	}
	return f.File.Sync()
}

func (g *gatedSyncFS) syncCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.syncs
}

// TestSyncAgainAfterTruncationRace (issue 13 b): a truncation while a group
// commit is in flight makes that sync report the offset synced before the
// cut; in fsync mode the replica asks for another sync, or what remains of
// the log would never be reported durable and a follower would never fetch
// again.
func TestSyncAgainAfterTruncationRace(t *testing.T) {
	root := t.TempDir()
	fsys := &gatedSyncFS{}
	opts := segstore.Options{SegmentBytes: 1 << 20, IndexIntervalBytes: 256, IndexBytes: 4096, Logger: hclog.NewNullLogger()}
	deps := &Deps{Self: "n1", Log: hclog.NewNullLogger(), Now: time.Now, FS: fsys, LogOptions: opts,
		Durability: replicate.DurabilityFsync}
	dir := filepath.Join(root, "t-0")
	log, _, err := openPartitionLog(fsys, dir, opts, func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		appendLeader(t, log, 1, "x")
	}
	r := newReplica(deps, "t", 0, "id", dir, log, false)
	r.start()
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Error(err)
		}
	})

	fsys.arm()
	r.requestSync()
	select {
	case <-fsys.held:
	case <-time.After(5 * time.Second):
		t.Fatal("the group commit never reached fsync")
	}
	// The cut, while that fsync is held (a follower truncating on a leader
	// change).
	if err := log.Truncate(5); err != nil {
		t.Fatal(err)
	}
	close(fsys.release)
	deadline := time.Now().Add(5 * time.Second)
	for log.SyncedOffset() < log.LogEndOffset() {
		if time.Now().After(deadline) {
			t.Fatalf("synced offset %d below the log end %d 5s after the cut (%d segment syncs): nothing asked for another sync",
				log.SyncedOffset(), log.LogEndOffset(), fsys.syncCount())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
