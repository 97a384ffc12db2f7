package partition

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"
)

// TestReopenBelowReportedFetchOffsetIsDataLoss: with durability
// "replicated" a follower's fetch offset is its log end, fsynced or not,
// and the leader counts it toward the HW (and acknowledges acks=all writes
// below it) before the follower itself learns that HW from the next
// answer. A log failure then reopens the follower's log cut to its last
// fsync. The cut is below what the follower told the leader it holds, so
// the leader may have acknowledged records it no longer has; the replica,
// still in the ISR, must not lead before it has fetched them again. reopen
// compared the cut with the replica's own HW only, which trails what it
// reported, and left the mark off.
func TestReopenBelowReportedFetchOffsetIsDataLoss(t *testing.T) {
	// A closed session set answers every fetch with an error at once: the
	// test only needs the fetch to go out.
	sessions := peer.NewSessions(nil, "n2", time.Second, nil)
	sessions.Close()
	r, fsys, clock := faultFSReplica(t, &Deps{
		Self: "n2", Config: &config.Config{}, Durability: replicate.DurabilityReplicated,
		sessions: sessions,
		LookupAgent: func(string) (election.AgentInfo, bool) {
			return election.AgentInfo{NodeID: "n1", PeerAddr: "127.0.0.1:1"}, true
		},
	})
	log := r.CurrentLog()

	// Offsets 0-1 are fsynced (a checkpoint) and the replica knows them
	// committed; 2-3 came from the leader n1 since, in the page cache only.
	appendLeader(t, log, 1, "a", "b")
	if synced, err := log.Sync(); err != nil || synced != 2 {
		t.Fatalf("sync: %d, %v", synced, err)
	}
	if err := log.SetHighWatermark(2); err != nil {
		t.Fatal(err)
	}
	appendLeader(t, log, 1, "c", "d")

	// Following n1 at epoch 1, the replica fetches from its log end: n1
	// counts offset 4 for it, moves its HW to 4 and acknowledges c and d.
	r.becomeFollower(followTarget{node: "n1", epoch: 1})
	r.driveFollower()
	if r.fetchOut.FetchOffset != 4 {
		t.Fatalf("fetch offset %d, want 4 (the log end)", r.fetchOut.FetchOffset)
	}

	// Before the answer that carries HW 4 arrives, the log fails (an fsync
	// error) and is reopened: recovery keeps what the last successful fsync
	// covered.
	fsys.Inject(segstore.Fault{Op: segstore.OpSync, Path: ".log"})
	_, syncErr := log.Sync()
	if !errors.Is(syncErr, segstore.ErrFailed) {
		t.Fatalf("sync: %v, want the injected failure", syncErr)
	}
	r.failLog(fmt.Errorf("fsync: %w", syncErr))
	fsys.Clear()
	clock.t = clock.t.Add(reopenBackoff)
	r.reopen()
	if r.logFailed {
		t.Fatal("reopen did not succeed")
	}
	if end := r.CurrentLog().LogEndOffset(); end != 2 {
		t.Fatalf("reopened log ends at %d, want 2 (the fsynced records)", end)
	}
	if !r.dataLoss {
		t.Fatal("the reopened log lost offsets 2-3, which this replica reported to the leader as held (fetch offset 4) " +
			"and the leader may have acknowledged, yet the replica is not marked data_loss: " +
			"still in the ISR, it may win the next election without them")
	}
}
