package partition

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"
)

// TestStopWithFailedLogIsNotAClean: in "replicated" durability a leader
// acknowledges an acks=all write (offsets 0-1) that its own log holds
// unsynced; the log then fails (an fsync error), and the agent is stopped
// gracefully before the loop reopened it (a second failure waits up to 30 s
// before its reopen). The reopen is what would have cut what no fsync
// covered and marked the replica data_loss; the stop skips it, closes
// nothing, and Replica.Stop (so Manager.Stop) reports no error, so the
// agent writes clean_shutdown. After a power loss the next start trusts
// that marker (no lost page cache, no data_loss marks): the replica opens
// without the acknowledged records and is free to lead.
func TestStopWithFailedLogIsNotAClean(t *testing.T) {
	// healed: the fault passed before the stop, so a recovery at the stop
	// succeeds (and must record the data loss); else the stop must say it
	// did not close cleanly.
	for _, healed := range []bool{false, true} {
		t.Run(fmt.Sprintf("healed=%v", healed), func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			r, fsys, clock := faultFSReplica(t, &Deps{
				Self: "n1", Config: &config.Config{}, Durability: replicate.DurabilityReplicated,
			})
			if err := writeReplicaFile(fsys, r.dir, replicaFile{Topic: "t", Partition: 0, TopicID: "id"}); err != nil {
				t.Fatal(err)
			}
			failAfterAcknowledging(t, r, fsys, clock)
			r.reopenAt = clock.t.Add(30 * time.Second) // a second failure's hold

			// SIGTERM: the replica's loop stops.
			if healed {
				fsys.Clear() // the fault passed: a recovery at the stop can succeed
			}
			r.shutdown()
			stopErr := r.closeErr
			r.logFailed = true // stopped: faultFSReplica's cleanup must not close it again
			t.Logf("Replica.Stop would return %v", stopErr)

			// The host loses power; the next start believes the stop was clean
			// when stopErr is nil (no marks), and opens the log as it finds it.
			fsys.Crash()
			rng := rand.New(rand.NewPCG(seed, 1))
			opts := segstore.Options{SegmentBytes: 1 << 20, IndexIntervalBytes: 256, IndexBytes: 4096, Logger: hclog.NewNullLogger()}
			var (
				end      int64
				dataLoss bool
				rf       replicaFile
			)
			// What survives is random per file: the first of a few power losses
			// that took the unsynced records.
			for try := range 32 {
				dst := filepath.Join(t.TempDir(), "after")
				if err := fsys.Reconstruct(dst, rng); err != nil {
					t.Fatal(err)
				}
				dir := filepath.Join(dst, "t-0")
				var err error
				rf, _, err = readReplicaFile(segstore.OSFS{}, dir)
				if err != nil {
					t.Fatal(err)
				}
				reopened, loss, err := openPartitionLog(segstore.OSFS{}, dir, opts, func() error { return nil })
				if err != nil {
					t.Fatal(err)
				}
				end, dataLoss = reopened.LogEndOffset(), loss
				reopened.Close()
				if end < 2 {
					t.Logf("power loss %d took the unsynced records", try)
					break
				}
			}
			t.Logf("after the power loss: log end %d, data loss on open %t, replica.json data_loss %t", end, dataLoss, rf.DataLoss)
			if stopErr == nil && end < 2 && !dataLoss && !rf.DataLoss {
				t.Fatalf("a stop with the log failed reported a clean close (so clean_shutdown is written) and recorded no data loss: "+
					"after a power loss the replica opens at %d, below the acknowledged HW 2, unmarked, free to lead", end)
			}
		})
	}
}
