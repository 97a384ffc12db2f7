package segstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/testenv"
)

// openFDs counts this process's open descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		testenv.SkipUnlessCI(t, "cannot count descriptors: %v", err)
	}
	return len(entries) - 1 // the listing's own
}

// kept reports the descriptors the cache keeps open, those an eviction is
// closing now excluded.
func (c *FileCache) kept() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open - c.closing
}

func oneBatch(rng *rand.Rand, payload int) []byte {
	return makeBatch(rng, batchSpec{records: 1, payload: payload, timestamp: 1})
}

// TestFileCacheBoundConcurrent appends to and reads from many logs sharing
// a cache from several goroutines at once: the descriptors kept never pass
// the bound by more than what the goroutines pin, every read returns what
// was appended, and once idle the cache is within its bound.
func TestFileCacheBoundConcurrent(t *testing.T) {
	for _, bound := range []int{1, 4, 32} {
		t.Run(fmt.Sprintf("max=%d", bound), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(testSeed(t), uint64(bound)))
			cache := NewFileCache(bound)
			const logs, workers, rounds = 8, 4, 60
			opts := smallOptions(t, newClock())
			opts.Files = cache
			opts.Logger = nil
			root := t.TempDir()
			ls := make([]*Log, logs)
			for i := range ls {
				ls[i] = openLog(t, OSFS{}, filepath.Join(root, fmt.Sprint(i)), opts)
			}
			// A worker holds at most a log file, an index file and a reader.
			slack := 3 * workers
			var over sync.Once
			var overErr error
			check := func() {
				if k := cache.kept(); k > bound+slack {
					over.Do(func() { overErr = fmt.Errorf("%d descriptors kept, bound %d + %d pinned", k, bound, slack) })
				}
			}
			var mu sync.Mutex // per-log append order for the expected content
			want := make([][][]byte, logs)
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				seed := rng.Uint64()
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(seed, uint64(w)))
					for range rounds {
						i := rng.IntN(logs)
						l := ls[i]
						b := oneBatch(rng, 100+rng.IntN(400))
						mu.Lock()
						_, _, err := l.AppendLeader(b, 0)
						if err == nil {
							want[i] = append(want[i], b)
						}
						mu.Unlock()
						if err != nil {
							errs <- err
							return
						}
						check()
						leo := l.LogEndOffset()
						off := rng.Int64N(leo)
						r, err := l.Read(off, 1<<20, leo)
						if err != nil {
							errs <- fmt.Errorf("read %d at %d: %w", i, off, err)
							return
						}
						check()
						got, err := io.ReadAll(r)
						r.Close()
						if err != nil || len(got) == 0 {
							errs <- fmt.Errorf("read region %d at %d: %d bytes, %v", i, off, len(got), err)
							return
						}
						if rng.IntN(4) == 0 {
							if _, err := l.Sync(); err != nil {
								errs <- err
								return
							}
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if overErr != nil {
				t.Fatal(overErr)
			}
			if k := cache.Open(); k > bound {
				t.Fatalf("idle cache keeps %d descriptors, bound %d", k, bound)
			}
			for i, l := range ls {
				got := readAll(t, l, l.LogEndOffset())
				if len(got) != len(want[i]) {
					t.Fatalf("log %d: %d batches, want %d", i, len(got), len(want[i]))
				}
				for j := range got {
					// AppendLeader stamped offsets into want's slices in place.
					if !bytes.Equal(got[j], want[i][j]) {
						t.Fatalf("log %d batch %d differs", i, j)
					}
				}
			}
			if bound < logs && (cache.Evictions() == 0 || cache.Reopens() == 0) {
				t.Fatalf("evictions %d, reopens %d: the bound was never enforced", cache.Evictions(), cache.Reopens())
			}
			for _, l := range ls {
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if k := cache.Open(); k != 0 {
				t.Fatalf("%d descriptors open after every log closed", k)
			}
		})
	}
}

