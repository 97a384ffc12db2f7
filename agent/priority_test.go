package agent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/replicate"
)

// pausableClock is an agent clock that can hold the next goroutine asking
// it for the time, for tests that need the replica loop stopped at a known
// point (its reconcile asks the clock after every event).
type pausableClock struct {
	mu     sync.Mutex
	pause  chan struct{}
	paused chan struct{}
}

func (c *pausableClock) now() time.Time {
	c.mu.Lock()
	pause, paused := c.pause, c.paused
	c.pause, c.paused = nil, nil
	c.mu.Unlock()
	if pause != nil {
		close(paused)
		<-pause
	}
	return time.Now()
}

// arm makes the next caller block until release is called; paused is closed
// once one does.
func (c *pausableClock) arm() (paused <-chan struct{}, release func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pause, c.paused = make(chan struct{}), make(chan struct{})
	pause := c.pause
	return c.paused, func() { close(pause) }
}

// TestLeadershipLossBeforeQueuedProduce: when the leadership has ended and a
// produce is queued at the same time, the loop steps down first, so the
// write is refused, never appended and acknowledged by a former leader.
// Before the fix the loop's select chose between the two at random; 20
// rounds make a miss practically certain.
func TestLeadershipLossBeforeQueuedProduce(t *testing.T) {
	clock := &pausableClock{}
	c := startTestClusterWith(t, 1, "", func(a *Agent) { a.now = clock.now })
	n1 := c.agents[0]
	c.createTopic(n1, "prio", 1, 1, 1)
	const rounds = 20
	for round := 0; round < rounds; {
		c.waitLeader("prio", 0, 1)
		r := n1.agent.replicas.get("prio", 0)
		// The leader's tick (every 50ms) makes the loop ask the clock.
		paused, release := clock.arm()
		select {
		case <-paused:
		case <-time.After(5 * time.Second):
			t.Fatal("the clock was never asked")
		}
		// Whoever the clock holds, the loop must be the one: a queued
		// produce stays queued.
		outcome := make(chan produceOutcome, 1)
		go func() {
			outcome <- r.produce(&produceRequest{batch: testBatch(t, []string{"late"}), acks: replicate.AcksLeader,
				epoch: anyEpoch, deadline: time.Now().Add(5 * time.Second)}, 6*time.Second)
		}()
		waitQueued := time.Now().Add(time.Second)
		for len(r.events) == 0 && time.Now().Before(waitQueued) {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
		if len(r.events) != 1 {
			release()
			<-outcome
			continue // the clock held some other goroutine: try again
		}
		l := r.leadership // the loop is held: no concurrent writer
		if err := l.Resign(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-l.Done()
		before := r.currentLog().LogEndOffset()
		release()
		out := <-outcome
		if out.err == nil || out.appended || r.currentLog().LogEndOffset() != before {
			t.Fatalf("round %d: produce queued behind a lost leadership: err %v, appended %t, log end %d -> %d",
				round, out.err, out.appended, before, r.currentLog().LogEndOffset())
		}
		if !errors.Is(out.err, errNotLeaderHere) {
			t.Fatalf("round %d: err %v, want not leader", round, out.err)
		}
		round++
	}
}

// stopOrderCoordinator records, when the agent's graceful stop closes the
// coordinator (which releases the leader locks), which partitions this
// agent still led.
type stopOrderCoordinator struct {
	Coordinator
	agent        *Agent
	leadingAtEnd []string
	closed       bool
}

func (c *stopOrderCoordinator) Close(ctx context.Context) error {
	c.agent.replicas.mu.RLock()
	for key, r := range c.agent.replicas.replicas {
		if r.currentView().role == roleLeader {
			c.leadingAtEnd = append(c.leadingAtEnd, partitionName(key.topic, key.partition))
		}
	}
	c.agent.replicas.mu.RUnlock()
	c.closed = true
	return c.Coordinator.Close(ctx)
}

// TestGracefulStopStepsDownBeforeReleasing: a graceful stop makes every
// replica loop stop leading before the locks are released, so no write is
// appended in a leadership another agent may already have taken.
func TestGracefulStopStepsDownBeforeReleasing(t *testing.T) {
	var wrapped *stopOrderCoordinator
	c := startTestClusterWith(t, 1, "", func(a *Agent) {
		wrapped = &stopOrderCoordinator{Coordinator: a.coord, agent: a}
		a.coord = wrapped
	})
	n1 := c.agents[0]
	c.createTopic(n1, "order", 3, 1, 1)
	for p := range 3 {
		c.waitLeader("order", p, 1)
	}
	if err := n1.stop(); err != nil {
		t.Fatal(err)
	}
	if !wrapped.closed {
		t.Fatal("the stop never closed the coordinator")
	}
	if len(wrapped.leadingAtEnd) > 0 {
		t.Fatalf("locks released while still leading %v", wrapped.leadingAtEnd)
	}
}
