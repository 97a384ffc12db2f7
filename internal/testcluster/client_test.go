package testcluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/logagent/logagent/client"
)

// TestGoClientAgainstAgents: the Go client's producer and consumer work
// against real agents: records sent with acks=all through the leader are
// read back in order, with their keys, from a follower in the ISR.
func TestGoClientAgainstAgents(t *testing.T) {
	const topic, n = "gocli", 500
	c := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := client.New("http://" + c.Agents[0].ClientAddr)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateTopic(ctx, client.TopicSpec{Name: topic, Partitions: 1, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	leader, _ := c.WaitLeader(topic, 0, 20*time.Second)
	c.WaitISR(topic, 0, []string{"n1", "n2", "n3"}, 20*time.Second)

	cl, err := client.New("http://" + leader.ClientAddr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := cl.NewProducer(client.WithDefaultTopic(topic), client.WithLinger(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	futures := make([]*client.Future, n)
	for i := range n {
		if futures[i], err = p.Produce(ctx, client.Message{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i), Partition: client.ToPartition(0)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for i, f := range futures {
		res, err := f.Wait(ctx)
		if err != nil || res.Offset != int64(i) {
			t.Fatalf("record %d: %+v %v", i, res, err)
		}
	}

	var follower *Agent
	for _, a := range c.Agents {
		if a != leader {
			follower = a
		}
	}
	waitReplicasAt(t, c, topic, 0, n, 20*time.Second)
	fc, err := client.New("http://" + follower.ClientAddr)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := fc.NewConsumer(topic, 0, client.OffsetEarliest)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		r, err := cons.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Offset != int64(i) || string(r.Key) != fmt.Sprintf("k%d", i) || string(r.Value) != fmt.Sprintf("v%d", i) {
			t.Fatalf("record %d from follower %s: offset %d key %q value %q", i, follower.NodeID, r.Offset, r.Key, r.Value)
		}
	}
}
