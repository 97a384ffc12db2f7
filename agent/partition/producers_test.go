package partition

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/producer"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/segstore"
)

// producerTestReplica opens the partition log in dir and a replica on it,
// without starting its loop: the test calls the loop's functions itself.
func producerTestReplica(t *testing.T, fsys segstore.FS, dir string) *Replica {
	t.Helper()
	return producerTestReplicaWith(t, fsys, dir, producer.Options{}, hclog.NewNullLogger())
}

// producerTestReplicaWith is producerTestReplica with the producer state's
// options and the replica's logger.
func producerTestReplicaWith(t *testing.T, fsys segstore.FS, dir string, popts producer.Options, logger hclog.Logger) *Replica {
	t.Helper()
	opts := segstore.Options{SegmentBytes: 1 << 20, IndexIntervalBytes: 256, IndexBytes: 4096, Logger: hclog.NewNullLogger()}
	clock := &fakeNow{t: time.Now()}
	deps := &Deps{Self: "n1", Log: logger, Now: clock.now, FS: fsys, LogOptions: opts, ProducerOptions: popts}
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
	return appendIdempotentAt(t, r, id, seq, n, time.Now().UnixMilli())
}

// appendIdempotentAt is appendIdempotent with records of timestamp ts (ms).
func appendIdempotentAt(t *testing.T, r *Replica, id int64, seq int32, n int, ts int64) int64 {
	t.Helper()
	batch := idempotentBatch(t, id, seq, n, ts)
	if d := r.producers.Check(id, 0, seq, int32(n)); d.Verdict != producer.Append {
		t.Fatalf("check of producer %d seq %d: %v", id, seq, d.Verdict)
	}
	base, _, err := r.CurrentLog().AppendLeader(batch, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := applyProducerBatch(r.producers, record.Header(batch), r.deps.Now()); err != nil {
		t.Fatal(err)
	}
	r.producersDirty = true
	return base
}

// idempotentBatch is a batch of producer id (epoch 0) at seq: n records of
// timestamp ts (ms).
func idempotentBatch(t *testing.T, id int64, seq int32, n int, ts int64) []byte {
	t.Helper()
	var b record.Builder
	b.SetProducer(id, 0, seq)
	for i := 0; i < n; i++ {
		if err := b.Add(ts, nil, []byte("v"), nil); err != nil {
			t.Fatal(err)
		}
	}
	batch, err := b.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	return batch
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

// TestProducerSnapshotAheadOfLogNotReusedAfterRefill: a snapshot ignored at
// open because the log lost its tail (crash) must not be used at a later
// open once the log has grown past its end again with other batches.
func TestProducerSnapshotAheadOfLogNotReusedAfterRefill(t *testing.T) {
	fsys := segstore.OSFS{}
	dir := filepath.Join(t.TempDir(), "t-0")

	r := producerTestReplica(t, fsys, dir)
	appendIdempotent(t, r, 9, 0, 1)
	lost := appendIdempotent(t, r, 7, 0, 2) // offsets lost..lost+1, never acknowledged
	r.writeProducerSnapshot()               // snapshot end = lost+2
	// The crash loses the unsynced tail: producer 7's batch.
	if err := r.CurrentLog().Truncate(lost); err != nil {
		t.Fatal(err)
	}
	r.CurrentLog().Close()

	r = producerTestReplica(t, fsys, dir) // snapshot ahead of the log: ignored
	if r.producerSnapshotEnd != -1 {
		t.Fatalf("snapshot ahead of the log used")
	}
	// The log refills past the snapshot's end with other batches (plain
	// ones, as a follower fetches them from the new leader).
	var b record.Builder
	for i := 0; i < 3; i++ {
		if err := b.Add(time.Now().UnixMilli(), nil, []byte("other"), nil); err != nil {
			t.Fatal(err)
		}
	}
	batch, err := b.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.CurrentLog().AppendLeader(batch, 1); err != nil {
		t.Fatal(err)
	}
	r.appliedBatches(batch)
	r.maintainProducers() // the retention tick
	r.CurrentLog().Close()

	r = producerTestReplica(t, fsys, dir)
	// Producer 7 resends its unacknowledged batch: it is not in the log, so
	// it must be appended, not answered as a duplicate at offsets that hold
	// other records.
	if d := r.producers.Check(7, 0, 0, 2); d.Verdict != producer.Append {
		t.Fatalf("resend of a batch the log lost: %v (%s), want append: the stale snapshot (end %d) was used", d.Verdict, d.Reason, r.producerSnapshotEnd)
	}
}

// TestProducerJustAppendedNotExpired: a batch the leader appended a moment
// ago whose records carry an old CreateTime (a sidecar lane carrying a
// Kafka client's backfill, a mirror keeping source timestamps) must still
// be recognised when it is resent after an unknown outcome, even if the
// retention tick ran in between.
func TestProducerJustAppendedNotExpired(t *testing.T) {
	r := producerTestReplica(t, segstore.OSFS{}, filepath.Join(t.TempDir(), "t-0"))
	old := r.deps.Now().Add(-8 * 24 * time.Hour).UnixMilli()
	base := appendIdempotentAt(t, r, 42, 0, 1, old)
	r.maintainProducers() // the retention tick, a second later
	wantDuplicate(t, r, "resend right after the append", 42, 0, 1, base)
}

// TestProducersBeyondMaxPerPartitionForgotten: five producers of one
// batch each (a client making a producer per process) on a partition that
// keeps three: the retention tick forgets the two least recently active,
// says so, and the snapshot and a restart keep the three. Before, every
// producer stayed for producer.id_expiration (a week), each about 165
// bytes of memory and 67 of snapshot, without bound.
func TestProducersBeyondMaxPerPartitionForgotten(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "t-0")
	watch := &logWatch{want: "forgot idempotent producers beyond producer.max_per_partition"}
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: watch})
	opts := producer.Options{MaxProducers: 3}
	r := producerTestReplicaWith(t, segstore.OSFS{}, dir, opts, logger)
	clock := &fakeNow{t: time.Now()}
	r.deps.Now = clock.now
	// Producers 5, 4, ..., 1 write a second apart: 4 and 5 are the least
	// recently active (the higher ids: a tie broken by id would keep them).
	bases := map[int64]int64{}
	for id := int64(5); id >= 1; id-- {
		clock.t = clock.t.Add(time.Second)
		bases[id] = appendIdempotentAt(t, r, id, 0, 1, clock.t.UnixMilli())
	}
	r.maintainProducers() // the retention tick, within producer.ResendWindow
	if r.producers.Len() != 5 {
		t.Fatalf("%d producers kept right after they wrote, want all 5 (their clients may resend)", r.producers.Len())
	}
	clock.t = clock.t.Add(producer.ResendWindow)
	r.maintainProducers() // the tick past it
	wantKept := func(what string) {
		t.Helper()
		if r.producers.Len() != 3 {
			t.Fatalf("%s: %d producers kept, want 3", what, r.producers.Len())
		}
		for id := int64(1); id <= 3; id++ {
			wantDuplicate(t, r, what, id, 0, 1, bases[id])
		}
		for id := int64(4); id <= 5; id++ {
			if d := r.producers.Check(id, 0, 7, 1); d.Verdict != producer.Append {
				t.Fatalf("%s: producer %d, forgotten, at seq 7: %v, want append (a new producer)", what, id, d.Verdict)
			}
		}
	}
	wantKept("after the tick")
	if !watch.seen.Load() {
		t.Error("forgetting producers beyond producer.max_per_partition was not logged")
	}
	r.CurrentLog().Close()
	r = producerTestReplicaWith(t, segstore.OSFS{}, dir, opts, hclog.NewNullLogger())
	wantKept("after a restart")
}

