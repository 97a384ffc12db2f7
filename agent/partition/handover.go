package partition

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/replicate"
)

// A leader hands its partition over (Kafka's controlled shutdown,
// docs/design.md §7.4) when its agent stops gracefully, and to move the
// leadership back to the partition's preferred replica after failovers:
//
//	draining   the loop refuses new appends (ErrLeadershipMoving: nothing
//	           written) while the appends it took are acknowledged or fail as
//	           they would, and waits for a successor among replicate.Leader's
//	           Successors: an in-sync follower whose fetch offset is the
//	           leader's log end
//	releasing  the loop steps down (no append after this point) and releases
//	           the leader key naming the successor (election's HandOver): the
//	           successor campaigns at once, the others hold back
//	confirming a stopping agent's replica waits until the metadata shows a
//	           leader at a newer epoch, then its stop goes on
//
// Each phase is bounded. A stop that finds no successor (replication
// factor 1, an ISR of one, or none caught up by the drain's end) steps down
// as it did before handovers existed; a move that finds none leads on.

// Bounds of a handover.
const (
	// retireDrain bounds a stopping leader's wait for its appends to be
	// acknowledged and a successor to reach its log end.
	retireDrain = 2 * time.Second
	// moveDrain is the same for a move to the preferred replica, which the
	// leader starts only when that replica is in sync: appends are refused
	// meanwhile, so a move that does not come together ends soon.
	moveDrain = 500 * time.Millisecond
	// confirmWait bounds a stopping leader's wait for the metadata to show
	// the new leader.
	confirmWait = 2 * time.Second
	// moveInterval is the least time between two moves to a preferred
	// replica started by one agent.
	moveInterval = 2 * time.Second
	// MaxParallelHandovers bounds the handovers of a graceful stop in
	// progress at once (each is a Consul release and, on the successor,
	// an election).
	MaxParallelHandovers = 16
)

// ErrLeadershipMoving refuses an append to a leader that is handing its
// partition over: nothing was appended, and the new leader takes writes
// within milliseconds.
var ErrLeadershipMoving = errors.New("agent: the leadership is moving to another replica")

type handoverPhase uint8

const (
	phaseDraining handoverPhase = iota
	phaseReleasing
	phaseConfirming
)

// handover is one in progress; the loop owns it.
type handover struct {
	// retiring says the agent stops; else this is a move to one of
	// targets (the partition's preferred replica, or a reassignment's
	// target replicas, in the order they are preferred), and no other
	// successor will do.
	retiring bool
	targets  []string
	// reassign says the move takes the leadership off a replica that a
	// reassignment removes (reassign.go): one that did not come together
	// is tried again after reassignRetry, not leader_rebalance_delay.
	reassign bool
	phase    handoverPhase
	// epoch is the leadership handed over.
	epoch int32
	// drainBy ends the draining phase; confirmBy the confirming phase.
	drainBy, confirmBy time.Time
	successor          string
	// done is closed when the handover is over, whatever its outcome.
	done chan struct{}
}

// handoverStep is what a draining leader does next.
type handoverStep uint8

const (
	stepWait handoverStep = iota
	// stepRelease: hand over to the successor decideHandover names.
	stepRelease
	// stepDownPlain: stop leading without naming a successor; the lock
	// goes with the agent's leaving Consul, and the others elect then.
	stepDownPlain
	// stepAbort: lead on (a move that did not come together).
	stepAbort
)

// decideHandover is a draining leader's next step at now, with pending
// produce acks still waiting, the leader's Successors, and followers, the
// number of other ISR members. A successor is taken once nothing is pending,
// or at the drain's end anyway (what is still pending then fails as
// not_leader_after_append, its outcome unknown, as on any step-down; the
// successor holds it). A stop with no other ISR member cannot hand over and
// steps down at once.
func decideHandover(h *handover, now time.Time, pending int, successors []string, followers int) (handoverStep, string) {
	successor := ""
	if h.retiring && len(successors) > 0 {
		successor = successors[0]
	}
	for _, id := range h.targets {
		if successor == "" && slices.Contains(successors, id) {
			successor = id
		}
	}
	expired := !now.Before(h.drainBy)
	switch {
	case successor != "" && (pending == 0 || expired):
		return stepRelease, successor
	case h.retiring && followers == 0:
		return stepDownPlain, ""
	case !expired:
		return stepWait, ""
	case h.retiring:
		return stepDownPlain, ""
	default:
		return stepAbort, ""
	}
}

