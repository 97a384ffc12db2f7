package partition

import (
	"errors"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/producer"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"
	"github.com/logagent/logagent/wire"
)

// fullTruncFollower is a replica on a FaultFS that can follow n1 (at an
// address nothing answers: the test hands the loop the answers itself).
func fullTruncFollower(t *testing.T) (*Replica, *segstore.FaultFS) {
	t.Helper()
	sessions := peer.NewSessions(nil, "n2", time.Second, nil)
	sessions.Close()
	r, fsys, _ := faultFSReplica(t, &Deps{
		Self: "n2", Config: &config.Config{}, Durability: replicate.DurabilityReplicated,
		sessions: sessions,
		LookupAgent: func(string) (election.AgentInfo, bool) {
			return election.AgentInfo{NodeID: "n1", PeerAddr: "127.0.0.1:1"}, true
		},
	})
	return r, fsys
}

// TestFullDiskRestartTruncationDoesNotFailTheLog: a follower whose disk
// is full and whose log is empty below the leader's log start (a replica
// just added by a reassignment, the leader's retention long past 0) is told to truncate fully
// to the leader's start. That truncation must write the new log start
// offset first, which the full disk refuses before anything (beyond
// emptying the log at its own start) changed. The design says a truncation
// refused for space leaves the log usable; TruncateFully failed the log
// instead, and the replica then reopened at once, followed again at once
// (following was reset), got the same out-of-range answer and failed
// again: a loop with no backoff (an Error log line, a log recovery and a
// fetch per turn) for as long as the disk stays full.
func TestFullDiskRestartTruncationDoesNotFailTheLog(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 17))
	r, fsys := fullTruncFollower(t)
	// A replica just added to the partition (a reassignment, a replaced
	// host): its log is empty at 0, the leader's retention has moved its
	// log start on.
	leaderStart := int64(10 + rng.IntN(1000))

	// The disk is full from now on.
	fsys.Inject(segstore.Fault{Op: segstore.OpWrite, Path: ".log", Err: syscall.ENOSPC, Partial: true, Sticky: true})
	fsys.Inject(segstore.Fault{Op: segstore.OpCreate, Err: syscall.ENOSPC, Sticky: true})

	target := followTarget{node: "n1", epoch: 2}
	failures := 0
	// One instant of the (fake) clock: what reconcile would do, turn after
	// turn, without any time passing.
	for turn := 0; turn < 20; turn++ {
		if r.logFailed {
			if r.deps.Now().Before(r.reopenAt) {
				break // backs off: fine
			}
			r.reopen()
			if r.logFailed {
				break
			}
		}
		if r.follower == nil {
			if target == r.following && r.deps.Now().Before(r.followRetryAt) {
				break // backs off: fine
			}
			r.becomeFollower(target)
		}
		if r.deps.Now().Before(r.followRetryAt) {
			break
		}
		r.driveFollower()
		r.takeFetchAnswers()
		if r.follower == nil {
			continue
		}
		r.onFetchAnswered(fetchAnswered{gen: r.gen, seq: r.fetchSeq, err: &peer.Error{Status: 416, Code: wire.CodeOffsetOutOfRange,
			LogStartOffset: leaderStart, LogEndOffset: leaderStart + 5}})
		r.driveFollower()
		r.takeFetchAnswers()
		if r.logFailed {
			failures++
		}
	}
	if failures > 0 {
		err := error(nil)
		if _, e := r.CurrentLog().Sync(); e != nil {
			err = e
		}
		t.Fatalf("a full truncation refused for space failed the log %d times within one instant (no backoff; last error %v, ErrNoSpace %v): "+
			"want the log left usable and the follower backing off", failures, err, errors.Is(err, segstore.ErrNoSpace))
	}
}

// TestFullDiskRestartTruncationAfterEmptyingForgetsItsProducers: a
// follower whose log holds an idempotent producer's batch is told to
// truncate fully to the leader's log start. TruncateFully empties the log
// at its own start first, then writes the new log start offset, which a
// full disk refuses: ErrNoSpace, the log usable and empty. The replica
// took every ErrNoSpace of a truncation for "nothing changed" and kept the
// producer state, which still held the batch the log had lost: as leader
// (an unclean election, say) it would answer the producer's resend as a
// duplicate of records that are not there.
func TestFullDiskRestartTruncationAfterEmptyingForgetsItsProducers(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 19))
	r, fsys := fullTruncFollower(t)
	r.loadProducers()
	count := 1 + rng.IntN(5)
	base := appendIdempotent(t, r, 7, 0, count)
	end := r.CurrentLog().LogEndOffset()
	leaderStart := end + 1 + int64(rng.IntN(1000))

	// Room for everything but the new log start offset's checkpoint.
	fsys.Inject(segstore.Fault{Op: segstore.OpCreate, Path: "log-start-offset", Err: syscall.ENOSPC, Sticky: true})

	r.becomeFollower(followTarget{node: "n1", epoch: 2})
	r.driveFollower()
	r.takeFetchAnswers()
	r.onFetchAnswered(fetchAnswered{gen: r.gen, seq: r.fetchSeq, err: &peer.Error{Status: 416, Code: wire.CodeOffsetOutOfRange,
		LogStartOffset: leaderStart, LogEndOffset: leaderStart + 5}})
	r.driveFollower()

	log := r.CurrentLog()
	if r.logFailed || log.LogEndOffset() != base || log.LogStartOffset() != base {
		t.Fatalf("after the refused full truncation: failed %v, log [%d, %d); want the log usable and emptied at %d "+
			"(the case this test is about)", r.logFailed, log.LogStartOffset(), log.LogEndOffset(), base)
	}
	if d := r.producers.Check(7, 0, 0, int32(count)); d.Verdict != producer.Append {
		t.Fatalf("resend of producer 7's batch, which the emptied log no longer holds: %v (%s), want append", d.Verdict, d.Reason)
	}
}
