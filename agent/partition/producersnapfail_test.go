package partition

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/logagent/logagent/producer"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/segstore"
)

// TestProducerSnapshotOfUnknownEndRemovedOnTruncation: the producer
// snapshot on disk may describe more than the replica's record of its end
// (producerSnapshotEnd) says. A write whose directory fsync failed had
// already renamed the new snapshot over the old one, yet the replica kept
// the old end (or none): a truncation below the new end but not below the
// old one kept the file, the log refilled past its end with other
// batches, and the next open (a crash before the next retention tick's
// snapshot) took it as describing the log. A producer whose batch the
// truncation cut then had its resend answered as a duplicate at offsets
// that hold other records.
func TestProducerSnapshotOfUnknownEndRemovedOnTruncation(t *testing.T) {
	tests := []struct {
		name string
		// earlier: a snapshot was written before the failing one.
		earlier bool
		// restart: the follower's truncation is a full one (TruncateFully).
		restart bool
	}{
		{"first snapshot's directory fsync fails", false, false},
		{"a later snapshot's directory fsync fails", true, false},
		{"first snapshot's directory fsync fails, full truncation", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			fsys, err := segstore.NewFaultFS(root)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(root, "t-0")
			r := producerTestReplica(t, fsys, dir)
			appendIdempotent(t, r, 9, 0, 1)
			if tc.earlier {
				r.writeProducerSnapshot()
				if r.producerSnapshotEnd != 1 {
					t.Fatalf("snapshot end %d, want 1", r.producerSnapshotEnd)
				}
			}
			lost := appendIdempotent(t, r, 7, 0, 2) // never committed: a new leader lacks it
			fsys.Inject(segstore.Fault{Op: segstore.OpSyncDir, Path: dir})
			r.writeProducerSnapshot() // renamed into place, its directory not synced
			b, err := readFileFS(fsys, filepath.Join(dir, producerSnapshotFile), snapshotFileLimit)
			if err != nil {
				t.Fatal(err)
			}
			if _, end, err := producer.UnmarshalSnapshot(b, producer.Options{}); err != nil || end != lost+2 {
				t.Fatalf("snapshot on disk: end %d (%v), want %d: the fault did not hit its directory fsync", end, err, lost+2)
			}

			// The follower's truncation to the new leader's log cuts
			// producer 7's batch, and the log refills past the snapshot's
			// end with other (plain) batches.
			if tc.restart {
				err = r.CurrentLog().TruncateFully(lost)
			} else {
				err = r.CurrentLog().Truncate(lost)
			}
			if err != nil {
				t.Fatal(err)
			}
			r.producersTruncated(tc.restart)
			if r.logFailed {
				t.Fatal("log failed")
			}
			appendOtherRecords(t, r)
			// The agent dies before the next retention tick: the log is
			// on disk, the snapshot is what the failed write left.
			r.CurrentLog().Close()

			r = producerTestReplica(t, fsys, dir)
			// Producer 7 resends its batch: the log does not hold it, so
			// it must be appended, not answered as a duplicate at offsets
			// that hold other records.
			if d := r.producers.Check(7, 0, 0, 2); d.Verdict != producer.Append {
				t.Fatalf("resend of a batch the truncation cut: %v (original at %d), want append: the snapshot of end %d survived the truncation to %d and was used (snapshot end %d, log end %d)",
					d.Verdict, d.Original.BaseOffset, lost+2, lost, r.producerSnapshotEnd, r.CurrentLog().LogEndOffset())
			}
		})
	}
}

// TestProducerSnapshotUnreadableAtOpenRemovedOnTruncation: a snapshot that
// could not be read at open (no descriptor left, EMFILE; an I/O error) is
// still on disk, whole, with an end the replica does not know. Taken as
// none, a truncation below its end kept it, the log grew past that end
// again with other batches, and the next open, reading it this time, used
// it.
func TestProducerSnapshotUnreadableAtOpenRemovedOnTruncation(t *testing.T) {
	root := t.TempDir()
	fsys, err := segstore.NewFaultFS(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "t-0")
	r := producerTestReplica(t, fsys, dir)
	appendIdempotent(t, r, 9, 0, 1)
	lost := appendIdempotent(t, r, 7, 0, 2)
	r.writeProducerSnapshot()
	r.CurrentLog().Close()

	fsys.Inject(segstore.Fault{Op: segstore.OpOpen, Path: producerSnapshotFile, Err: syscall.EMFILE})
	r = producerTestReplica(t, fsys, dir) // the snapshot cannot be opened: the log is scanned
	wantDuplicate(t, r, "from the log", 7, 0, 2, lost)
	if err := r.CurrentLog().Truncate(lost); err != nil {
		t.Fatal(err)
	}
	r.producersTruncated(false)
	if r.logFailed {
		t.Fatal("log failed")
	}
	appendOtherRecords(t, r)
	r.CurrentLog().Close() // the agent dies before the next retention tick

	r = producerTestReplica(t, fsys, dir)
	if d := r.producers.Check(7, 0, 0, 2); d.Verdict != producer.Append {
		t.Fatalf("resend of a batch the truncation cut: %v (original at %d), want append: the snapshot unreadable at the earlier open survived the truncation to %d and was used (snapshot end %d, log end %d)",
			d.Verdict, d.Original.BaseOffset, lost, r.producerSnapshotEnd, r.CurrentLog().LogEndOffset())
	}
}

// appendOtherRecords appends, as the leader of epoch 2, a batch of three
// records of no producer: the log grows past a truncation again.
func appendOtherRecords(t *testing.T, r *Replica) {
	t.Helper()
	var bld record.Builder
	for range 3 {
		if err := bld.Add(time.Now().UnixMilli(), nil, []byte("other"), nil); err != nil {
			t.Fatal(err)
		}
	}
	batch, err := bld.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.CurrentLog().AppendLeader(batch, 2); err != nil {
		t.Fatal(err)
	}
	r.appliedBatches(batch)
}
