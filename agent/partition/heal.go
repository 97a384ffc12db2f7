package partition

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/reassign"
	"github.com/logagent/logagent/replicate"
)

// Self-healing (cluster.replace_dead_after, docs/design.md §7.7): a
// partition's leader moves the replicas of agents it has seen dead for
// that long, and those of agents being drained (logagent node drain), to
// live agents without a replica of the partition, with the reassignment of
// §7.6. The leader decides for its own partition only:
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
// for cluster.replace_dead_after or on an agent being drained, if one is due
// and the cluster has fewer than reassign.MaxHealing moves in flight.
func (r *Replica) maybeHeal(now time.Time) {
	after := r.deps.Config.Cluster.ReplaceDeadAfter
	pm := r.meta.pm
	if r.healing || r.retiring || !r.meta.usable || pm.Reassign != nil || r.liveness == nil || now.Before(r.healRetryAt) {
		return
	}
	snap := r.deps.Coord.Metadata()
	if spm, ok := snap.Partition(r.topic, r.partition); !ok || spm.ReplicasIndex != pm.ReplicasIndex {
		// The replica's metadata trails the snapshot by a dispatch (the
		// move it started a moment ago shows in the snapshot, not yet in
		// it): a start decided from it is refused, and the next try
		// waits healRetry. Decide once it caught up; the dispatch that
		// brings it runs reconcile again.
		return
	}
	dead := r.deadSince.Due(pm.Replicas, after, now)
	due := slices.Clone(dead)
	for _, id := range pm.Replicas {
		if snap.IsDraining(id) && !slices.Contains(due, id) {
			due = append(due, id)
		}
	}
	if len(due) == 0 || snap.Index == r.healBusyIndex {
		return
	}
	// A replica dead but not due yet would stay in the target: the move
	// would complete without it (reassign.Next), and its re-placing, once
	// due, take a second move and a second copy. Wait until it is due, or
	// alive again, so that one move replaces them all. With self-healing
	// off (replace_dead_after 0) a dead replica is never due: the
	// partition waits until it is alive again (a liveness change wakes the
	// leader), or an operator's partition move replaces it.
	for _, id := range pm.Replicas {
		since, ok := r.deadSince[id]
		if !ok || slices.Contains(due, id) {
			continue
		}
		if after > 0 {
			r.healRetryAt = since.Add(after)
			return
		}
		if !r.healWaitLogged {
			r.healWaitLogged = true
			r.log.Warn("cannot re-place replicas while a replica is dead and self-healing is off (cluster.replace_dead_after = 0s): waiting for it to come back",
				"dead", id, "draining", snap.Draining(), "replicas", pm.Replicas)
		}
		return
	}
	load, moving := replicaLoad(snap, r.liveness)
	if moving >= reassign.MaxHealing {
		// Try again with the next snapshot: the one that shows a move
		// done, not after a fixed delay.
		r.healBusyIndex = snap.Index
		return
	}
	// An agent being drained takes no replica, nor one in Consul
	// maintenance mode or with a check in warning (not placeable, as for
	// a new topic's partitions), nor one whose catch-up stalled a move of
	// this partition lately (cancelStalledHeal): it would stall the next
	// one the same way.
	avoid := r.avoidedAgents(now)
	placeable := slices.DeleteFunc(r.liveness.Placeable(), func(id string) bool { return snap.IsDraining(id) || slices.Contains(avoid, id) })
	target, ok := reassign.Replace(pm.Replicas, due, placeable, load)
	if !ok {
		if !r.healWaitLogged {
			r.healWaitLogged = true
			r.log.Warn("cannot re-place replicas: no live agent without a replica of the partition", "dead", dead, "draining", snap.Draining(), "replicas", pm.Replicas,
				"alive", placeable, "not_passing", r.liveness.NotPassing(), "stalled_lately", avoid)
		}
		r.healRetryAt = now.Add(healRetry)
		return
	}
	replicasIndex := func(topic string, partition int) uint64 {
		pm, _ := snap.Partition(topic, partition)
		return pm.ReplicasIndex
	}
	if r.deps.heals == nil || !r.deps.heals.take(replicasIndex, r.topic, r.partition, pm.ReplicasIndex, now) {
		// Another replica of this agent started one that the metadata
		// does not show yet: its move must count before this one.
		return
	}
	r.log.Info("re-placing replicas", "dead", dead, "draining", snap.Draining(), "replicas", pm.Replicas, "target", target, "replace_dead_after", after)
	r.healing, r.healWaitLogged = true, false
	// The start is refused unless the partition is still what the target
	// was chosen from: the metadata may be behind Consul (a move another
	// leader completed, the topic created again), and a start over other
	// replicas would move them by this decision.
	// A move that re-places a dead replica is self-healing's, which its
	// leader cancels if it stalls; one only for a drain is the
	// operator's, and waits as the operator's own moves do.
	gen, from := r.gen, election.DecidedFrom{TopicID: r.meta.tc.ID, ReplicasIndex: pm.ReplicasIndex, Healing: len(dead) > 0,
		Draining: drainGuards(due, dead, snap.DrainIndex)}
	r.tasks.Go(func() {
		ctx, cancel := context.WithTimeout(r.ctx, isrProposalTimeout)
		defer cancel()
		_, _, err := r.deps.Coord.StartReassignFrom(ctx, r.topic, r.partition, from, target)
		r.send(healResult{gen: gen, target: target, err: err})
	})
}