// TestFileCacheKeepsPinned checks that eviction never closes a descriptor
// in use: a Region of a sealed segment stays readable while other logs
// take the cache's only slot many times over, also after its segment is
// deleted.
func TestFileCacheKeepsPinned(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 2))
	cache := NewFileCache(1)
	opts := smallOptions(t, newClock())
	opts.Files = cache
	root := t.TempDir()
	a := openLog(t, OSFS{}, filepath.Join(root, "a"), opts)
	defer a.Close()
	b := openLog(t, OSFS{}, filepath.Join(root, "b"), opts)
	defer b.Close()
	var first []byte
	for i := 0; len(a.segments) < 3; i++ {
		batch := oneBatch(rng, 1000)
		if _, _, err := a.AppendLeader(batch, 0); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = batch
		}
	}
	r, err := a.Read(0, int64(len(first)), a.LogEndOffset())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	evicted := cache.Evictions()
	for range 20 {
		if _, _, err := b.AppendLeader(oneBatch(rng, 1000), 0); err != nil {
			t.Fatal(err)
		}
	}
	if cache.Evictions() == evicted {
		t.Fatal("no eviction happened")
	}
	if err := a.SetHighWatermark(a.LogEndOffset()); err != nil {
		t.Fatal(err)
	}
	if n, err := a.DeleteBefore(a.segments[1].base); err != nil || n != 1 {
		t.Fatalf("delete: %d, %v", n, err)
	}
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, first) {
		t.Fatalf("region read %d bytes (%v), want the first batch", len(got), err)
	}
}

