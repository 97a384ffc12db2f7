package segstore

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/testseed"
)

// TestSyncDirCoalesced: every call returns the outcome of an fsync that
// started after it began; calls arriving while one runs share the next; a
// failure reaches exactly the calls its fsync covered and is not retried.
func TestSyncDirCoalesced(t *testing.T) {
	rng := testseed.Rand(t)
	for round := range 20 {
		dir := fmt.Sprintf("/round/%d", round)
		failAt := int64(rng.IntN(4)) // the failing fsync, counted from 1; 0: none fails
		const callers = 32
		// Drawn here: the fsyncs run on the callers' goroutines.
		took := make([]time.Duration, callers+1)
		for i := range took {
			took[i] = time.Duration(rng.IntN(3)+1) * time.Millisecond
		}
		var (
			mu     sync.Mutex
			starts []time.Time // of each fsync, in order
			syncs  atomic.Int64
		)
		fsync := func(got string) error {
			if got != dir {
				t.Errorf("fsync of %q, want %q", got, dir)
			}
			n := syncs.Add(1)
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			time.Sleep(took[min(n, callers)])
			if n == failAt {
				return errors.New("injected")
			}
			return nil
		}
		type outcome struct {
			began, ended time.Time
			err          error
		}
		out := make([]outcome, callers)
		var wg sync.WaitGroup
		for i := range callers {
			delay := time.Duration(rng.IntN(5000)) * time.Microsecond
			wg.Go(func() {
				time.Sleep(delay)
				out[i].began = time.Now()
				out[i].err = syncDirCoalesced(dir, fsync)
				out[i].ended = time.Now()
			})
		}
		wg.Wait()
		n := int(syncs.Load())
		if n >= callers {
			t.Errorf("round %d: %d fsyncs for %d overlapping calls: none shared", round, n, callers)
		}
		failed := 0
		for i, o := range out {
			// The fsync that covered the call: the first to start after it
			// began must have started before it ended.
			covered := -1
			for k, s := range starts {
				if !s.Before(o.began) {
					covered = k
					break
				}
			}
			if covered < 0 || !starts[covered].Before(o.ended) {
				t.Errorf("round %d: call %d returned with no fsync started after it began", round, i)
				continue
			}
			if o.err != nil {
				failed++
				if int64(covered+1) > failAt {
					t.Errorf("round %d: call %d failed (%v), though only fsync %d failed, before it", round, i, o.err, failAt)
				}
			}
		}
		if failAt > 0 && failAt <= int64(n) && failed == 0 {
			t.Errorf("round %d: fsync %d failed and no call saw it", round, failAt)
		}
		if _, ok := dirSyncs.Load(dir); ok {
			t.Errorf("round %d: the idle directory's syncer is still held", round)
		}
	}
}