// drainGuards is the drain key index (drainIndex) of each replica of due
// re-placed because its agent is drained: not dead, which is re-placed
// whether the drain holds or not. The start checks them, so that a drain
// cancelled after the decision moves nothing (nil when there are none).
func drainGuards(due, dead []string, drainIndex func(node string) uint64) map[string]uint64 {
	var guards map[string]uint64
	for _, id := range due {
		if !slices.Contains(dead, id) {
			if guards == nil {
				guards = map[string]uint64{}
			}
			guards[id] = drainIndex(id)
		}
	}
	return guards
}

func (r *Replica) onHealResult(ev healResult) {
	if ev.err != nil {
		// The metadata never shows a start that failed: the agent's turn
		// goes back, also when the leadership that sent it has ended.
		r.deps.heals.release(r.topic, r.partition)
	}
	if ev.gen != r.gen {
		return
	}
	r.healing = false
	if ev.err != nil {
		r.log.Warn("re-placing replicas did not start", "target", ev.target, "error", ev.err)
		r.healRetryAt = r.deps.Now().Add(healRetry)
		return
	}
	r.log.Info("move started to re-place replicas", "target", ev.target)
}

// healStall is what a leader saw of the replicas added by the
// self-healing move whose reassign key is at index: since when each has
// made no progress, whether its cancel is out or written (the metadata
// shows the way back, at another index, a moment later: no second
// cancel), and until when the next cancel waits after one that failed.
// At a way back's index (since nil) it says the way back was looked at
// (avoidCancelledHeal).
type healStall struct {
	index     uint64
	since     reassign.StalledSince
	cancelled bool
	retryAt   time.Time
}

// healCancelResult is the outcome of a cancel of a stalled self-healing
// move.
type healCancelResult struct {
	gen     uint64
	index   uint64
	stalled []string
	err     error
}

