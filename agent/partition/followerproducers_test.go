package partition

import (
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
// before the follower reports a position past the batch; a rebuild that
// cannot reach the log end (it starts from a snapshot that disagrees with
// the log too) fails the log, whose recovery decides, and the
// follower reports nothing.
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
		{"state and snapshot: the log fails", 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, fsys := fullTruncFollower(t)
			r.loadProducers()
			// Producer 9's batch, which the log (empty) does not hold.
			if err := r.producers.Apply(producer.Batch{ProducerID: 9, BaseSequence: 0, RecordCount: 1, BaseOffset: tt.planted, LastOffset: tt.planted, LeaderEpoch: 1}); err != nil {
				t.Fatal(err)
			}
			if tt.inSnapshot {
				b, err := r.producers.MarshalSnapshot(nil, tt.planted+1)
				if err != nil {
					t.Fatal(err)
				}
				if err := writeFileAtomic(fsys, filepath.Join(r.dir, producerSnapshotFile), b); err != nil {
					t.Fatal(err)
				}
			}

			r.becomeFollower(followTarget{node: "n1", epoch: 2})
			r.driveFollower()
			r.takeFetchAnswers()
			batch := idempotentBatch(t, 7, 0, 2, r.deps.Now().UnixMilli())
			record.SetLeaderEpoch(batch, 2)
			r.onFetchAnswered(fetchAnswered{gen: r.gen, seq: r.fetchSeq, answer: peer.FetchAnswer{Batches: batch, Positions: peer.FetchPositions{
				LeaderEpoch: 2, EpochStartOffset: 0, HighWatermark: 0, LogEndOffset: 2}}})

			if tt.inSnapshot {
				if !r.logFailed || r.follower != nil {
					t.Fatalf("log failed %v, following %v: want the log failed and nothing reported, the producer state (rebuilt from a snapshot that disagrees with the log) not knowing producer 7's batch at 0",
						r.logFailed, r.follower != nil)
				}
				return
			}
			if r.logFailed {
				t.Fatal("log failed: the state rebuilt from the log reaches its end")
			}
			if d := r.producers.Check(7, 0, 0, 2); d.Verdict != producer.Duplicate || d.Original.BaseOffset != 0 {
				t.Fatalf("resend of producer 7's batch appended at 0: %v (original at %d), want a duplicate of it", d.Verdict, d.Original.BaseOffset)
			}
			if d := r.producers.Check(9, 0, 0, 1); d.Verdict == producer.Duplicate {
				t.Fatalf("producer 9's batch, which the log does not hold, is still in the state after the rebuild: %s", d.Reason)
			}
			r.driveFollower()
			if r.fetchOut.FetchOffset != 2 {
				t.Fatalf("fetch offset %d, want 2", r.fetchOut.FetchOffset)
			}
		})
	}
}
