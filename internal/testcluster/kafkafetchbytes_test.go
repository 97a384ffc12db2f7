package testcluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/logagent/logagent/wire"
)

// TestKafkaProxiedFetchCountedOnce: logagent_fetch_bytes_total is
// documented as "body bytes of the fetch answers served from this agent's
// replicas; a fetch proxied to the leader counts at the leader", and
// dashboards (and the status page's fetch bytes/s) sum it over agents. A
// Kafka consumer on an agent that holds no replica of the partition is
// served through the leader's client API (which counts the bytes, as for
// any fetch it serves) and the proxying agent's broker counts them again.
func TestKafkaProxiedFetchCountedOnce(t *testing.T) {
	const topic, n = "kfb", 50
	c := Start(t, Options{Agents: 2, Kafka: true})
	if err := c.Agents[0].CreateTopic(TopicSpec{Name: topic, Partitions: 1, ReplicationFactor: 1, MinInsyncReplicas: 1}); err != nil {
		t.Fatal(err)
	}
	leader, _ := c.WaitLeader(topic, 0, 20*time.Second)
	other := c.Agents[0]
	if other == leader {
		other = c.Agents[1]
	}
	var body strings.Builder
	for i := range n {
		fmt.Fprintf(&body, "{\"value\":\"v-%d\"}\n", i)
	}
	if _, err := leader.Produce(topic, 0, wire.ContentTypeNDJSON, []byte(body.String()), "all", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	got := consumeAll(t, other, topic, 0, n, 30*time.Second)
	if len(got) != n {
		t.Fatalf("consumed %d", len(got))
	}
	atLeader := scrapeAgent(t, leader).must(t, "logagent_fetch_bytes_total", "topic", topic)
	atOther, _ := scrapeAgent(t, other).value("logagent_fetch_bytes_total", "topic", topic)
	t.Logf("fetch_bytes_total{topic=%q}: leader %s %.0f, proxying agent %s (no replica) %.0f", topic, leader.NodeID, atLeader, other.NodeID, atOther)
	if atLeader == 0 {
		t.Fatal("the leader did not count the proxied fetch")
	}
	if atOther != 0 {
		t.Errorf("the proxying agent, which holds no replica, counted %.0f fetch bytes on top of the leader's %.0f: the bytes served are counted twice across agents", atOther, atLeader)
	}
}
