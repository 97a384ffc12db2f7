package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"maps"
	"slices"
	"time"

	"github.com/logagent/logagent/client"
)

// These examples run against a cluster of real agents that TestMain
// starts: $LOGAGENT_ADDR names its first agent, and their topics exist,
// as `logagent dev` and `logagent topic create` would make them.

func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New("") // $LOGAGENT_ADDR, or http://127.0.0.1:7070
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx) // closes the producers and consumers made from c

	err = c.CreateTopic(ctx, client.TopicSpec{Name: "events", Partitions: 3, ReplicationFactor: 3, MinInsyncReplicas: 2})
	if err != nil && !errors.Is(err, client.ErrTopicExists) {
		log.Fatal(err)
	}

	p, err := c.NewProducer() // acks=all, idempotent
	if err != nil {
		log.Fatal(err)
	}
	res, err := p.Send(ctx, client.Message{Topic: "events", Key: []byte("user-7"), Value: []byte(`{"clicked":"buy"}`)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("written to partition %d\n", res.Partition)

	// Read it back: that partition, from the record's offset.
	cons, err := c.ConsumePartitions(map[client.TopicPartition]int64{{Topic: "events", Partition: res.Partition}: res.Offset})
	if err != nil {
		log.Fatal(err)
	}
	r, err := cons.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("read %s = %s from %s/%d at offset %v\n", r.Key, r.Value, r.Topic, r.Partition, r.Offset == res.Offset)
	// Output:
	// written to partition 0
	// read user-7 = {"clicked":"buy"} from events/0 at offset true
}

func ExampleNew() {
	for _, addr := range []string{"127.0.0.1", "127.0.0.1:7071", "agent.internal", "https://agent.internal", "http://[::1]:9000"} {
		c, err := client.New(addr)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%-22s -> %s\n", addr, c.Addr())
	}
	_, err := client.New("agent.internal/v1")
	fmt.Println(errors.Is(err, client.ErrInvalidAddr))
	// Output:
	// 127.0.0.1              -> http://127.0.0.1:7070
	// 127.0.0.1:7071         -> http://127.0.0.1:7071
	// agent.internal         -> http://agent.internal:7070
	// https://agent.internal -> https://agent.internal:7070
	// http://[::1]:9000      -> http://[::1]:9000
	// true
}

func ExampleProducer_Send() {
	ctx := context.Background()
	c, err := client.New("")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)
	p, err := c.NewProducer(client.WithDefaultTopic("payments"), client.WithLinger(2*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}

	sendCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := p.Send(sendCtx, client.Message{Value: []byte("hello")})
	switch {
	case errors.Is(err, client.ErrOutcomeUnknown):
		// The record may have been written (client.ErrAckTimeout, say):
		// sending it again may duplicate it. Decide according to what a
		// duplicate costs.
		fmt.Println("unknown outcome:", err)
	case err != nil:
		fmt.Println("not written:", err) // safe to try again later
	default:
		fmt.Printf("written to partition %d, acknowledged by the in-sync replicas\n", res.Partition)
	}
	// Output: written to partition 0, acknowledged by the in-sync replicas
}

func ExampleProducer_Produce() {
	ctx := context.Background()
	c, err := client.New("")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)
	// One producer for every topic: one buffer, one set of requests.
	p, err := c.NewProducer()
	if err != nil {
		log.Fatal(err)
	}
	var futures []*client.Future
	for i := range 200 {
		topic := []string{"logs", "metrics"}[i%2]
		f, err := p.Produce(ctx, client.Message{Topic: topic, Value: fmt.Appendf(nil, "line %d", i)})
		if err != nil {
			log.Fatal(err)
		}
		futures = append(futures, f)
	}
	if err := p.Close(ctx); err != nil { // flushes, and waits
		log.Fatal(err)
	}
	written := map[string]int{}
	for i, f := range futures {
		if _, err := f.Wait(ctx); err != nil {
			log.Fatal(err)
		}
		written[[]string{"logs", "metrics"}[i%2]]++
	}
	s := p.Stats()
	fmt.Printf("logs %d, metrics %d\n", written["logs"], written["metrics"])
	fmt.Printf("stats: %d produced, %d failed, %d in flight\n", s.RecordsProduced, s.ProduceErrors, s.InFlight)
	// Output:
	// logs 100, metrics 100
	// stats: 200 produced, 0 failed, 0 in flight
}

func ExampleConsumer_Next() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New("")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)
	p, err := c.NewProducer(client.WithDefaultTopic("audit"))
	if err != nil {
		log.Fatal(err)
	}
	for i := range 3 {
		if _, err := p.Send(ctx, client.Message{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}); err != nil {
			log.Fatal(err)
		}
	}

	// One partition, from its first record.
	cons, err := c.NewConsumer("audit", 0, client.OffsetEarliest, client.WithOffsetReset(client.OffsetEarliest))
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		r, err := cons.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d %s=%s\n", r.Offset, r.Key, r.Value)
	}
	// Output:
	// 0 k0=v0
	// 1 k1=v1
	// 2 k2=v2
}

