package partition

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/producer"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/segstore"
)

// producerTestReplica opens the partition log in dir and a replica on it,
// without starting its loop: the test calls the loop's functions itself.
func producerTestReplica(t *testing.T, fsys segstore.FS, dir string) *Replica {
	t.Helper()
	opts := segstore.Options{SegmentBytes: 1 << 20, IndexIntervalBytes: 256, IndexBytes: 4096, Logger: hclog.NewNullLogger()}
	clock := &fakeNow{t: time.Now()}
	deps := &Deps{Self: "n1", Log: hclog.NewNullLogger(), Now: clock.now, FS: fsys, LogOptions: opts}
	log, _, err := openPartitionLog(fsys, dir, opts, func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	r := newReplica(deps, "t", 0, "id", dir, log, false)
	t.Cleanup(func() { r.CurrentLog().Close() })
	r.loadProducers()
	return r
}

// appendIdempotent appends one batch of producer id at seq, n records, as
// the leader loop does (append, then apply), and returns its base offset.
func appendIdempotent(t *testing.T, r *Replica, id int64, seq int32, n int) int64 {
	t.Helper()
	var b record.Builder
	b.SetProducer(id, 0, seq)
	for i := 0; i < n; i++ {
		if err := b.Add(time.Now().UnixMilli(), nil, []byte("v"), nil); err != nil {
			t.Fatal(err)
		}
	}
	batch, err := b.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := r.producers.Check(id, 0, seq, int32(n)); d.Verdict != producer.Append {
		t.Fatalf("check of producer %d seq %d: %v", id, seq, d.Verdict)
	}
	base, _, err := r.CurrentLog().AppendLeader(batch, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := applyProducerBatch(r.producers, record.Header(batch)); err != nil {
		t.Fatal(err)
	}
	r.producersDirty = true
	return base
}

// wantDuplicate checks that a resend of (id, seq, n) is a duplicate of the
// batch at base.
func wantDuplicate(t *testing.T, r *Replica, what string, id int64, seq int32, n int, base int64) {
	t.Helper()
	d := r.producers.Check(id, 0, seq, int32(n))
	if d.Verdict != producer.Duplicate || d.Original.BaseOffset != base {
		t.Fatalf("%s: resend of producer %d seq %d: %v (original at %d), want a duplicate at %d", what, id, seq, d.Verdict, d.Original.BaseOffset, base)
	}
}

// TestProducerStateRebuilt: a replica's producer state comes back from its
// log alone (no snapshot), from the snapshot plus the batches after it, and
// from the log when the snapshot is damaged or ahead of the log; a
// truncation below the snapshot's end removes the snapshot.
func TestProducerStateRebuilt(t *testing.T) {
	root := t.TempDir()
	fsys := segstore.OSFS{}
	dir := filepath.Join(root, "t-0")
	snapshot := filepath.Join(dir, producerSnapshotFile)

	r := producerTestReplica(t, fsys, dir)
	a0 := appendIdempotent(t, r, 7, 0, 3)
	b0 := appendIdempotent(t, r, 9, 0, 2)
	a1 := appendIdempotent(t, r, 7, 3, 3)
	r.CurrentLog().Close()

	r = producerTestReplica(t, fsys, dir)
	wantDuplicate(t, r, "from the log alone", 7, 3, 3, a1)
	wantDuplicate(t, r, "from the log alone", 9, 0, 2, b0)
	wantDuplicate(t, r, "from the log alone", 7, 0, 3, a0)

	r.writeProducerSnapshot()
	if _, err := os.Stat(snapshot); err != nil {
		t.Fatalf("no snapshot written: %v", err)
	}
	snapEnd := r.producerSnapshotEnd
	a2 := appendIdempotent(t, r, 7, 6, 1)
	r.CurrentLog().Close()

	r = producerTestReplica(t, fsys, dir)
	if r.producerSnapshotEnd != snapEnd {
		t.Fatalf("snapshot end %d after open, want %d (the snapshot was not used)", r.producerSnapshotEnd, snapEnd)
	}
	wantDuplicate(t, r, "from the snapshot and the batch after it", 7, 6, 1, a2)
	wantDuplicate(t, r, "from the snapshot and the batch after it", 9, 0, 2, b0)

	// A damaged snapshot is ignored: the log is scanned.
	r.writeProducerSnapshot()
	r.CurrentLog().Close()
	b, err := os.ReadFile(snapshot)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(snapshot, b, 0o640); err != nil {
		t.Fatal(err)
	}
	r = producerTestReplica(t, fsys, dir)
	if r.producerSnapshotEnd != -1 {
		t.Fatalf("a damaged snapshot was used (end %d)", r.producerSnapshotEnd)
	}
	wantDuplicate(t, r, "after a damaged snapshot", 7, 6, 1, a2)

	// A truncation below the snapshot's end removes it; the state forgets
	// the cut batch, and the producer's next sequence is the cut one.
	r.writeProducerSnapshot()
	if err := r.CurrentLog().Truncate(a2); err != nil {
		t.Fatal(err)
	}
	r.producersTruncated(false)
	if _, err := os.Stat(snapshot); !os.IsNotExist(err) {
		t.Fatalf("the snapshot survived a truncation below its end: %v", err)
	}
	if d := r.producers.Check(7, 0, 6, 1); d.Verdict != producer.Append {
		t.Fatalf("after the truncation, producer 7 seq 6: %v, want append", d.Verdict)
	}
	a2 = appendIdempotent(t, r, 7, 6, 2)
	r.CurrentLog().Close()

	// A snapshot ahead of the log (its tail lost in a crash) is ignored.
	r = producerTestReplica(t, fsys, dir)
	wantDuplicate(t, r, "after the truncation", 7, 6, 2, a2)
	r.writeProducerSnapshot()
	if err := r.CurrentLog().Truncate(a2); err != nil {
		t.Fatal(err)
	}
	r.CurrentLog().Close()
	r = producerTestReplica(t, fsys, dir)
	if r.producerSnapshotEnd != -1 {
		t.Fatalf("a snapshot ahead of the log end was used (end %d, log end %d)", r.producerSnapshotEnd, r.CurrentLog().LogEndOffset())
	}
	if d := r.producers.Check(7, 0, 6, 1); d.Verdict != producer.Append {
		t.Fatalf("producer 7 seq 6 with the log cut below it: %v, want append", d.Verdict)
	}
}
