package partition

import (
	"errors"
	"testing"
	"time"

	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"
)

// TestReopenBelowLeaderHWSetOnFailedLogIsDataLoss: in "replicated"
// durability a leader counts its own unsynced records toward the HW. The
// log fails off the loop (here the checkpoint goroutine's write; the loop
// hears of it only with checkpointResult); before the loop handles that, a
// follower's fetch moves the leader's HW to 2 and the acks=all write of
// offsets 0-1 is acknowledged, but SetHighWatermark(2) is refused by the
// failed log, so failed.HighWatermark() stays 0. The reopen keeps only what
// fsyncs covered (nothing), and decides data loss from
// max(failed.HighWatermark(), reportedEnd) = 0: the replica, still in the
// ISR, is not marked data_loss and may lead without the acknowledged
// records.
func TestReopenBelowLeaderHWSetOnFailedLogIsDataLoss(t *testing.T) {
	r, fsys, clock := faultFSReplica(t, &Deps{
		Self: "n1", Config: &config.Config{}, Durability: replicate.DurabilityReplicated,
	})
	log := r.CurrentLog()
	leader := leadByHand(t, r, clock)

	reply := make(chan ProduceOutcome, 1)
	r.onProduce(&produceRequest{batch: testBatch(t, []string{"a", "b"}), acks: replicate.AcksAll, epoch: AnyEpoch, reply: reply})
	select {
	case out := <-reply:
		t.Fatalf("acks=all answered before the follower has it: %+v", out)
	default:
	}

	// The checkpoint goroutine's write fails: the log is failed, the loop
	// does not know yet.
	fsys.Inject(segstore.Fault{Op: segstore.OpSync, Sticky: true})
	cpErr := log.Checkpoint()
	if !errors.Is(cpErr, segstore.ErrFailed) {
		t.Fatalf("checkpoint: %v, want a failure", cpErr)
	}

	// The follower's fetch, queued before the checkpoint result, reaches
	// offset 2: the HW moves to 2 and the write is acknowledged.
	fr := make(chan LeaderFetchOutcome, 1)
	r.onLeaderFetch(&leaderFetchRequest{req: replicate.FetchRequest{ReplicaID: "n2", FetchOffset: 2, CurrentLeaderEpoch: 1, LastFetchedEpoch: 1}, reply: fr})
	if out := <-fr; out.Err != nil || out.Result.HighWatermark != 2 {
		t.Fatalf("fetch: %+v", out)
	}
	out := <-reply
	if out.Err != nil {
		t.Fatalf("produce: %+v", out)
	}
	t.Logf("acks=all write [%d, %d] acknowledged; leader HW %d; failed log's HW %d", out.Base, out.Last, leader.HighWatermark(), log.HighWatermark())

	// The loop learns of the failure: it steps down (the test's leader has
	// no Consul lock to release) and reopens.
	r.stepDown(errors.New("checkpoint failed"), false)
	r.onCheckpointResult(checkpointResult{log: log, err: cpErr})
	if !r.logFailed {
		t.Fatal("log not failed")
	}
	fsys.Clear()
	clock.t = clock.t.Add(reopenBackoff)
	r.reopen()
	if r.logFailed {
		t.Fatal("reopen did not succeed")
	}
	end := r.CurrentLog().LogEndOffset()
	if end < 2 && !r.dataLoss {
		t.Fatalf("reopened log ends at %d, below the HW 2 this replica acknowledged acks=all writes under, "+
			"yet it is not marked data_loss: still in the ISR, it may lead without them", end)
	}
}

// leadByHand makes r (durability "replicated") the leader of t/0 at epoch
// 1 with replicas and ISR n1 and n2 and min_insync_replicas 2, as
// becomeLeader would without a Consul leadership.
func leadByHand(t *testing.T, r *Replica, clock *fakeNow) *replicate.Leader {
	t.Helper()
	log := r.CurrentLog()
	if err := log.AssignEpoch(1, 0); err != nil {
		t.Fatal(err)
	}
	leader, err := replicate.NewLeader(replicate.LeaderConfig{
		Self: "n1", Epoch: 1, EpochStartOffset: 0,
		Replicas: []string{"n1", "n2"}, ISR: []string{"n1", "n2"}, MinInsyncReplicas: 2,
		LagTimeMax: 10 * time.Second, Durability: replicate.DurabilityReplicated,
		EpochCache: epochCache{log: log},
	}, clock.now())
	if err != nil {
		t.Fatal(err)
	}
	r.role, r.leader, r.leaderISR = RoleLeader, leader, leader.ISR()
	r.leaderTicker = time.NewTicker(time.Hour)
	r.loadProducers()
	return leader
}
