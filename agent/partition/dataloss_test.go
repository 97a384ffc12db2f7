package partition

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"
)

// TestDataLossClearedOnlyUnderTheJoinRule (issue 13 e): a replica that lost
// data clears its mark only once its durable log reaches both the leader's
// HW and the start of the leader's epoch. A new leader's HW can trail what
// its predecessor committed (it learns the HW from its followers), so the HW
// alone would let a replica that lacks committed records lead again.
func TestDataLossClearedOnlyUnderTheJoinRule(t *testing.T) {
	tests := []struct {
		name       string
		durability replicate.Durability
		hw, start  int64
		sync       bool
		wantClear  bool
	}{
		{"behind the epoch start, at the HW", replicate.DurabilityReplicated, 4, 6, false, false},
		{"at both", replicate.DurabilityReplicated, 4, 5, false, true},
		{"behind the HW", replicate.DurabilityReplicated, 6, 0, false, false},
		{"fsync mode, not yet fsynced", replicate.DurabilityFsync, 5, 5, false, false},
		{"fsync mode, fsynced", replicate.DurabilityFsync, 5, 5, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			fsys := segstore.OSFS{}
			opts := segstore.Options{SegmentBytes: 1 << 20, IndexIntervalBytes: 256, IndexBytes: 4096, Logger: hclog.NewNullLogger()}
			deps := &Deps{Self: "n2", Log: hclog.NewNullLogger(), Now: time.Now, FS: fsys, LogOptions: opts, Durability: tc.durability}
			dir := filepath.Join(root, "t-0")
			log, _, err := openPartitionLog(fsys, dir, opts, func() error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { log.Close() })
			for range 5 {
				appendLeader(t, log, 1, "x")
			}
			if tc.sync {
				if _, err := log.Sync(); err != nil {
					t.Fatal(err)
				}
			}
			r := newReplica(deps, "t", 0, "id", dir, log, true)
			r.maybeClearDataLoss(peer.FetchPositions{LeaderEpoch: 2, HighWatermark: tc.hw, EpochStartOffset: tc.start, LogEndOffset: 9})
			if cleared := !r.dataLoss; cleared != tc.wantClear {
				t.Fatalf("log end 5, leader HW %d, epoch start %d: cleared %t, want %t", tc.hw, tc.start, cleared, tc.wantClear)
			}
			if f, _, err := readReplicaFile(segstore.OSFS{}, dir); tc.wantClear && (err != nil || f.DataLoss) {
				t.Fatalf("replica file %+v (%v) after clearing: the mark must be gone on disk too", f, err)
			}
		})
	}
}