// handoverRequest asks a leading loop to hand its partition over as a
// stopping agent does; the loop replies with a channel closed when the
// handover is over (closed already when the replica does not lead).
type handoverRequest struct{ reply chan (<-chan struct{}) }

// handoverReleased is the outcome of the release, from its goroutine.
type handoverReleased struct {
	h   *handover
	err error
}

func (r *Replica) onHandoverRequest(ev handoverRequest) {
	switch h := r.handover; {
	case h != nil:
		// A move in progress becomes the stop's handover: to any successor,
		// and confirmed before the stop goes on.
		h.retiring = true
		if h.phase == phaseDraining {
			h.drainBy = r.deps.Now().Add(retireDrain)
		}
	case r.role == RoleLeader:
		r.startHandover(&handover{retiring: true, drainBy: r.deps.Now().Add(retireDrain)})
	default:
		over := make(chan struct{})
		close(over)
		ev.reply <- over
		return
	}
	ev.reply <- r.handover.done
}

// startHandover begins draining.
func (r *Replica) startHandover(h *handover) {
	h.epoch, h.done = r.leader.Epoch(), make(chan struct{})
	r.handover = h
	r.log.Info("handing the leadership over", "epoch", h.epoch, "retiring", h.retiring, "targets", h.targets, "reassign", h.reassign,
		"log_end_offset", r.leader.LogEndOffset(), "high_watermark", r.leader.HighWatermark(), "pending_acks", len(r.acks))
}

// driveHandover moves the handover in progress on; reconcile calls it.
func (r *Replica) driveHandover(now time.Time) {
	h := r.handover
	switch h.phase {
	case phaseDraining:
		if r.role != RoleLeader || r.leader.Epoch() != h.epoch {
			// The leadership ended otherwise (lease, Consul, a failed log).
			r.finishHandover("leadership ended while draining")
			return
		}
		followers := 0
		for _, id := range r.leaderISR {
			if id != r.deps.Self {
				followers++
			}
		}
		step, successor := decideHandover(h, now, len(r.acks), r.leader.Successors(), followers)
		switch step {
		case stepRelease:
			r.releaseTo(h, successor)
		case stepDownPlain:
			r.log.Info("no in-sync follower holds the whole log: stepping down without a handover", "epoch", h.epoch, "isr", r.leaderISR)
			r.stepDown(errors.New("agent stopping"), false)
			r.finishHandover("stepped down")
		case stepAbort:
			r.log.Info("no target replica caught up: leading on", "epoch", h.epoch, "targets", h.targets, "reassign", h.reassign)
			if h.reassign {
				r.reassignRetryAt = now.Add(reassignRetry)
			} else {
				r.moveRetryAt = now.Add(r.deps.Config.Replication.LeaderRebalanceDelay)
			}
			r.finishHandover("aborted")
		}
	case phaseConfirming:
		pm := r.meta.pm
		if (pm.State.Epoch > h.epoch && pm.LeaderSession != "") || !now.Before(h.confirmBy) {
			r.finishHandover("new leader " + pm.State.Leader)
		}
	}
}

// releaseTo steps down and releases the leader key naming successor. The
// loop has stopped leading before the release is sent, so nothing is
// appended at this epoch once another replica can win the next one.
func (r *Replica) releaseTo(h *handover, successor string) {
	l := r.leadership
	h.phase, h.successor = phaseReleasing, successor
	r.log.Info("handing over", "epoch", h.epoch, "successor", successor, "log_end_offset", r.leader.LogEndOffset(),
		"high_watermark", r.leader.HighWatermark(), "pending_acks", len(r.acks))
	r.stepDown(errors.New("handing over to "+successor), false)
	r.tasks.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), peer.CallTimeout)
		defer cancel()
		err := l.HandOver(ctx, successor)
		r.send(handoverReleased{h: h, err: err})
	})
}

