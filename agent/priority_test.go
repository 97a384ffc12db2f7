package agent

import (
	"context"
	"testing"

	"github.com/logagent/logagent/agent/reply"
)

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
	snap := c.Metadata()
	for _, topic := range snap.Topics() {
		tm, _ := snap.Topic(topic)
		for _, pm := range tm.Partitions {
			if r := c.agent.replicas.Get(topic, pm.Partition); r != nil && r.CurrentView().Role == roleLeader {
				c.leadingAtEnd = append(c.leadingAtEnd, reply.PartitionName(topic, pm.Partition))
			}
		}
	}
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
