package partition

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"
)

// campaignCountingCoord counts the campaigns a replica starts (each waits
// for its cancellation); a replica under test must ask nothing else of it.
type campaignCountingCoord struct {
	Coordinator
	campaigns atomic.Int32
}

func (c *campaignCountingCoord) CampaignAs(ctx context.Context, _ string, _ int, _ election.Candidate) (*election.Leadership, error) {
	c.campaigns.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestDataLossMarkWriteFailureIsRetried: the write of replica.json that
// records a change of the data-loss mark fails (a full disk, an I/O
// error). The replica keeps the mark it decided in memory, and writes the
// file again, on the loop's clock, until the file says so durably. Before,
// the failure was only logged: a replica whose reopened log lost
// acknowledged records kept data_loss false on disk, and after a restart of
// its agent (its memory of the acknowledged HW gone) it trusted that log
// and could lead with it. Clearing the mark is the reverse: the replica
// holds the committed log again, and the file must come to say so, or
// every restart marks it again.
func TestDataLossMarkWriteFailureIsRetried(t *testing.T) {
	tests := []struct {
		name string
		// mark: the replica's reopened log lost acknowledged records
		// (it sets the mark); else it had the mark and clears it.
		mark bool
	}{
		{"mark after a reopen below the acknowledged HW", true},
		{"clear once the log reaches the leader's", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			coord := &campaignCountingCoord{}
			r, fsys, clock := faultFSReplica(t, &Deps{
				Self: "n1", Config: &config.Config{}, Coord: coord, Durability: replicate.DurabilityReplicated,
			})
			// Driven by hand: reconcile arms the wake timer of a loop that
			// does not run.
			r.wakeTimer = time.NewTimer(time.Hour)
			r.wakeTimer.Stop()
			if err := writeReplicaFile(fsys, r.dir, replicaFile{Topic: "t", Partition: 0, TopicID: "id", DataLoss: !tc.mark}); err != nil {
				t.Fatal(err)
			}
			writeFails := segstore.Fault{Op: segstore.OpWrite, Path: replicaFileName, Err: syscall.ENOSPC}
			if tc.mark {
				lostAcknowledged(t, r, fsys, clock, writeFails)
				if !r.dataLoss {
					t.Fatal("the reopened log misses acknowledged records and the replica is not marked")
				}
			} else {
				r.dataLoss = true
				log := r.CurrentLog()
				for range 5 {
					appendLeader(t, log, 1, "x")
				}
				fsys.Inject(writeFails)
				r.maybeClearDataLoss(peer.FetchPositions{LeaderEpoch: 2, HighWatermark: 5, EpochStartOffset: 5, LogEndOffset: 5})
				if r.dataLoss {
					t.Fatal("the mark was not cleared: the log reaches the leader's HW and epoch start")
				}
			}
			if f, _, err := readReplicaFile(fsys, r.dir); err != nil || f.DataLoss == tc.mark {
				t.Fatalf("replica.json %+v (%v) right after the failed write: the fault did not hit it", f, err)
			}
			fsys.Inject(writeFails) // the first write again fails too
			// A restart would find the mark the file has. The loop writes it
			// again, woken by its own timer (no other event comes here),
			// not at once (a failing disk is not hammered), and (when
			// marked) never campaigns meanwhile.
			r.meta.usable = tc.mark
			start := clock.t
			r.reconcile()
			if f, _, err := readReplicaFile(fsys, r.dir); err != nil || f.DataLoss == tc.mark {
				t.Fatalf("replica.json %+v (%v): written again at once after the failure", f, err)
			}
			for clock.t.Sub(start) < time.Minute && !r.wakeAt.IsZero() {
				clock.t, r.wakeAt = r.wakeAt, time.Time{} // the wake timer fires
				r.reconcile()
				if tc.mark && (!r.dataLoss || !r.CurrentView().DataLoss || r.campaigning || coord.campaigns.Load() != 0) {
					t.Fatalf("%v after the failed write: data_loss %t (view %t), campaigns %d: a replica that lost acknowledged records may lead",
						clock.t.Sub(start), r.dataLoss, r.CurrentView().DataLoss, coord.campaigns.Load())
				}
				if f, _, err := readReplicaFile(fsys, r.dir); err == nil && f.DataLoss == tc.mark {
					// Written again 1 s after the failure, and once more 2 s
					// after that.
					if took := clock.t.Sub(start); took != 3*time.Second {
						t.Fatalf("replica.json says data_loss %t %v after the failed write, want 3s (1s, then 2s more)", f.DataLoss, took)
					}
					break
				}
			}
			// Durably: what a crash leaves says it too.
			fsys.Crash()
			dst := filepath.Join(t.TempDir(), "after")
			if err := fsys.Reconstruct(dst, rand.New(rand.NewPCG(1, 2))); err != nil {
				t.Fatal(err)
			}
			f, _, err := readReplicaFile(segstore.OSFS{}, filepath.Join(dst, "t-0"))
			if err != nil {
				t.Fatal(err)
			}
			if f.DataLoss != tc.mark {
				t.Fatalf("a minute after the failed write, replica.json after a crash says data_loss %t, the replica decided %t: "+
					"the write was never made again", f.DataLoss, tc.mark)
			}
			r.logFailed = true // crashed: faultFSReplica's cleanup must not close the log
		})
	}
}

