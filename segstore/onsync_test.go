package segstore

import (
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// steppingClock moves on by step at every reading, so a duration measured
// between two readings is exactly step.
type steppingClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (c *steppingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.step)
	return c.now
}

// TestOnSyncTimesEachGroupCommit: OnSync hears of every fsync Sync makes,
// timed with the injected clock, of none when there is nothing to sync,
// and of a failed one too.
func TestOnSyncTimesEachGroupCommit(t *testing.T) {
	root := t.TempDir()
	fsys, err := NewFaultFS(root)
	if err != nil {
		t.Fatal(err)
	}
	clock := &steppingClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), step: 3 * time.Millisecond}
	var mu sync.Mutex
	var seen []time.Duration
	opts := smallOptions(t, newClock())
	opts.SegmentBytes = 1 << 20
	opts.Now = clock.Now
	opts.OnSync = func(d time.Duration) {
		mu.Lock()
		seen = append(seen, d)
		mu.Unlock()
	}
	l := openLog(t, fsys, filepath.Join(root, "p0"), opts)
	defer l.Close()
	logPath := l.active.logPath
	before := fsys.SyncCalls(logPath)
	const n = 3
	for range n {
		if _, _, err := l.AppendLeader(makeBatch(nil, batchSpec{epoch: 1, payload: 100}), 1); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing appended since: no fsync, nothing to report.
	if _, err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := append([]time.Duration(nil), seen...)
	mu.Unlock()
	if syncs := fsys.SyncCalls(logPath) - before; len(got) != n || syncs != n {
		t.Fatalf("OnSync heard of %d syncs (%v), the log file had %d fsyncs, want %d of each", len(got), got, syncs, n)
	}
	for i, d := range got {
		if d != clock.step {
			t.Errorf("sync %d took %v by the injected clock, want %v", i, d, clock.step)
		}
	}

	fsys.Inject(Fault{Op: OpSync, Path: logPath})
	if _, _, err := l.AppendLeader(makeBatch(nil, batchSpec{epoch: 1, payload: 100}), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Sync(); !errors.Is(err, ErrFailed) {
		t.Fatalf("sync with an injected fsync fault: %v, want ErrFailed", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n+1 {
		t.Fatalf("OnSync heard of %d syncs after a failed one, want %d", len(seen), n+1)
	}
}
