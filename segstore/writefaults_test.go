package segstore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// blockSyncFS is a FaultFS whose fsyncs of one file block, once armed,
// until released.
type blockSyncFS struct {
	*FaultFS
	mu      sync.Mutex
	path    string
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

type blockSyncFile struct {
	File
	g    *blockSyncFS
	path string
}

func (g *blockSyncFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := g.FaultFS.OpenFile(name, flag, perm)
	if err != nil {
		return f, err
	}
	return &blockSyncFile{File: f, g: g, path: filepath.Clean(name)}, nil
}

func (f *blockSyncFile) Sync() error {
	f.g.mu.Lock()
	armed := f.g.path != "" && f.g.path == f.path
	f.g.mu.Unlock()
	if armed {
		first := false
		f.g.once.Do(func() { first = true })
		if first {
			close(f.g.entered)
			<-f.g.release
		}
	}
	return f.File.Sync()
}

// TestCloseDoesNotCheckpointPastAnInFlightSync: a Sync has taken the
// segments sealed since the last sync (and the directory's dirty flag) and
// is fsyncing them when Close runs (the replica's syncer goroutine is not
// waited for before Close). Close fsyncs only the active segment, yet writes
// a recovery point at the log end, promising bytes of the sealed segment
// that no fsync has covered yet. A crash then makes the next Open report
// data loss (or, with RepairDataLoss, cut data Close said was durable).
func TestCloseDoesNotCheckpointPastAnInFlightSync(t *testing.T) {
	seed := testSeed(t)
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 81))
	root := t.TempDir()
	ffs, err := NewFaultFS(root)
	if err != nil {
		t.Fatal(err)
	}
	g := &blockSyncFS{FaultFS: ffs, entered: make(chan struct{}), release: make(chan struct{})}
	opts := smallOptions(t, newClock())
	opts.Files = NewFileCache(1024) // no eviction fsyncs
	dir := filepath.Join(root, "p0")
	l := openLog(t, g, dir, opts)
	var batches [][]byte
	for len(l.segments) < 2 {
		batches = append(batches, appendN(t, l, rng, 1, 1, 150)...)
	}
	first := l.segments[0]
	g.mu.Lock()
	g.path = filepath.Clean(first.logPath)
	g.mu.Unlock()

	syncDone := make(chan error, 1)
	go func() {
		_, err := l.Sync()
		syncDone <- err
	}()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the sync never reached the sealed segment")
	}
	closeDone := make(chan error, 1)
	go func() { closeDone <- l.Close() }()
	var closeErr error
	select {
	case closeErr = <-closeDone:
		// Close did not wait for the fsync in flight.
		ffs.Crash() // power loss while the sealed segment's fsync is in flight
		close(g.release)
	case <-time.After(500 * time.Millisecond):
		// Close waits for the fsync in flight: crash while it waits.
		ffs.Crash()
		close(g.release)
		closeErr = <-closeDone
	}
	<-syncDone
	if closeErr != nil || l.failure.Load() != nil {
		t.Logf("Close: %v, log failure: %v (no durability claimed)", closeErr, l.failure.Load())
		batches = nil // nothing was claimed durable
	}
	for i := range 12 {
		post := filepath.Join(t.TempDir(), fmt.Sprint(i))
		if err := ffs.Reconstruct(post, rand.New(rand.NewPCG(seed, uint64(i)))); err != nil {
			t.Fatal(err)
		}
		l2, err := Open(OSFS{}, filepath.Join(post, "p0"), smallOptions(t, newClock()))
		if err != nil {
			var dl *DataLossError
			if errors.As(err, &dl) {
				t.Fatalf("reconstruction %d: no disk damage, yet Open reports data loss below a recovery point Close wrote: %v", i, err)
			}
			t.Fatalf("reconstruction %d: open: %v", i, err)
		}
		got := readAll(t, l2, l2.LogEndOffset())
		l2.Close()
		if batches != nil && !slices.EqualFunc(got, batches, bytes.Equal) {
			t.Fatalf("reconstruction %d: %d batches recovered, Close made %d durable", i, len(got), len(batches))
		}
	}
}

// TestFollowerAppendRefusedAfterPublishingPart: a follower append of two
// batches whose second one rolls the segment; the new segment's log file is
// evicted from a tiny file cache while its index is mapped, and reopening it
// for the second run fails (EMFILE). The first batch is already written and
// published (LEO moved), yet AppendFollower returns a plain error with the
// log usable: the caller, told that nothing was appended, neither records
// the batch nor moves its fetch offset, and every later fetch from its old
// offset is refused as not contiguous.
func TestFollowerAppendRefusedAfterPublishingPart(t *testing.T) {
	seed := testSeed(t)
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 82))
	root := t.TempDir()
	ffs, err := NewFaultFS(root)
	if err != nil {
		t.Fatal(err)
	}
	opts := smallOptions(t, newClock())
	opts.Files = NewFileCache(1)
	l := openLog(t, ffs, filepath.Join(root, "p0"), opts)
	defer l.Close()
	b0 := makeBatch(rng, batchSpec{base: 0, epoch: 1, payload: 3000})
	if err := l.AppendFollower(b0, 1); err != nil {
		t.Fatal(err)
	}
	b1 := makeBatch(rng, batchSpec{base: 1, epoch: 1, payload: 500})
	b2 := makeBatch(rng, batchSpec{base: 2, epoch: 2, payload: 1000}) // rolls
	emfile := &os.SyscallError{Syscall: "open", Err: errors.New("too many open files")}
	ffs.Inject(Fault{Op: OpOpen, Nth: 2, Path: segmentFileName(2, logSuffix), Err: emfile})
	leoBefore := l.LogEndOffset()
	err = l.AppendFollower(append(append([]byte(nil), b1...), b2...), 2)
	t.Logf("AppendFollower: %v; LEO %d -> %d; epochs %v", err, leoBefore, l.LogEndOffset(), l.EpochEntries())
	if err == nil {
		t.Fatal("the reopen fault did not hit the append: the test no longer reaches the case it is about")
	}
	if errors.Is(err, ErrFailed) {
		return // the log failed: the caller recovers it
	}
	if l.LogEndOffset() != leoBefore {
		t.Fatalf("AppendFollower returned %q (log usable, nothing appended as far as the caller can tell), but the LEO moved from %d to %d", err, leoBefore, l.LogEndOffset())
	}
	if latest, _ := l.LatestEpoch(); latest.Epoch != 1 {
		t.Fatalf("refused append left epoch entry %v", latest)
	}
}