func ExampleClient_ConsumeTopics() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New("")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)
	p, err := c.NewProducer(client.WithDefaultTopic("clicks"))
	if err != nil {
		log.Fatal(err)
	}
	for i := range 6 {
		if _, err := p.Send(ctx, client.Message{Key: fmt.Appendf(nil, "user-%d", i), Value: []byte("click")}); err != nil {
			log.Fatal(err)
		}
	}

	// Every partition of the topic: keys are spread over them.
	cons, err := c.ConsumeTopics(ctx, []string{"clicks"}, client.OffsetEarliest)
	if err != nil {
		log.Fatal(err)
	}
	defer cons.Close()
	partitionOf := map[string]int{}
	for len(partitionOf) < 6 {
		r, err := cons.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		partitionOf[string(r.Key)] = r.Partition
	}
	partitions := map[int]bool{}
	for _, p := range partitionOf {
		partitions[p] = true
	}
	fmt.Println(slices.Sorted(maps.Keys(partitionOf)))
	fmt.Println(len(partitions), "partitions")
	// Output:
	// [user-0 user-1 user-2 user-3 user-4 user-5]
	// 3 partitions
}

func ExampleClient_NewGroupConsumer() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.New("")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)
	p, err := c.NewProducer(client.WithDefaultTopic("invoices"))
	if err != nil {
		log.Fatal(err)
	}
	for i := range 4 {
		if _, err := p.Send(ctx, client.Message{Key: fmt.Appendf(nil, "invoice-%d", i), Value: []byte("due")}); err != nil {
			log.Fatal(err)
		}
	}

	// The group's members share the topic's partitions; the group keeps
	// where each partition is consumed to.
	g, err := c.NewGroupConsumer("billing", []string{"invoices"})
	if err != nil {
		log.Fatal(err)
	}
	var read []string
	next := map[int]int64{} // of each partition: the offset after the last record read
	for len(read) < 4 {
		records, err := g.Poll(ctx)
		if err != nil {
			log.Fatal(err)
		}
		for _, r := range records {
			read = append(read, string(r.Key))
			next[r.Partition] = r.Offset + 1
		}
	}
	if err := g.Close(ctx); err != nil { // commits, and leaves the group
		log.Fatal(err)
	}
	slices.Sort(read)
	fmt.Println(read)

	// The next member of the group starts where this one stopped.
	offsets, err := c.CommittedOffsets(ctx, "billing", "invoices")
	if err != nil {
		log.Fatal(err)
	}
	slices.SortFunc(offsets, func(a, b client.CommittedOffset) int { return a.Partition - b.Partition })
	for _, o := range offsets {
		fmt.Printf("partition %d committed after the last record read: %v\n", o.Partition, o.Offset == next[o.Partition])
	}
	// Output:
	// [invoice-0 invoice-1 invoice-2 invoice-3]
	// partition 0 committed after the last record read: true
	// partition 1 committed after the last record read: true
}

func ExampleClient_DescribeTopic() {
	ctx := context.Background()
	c, err := client.New("")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)
	info, err := c.DescribeTopic(ctx, "events")
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range info.Partitions {
		fmt.Printf("partition %d: %d replicas, leader elected: %v\n", p.Partition, len(p.Replicas), p.Leader != "")
	}

	_, err = c.DescribeTopic(ctx, "no-such-topic")
	fmt.Println(errors.Is(err, client.ErrUnknownTopic))
	// Output:
	// partition 0: 3 replicas, leader elected: true
	// partition 1: 3 replicas, leader elected: true
	// partition 2: 3 replicas, leader elected: true
	// true
}

func ExampleClient_AlterTopic() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New("")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)
	// signups has 2 partitions: two more, records kept three days; keyed
	// records now hash over 4.
	info, err := c.AlterTopic(ctx, "signups", client.TopicChanges{Partitions: 4, Retention: "72h"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(info.Partitions), "partitions, retention", string(info.Config["retention"]))

	// Partitions are only ever added.
	_, err = c.AlterTopic(ctx, "signups", client.TopicChanges{Partitions: 3})
	fmt.Println(errors.Is(err, client.ErrInvalidRequest))

	// Back to the agents' storage.retention.
	info, err = c.AlterTopic(ctx, "signups", client.TopicChanges{Retention: client.AgentDefault})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("from the agents:", string(info.Config["agent_defaults"]))
	// Output:
	// 4 partitions, retention "72h"
	// true
	// from the agents: ["retention","retention_bytes"]
}

func ExamplePartitionForKey() {
	fmt.Println(client.PartitionForKey([]byte("user-7"), 3))
	// Output: 0
}
