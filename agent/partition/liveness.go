package partition

import (
	"slices"
	"time"

	"github.com/logagent/logagent/reassign"
)

// A leader's replica loop hears from Consul which agents are dead (their
// check is critical or their registration gone) and hands the dead
// replicas of its partition to the leader state machine, which removes
// them from the ISR at once instead of after replication.lag_time_max: a
// crashed follower stops holding acks=all writes back about check_ttl after
// its last heartbeat. The loop applies the latest liveness when it starts
// leading (members already known dead) and on every change while it leads.

// applyLiveness hands the leader the partition's replicas that the latest
// liveness says are dead.
func (r *Replica) applyLiveness() {
	lv := r.deps.Coord.Liveness()
	r.liveness = lv
	dead := lv.DeadAmong(r.meta.pm.Replicas)
	// The leader itself is never removed: a liveness read while Consul
	// brings its check back critical after a restart lists it dead.
	if inISR := slices.DeleteFunc(slices.Clone(dead), func(id string) bool {
		return id == r.deps.Self || !slices.Contains(r.leaderISR, id)
	}); len(inISR) > 0 && !slices.Equal(dead, r.deadReplicas) {
		r.log.Warn("removing replicas from the ISR: consul reports agent dead", "dead", inISR, "isr", r.leaderISR, "epoch", r.leader.Epoch())
	}
	r.deadReplicas = dead
	if r.deadSince == nil {
		r.deadSince = reassign.DeadSince{}
	}
	r.deadSince.Observe(dead, r.deps.Now())
	// An agent that came (or came back) may be the one a waiting
	// re-placing needs, and one that died may free a healing slot
	// (replicaLoad).
	r.healRetryAt, r.healBusyIndex = time.Time{}, 0
	if err := r.leader.SetDeadFollowers(dead, r.deps.Now()); err != nil {
		r.log.Debug("dead followers refused", "error", err)
	}
	r.processLeaderReady()
}

// livenessChanged is closed when the liveness the leader last applied is
// replaced; nil (never ready) when not leading.
func (r *Replica) livenessChanged() <-chan struct{} {
	if r.liveness == nil {
		return nil
	}
	return r.liveness.Changed()
}

// stopLiveness forgets the liveness when the leadership ends.
func (r *Replica) stopLiveness() {
	r.liveness, r.deadReplicas, r.deadSince = nil, nil, nil
	r.healing, r.healWaitLogged, r.healRetryAt, r.healBusyIndex = false, false, time.Time{}, 0
	r.healStall, r.healAvoid = healStall{}, nil
}
