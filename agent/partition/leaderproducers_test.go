package partition

import (
	"slices"
	"testing"

	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/producer"
	"github.com/logagent/logagent/replicate"
)

// TestLeaderProducerStateThatMissedAnAppendIsRebuilt: the leader's
// producer state holds a batch past its log end (a state and a log that
// disagree, as a full truncation refused for space after emptying the log
// once left them), so the Apply after a producer's append is refused
// (below the state's end). The leader only logged that and acknowledged
// the batch, the state not knowing it: the producer's resend of it was
// appended a second time. The state is rebuilt from the log before the
// batch is acknowledged, and the resend is its duplicate.
func TestLeaderProducerStateThatMissedAnAppendIsRebuilt(t *testing.T) {
	r, _, clock := faultFSReplica(t, &Deps{Self: "n1", Config: &config.Config{}, Durability: replicate.DurabilityReplicated})
	leadByHand(t, r, clock)
	// Producer 9's batch at 5-5, which the log (empty) does not hold.
	if err := r.producers.Apply(producer.Batch{ProducerID: 9, BaseSequence: 0, RecordCount: 1, BaseOffset: 5, LastOffset: 5, LeaderEpoch: 1}); err != nil {
		t.Fatal(err)
	}

	batch := idempotentBatch(t, 7, 0, 2, clock.now().UnixMilli())
	produce := func() ProduceOutcome {
		t.Helper()
		reply := make(chan ProduceOutcome, 1)
		r.onProduce(&produceRequest{batch: slices.Clone(batch), acks: replicate.AcksLeader, epoch: AnyEpoch, reply: reply})
		select {
		case out := <-reply:
			return out
		default:
			t.Fatal("acks=1 produce not answered")
			return ProduceOutcome{}
		}
	}
	first := produce()
	if first.Err != nil {
		t.Fatalf("first copy: %+v", first)
	}
	resend := produce()
	if resend.Err != nil || !resend.Duplicate || resend.Base != first.Base {
		t.Fatalf("resend of producer 7's batch acknowledged at %d: %+v, want a duplicate of it (log end now %d)",
			first.Base, resend, r.CurrentLog().LogEndOffset())
	}
	if d := r.producers.Check(9, 0, 0, 1); d.Verdict == producer.Duplicate {
		t.Fatalf("producer 9's batch, which the log does not hold, is still in the state after the rebuild: %s", d.Reason)
	}
}
