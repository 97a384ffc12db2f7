package agent

import (
	"strings"
	"testing"
	"time"
)

// TestFollowersFollowTheLeadersLogStart: segments the leader deleted below
// a start offset (a consumer-group coordinator's restatement does so) go
// from the followers too, at their next fetch.
func TestFollowersFollowTheLeadersLogStart(t *testing.T) {
	c := startTestCluster(t, 3, "storage {\n  segment_bytes = \"4KiB\"\n}\n")
	n1 := c.agents[0]
	c.createTopic(n1, "trim", 1, 3, 2)
	leader, _ := c.waitLeader("trim", 0, 3)
	value := strings.Repeat("x", 500)
	for range 40 {
		leader.mustProduce("trim", 0, value)
	}
	c.waitCaughtUp("trim", 0, 40)
	log := leader.agent.replicas.Get("trim", 0).CurrentLog()
	if n, err := log.DeleteBefore(30); err != nil || n == 0 {
		t.Fatalf("DeleteBefore(30) on the leader = %d, %v", n, err)
	}
	start := log.LogStartOffset()
	leader.mustProduce("trim", 0, value)
	c.waitFor(20*time.Second, "followers at the leader's log start", func() bool {
		for _, ta := range c.running() {
			if ta.agent.replicas.Get("trim", 0).CurrentLog().LogStartOffset() != start {
				return false
			}
		}
		return true
	})
	for _, ta := range c.running() {
		d := ta.describe("trim").Partitions[0]
		if *d.LogStartOffset != start || *d.LogEndOffset != 41 {
			t.Fatalf("%s: log start %d, end %d; want %d, 41", ta.nodeID, *d.LogStartOffset, *d.LogEndOffset, start)
		}
	}
}
