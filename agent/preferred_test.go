package agent

import (
	"fmt"
	"testing"
)

// TestNewTopicLeadersArePreferredReplicas: the first leader of every
// partition of a new topic is the first of its replicas, so the leaders
// spread over the agents as the assignment rotates them (before, whichever
// agent saw the topic first often led every partition).
func TestNewTopicLeadersArePreferredReplicas(t *testing.T) {
	c := startTestCluster(t, 3, "")
	for i := range 3 {
		topic := fmt.Sprintf("spread%d", i)
		c.createTopic(c.agents[i], topic, 3, 3, 2)
		leaders := map[string]int{}
		for p := range 3 {
			_, pd := c.waitLeader(topic, p, -1)
			if pd.Leader != pd.Replicas[0] || pd.Epoch != 1 {
				t.Errorf("%s/%d: first leader %s at epoch %d, want its preferred replica %s (replicas %v)",
					topic, p, pd.Leader, pd.Epoch, pd.Replicas[0], pd.Replicas)
			}
			leaders[pd.Leader]++
		}
		if len(leaders) != 3 {
			t.Errorf("%s: leaders %v, want one partition on each agent", topic, leaders)
		}
	}
}
