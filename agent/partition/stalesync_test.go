package partition

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"
)

// TestStaleSyncResultAfterTruncationNotCountedDurable: in fsync mode a
// follower's fetch offset must be fsynced. A group commit that returned
// offset 4 before a truncation to 2 (its result still on its way to the
// loop: the syncer goroutine had not sent it yet) is reported after the
// follower re-fetched offsets 2-3 from the leader: onSyncResult hands
// Synced(3) to the follower, which takes the new, never fsynced records
// for durable and fetches from 4; the leader counts 4 toward its HW.
func TestStaleSyncResultAfterTruncationNotCountedDurable(t *testing.T) {
	root := t.TempDir()
	fsys := segstore.OSFS{}
	opts := segstore.Options{SegmentBytes: 1 << 20, IndexIntervalBytes: 256, IndexBytes: 4096, Logger: hclog.NewNullLogger()}
	sessions := peer.NewSessions(nil, "n2", time.Second, nil)
	sessions.Close()
	deps := &Deps{Self: "n2", Config: &config.Config{}, Log: hclog.NewNullLogger(), Now: time.Now, FS: fsys, LogOptions: opts,
		Durability: replicate.DurabilityFsync, sessions: sessions,
		LookupAgent: func(string) (election.AgentInfo, bool) {
			return election.AgentInfo{NodeID: "n1", PeerAddr: "127.0.0.1:1"}, true
		}}
	dir := filepath.Join(root, "t-0")
	log, _, err := openPartitionLog(fsys, dir, opts, func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	// Offsets 0-3 at epoch 1, fsynced: the group commit returns 4.
	appendLeader(t, log, 1, "a", "b")
	appendLeader(t, log, 1, "c", "d")
	stale, err := log.Sync()
	if err != nil || stale != 4 {
		t.Fatalf("sync: %d, %v", stale, err)
	}
	// No syncer: the test delivers sync results itself.
	r := newReplica(deps, "t", 0, "id", dir, log, false)
	r.loadProducers()
	r.becomeFollower(followTarget{node: "n1", epoch: 2})
	r.driveFollower()
	if r.fetchOut.FetchOffset != 4 {
		t.Fatalf("fetch offset %d", r.fetchOut.FetchOffset)
	}
	// The leader of epoch 2 kept epoch 1 only up to offset 2.
	r.onFetchAnswered(fetchAnswered{gen: r.gen, seq: r.fetchSeq, answer: peer.FetchAnswer{Positions: peer.FetchPositions{
		LeaderEpoch: 2, EpochStartOffset: 2, HighWatermark: 2, LogEndOffset: 4, Diverging: &replicate.EpochEndOffset{Epoch: 1, EndOffset: 2}}}})
	r.driveFollower()
	if end := log.LogEndOffset(); end != 2 || r.fetchOut.FetchOffset != 2 {
		t.Fatalf("after the truncation: log end %d, fetch offset %d; want 2 and 2", end, r.fetchOut.FetchOffset)
	}
	// The leader sends its offsets 2-3 (epoch 2).
	batch := testBatch(t, []string{"X", "Y"})
	record.SetBaseOffset(batch, 2)
	record.SetLeaderEpoch(batch, 2)
	r.onFetchAnswered(fetchAnswered{gen: r.gen, seq: r.fetchSeq, answer: peer.FetchAnswer{Batches: batch, Positions: peer.FetchPositions{
		LeaderEpoch: 2, EpochStartOffset: 2, HighWatermark: 2, LogEndOffset: 4}}})
	r.driveFollower()
	if log.LogEndOffset() != 4 || r.fetchOut.FetchOffset != 2 {
		t.Fatalf("log end %d, last fetch offset %d: want 4, and no fetch before the fsync", log.LogEndOffset(), r.fetchOut.FetchOffset)
	}
	// The pre-truncation group commit's result arrives now.
	r.onSyncResult(syncResult{log: log, offset: stale})
	r.driveFollower()
	if r.fetchOut.FetchOffset > log.SyncedOffset() {
		t.Fatalf("fetch offset %d sent while the log is fsynced only to %d: the leader counts unsynced records toward the HW",
			r.fetchOut.FetchOffset, log.SyncedOffset())
	}
}
