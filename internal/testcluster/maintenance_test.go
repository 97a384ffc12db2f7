package testcluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestAgentInMaintenanceKeepsServing: an operator puts the leader's agent
// in Consul maintenance mode (consul maint -enable -service
// logagent-<node>) before patching its host. Maintenance is not death: the
// agent keeps its session and leads on. So the others must go on reaching
// it, its followers fetching and the sidecars forwarding writes, for
// longer than lag_time_max (shipped timing), and logagent status must show
// it up; only new replicas stay off it (docs/operations.md).
func TestAgentInMaintenanceKeepsServing(t *testing.T) {
	const topic = "maint"
	c := Start(t, Options{Timing: TimingShipped})
	leader, epoch := createReplicatedTopic(t, c, topic)
	via := otherAgent(t, c, leader)
	if err := c.Consul.Client().Agent().EnableServiceMaintenance("logagent-"+leader.NodeID, "patching"); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s (leader at epoch %d) in maintenance; writing acks=all through %s", leader.NodeID, epoch, via.NodeID)
	start := time.Now()
	for i := 0; time.Since(start) < c.Timings.LagTimeMax+5*time.Second; i++ {
		if _, err := via.Produce(topic, 0, ContentTypeNDJSON, fmt.Appendf(nil, "{\"value\":\"m%d\"}\n", i), "all", 5*time.Second); err != nil {
			t.Fatalf("write %d, %v after %s went into maintenance: %v", i, time.Since(start).Round(time.Millisecond), leader.NodeID, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	p, err := leader.DescribePartition(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.Role != "leader" || p.Epoch != epoch || len(p.ISR) != 3 {
		t.Fatalf("%s after %v in maintenance: %+v, want the leader at epoch %d with the full ISR", leader.NodeID, c.Timings.LagTimeMax+5*time.Second, p, epoch)
	}
	st := runCLI(t, "", "status", "-addr", "http://"+via.ClientAddr)
	for _, line := range strings.Split(st, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == leader.NodeID && (slices.Contains(f, "DOWN") || !slices.Contains(f, "not-passing")) {
			t.Errorf("logagent status shows %s, in maintenance and leading, as %q, want up and not passing:\n%s", leader.NodeID, line, st)
		}
	}
	if !strings.Contains(st, "1 not passing every Consul check") {
		t.Errorf("logagent status does not count the agent not passing:\n%s", st)
	}
}
