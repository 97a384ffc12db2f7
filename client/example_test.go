package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/logagent/logagent/client"
)

// These examples need a running agent (logagent dev starts three), so they
// have no Output line: they are compiled, not run.

func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New("") // $LOGAGENT_ADDR or http://127.0.0.1:7070
	if err != nil {
		log.Fatal(err)
	}
	err = c.CreateTopic(ctx, client.TopicSpec{Name: "events", Partitions: 3, ReplicationFactor: 3, MinInsyncReplicas: 2})
	if err != nil && !errors.Is(err, client.ErrTopicExists) {
		log.Fatal(err)
	}
	p, err := c.NewProducer(client.WithDefaultTopic("events"))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(ctx)
	res, err := p.Send(ctx, client.Message{Key: []byte("user-7"), Value: []byte(`{"clicked":"buy"}`)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("written to partition %d at offset %d\n", res.Partition, res.Offset)
}

func ExampleProducer_Send() {
	ctx := context.Background()
	c, err := client.New("http://127.0.0.1:7070")
	if err != nil {
		log.Fatal(err)
	}
	p, err := c.NewProducer(client.WithDefaultTopic("events"), client.WithAcks(client.AcksAll), client.WithLinger(2*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(ctx)

	sendCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := p.Send(sendCtx, client.Message{Value: []byte("hello")})
	switch {
	case errors.Is(err, client.ErrOutcomeUnknown):
		// The record may have been written: sending it again may
		// duplicate it. Decide according to what a duplicate costs.
		log.Printf("unknown outcome: %v", err)
	case err != nil:
		log.Printf("not written: %v", err) // safe to try again later
	default:
		fmt.Printf("offset %d, epoch %d\n", res.Offset, res.Epoch)
	}
}

func ExampleProducer_Produce() {
	ctx := context.Background()
	c, err := client.New("")
	if err != nil {
		log.Fatal(err)
	}
	p, err := c.NewProducer(client.WithDefaultTopic("logs"))
	if err != nil {
		log.Fatal(err)
	}
	var futures []*client.Future
	for i := range 1000 {
		f, err := p.Produce(ctx, client.Message{Value: fmt.Appendf(nil, "line %d", i)})
		if err != nil {
			log.Fatal(err)
		}
		futures = append(futures, f)
	}
	if err := p.Close(ctx); err != nil { // flushes
		log.Fatal(err)
	}
	for _, f := range futures {
		if _, err := f.Wait(ctx); err != nil {
			log.Print(err)
		}
	}
}

func ExampleConsumer_Next() {
	ctx := context.Background()
	c, err := client.New("")
	if err != nil {
		log.Fatal(err)
	}
	cons, err := c.NewConsumer("events", 0, client.OffsetEarliest, client.WithOffsetReset(client.OffsetEarliest))
	if err != nil {
		log.Fatal(err)
	}
	for {
		r, err := cons.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d %s=%s\n", r.Offset, r.Key, r.Value)
	}
}

func ExampleClient_DescribeTopic() {
	ctx := context.Background()
	c, err := client.New("")
	if err != nil {
		log.Fatal(err)
	}
	info, err := c.DescribeTopic(ctx, "events")
	if errors.Is(err, client.ErrUnknownTopic) {
		fmt.Println("no such topic")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range info.Partitions {
		fmt.Printf("partition %d: leader %s epoch %d isr %v hw %d\n", p.Partition, p.Leader, p.Epoch, p.ISR, p.HighWatermark)
	}
}

func ExamplePartitionForKey() {
	fmt.Println(client.PartitionForKey([]byte("user-7"), 3))
	// Output: 0
}