// cancelStalledHeal cancels the partition's self-healing move when a
// replica it adds has made no progress (its log end unmoved, outside the
// ISR) for cluster.replace_dead_after, the time after which self-healing
// takes a replica that does not answer for lost: an added replica that
// died too, or whose agent never opens it, never fetches, and the move
// waited for it for ever, holding one of the cluster's reassign.MaxHealing
// slots, so that no other dead replica was re-placed until an operator
// cancelled it. The way back frees the slot, and the partition is
// re-placed again on another agent (maybeHeal avoids the stalled one for
// as long again). Only self-healing's own moves are cancelled
// (election.Reassignment.Healing): an operator's move and a drain's wait
// as Kafka's reassignments do, until they complete or an operator
// cancels them. The leader ticks while a move is in flight
// (housekeepingPending), so the bound is seen within a tick. The way back
// of a self-healing move cancelled otherwise has the agents it added left
// out of the next re-placing (avoidCancelledHeal).
func (r *Replica) cancelStalledHeal(now time.Time) {
	pm := r.meta.pm
	after := r.deps.Config.Cluster.ReplaceDeadAfter
	if pm.Reassign == nil || !pm.Reassign.Healing || after <= 0 || !r.meta.usable {
		r.healStall = healStall{}
		return
	}
	if pm.Reassign.Cancelled {
		r.avoidCancelledHeal(now)
		return
	}
	if r.healStall.since == nil || r.healStall.index != pm.ReassignIndex {
		r.healStall = healStall{index: pm.ReassignIndex, since: reassign.StalledSince{}}
	}
	if r.healStall.cancelled || now.Before(r.healStall.retryAt) {
		return
	}
	progress := r.leader.Progress()
	added := make([]reassign.Added, 0, len(pm.Reassign.Adding))
	for _, id := range pm.Reassign.Adding {
		// One the leader does not follow yet has not fetched either.
		a := reassign.Added{ID: id, LogEnd: -1}
		if i := slices.IndexFunc(progress, func(s replicate.ReplicaStatus) bool { return s.ID == id }); i >= 0 {
			a.LogEnd, a.InSync = progress[i].LogEndOffset, progress[i].InSync
		}
		added = append(added, a)
	}
	r.healStall.since.Observe(added, now)
	stalled := r.healStall.since.Stalled(after, now)
	if len(stalled) == 0 {
		return
	}
	r.log.Warn("cancelling a self-healing move: replicas it adds made no progress for cluster.replace_dead_after",
		"stalled", stalled, "target", pm.Reassign.Target, "adding", pm.Reassign.Adding, "replace_dead_after", after)
	r.healStall.cancelled = true
	gen, index := r.gen, pm.ReassignIndex
	r.tasks.Go(func() {
		ctx, cancel := context.WithTimeout(r.ctx, isrProposalTimeout)
		defer cancel()
		_, err := r.deps.Coord.CancelReassignFrom(ctx, r.topic, r.partition, index)
		r.send(healCancelResult{gen: gen, index: index, stalled: stalled, err: err})
	})
}

func (r *Replica) onHealCancelResult(ev healCancelResult) {
	if ev.gen != r.gen {
		return
	}
	now := r.deps.Now()
	if ev.err != nil {
		// The move may have moved on (ErrConflict: completed, or another
		// one started); the next look decides from the metadata again.
		r.log.Warn("self-healing move not cancelled", "stalled", ev.stalled, "error", ev.err)
		if r.healStall.index == ev.index {
			r.healStall.cancelled, r.healStall.retryAt = false, now.Add(healRetry)
		}
		return
	}
	if r.healAvoid == nil {
		r.healAvoid = map[string]time.Time{}
	}
	for _, id := range ev.stalled {
		r.healAvoid[id] = now.Add(r.deps.Config.Cluster.ReplaceDeadAfter)
	}
	r.log.Info("stalled self-healing move cancelled: the partition goes back, and is re-placed on other agents", "stalled", ev.stalled)
}

// avoidCancelledHeal leaves the replicas a cancelled self-healing move
// added (its way back's removing) out of the partition's re-placing for
// replace_dead_after, once per way back, unless this leadership cancelled
// the move itself (it leaves out the stalled ones then,
// onHealCancelResult). A move an operator cancelled (partition move
// -cancel) was started again by the next look as soon as the way back was
// done, onto the same agents (the fewest replicas: they had just lost
// this one), its copy begun again from nothing and the cancel undone.
func (r *Replica) avoidCancelledHeal(now time.Time) {
	pm := r.meta.pm
	if r.healStall.index == pm.ReassignIndex {
		return
	}
	own := r.healStall.cancelled
	r.healStall = healStall{index: pm.ReassignIndex}
	if own {
		return
	}
	if r.healAvoid == nil {
		r.healAvoid = map[string]time.Time{}
	}
	for _, id := range pm.Reassign.Removing {
		r.healAvoid[id] = now.Add(r.deps.Config.Cluster.ReplaceDeadAfter)
	}
	r.log.Info("self-healing move cancelled: the agents it added take no replica of the partition for cluster.replace_dead_after",
		"added", pm.Reassign.Removing, "back_to", pm.Reassign.Target, "replace_dead_after", r.deps.Config.Cluster.ReplaceDeadAfter)
}