func (r *Replica) onHandoverReleased(ev handoverReleased) {
	h := ev.h
	if r.handover != h {
		return
	}
	if ev.err != nil {
		r.log.Warn("handover release failed; the lock goes with the session", "epoch", h.epoch, "successor", h.successor, "error", ev.err)
	}
	if !h.retiring {
		r.campaignRetryAt = r.deps.Now().Add(election.HandoverHold)
		r.finishHandover("handed over to " + h.successor)
		return
	}
	h.phase, h.confirmBy = phaseConfirming, r.deps.Now().Add(confirmWait)
}

// finishHandover ends the handover in progress.
func (r *Replica) finishHandover(outcome string) {
	h := r.handover
	r.handover = nil
	r.log.Info("handover over", "epoch", h.epoch, "outcome", outcome)
	close(h.done)
}

// moveLimiter spaces the moves to preferred replicas one agent starts, so
// that leaderships come back one at a time rather than all at once.
type moveLimiter struct {
	mu       sync.Mutex
	interval time.Duration
	next     time.Time
}

// take says whether a move may start at now, and if so spends the turn.
func (m *moveLimiter) take(now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.Before(m.next) {
		return false
	}
	m.next = now.Add(m.interval)
	return true
}

// preferredMoveDue says whether a leader should hand its partition to the
// preferred replica: it is not this replica, it has been in the ISR (and
// not reported dead) since inSyncSince for at least delay, its agent is not
// stopping, and its fetch offset has reached the high watermark, so it can
// catch up within a drain.
func preferredMoveDue(self string, replicas []string, progress []replicate.ReplicaStatus, hw int64, inSyncSince, now time.Time, delay time.Duration) bool {
	if len(replicas) == 0 || replicas[0] == self || inSyncSince.IsZero() || now.Sub(inSyncSince) < delay {
		return false
	}
	i := slices.IndexFunc(progress, func(s replicate.ReplicaStatus) bool { return s.ID == replicas[0] })
	return i >= 0 && progress[i].InSync && !progress[i].Retiring && progress[i].LogEndOffset >= hw
}

// trackPreferred keeps preferredSince: when the preferred replica was last
// seen to enter the ISR of this leadership, at epoch, alive; zero while it
// is out. A new leadership counts from its own start, whatever an earlier
// one saw.
func (r *Replica) trackPreferred(now time.Time, epoch int32) {
	if epoch != r.preferredEpoch {
		r.preferredSince, r.preferredEpoch = time.Time{}, epoch
	}
	pm := r.meta.pm
	in := len(pm.Replicas) > 0 && pm.Replicas[0] != r.deps.Self &&
		slices.Contains(r.leaderISR, pm.Replicas[0]) && !slices.Contains(r.deadReplicas, pm.Replicas[0])
	switch {
	case !in:
		r.preferredSince = time.Time{}
	case r.preferredSince.IsZero():
		r.preferredSince = now
	}
}

// maybeMoveToPreferred starts a move to the preferred replica when one is
// due and the agent's limiter allows it; reconcile calls it while leading.
func (r *Replica) maybeMoveToPreferred(now time.Time) {
	r.trackPreferred(now, r.leader.Epoch())
	cfg := r.deps.Config.Replication
	if !cfg.AutoLeaderRebalance || r.retiring || r.handover != nil || r.deps.moves == nil || now.Before(r.moveRetryAt) {
		return
	}
	if !preferredMoveDue(r.deps.Self, r.meta.pm.Replicas, r.leader.Progress(), r.leader.HighWatermark(), r.preferredSince, now, cfg.LeaderRebalanceDelay) {
		return
	}
	if !r.deps.moves.take(now) {
		return
	}
	r.startHandover(&handover{targets: []string{r.meta.pm.Replicas[0]}, drainBy: now.Add(moveDrain)})
}

// handoverWake is when the handover in progress must be decided again
// without an event.
func (r *Replica) handoverWake() time.Time {
	switch h := r.handover; {
	case h == nil:
		return time.Time{}
	case h.phase == phaseDraining:
		return h.drainBy
	case h.phase == phaseConfirming:
		return h.confirmBy
	}
	return time.Time{}
}
