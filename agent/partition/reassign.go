package partition

import (
	"slices"
	"sync"
	"time"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/reassign"
)

// reassignRetry is how long a leader waits before it decides a move's next
// step again after one that did not come together (a refused completion, a
// handover that found no target replica caught up): the metadata or the
// followers must move first.
const reassignRetry = time.Second

// syncReplicas hands the leader state machine the replica set the metadata
// shows, and the liveness of its members: the union when a move starts (its
// new replicas may fetch from then on), the target once it completed. A set
// the state machine refuses
// (one lacking an ISR member: metadata older than what this leader
// committed) is left for the next snapshot.
func (r *Replica) syncReplicas() {
	want := r.meta.pm.Replicas
	if !r.meta.usable || len(want) == 0 || slices.Equal(r.leader.Replicas(), want) {
		return
	}
	if r.meta.pm.ReplicasIndex <= r.replicasFloor {
		// Metadata from before this leader's own completion (the union it
		// shows is over) or older than its election's.
		return
	}
	if err := r.leader.SetReplicas(want); err != nil {
		r.log.Debug("replica set not taken from the metadata yet", "replicas", want, "error", err)
		return
	}
	r.log.Info("replica set changed", "replicas", want)
	// The state machine ignored what Consul says of replicas it did not
	// have yet: an added replica reported dead must not join the ISR.
	r.applyLiveness()
}

// driveReassign moves the partition's reassignment, or a cancel's way
// back, on (docs/design.md §7.6); reconcile calls it while leading. reassign.Next decides; a
// completion goes out as the state machine's one ISR change in flight, a
// handover as a move of the leadership to a target replica.
func (r *Replica) driveReassign(now time.Time) {
	r.syncReplicas()
	pm := r.meta.pm
	if pm.Reassign == nil || !r.meta.usable || now.Before(r.reassignRetryAt) {
		return
	}
	step := reassign.Next(reassign.State{
		Self:        r.deps.Self,
		Move:        planMove(pm.Reassign),
		Replicas:    r.leader.Replicas(),
		ISR:         r.leaderISR,
		InFlight:    r.leader.InFlight() || r.isrRetry != nil,
		HandingOver: r.handover != nil,
		Successors:  r.leader.Successors(),
		Dead:        r.deadReplicas,
		MinISR:      r.meta.tc.MinInsyncReplicas,
	})
	switch step.Kind {
	case reassign.HandOver:
		if r.retiring {
			return
		}
		r.startHandover(&handover{targets: step.To, reassign: true, drainBy: now.Add(moveDrain)})
	case reassign.Complete:
		propose := func(target []string) error { return r.leader.ProposeReassignment(target, step.DeadKept) }
		if pm.Reassign.Cancelled {
			// A cancel's way back: back to the original list, whose
			// members need not all be in the ISR.
			propose = r.leader.ProposeCancel
		}
		if len(step.DeadKept) > 0 {
			r.log.Info("completing the move without waiting for dead replicas it keeps: they stay outside the ISR", "target", step.Target, "dead", step.DeadKept)
		}
		if err := propose(step.Target); err != nil {
			r.log.Warn("reassignment completion refused by the leader state", "target", step.Target, "error", err)
			r.reassignRetryAt = now.Add(reassignRetry)
			return
		}
		r.reassignIndexes = reassignIndexes{replicas: pm.ReplicasIndex, move: pm.ReassignIndex, m: *pm.Reassign}
		r.processLeaderReady()
	}
}

// planMove is the move m as reassign's plan takes it.
func planMove(m *election.Reassignment) reassign.Move {
	return reassign.Move{Target: m.Target, Adding: m.Adding, Removing: m.Removing, Cancel: m.Cancelled}
}

// reassignIndexes are the keys a completion decided from: its transaction
// is guarded by them.
type reassignIndexes struct {
	replicas, move uint64
	m              election.Reassignment
}

// throttled says the leader's answers to node's fetches count against the
// catch-up throttle: node is being added by a move and is not in the ISR.
func (r *Replica) throttled(node string) bool {
	pm := r.meta.pm
	return pm.Reassign != nil && slices.Contains(pm.Reassign.Adding, node) && !slices.Contains(r.leaderISR, node)
}

// catchUp counts the bytes a leader sent each replica being added, for
// the move's progress in status.
type catchUp struct {
	mu    sync.Mutex
	bytes map[string]int64
}

// AddCatchUpBytes counts n bytes sent to node while it was catching up.
func (r *Replica) AddCatchUpBytes(node string, n int) {
	r.catchUp.mu.Lock()
	defer r.catchUp.mu.Unlock()
	if r.catchUp.bytes == nil {
		r.catchUp.bytes = map[string]int64{}
	}
	r.catchUp.bytes[node] += int64(n)
}

// CatchUpBytes is how many bytes this replica, leading, sent each
// replica being added since it opened.
func (r *Replica) CatchUpBytes() map[string]int64 {
	r.catchUp.mu.Lock()
	defer r.catchUp.mu.Unlock()
	out := make(map[string]int64, len(r.catchUp.bytes))
	for k, v := range r.catchUp.bytes {
		out[k] = v
	}
	return out
}