// avoidedAgents lists the agents maybeHeal leaves out at now: their
// catch-up stalled a move of this partition less than
// replace_dead_after ago.
func (r *Replica) avoidedAgents(now time.Time) []string {
	var out []string
	for id, until := range r.healAvoid {
		if now.Before(until) {
			out = append(out, id)
		} else {
			delete(r.healAvoid, id)
		}
	}
	slices.Sort(out)
	return out
}

// healWake is when maybeHeal should look again: its retry, or the next
// dead replica becoming due; zero when neither.
func (r *Replica) healWake() time.Time {
	if r.role != RoleLeader {
		return time.Time{}
	}
	next := r.healRetryAt
	if after := r.deps.Config.Cluster.ReplaceDeadAfter; after > 0 {
		for _, since := range r.deadSince {
			if due := since.Add(after); next.IsZero() || due.Before(next) {
				next = due
			}
		}
	}
	return next
}

// replicaLoad counts the replicas each agent holds in s, and the moves in
// flight that take one of the cluster's reassign.MaxHealing slots: those
// that can complete. A move that adds an agent lv says is dead waits for it
// to join the ISR (a drain's added agent died): counted, two of them
// stopped every re-placing in the cluster, in the second failure
// self-healing is for. One that keeps a dead agent completes without it
// (reassign.Next), unless that would take the ISR below
// min_insync_replicas (reassign.HeldByDeadKept): then it too waits for
// the agent, and is not counted.
func replicaLoad(s *election.Snapshot, lv *election.Liveness) (map[string]int, int) {
	load, moving := map[string]int{}, 0
	for _, name := range s.Topics() {
		tm, _ := s.Topic(name)
		for _, pm := range tm.Partitions {
			for _, id := range pm.Replicas {
				load[id]++
			}
			if m := pm.Reassign; m != nil && len(lv.DeadAmong(m.Adding)) == 0 &&
				!reassign.HeldByDeadKept(planMove(m), pm.State.ISR, lv.DeadAmong(m.Target), tm.Config.MinInsyncReplicas) {
				moving++
			}
		}
	}
	return load, moving
}

// healHoldMax bounds how long a start holds the agent's turn when the
// metadata does not show it (a start whose outcome was lost).
const healHoldMax = 10 * time.Second

// healLimiter lets one replica of an agent at a time start a move of
// maybeHeal, until the metadata shows that move: the replicas of one agent
// read the same snapshot, and without it each would count the moves in
// flight before any of theirs, and all start at once. A start writes the
// partition's replicas key, so the metadata shows it once that key's index
// is past the one the start was decided from (the move may be over by
// then: it still counted).
type healLimiter struct {
	mu        sync.Mutex
	held      bool
	topic     string
	partition int
	index     uint64
	since     time.Time
}

// take says whether the replica of topic/partition, deciding from its
// replicas key at index, may start a move now, and if so holds the turn;
// replicasIndex is the metadata's index of a partition's replicas key (0
// when it has no such partition).
func (l *healLimiter) take(replicasIndex func(topic string, partition int) uint64, topic string, partition int, index uint64, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held && replicasIndex(l.topic, l.partition) == l.index && now.Sub(l.since) < healHoldMax {
		return false
	}
	l.held, l.topic, l.partition, l.index, l.since = true, topic, partition, index, now
	return true
}

// release gives the turn back after a start that failed.
func (l *healLimiter) release(topic string, partition int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held && l.topic == topic && l.partition == partition {
		l.held = false
	}
}