// lostAcknowledged has r, in "replicated" durability, lead and acknowledge
// an acks=all write its own log holds unsynced; the log then fails, and its
// reopen (cutting what no fsync covered) meets fault in the file system.
func lostAcknowledged(t *testing.T, r *Replica, fsys *segstore.FaultFS, clock *fakeNow, fault segstore.Fault) {
	t.Helper()
	failAfterAcknowledging(t, r, fsys, clock)
	fsys.Clear()
	fsys.Inject(fault)
	clock.t = clock.t.Add(reopenBackoff)
	r.reopen()
	if r.logFailed {
		t.Fatal("reopen did not succeed")
	}
	if end := r.CurrentLog().LogEndOffset(); end >= 2 {
		t.Fatalf("reopened log ends at %d: the unsynced acknowledged records were kept", end)
	}
}

// failAfterAcknowledging has r, in "replicated" durability, lead and
// acknowledge an acks=all write of two records its own log holds unsynced
// (n2 fetched them); the log then fails at its next fsync (a sticky fault,
// left in place), and the loop hears of it and has not reopened it yet. It
// returns the failed log.
func failAfterAcknowledging(t *testing.T, r *Replica, fsys *segstore.FaultFS, clock *fakeNow) *segstore.Log {
	t.Helper()
	log := r.CurrentLog()
	leadByHand(t, r, clock)
	reply := make(chan ProduceOutcome, 1)
	r.onProduce(&produceRequest{batch: testBatch(t, []string{"a", "b"}), acks: replicate.AcksAll, epoch: AnyEpoch, reply: reply})
	fr := make(chan LeaderFetchOutcome, 1)
	r.onLeaderFetch(&leaderFetchRequest{req: replicate.FetchRequest{ReplicaID: "n2", FetchOffset: 2, CurrentLeaderEpoch: 1, LastFetchedEpoch: 1}, reply: fr})
	if out := <-fr; out.Err != nil || out.Result.HighWatermark != 2 {
		t.Fatalf("fetch: %+v", out)
	}
	if out := <-reply; out.Err != nil {
		t.Fatalf("produce: %+v", out)
	}
	fsys.Inject(segstore.Fault{Op: segstore.OpSync, Sticky: true})
	cpErr := log.Checkpoint()
	if !errors.Is(cpErr, segstore.ErrFailed) {
		t.Fatalf("checkpoint: %v, want a failure", cpErr)
	}
	r.stepDown(errors.New("checkpoint failed"), false)
	r.onCheckpointResult(checkpointResult{log: log, err: cpErr})
	if !r.logFailed {
		t.Fatal("log not failed")
	}
	return log
}

// TestStopWritesTheDataLossMarkOrSaysItCouldNot: a replica stops while the
// write of its data-loss mark still fails. The stop tries once more, and
// when the file still cannot be written its Stop reports it (the agent then
// writes no clean_shutdown, and logs why): the next start would trust the
// log.
func TestStopWritesTheDataLossMarkOrSaysItCouldNot(t *testing.T) {
	for _, tc := range []struct {
		name       string
		sticky     bool
		wantMarked bool
	}{
		{"the disk took the write again by the stop", false, true},
		{"the disk still refuses it", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, fsys, _ := faultFSReplica(t, &Deps{Self: "n1", Config: &config.Config{}, Durability: replicate.DurabilityReplicated})
			if err := writeReplicaFile(fsys, r.dir, replicaFile{Topic: "t", Partition: 0, TopicID: "id"}); err != nil {
				t.Fatal(err)
			}
			fsys.Inject(segstore.Fault{Op: segstore.OpWrite, Path: replicaFileName, Err: syscall.EIO, Sticky: tc.sticky})
			r.setDataLoss(true)
			r.shutdown()
			r.logFailed = true // closed: faultFSReplica's cleanup must not close it again
			f, _, err := readReplicaFile(fsys, r.dir)
			if err != nil {
				t.Fatal(err)
			}
			if f.DataLoss != tc.wantMarked {
				t.Fatalf("after the stop replica.json says data_loss %t, want %t", f.DataLoss, tc.wantMarked)
			}
			if clean := r.closeErr == nil; clean != f.DataLoss {
				t.Fatalf("stop error %v with replica.json data_loss %t: a stop that could not record the mark must say so", r.closeErr, f.DataLoss)
			}
		})
	}
}
