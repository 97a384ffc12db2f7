package testcluster

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/logagent/logagent/client"
)

// TestGoProducerSeveralTopicsThroughACrash: one idempotent Go producer
// writes keyed records to two topics through a sidecar while the leader of
// one topic's partition is killed: every record is acknowledged, and each
// partition of each topic holds the acknowledged records once, in the
// order produced, at the offsets acknowledged. A MultiConsumer of both
// topics reads them back.
func TestGoProducerSeveralTopicsThroughACrash(t *testing.T) {
	const n = 600
	topics := map[string]int{"multi-a": 2, "multi-b": 1}
	c := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for name, partitions := range topics {
		if err := c.Agents[0].CreateTopic(TopicSpec{Name: name, Partitions: partitions, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
			t.Fatal(err)
		}
		for p := range partitions {
			c.WaitISR(name, p, []string{"n1", "n2", "n3"}, 20*time.Second)
		}
	}
	victim, _ := c.WaitLeader("multi-b", 0, 20*time.Second)
	var sidecar *Agent
	for _, a := range c.Agents {
		if a != victim {
			sidecar = a
		}
	}
	cl, err := client.New("http://" + sidecar.ClientAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close(ctx)
	p, err := cl.NewProducer(client.WithLinger(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	type sent struct {
		tp     client.TopicPartition
		value  string
		future *client.Future
	}
	var all []sent
	for i := range n {
		if i == n/3 {
			victim.Kill()
			t.Logf("killed %s, the leader of multi-b/0, after %d records", victim.NodeID, i)
		}
		topic := []string{"multi-a", "multi-b"}[i%2]
		key := fmt.Sprintf("k%d", i%10)
		value := fmt.Sprintf("%s-%d", topic, i)
		f, err := p.Produce(ctx, client.Message{Topic: topic, Key: []byte(key), Value: []byte(value)})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, sent{client.TopicPartition{Topic: topic, Partition: client.PartitionForKey([]byte(key), topics[topic])}, value, f})
		if i%50 == 0 {
			time.Sleep(10 * time.Millisecond) // the kill lands among requests in flight
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[client.TopicPartition][]string{}
	for _, s := range all {
		res, err := s.future.Wait(ctx)
		if err != nil {
			t.Fatalf("%s to %s: %v", s.value, s.tp, err)
		}
		if res.Partition != s.tp.Partition || res.Offset != int64(len(want[s.tp])) {
			t.Fatalf("%s acknowledged at %d/%d, want %s at offset %d", s.value, res.Partition, res.Offset, s.tp, len(want[s.tp]))
		}
		want[s.tp] = append(want[s.tp], s.value)
	}
	if st := p.Stats(); st.RecordsProduced != n || st.ProduceErrors != 0 || st.InFlight != 0 {
		t.Errorf("producer stats %+v", st)
	}
	t.Logf("producer stats %+v", p.Stats())

	cons, err := cl.ConsumeTopics(ctx, []string{"multi-a", "multi-b"}, client.OffsetEarliest)
	if err != nil {
		t.Fatal(err)
	}
	got := map[client.TopicPartition][]string{}
	for read := 0; read < n; read++ {
		r, err := cons.Next(ctx)
		if err != nil {
			t.Fatalf("after %d records: %v", read, err)
		}
		tp := client.TopicPartition{Topic: r.Topic, Partition: r.Partition}
		if r.Offset != int64(len(got[tp])) {
			t.Fatalf("%s: offset %d after %d records", tp, r.Offset, len(got[tp]))
		}
		got[tp] = append(got[tp], string(r.Value))
	}
	for tp, values := range want {
		if !slices.Equal(got[tp], values) {
			t.Errorf("%s holds %d records %q\nwant %d %q", tp, len(got[tp]), got[tp], len(values), values)
		}
	}
	if err := cons.Close(); err != nil {
		t.Fatal(err)
	}
	// Nothing beyond what was acknowledged: every partition ends there.
	for tp, values := range want {
		c.WaitFor(10*time.Second, fmt.Sprintf("%s's high watermark at %d on %s", tp, len(values), sidecar.NodeID), func() bool {
			part, err := sidecar.DescribePartition(tp.Topic, tp.Partition)
			return err == nil && part.HighWatermark != nil && *part.HighWatermark == int64(len(values))
		})
	}
}