// appendOtherTraffic appends plain batches (other producers' traffic) until
// the log has a sealed segment for retention to delete, and commits them.
func appendOtherTraffic(t *testing.T, r *Replica) {
	t.Helper()
	log := r.CurrentLog()
	for !log.HasSealedSegments() || log.LogEndOffset()%4 != 0 {
		var b record.Builder
		if err := b.Add(time.Now().UnixMilli(), nil, []byte(strings.Repeat("x", 400)), nil); err != nil {
			t.Fatal(err)
		}
		batch, err := b.AppendTo(nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := log.AppendLeader(batch, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := log.SetHighWatermark(log.LogEndOffset()); err != nil {
		t.Fatal(err)
	}
}

// TestProducerKeptWhenRetentionDeletesItsBatches: retention deleting a
// producer's last batch (size retention on a busy partition, by other
// producers' traffic) does not forget the producer, on the tick nor
// across a restart: its resend is still a duplicate, and its batch past a
// gap still out of order. A snapshot retention left behind (the agent
// stopped before the tick that follows the deletion) is not used: the
// batches it misses are gone from the log too.
func TestProducerKeptWhenRetentionDeletesItsBatches(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "t-0")
	fsys := segstore.OSFS{}
	r := producerTestReplica(t, fsys, dir)
	base := appendIdempotent(t, r, 7, 0, 2)
	r.writeProducerSnapshot()
	appendIdempotent(t, r, 9, 0, 1)
	appendOtherTraffic(t, r)
	r.CurrentLog().SetRetention(0, 1)
	r.applyRetention()
	if start := r.CurrentLog().LogStartOffset(); start <= base+1 {
		t.Fatalf("log start %d: retention did not delete producer 7's batch at %d", start, base)
	}
	wantKept := func(what string) {
		t.Helper()
		wantDuplicate(t, r, what, 7, 0, 2, base)
		if d := r.producers.Check(7, 0, 3, 1); d.Verdict != producer.OutOfOrderSequence || d.ExpectedSequence != 2 {
			t.Fatalf("%s: producer 7 seq 3 past a gap: %v expecting %d, want out_of_order_sequence expecting 2", what, d.Verdict, d.ExpectedSequence)
		}
	}
	// The agent stops before the tick: its snapshot ends below the log
	// start and misses producer 9's batch, which the log lost too.
	r.CurrentLog().Close()
	r = producerTestReplica(t, fsys, dir)
	if r.producers.Len() != 0 {
		t.Fatalf("%d producers known from a snapshot that ends below the log start %d", r.producers.Len(), r.CurrentLog().LogStartOffset())
	}

	r.CurrentLog().Close()
	dir = filepath.Join(t.TempDir(), "t-0")
	r = producerTestReplica(t, fsys, dir)
	base = appendIdempotent(t, r, 7, 0, 2)
	r.writeProducerSnapshot()
	appendOtherTraffic(t, r)
	r.CurrentLog().SetRetention(0, 1)
	r.applyRetention()
	r.maintainProducers() // the retention tick
	wantKept("after the retention tick")
	r.CurrentLog().Close()
	r = producerTestReplica(t, fsys, dir)
	if r.producerSnapshotEnd < r.CurrentLog().LogStartOffset() {
		t.Fatalf("snapshot end %d below the log start %d after the tick", r.producerSnapshotEnd, r.CurrentLog().LogStartOffset())
	}
	wantKept("after a restart")
}

// TestProducerSnapshotFollowsALogStartMovedOffTheTick: the log start moves
// outside the retention tick too: a retention change applied at once
// (logagent topic alter), and a follower deleting below its leader's log
// start. Each rewrites the producer snapshot when the start passes its
// end, as the tick does, so that a restart right after it still knows the
// producer whose batches went: its resend is a duplicate (before, the
// snapshot was rewritten only at the next tick, up to retentionInterval
// later, and a restart in between forgot the producer).
func TestProducerSnapshotFollowsALogStartMovedOffTheTick(t *testing.T) {
	for _, tc := range []struct {
		name string
		move func(t *testing.T, r *Replica)
	}{
		{"a retention change applied at once", func(t *testing.T, r *Replica) {
			r.meta = replicaMeta{usable: true, tc: election.TopicConfig{ID: "id", Name: "t", Partitions: 1,
				ReplicationFactor: 1, MinInsyncReplicas: 1, Storage: json.RawMessage(`{"retention_bytes":1}`)}}
			r.applyTopicStorage()
		}},
		{"a follower following its leader's log start", func(t *testing.T, r *Replica) {
			r.followLogStart(r.CurrentLog().LogEndOffset())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "t-0")
			fsys := segstore.OSFS{}
			r := producerTestReplica(t, fsys, dir)
			base := appendIdempotent(t, r, 7, 0, 2)
			r.writeProducerSnapshot()
			appendOtherTraffic(t, r)
			tc.move(t, r)
			if start := r.CurrentLog().LogStartOffset(); start <= base {
				t.Fatalf("log start %d: producer 7's batch at %d was not deleted", start, base)
			}
			// A restart before the next retention tick.
			r.CurrentLog().Close()
			r = producerTestReplica(t, fsys, dir)
			wantDuplicate(t, r, "after a restart", 7, 0, 2, base)
		})
	}
}