// TestFileCacheSyncsBeforeClosing checks that a file with writes no fsync
// covered is fsynced before the cache closes it, that an error of that
// fsync fails its log, and that a failed log's files are never fsynced
// again.
func TestFileCacheSyncsBeforeClosing(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 3))
	root := t.TempDir()
	fsys, err := NewFaultFS(root)
	if err != nil {
		t.Fatal(err)
	}
	cache := NewFileCache(2)
	opts := smallOptions(t, newClock())
	opts.Files = cache
	a := openLog(t, fsys, filepath.Join(root, "a"), opts)
	defer a.Close()
	b := openLog(t, fsys, filepath.Join(root, "b"), opts)
	defer b.Close()
	aLog := a.active.logPath

	touchB := func() {
		t.Helper()
		for range 3 {
			if _, _, err := b.AppendLeader(oneBatch(rng, 100), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, _, err := a.AppendLeader(oneBatch(rng, 100), 0); err != nil {
		t.Fatal(err)
	}
	before := fsys.SyncCalls(aLog)
	touchB()
	if got := fsys.SyncCalls(aLog); got != before+1 {
		t.Fatalf("%s synced %d times when evicted, want once", aLog, got-before)
	}

	// Closed clean, a file is not synced again when it is evicted next.
	if _, err := a.ReadBytes(0, 1<<20, a.LogEndOffset()); err != nil {
		t.Fatal(err)
	}
	touchB()
	if got := fsys.SyncCalls(aLog); got != before+1 {
		t.Fatalf("%s synced %d times, want once: reading made it dirty", aLog, got-before)
	}

	if _, _, err := a.AppendLeader(oneBatch(rng, 100), 0); err != nil {
		t.Fatal(err)
	}
	fsys.Inject(Fault{Op: OpSync, Path: aLog})
	touchB()
	if _, _, err := a.AppendLeader(oneBatch(rng, 100), 0); !errors.Is(err, ErrFailed) || !errors.Is(err, ErrInjected) {
		t.Fatalf("append after the eviction's fsync failed: %v, want a failed log", err)
	}
	failedSyncs := fsys.SyncCalls(aLog)
	touchB()
	if got := fsys.SyncCalls(aLog); got != failedSyncs {
		t.Fatalf("a failed log's file was fsynced again (%d times)", got-failedSyncs)
	}
	if _, _, err := b.AppendLeader(oneBatch(rng, 100), 0); err != nil {
		t.Fatalf("the other log: %v", err)
	}
}

// TestReopenFaults makes reopening a closed segment file fail, as open(2)
// does out of descriptors: the read or append fails with that error, the
// log is not failed and holds what it held, and the same call succeeds
// once opens work again.
func TestReopenFaults(t *testing.T) {
	type op func(l *Log, rng *rand.Rand) error
	readFirst := func(l *Log, _ *rand.Rand) error {
		_, err := l.ReadBytes(0, 1<<20, l.LogEndOffset())
		return err
	}
	regionFirst := func(l *Log, _ *rand.Rand) error {
		r, err := l.Read(0, 1<<20, l.LogEndOffset())
		if err != nil {
			return err
		}
		defer r.Close()
		_, err = io.ReadAll(r)
		return err
	}
	appendOne := func(l *Log, rng *rand.Rand) error {
		_, _, err := l.AppendLeader(oneBatch(rng, 300), 0)
		return err
	}
	syncLog := func(l *Log, _ *rand.Rand) error {
		_, err := l.Sync()
		return err
	}
	first := func(l *Log) string { return l.segments[0].logPath }
	active := func(l *Log) string { return l.active.logPath }
	activeIndex := func(l *Log) string { return l.active.indexPath }
	cases := []struct {
		name string
		path func(*Log) string
		prep op // before the files are closed
		op   op
		err  error
		// fails: a sync that cannot open what it must fsync fails the log
		// (Reopen then cuts what no fsync covered), rather than keep an
		// obligation it cannot meet.
		fails bool
	}{
		{name: "sealed log, EMFILE", path: first, op: readFirst, err: syscall.EMFILE},
		{name: "sealed log, injected", path: first, op: readFirst, err: ErrInjected},
		{name: "sealed reader, EMFILE", path: first, op: regionFirst, err: syscall.EMFILE},
		{name: "active log, EMFILE", path: active, op: appendOne, err: syscall.EMFILE},
		{name: "active index, EMFILE", path: activeIndex, op: appendOne, err: syscall.EMFILE},
		{name: "active log sync, EMFILE", path: active, prep: appendOne, op: syncLog, err: syscall.EMFILE, fails: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(testSeed(t), 4))
			root := t.TempDir()
			fsys, err := NewFaultFS(root)
			if err != nil {
				t.Fatal(err)
			}
			cache := NewFileCache(1)
			opts := smallOptions(t, newClock())
			opts.Files = cache
			l := openLog(t, fsys, filepath.Join(root, "p"), opts)
			defer l.Close()
			other := openLog(t, fsys, filepath.Join(root, "other"), opts)
			defer other.Close()
			for len(l.segments) < 3 {
				if err := appendOne(l, rng); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			if tc.prep != nil {
				if err := tc.prep(l, rng); err != nil {
					t.Fatal(err)
				}
			}
			want := readAll(t, l, l.LogEndOffset())
			// Take the only slot, so that every file of l is closed.
			if err := appendOne(other, rng); err != nil {
				t.Fatal(err)
			}
			path := tc.path(l)
			fsys.Inject(Fault{Op: OpOpen, Path: filepath.Base(path), Err: tc.err, Sticky: true})
			err = tc.op(l, rng)
			switch {
			case !errors.Is(err, tc.err):
				t.Fatalf("%v, want %v", err, tc.err)
			case errors.Is(err, ErrFailed) != tc.fails:
				t.Fatalf("%v: failed log %v, want %v", err, !tc.fails, tc.fails)
			}
			fsys.Clear()
			if tc.fails {
				return
			}
			if err := tc.op(l, rng); err != nil {
				t.Fatalf("once opens work again: %v", err)
			}
			got := readAll(t, l, l.LogEndOffset())
			if len(got) < len(want) {
				t.Fatalf("%d batches, had %d", len(got), len(want))
			}
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("batch %d changed", i)
				}
			}
			if err := appendOne(l, rng); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestOpenDescriptorsBounded is the measurement: SEGSTORE_FD_LOGS logs
// (default 1000; 10000 gives the figure in docs/design.md) in one process
// under a cache bound of SEGSTORE_FD_MAX (default 256), each appended to
// and read back: the process's open descriptors stay within the bound
// plus a constant, and every log still reads what it holds.
func TestOpenDescriptorsBounded(t *testing.T) {
	n := envInt(t, "SEGSTORE_FD_LOGS", 1000)
	bound := envInt(t, "SEGSTORE_FD_MAX", 256)
	rng := rand.New(rand.NewPCG(testSeed(t), 5))
	root := t.TempDir()
	cache := NewFileCache(bound)
	opts := Options{Files: cache, SegmentBytes: 4096, IndexBytes: 4096, IndexIntervalBytes: 256}
	baseline := openFDs(t)
	const slack = 8 // the runtime's, a directory being synced, /proc/self/fd itself
	ls := make([]*Log, n)
	start := time.Now()
	peak := 0
	defer func() {
		for _, l := range ls {
			if l != nil {
				l.Close()
			}
		}
	}()
	for i := range ls {
		l := openLog(t, OSFS{}, filepath.Join(root, fmt.Sprint(i)), opts)
		ls[i] = l
		for range 3 {
			if err := appendBatch(l, oneBatch(rng, 2000)); err != nil {
				t.Fatal(err)
			}
		}
		if i%100 == 0 {
			peak = max(peak, openFDs(t)-baseline)
		}
	}
	for _, i := range rng.Perm(n)[:min(n, 500)] {
		l := ls[i]
		if got := readAll(t, l, l.LogEndOffset()); len(got) != 3 {
			t.Fatalf("log %d: %d batches", i, len(got))
		}
		if err := appendBatch(l, oneBatch(rng, 2000)); err != nil {
			t.Fatal(err)
		}
	}
	peak = max(peak, openFDs(t)-baseline)
	t.Logf("%d logs (%d segments each), bound %d: peak %d descriptors over the baseline of %d, %d evictions, %d reopens, %v",
		n, len(ls[0].segments), bound, peak, baseline, cache.Evictions(), cache.Reopens(), time.Since(start).Round(time.Millisecond))
	if peak > bound+slack {
		t.Fatalf("%d descriptors open over the baseline, bound %d + %d", peak, bound, slack)
	}
}

func appendBatch(l *Log, b []byte) error {
	_, _, err := l.AppendLeader(b, 0)
	return err
}

// BenchmarkFileCachePin is what the cache adds to every append and read of
// an open file: a pin and an unpin.
func BenchmarkFileCachePin(b *testing.B) {
	l := openLog(b, OSFS{}, filepath.Join(b.TempDir(), "p"), Options{Files: NewFileCache(16)})
	defer l.Close()
	h := l.active.log
	for b.Loop() {
		if _, err := h.pin(); err != nil {
			b.Fatal(err)
		}
		h.unpin(true)
	}
}

// gateFS is OSFS whose first fsync of one file, once armed, blocks until
// released and then fails, as a writeback error would.
type gateFS struct {
	OSFS
	path    string
	armed   atomic.Bool
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

type gateFile struct {
	File
	g *gateFS
}

func (g *gateFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := g.OSFS.OpenFile(name, flag, perm)
	if err != nil || filepath.Clean(name) != g.path {
		return f, err
	}
	return &gateFile{File: f, g: g}, nil
}

func (f *gateFile) Sync() error {
	if f.g.armed.Load() {
		first := false
		f.g.once.Do(func() { first = true })
		if first {
			close(f.g.entered)
			<-f.g.release
			return ErrInjected
		}
	}
	return f.File.Sync()
}

// TestSyncRacingFailedEvictionFsync: the file cache evicts a log's dirty
// active segment file and its fsync fails (the log is failed); a Sync of
// that log that waited for the eviction to finish reopened the file,
// fsynced the new descriptor (which Linux does not tell of the earlier
// writeback error) and reported the appends durable, moving the synced
// position that Options.Reopen trusts past bytes no fsync covered.
func TestSyncRacingFailedEvictionFsync(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	root := t.TempDir()
	cache := NewFileCache(2)
	opts := smallOptions(t, newClock())
	opts.Files = cache
	g := &gateFS{entered: make(chan struct{}), release: make(chan struct{})}
	a := openLog(t, g, filepath.Join(root, "a"), opts)
	defer a.Close()
	g.path = a.active.logPath
	b := openLog(t, g, filepath.Join(root, "b"), opts)
	defer b.Close()

	if _, err := a.Sync(); err != nil {
		t.Fatal(err)
	}
	syncedBefore := a.SyncedOffset()
	if _, _, err := a.AppendLeader(oneBatch(rng, 100), 0); err != nil {
		t.Fatal(err)
	}
	g.armed.Store(true)

	// b's appends evict a's dirty log file; its fsync blocks in the gate.
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		for range 20 {
			if _, _, err := b.AppendLeader(oneBatch(rand.New(rand.NewPCG(3, 4)), 100), 0); err != nil {
				return
			}
			select {
			case <-g.entered:
				return
			default:
			}
		}
	}()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("a's log file was never evicted")
	}

	type result struct {
		off int64
		err error
	}
	res := make(chan result, 1)
	go func() {
		off, err := a.Sync()
		res <- result{off, err}
	}()
	// Let the Sync reach the file handle, which waits for the eviction.
	time.Sleep(200 * time.Millisecond)
	close(g.release)
	r := <-res
	<-bDone

	if a.failure.Load() == nil {
		t.Fatal("the eviction's failed fsync did not fail the log")
	}
	if r.err == nil {
		t.Errorf("Sync returned offset %d and no error although the fsync covering the append failed", r.off)
	}
	if got := a.syncedPosition().offset; got != syncedBefore {
		t.Errorf("synced offset moved from %d to %d past a failed fsync: a Reopen would keep bytes no fsync covered", syncedBefore, got)
	}
	if !errors.Is(r.err, ErrFailed) && r.err != nil {
		t.Errorf("Sync: %v, want ErrFailed", r.err)
	}
}

// TestReadWhoseSeekFailsClosesItsDescriptor: a Read whose read descriptor
// cannot be positioned returns the error and gives the descriptor back to
// the cache, which counts it closed; counted open for ever, it would hold
// one of the bound's places. A pooled descriptor that was closed under its
// region (a plain *os.File seeks without failing otherwise) makes the seek
// fail.
func TestReadWhoseSeekFailsClosesItsDescriptor(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 46))
	opts := smallOptions(t, newClock())
	opts.Files = NewFileCache(64) // no evictions: only the reads move the count
	l := openLog(t, OSFS{}, t.TempDir(), opts)
	defer l.Close()
	appendN(t, l, rng, 3, 1, 100)
	open := l.files.Open()
	r, err := l.Read(0, 1<<20, l.LogEndOffset())
	if err != nil {
		t.Fatal(err)
	}
	r.File.Close()
	r.Close() // pools the closed descriptor
	if _, err := l.Read(0, 1<<20, l.LogEndOffset()); err == nil {
		t.Fatal("a read through a closed descriptor succeeded")
	}
	if got := l.files.Open(); got != open {
		t.Fatalf("the cache counts %d descriptors open after the failed read, %d before the reads", got, open)
	}
	if got := readAll(t, l, l.LogEndOffset()); len(got) != 3 {
		t.Fatalf("read %d batches after the failed read, want 3", len(got))
	}
}
