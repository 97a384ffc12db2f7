package agent

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestNewTopicPlacesNoReplicaOnADrainingAgent: a topic created while n3 is
// being drained (logagent node drain n3, the host about to be retired)
// had its partitions spread over n3 too, as if it were not drained, and
// the drain then moved them off again, a copy each. It places them over
// the agents that take new replicas, as a partition added to a topic, a
// rebalance and self-healing already did. GET /v1/status marks n3 as being
// drained, so that topic create's warning about a capped replication
// factor can count it out.
func TestNewTopicPlacesNoReplicaOnADrainingAgent(t *testing.T) {
	c := startTestCluster(t, 3, "")
	n1 := c.agents[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n1.coord.SetDraining(ctx, "n3", true); err != nil {
		t.Fatal(err)
	}
	c.waitFor(10*time.Second, "n1's metadata to show the drain", func() bool { return n1.coord.Metadata().IsDraining("n3") })
	c.createTopic(n1, "fresh", 6, 2, 1)
	for _, p := range n1.describe("fresh").Partitions {
		if slices.Contains(p.Replicas, "n3") {
			t.Errorf("partition %d of a topic created while n3 is drained has replicas %v", p.Partition, p.Replicas)
		}
	}
	agents := n1.status().Agents
	draining := map[string]bool{}
	for _, a := range agents {
		draining[a.NodeID] = a.Draining
	}
	if len(draining) != 3 || !draining["n3"] || draining["n1"] || draining["n2"] {
		t.Errorf("GET /v1/status agents: %+v", agents)
	}
	// Each agent's build, as it registered it (the test cluster's
	// agents register "test-" and their node id).
	for _, a := range agents {
		if a.Version != "test-"+a.NodeID {
			t.Errorf("GET /v1/status lists %s with version %q, want %q", a.NodeID, a.Version, "test-"+a.NodeID)
		}
	}
}
