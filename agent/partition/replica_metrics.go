package partition

import (
	"context"

	"github.com/logagent/logagent/replicate"
)

// Hooks tell the agent of replicas' events, for its metrics. Each is
// optional, and runs on the replica's loop: it must be quick.
type Hooks struct {
	// LeaderElected: the replica won an election and leads.
	LeaderElected func()
	// ISRChanged: an ISR change the replica proposed as leader was
	// committed.
	ISRChanged func()
	// LoopWoke: the replica's loop woke (docs/design.md §7: an idle
	// replica does not).
	LoopWoke func()
}

func (h Hooks) leaderElected() {
	if h.LeaderElected != nil {
		h.LeaderElected()
	}
}

func (h Hooks) loopWoke() {
	if h.LoopWoke != nil {
		h.LoopWoke()
	}
}

func (h Hooks) isrChanged() {
	if h.ISRChanged != nil {
		h.ISRChanged()
	}
}

// progressRequest asks the leader's loop for its view of the replicas'
// progress.
type progressRequest struct {
	reply chan []replicate.ReplicaStatus
}

func (r *Replica) onProgress(ev progressRequest) {
	if r.leader == nil {
		ev.reply <- nil
		return
	}
	ev.reply <- r.leader.Progress()
}

// Progress is the leader's view of every replica, in replica order (its
// own entry has its log end offset), read from the loop when asked: the
// produce path publishes nothing for it. It is nil when this replica does
// not lead, or when the loop does not answer before ctx ends: a metrics
// scrape gives up rather than waiting on a busy loop.
func (r *Replica) Progress(ctx context.Context) []replicate.ReplicaStatus {
	ev := progressRequest{reply: make(chan []replicate.ReplicaStatus, 1)}
	select {
	case r.events <- ev:
	case <-r.ctx.Done():
		return nil
	case <-ctx.Done():
		return nil
	}
	select {
	case out := <-ev.reply:
		return out
	case <-r.done:
		return nil
	case <-ctx.Done():
		return nil
	}
}
