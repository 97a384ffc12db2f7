package partition

import (
	"errors"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"
)

// TestLogFailedInReconcileIsReopenedWithoutAnotherEvent: a log that fails
// in work reconcile itself does (retention here: a segment file whose
// removal fails with EIO; also a follower's truncation, the producer
// snapshot's removal after one) gets reopenAt = zero from failLog, but
// armWake arms only times after now, and reconcile has already passed its
// reopen check: nothing wakes the loop to reopen. The replica stays
// offline (its log closed, reads refused) until an unrelated event comes
// (a metadata change, a request), which on a quiet follower can be a very
// long time.
func TestLogFailedInReconcileIsReopenedWithoutAnotherEvent(t *testing.T) {
	r, log, clock := retentionFailingReplica(t)
	r.start()
	// One event (any) makes the loop reconcile: retention runs and fails
	// the log.
	if out := r.Produce(testBatch(t, []string{"x"}), replicate.AcksAll, AnyEpoch, clock.now().Add(time.Second), time.Second); out.Err == nil {
		t.Fatal("produce to a replica that does not lead was accepted")
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && r.CurrentLog() == log {
		time.Sleep(10 * time.Millisecond)
	}
	if r.CurrentLog() == log {
		failed := log.Checkpoint() != nil
		// Control: any event now reopens it at once.
		r.Produce(testBatch(t, []string{"x"}), replicate.AcksAll, AnyEpoch, clock.now().Add(time.Second), time.Second)
		time.Sleep(100 * time.Millisecond)
		t.Fatalf("3s after its log failed in reconcile (log failed: %v) the replica had not reopened it; "+
			"one unrelated event later it had: %v", failed, r.CurrentLog() != log)
	}
}

// TestLogFailingAgainWaitsTheHold: the first failure of a log is
// recovered at once; one that fails again soon after its reopen (a fault
// that comes back at every recovery: a follower's truncation hitting EIO
// at every fetch, a file that cannot be removed) waits the campaign hold
// before the next recovery. Reopened at once every time, now that a
// failure inside reconcile wakes the loop, such a fault turned into a
// loop of recoveries, one a millisecond.
func TestLogFailingAgainWaitsTheHold(t *testing.T) {
	r, _, clock := faultFSReplica(t, &Deps{Self: "n1", Config: &config.Config{}, Durability: replicate.DurabilityReplicated})
	r.failLog(errors.New("first fault"))
	if !r.reopenAt.IsZero() {
		t.Fatalf("first failure: reopen at %v, want at once", r.reopenAt)
	}
	r.reopen()
	if r.logFailed {
		t.Fatal("reopen failed")
	}
	clock.t = clock.t.Add(100 * time.Millisecond)
	r.failLog(errors.New("the same fault again"))
	if wait := r.reopenAt.Sub(clock.t); wait < failBackoffMin {
		t.Fatalf("failed again 100ms after its reopen: reopened %v later, want at least %v", wait, failBackoffMin)
	}
	// Healthy for failBackoffReset: the next failure is a first one again.
	r.reopenAt = clock.t
	r.reopen()
	clock.t = clock.t.Add(failBackoffReset)
	r.failLog(errors.New("a fault much later"))
	if !r.reopenAt.IsZero() {
		t.Fatalf("failed %v after its reopen: reopen at %v, want at once", failBackoffReset, r.reopenAt)
	}
}

// retentionFailingReplica is a replica (not started) whose log has a
// sealed segment, retention due to delete it, and every segment file
// removal failing with EIO.
func retentionFailingReplica(t *testing.T) (*Replica, *segstore.Log, *fakeNow) {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 18))
	// The clock is not moved once the loop runs: read without a lock.
	r, fsys, clock := newFaultFSReplica(t, &Deps{Self: "n1", Config: &config.Config{}, Durability: replicate.DurabilityReplicated})
	log := r.CurrentLog()
	t.Cleanup(func() {
		r.cancel()
		<-r.done
	})
	// Enough batches over the 256-byte index interval to fill the 4 KiB
	// index of a segment: a sealed segment for retention to delete.
	for log.HasSealedSegments() == false || rng.IntN(4) != 0 {
		appendLeader(t, log, 1, strings.Repeat("x", 300+rng.IntN(200)))
	}
	if _, err := log.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := log.SetHighWatermark(log.LogEndOffset()); err != nil {
		t.Fatal(err)
	}
	log.SetRetention(0, 1)
	// Retention is due, and removing a segment file fails with EIO.
	r.retentionAt = clock.t.Add(-time.Second)
	fsys.Inject(segstore.Fault{Op: segstore.OpRemove, Path: ".log", Err: syscall.EIO})

	return r, log, clock
}
