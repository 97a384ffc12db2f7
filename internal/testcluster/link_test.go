package testcluster

import (
	"testing"
	"time"
)

// TestCutLinkIsolatesOneFollower: with the links between the leader and
// one follower cut both ways, through the peer proxies that tell agents
// apart, that follower falls behind the next write and leaves the ISR
// while the other stays; healed, it comes back.
func TestCutLinkIsolatesOneFollower(t *testing.T) {
	const topic = "links"
	c := Start(t, Options{Proxies: true})
	if err := c.Agents[0].CreateTopic(TopicSpec{Name: topic, Partitions: 1, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	leader := c.WaitISR(topic, 0, []string{"n1", "n2", "n3"}, 30*time.Second)
	var cut, kept *Agent
	for _, a := range c.Agents {
		switch {
		case a == leader:
		case cut == nil:
			cut = a
		default:
			kept = a
		}
	}
	c.CutLink(cut, leader)
	c.CutLink(leader, cut)
	// A follower is out of sync only once it lags the leader's log end.
	if _, err := leader.Produce(topic, 0, ContentTypeNDJSON, []byte("{\"after\":\"cut\"}\n"), "1", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	c.WaitISR(topic, 0, []string{leader.NodeID, kept.NodeID}, 30*time.Second)
	t.Logf("cut %s from leader %s: ISR [%s %s]", cut.NodeID, leader.NodeID, leader.NodeID, kept.NodeID)
	leader.PeerProxy.Heal()
	cut.PeerProxy.Heal()
	c.WaitISR(topic, 0, []string{"n1", "n2", "n3"}, 30*time.Second)
}
