package partition

import (
	"context"
	"time"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/reassign"
)

// Self-healing (cluster.replace_dead_after, docs/design.md §7.7): a
// partition's leader moves the replicas of agents it has seen dead for
// that long to live agents without a replica of the partition, with the
// reassignment of §7.6. The leader decides for its own partition only:
// there is one leader per partition, and a leader that lost its leadership
// without knowing yet decided from metadata whose replicas index the start
// transaction checks, so no two agents start conflicting moves (the start
// also refuses a second move of a partition).

// healRetry is how long a leader waits before it tries again to re-place a
// dead replica after an attempt that did not start a move (no live agent to
// take it, a refused or failed start).
const healRetry = 5 * time.Second

// healResult is the outcome of a start of a healing move.
type healResult struct {
	gen    uint64
	target []string
	err    error
}

// maybeHeal starts the move that re-places the partition's replicas dead
// for cluster.replace_dead_after, if one is due and the cluster has fewer
// than reassign.MaxHealing moves in flight.
func (r *Replica) maybeHeal(now time.Time) {
	after := r.deps.Config.Cluster.ReplaceDeadAfter
	pm := r.meta.pm
	if after <= 0 || r.healing || r.retiring || !r.meta.usable || pm.Reassign != nil || r.liveness == nil || now.Before(r.healRetryAt) {
		return
	}
	due := r.deadSince.Due(pm.Replicas, after, now)
	if len(due) == 0 {
		return
	}
	snap := r.deps.Coord.Metadata()
	if snap.Index == r.healBusyIndex {
		return
	}
	load, moving := replicaLoad(snap)
	if moving >= reassign.MaxHealing {
		// Try again with the next snapshot: the one that shows a move
		// done, not after a fixed delay.
		r.healBusyIndex = snap.Index
		return
	}
	target, ok := reassign.Replace(pm.Replicas, due, r.liveness.Alive(), load)
	if !ok {
		if !r.healWaitLogged {
			r.healWaitLogged = true
			r.log.Warn("cannot re-place dead replicas: no live agent without a replica of the partition", "dead", due, "replicas", pm.Replicas, "alive", r.liveness.Alive())
		}
		r.healRetryAt = now.Add(healRetry)
		return
	}
	r.log.Info("re-placing dead replicas", "dead", due, "replicas", pm.Replicas, "target", target, "replace_dead_after", after)
	r.healing, r.healWaitLogged = true, false
	gen := r.gen
	r.tasks.Go(func() {
		ctx, cancel := context.WithTimeout(r.ctx, isrProposalTimeout)
		defer cancel()
		_, _, err := r.deps.Coord.StartReassign(ctx, r.topic, r.partition, target)
		r.send(healResult{gen: gen, target: target, err: err})
	})
}

func (r *Replica) onHealResult(ev healResult) {
	if ev.gen != r.gen {
		return
	}
	r.healing = false
	if ev.err != nil {
		r.log.Warn("re-placing dead replicas did not start", "target", ev.target, "error", ev.err)
		r.healRetryAt = r.deps.Now().Add(healRetry)
		return
	}
	r.log.Info("move started to re-place dead replicas", "target", ev.target)
}

// healWake is when the next dead replica becomes due for re-placing, zero
// when none is tracked.
func (r *Replica) healWake() time.Time {
	after := r.deps.Config.Cluster.ReplaceDeadAfter
	if after <= 0 || r.role != RoleLeader {
		return time.Time{}
	}
	next := r.healRetryAt
	for _, since := range r.deadSince {
		if due := since.Add(after); next.IsZero() || due.Before(next) {
			next = due
		}
	}
	return next
}

// replicaLoad counts each agent's replicas in the snapshot, and the moves
// in flight.
func replicaLoad(s *election.Snapshot) (map[string]int, int) {
	load, moving := map[string]int{}, 0
	for _, name := range s.Topics() {
		tm, _ := s.Topic(name)
		for _, pm := range tm.Partitions {
			for _, id := range pm.Replicas {
				load[id]++
			}
			if pm.Reassign != nil {
				moving++
			}
		}
	}
	return load, moving
}
