package reassign

import (
	"fmt"
	"slices"
)

// Move is a partition's reassignment as stored: the target list, the
// replicas it adds and the ones it removes.
type Move struct {
	Target   []string
	Adding   []string
	Removing []string
	// Cancel marks the way back of a cancelled move: Target is the list
	// the move started from, Removing the replicas it had added, Adding
	// empty.
	Cancel bool
}

// Union is the replica list while the move is in flight: Target, then
// Removing.
func (m Move) Union() []string { return append(slices.Clone(m.Target), m.Removing...) }

// State is what the leader knows when it decides.
type State struct {
	// Self is the leader.
	Self string
	Move Move
	// Replicas is the replica set the leader's state machine follows
	// (from the metadata); the move proceeds only once it is the union.
	Replicas []string
	// ISR is the committed ISR.
	ISR []string
	// InFlight says an ISR change is waiting for its outcome.
	InFlight bool
	// HandingOver says a handover of this leadership is under way.
	HandingOver bool
	// Successors are the followers that could take the leadership over
	// holding the leader's whole log (replicate.Leader.Successors).
	Successors []string
	// Dead are the replicas Consul says are dead.
	Dead []string
	// MinISR is the topic's min_insync_replicas.
	MinISR int
}

// Kind names a step.
type Kind int

const (
	// Wait: nothing to do until the state changes (Step.Reason says why,
	// Step.Waiting names the target replicas not yet in the ISR).
	Wait Kind = iota
	// HandOver: hand the leadership to the first of Step.To that is ready;
	// the leader is a replica the move removes.
	HandOver
	// Complete: write the completion (replicas := Step.Target, the ISR
	// less the removed replicas, the move deleted) as the one ISR change
	// in flight.
	Complete
)

func (k Kind) String() string {
	switch k {
	case Wait:
		return "wait"
	case HandOver:
		return "hand-over"
	case Complete:
		return "complete"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Step is Next's decision.
type Step struct {
	Kind    Kind
	Reason  string
	Waiting []string
	To      []string
	Target  []string
	// DeadKept are the target replicas a completion leaves outside the
	// ISR: replicas the move keeps (not adds) that Consul says are dead.
	DeadKept []string
}

// Next is the leader's next step of a move. Its order is the safety
// argument of docs/design.md §7.6: the added replicas must all be in the
// committed ISR (they joined by the ISR-join rule, so they hold the
// committed log) before anything is removed; the leader leaves only by a
// handover to a target replica among its successors; and the completion,
// which only removes, waits for any ISR change in flight, so that the ISR
// it leaves is exactly the target.
//
// A replica the move keeps (one of the target that it does not add) and
// that Consul says is dead is not waited for: it died during the move, and
// the move would wait for it for ever (a self-healing move, whose purpose
// was to replace another dead replica, among them), keeping every other
// move of the partition, self-healing's re-placing of this one too, from
// starting. The completion leaves it outside the ISR, as it was before the
// move ended; it joins again by the join rule if it comes back, or is
// re-placed like any dead replica. Nothing it removes is needed: the added
// replicas are in the ISR. Unless (HeldByDeadKept) the ISR left would be
// below min_insync_replicas and either smaller than now (a drain's removed
// replica still in sync: acks=all writes would stop) or the leader alone
// (a shrink with only the leader in sync: its removed replicas may be the
// eligible leaders, ELR, that hold the committed log beside it); then the
// move waits for the dead replica, as it did for every one before.
//
// A cancel's way back waits for no target replica: its target is the list
// the partition had, whose members need not all be in the ISR (one may be
// the dead replica a move was replacing); it removes only replicas the
// cancelled move added, and the ISR it leaves is the committed ISR's
// members in the target, which hold the committed log. The leader, if the
// move had made an added replica the leader, hands over first to a target
// replica among its successors, which are in the ISR.
func Next(s State) Step {
	if !slices.Equal(s.Replicas, s.Move.Union()) {
		return Step{Kind: Wait, Reason: fmt.Sprintf("the leader follows replicas %v, not the move's union %v yet", s.Replicas, s.Move.Union())}
	}
	if s.Move.Cancel {
		return handOverOrComplete(s)
	}
	deadKept := DeadKept(s.Move, s.ISR, s.Dead)
	var waiting []string
	for _, id := range s.Move.Target {
		if !slices.Contains(s.ISR, id) && !slices.Contains(deadKept, id) {
			waiting = append(waiting, id)
		}
	}
	if len(waiting) > 0 {
		return Step{Kind: Wait, Reason: "target replicas are catching up", Waiting: waiting}
	}
	if heldByKept(s.Move, s.ISR, deadKept, s.MinISR) {
		return Step{Kind: Wait, Reason: fmt.Sprintf("completing without the dead kept replicas would leave %d in the ISR, below min_insync_replicas %d, and fewer than now or the leader alone",
			len(s.Move.Target)-len(deadKept), s.MinISR), Waiting: deadKept}
	}
	step := handOverOrComplete(s)
	if step.Kind == Complete {
		step.DeadKept = deadKept
	}
	return step
}

// DeadKept is the target replicas of m outside isr that it keeps (does not
// add) and that dead says are dead: a completion leaves them out of the
// ISR. A cancel's way back waits for no target replica: none.
func DeadKept(m Move, isr, dead []string) []string {
	if m.Cancel {
		return nil
	}
	var out []string
	for _, id := range m.Target {
		if !slices.Contains(isr, id) && slices.Contains(dead, id) && !slices.Contains(m.Adding, id) {
			out = append(out, id)
		}
	}
	return out
}

// HeldByDeadKept reports whether m waits for its dead kept replicas
// (DeadKept) even once every other target replica is in the ISR: the ISR
// leaving them out would be below minISR and either remove a member of isr
// or hold the leader alone. Such a move cannot complete until one comes
// back (or it is cancelled).
func HeldByDeadKept(m Move, isr, dead []string, minISR int) bool {
	return heldByKept(m, isr, DeadKept(m, isr, dead), minISR)
}

// heldByKept is HeldByDeadKept with m's dead kept replicas known.
func heldByKept(m Move, isr, kept []string, minISR int) bool {
	after := len(m.Target) - len(kept)
	return len(kept) > 0 && after < minISR &&
		(after < 2 || slices.ContainsFunc(isr, func(id string) bool { return !slices.Contains(m.Target, id) }))
}

// handOverOrComplete is the end of a move once its target may take over:
// wait for an ISR change in flight, hand over when the leader leaves, else
// complete.
func handOverOrComplete(s State) Step {
	if s.InFlight {
		return Step{Kind: Wait, Reason: "an ISR change is in flight"}
	}
	if !slices.Contains(s.Move.Target, s.Self) {
		if s.HandingOver {
			return Step{Kind: Wait, Reason: "the leadership is being handed over"}
		}
		var to []string
		for _, id := range s.Move.Target {
			if slices.Contains(s.Successors, id) {
				to = append(to, id)
			}
		}
		if len(to) == 0 {
			return Step{Kind: Wait, Reason: "no target replica holds the leader's whole log yet"}
		}
		return Step{Kind: HandOver, To: to}
	}
	return Step{Kind: Complete, Target: slices.Clone(s.Move.Target)}
}
