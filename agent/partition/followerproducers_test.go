package partition

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/producer"
	"github.com/logagent/logagent/record"
)

// TestFollowerProducerStateThatMissedAnAppendIsRebuilt: a follower's
// producer state holds a batch past its log end (a state and a log that
// disagree, as a full truncation refused for space after emptying the log
// once left them), so the Apply after it appends producer 7's batch from
// the leader is refused. The follower only logged that and fetched on, the
// state not knowing the batch: once it led, the producer's resend of it
// would be appended a second time. The state is rebuilt from the log
// before the follower reports a position past the batch.
//
// When the planted state is also the producer snapshot (a snapshot that
// disagrees with the log, as one written before a truncation it did not
// see), the rebuild from it refused the batch too and failed the log; the
// reopen loaded the same snapshot again, ignoring the refusal, so the
// state kept missing producer 7's batch (or the next refused append failed
// the log again): the partition never recovered while the file stayed.
// The snapshot is now removed and the whole log scanned, at a rebuild and
// at a reopen alike.
func TestFollowerProducerStateThatMissedAnAppendIsRebuilt(t *testing.T) {
	for _, tt := range []struct {
		name string
		// planted is the offset of producer 9's batch in the state.
		planted int64
		// inSnapshot: the planted state is also the producer snapshot
		// (ending after it, within the log once producer 7's batch at 0-1
		// is appended), which the rebuild starts from: it refuses that
		// batch too.
		inSnapshot bool
	}{
		{"state only: rebuilt", 5, false},
		{"state and snapshot: snapshot removed, rebuilt from the whole log", 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, fsys := fullTruncFollower(t)
			r.loadProducers()
			snapshot := filepath.Join(r.dir, producerSnapshotFile)
			// Producer 9's batch, which the log does not hold.
			planted := producer.Batch{ProducerID: 9, BaseSequence: 0, RecordCount: 1, BaseOffset: tt.planted, LastOffset: tt.planted, LeaderEpoch: 1}
			if err := r.producers.Apply(planted); err != nil {
				t.Fatal(err)
			}
			plantSnapshot := func() {
				t.Helper()
				state := producer.New(r.deps.ProducerOptions)
				if err := state.Apply(planted); err != nil {
					t.Fatal(err)
				}
				b, err := state.MarshalSnapshot(nil, tt.planted+1)
				if err != nil {
					t.Fatal(err)
				}
				if err := writeFileAtomic(fsys, snapshot, b); err != nil {
					t.Fatal(err)
				}
			}
			// appendAt hands the follower producer 7's batch of sequence
			// seq, n records, at its fetch offset, which must be at.
			appendAt := func(seq int32, n int, at int64) {
				t.Helper()
				r.driveFollower()
				r.takeFetchAnswers()
				if r.fetchOut.FetchOffset != at {
					t.Fatalf("fetch offset %d, want %d", r.fetchOut.FetchOffset, at)
				}
				batch := idempotentBatch(t, 7, seq, n, r.deps.Now().UnixMilli())
				record.SetBaseOffset(batch, at)
				record.SetLeaderEpoch(batch, 2)
				r.onFetchAnswered(fetchAnswered{gen: r.gen, seq: r.fetchSeq, answer: peer.FetchAnswer{Batches: batch, Positions: peer.FetchPositions{
					LeaderEpoch: 2, EpochStartOffset: 0, HighWatermark: 0, LogEndOffset: at + int64(n)}}})
				if r.logFailed {
					t.Fatalf("log failed at producer 7's batch at %d: the producer state rebuilt from the log reaches its end", at)
				}
			}
			// matchesLog fails unless the state knows producer 7's batches
			// at offsets, and not producer 9's, and the snapshot that
			// disagreed with the log is gone.
			matchesLog := func(offsets ...int64) {
				t.Helper()
				seq := int32(0)
				for _, off := range offsets {
					if d := r.producers.Check(7, 0, seq, 2); d.Verdict != producer.Duplicate || d.Original.BaseOffset != off {
						t.Fatalf("resend of producer 7's batch appended at %d: %v (original at %d), want a duplicate of it", off, d.Verdict, d.Original.BaseOffset)
					}
					seq += 2
				}
				if d := r.producers.Check(9, 0, 0, 1); d.Verdict == producer.Duplicate {
					t.Fatalf("producer 9's batch, which the log does not hold, is still in the state after the rebuild: %s", d.Reason)
				}
				if !tt.inSnapshot {
					return
				}
				f, err := fsys.OpenFile(snapshot, os.O_RDONLY, 0)
				if err == nil {
					f.Close()
				}
				if !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("producer snapshot that disagrees with the log still there (open: %v)", err)
				}
			}

			if tt.inSnapshot {
				plantSnapshot()
			}
			r.becomeFollower(followTarget{node: "n1", epoch: 2})
			appendAt(0, 2, 0)
			matchesLog(0)
			r.driveFollower()
			if r.fetchOut.FetchOffset != 2 {
				t.Fatalf("fetch offset %d, want 2", r.fetchOut.FetchOffset)
			}
			if !tt.inSnapshot {
				return
			}

			// The same snapshot met at a reopen (the log failed for
			// another reason): the reopened replica's state is the log's.
			plantSnapshot()
			r.failLog(errors.New("test: the disk failed"))
			r.reopen()
			if r.logFailed {
				t.Fatal("reopen failed")
			}
			matchesLog(0)
			r.becomeFollower(followTarget{node: "n1", epoch: 2})
			appendAt(2, 2, 2)
			matchesLog(0, 2)
		})
	}
}
