package testcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	segkafka "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Kafka's classic consumer groups through the listener (docs/kafka.md
// "Consumer groups"), with kgo, sarama and kafka-go.

// cuttableDialer dials normally until cut, then closes every connection
// it made and refuses new ones: a client that dies without leaving its
// group (its LeaveGroup on Close never arrives), as a killed process.
type cuttableDialer struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (d *cuttableDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut {
		return nil, errors.New("cut")
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *cuttableDialer) kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cut = true
	for _, c := range d.conns {
		c.Close()
	}
}

// TestKafkaGroupTakeover: two kgo group consumers (default
// cooperative-sticky balancer), each through its own agent's listener,
// split a topic's partitions and commit what they consume; one dies
// without leaving (its connections cut) and the other takes its
// partitions once its session expires, starting each at the offset the
// dead member last committed: nothing is skipped.
func TestKafkaGroupTakeover(t *testing.T) {
	const topic, groupID, partitions, half = "kgroup", "takeover", 4, 400
	c := Start(t, Options{Kafka: true})
	groupTopic(t, c, c.Agents[0], topic, partitions)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	producer := spreadProducer(t, c.Agents[0], topic)
	produce := func(from, to int) { produceEach(ctx, t, producer, "r", from, to) }
	type member struct {
		cl *kgo.Client
		// consumed by value; committed: the last offset committed per
		// partition; first: the first offset consumed per partition.
		mu        sync.Mutex
		consumed  map[string]bool
		committed map[int32]int64
		first     map[int32]int64
	}
	dialer := &cuttableDialer{}
	newMember := func(a *Agent, extra ...kgo.Opt) *member {
		opts := append([]kgo.Opt{kgo.ConsumerGroup(groupID), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.SessionTimeout(3 * time.Second),
			kgo.HeartbeatInterval(300 * time.Millisecond), kgo.FetchMaxWait(200 * time.Millisecond)}, extra...)
		return &member{cl: kgoClient(t, a, opts...), consumed: map[string]bool{}, committed: map[int32]int64{}, first: map[int32]int64{}}
	}
	// poll consumes one round (at most maxRecords, 0 for no bound) and
	// commits it; false when nothing came.
	poll := func(m *member, pctx context.Context, maxRecords int) bool {
		fs := m.cl.PollRecords(pctx, maxRecords)
		if pctx.Err() != nil {
			return false
		}
		recs := fs.Records()
		if len(recs) == 0 {
			return false
		}
		if err := m.cl.CommitRecords(ctx, recs...); err != nil {
			t.Logf("commit: %v (consumed again after the rebalance)", err)
			return true
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, r := range recs {
			m.consumed[string(r.Value)] = true
			if _, ok := m.first[r.Partition]; !ok {
				m.first[r.Partition] = r.Offset
			}
			m.committed[r.Partition] = max(m.committed[r.Partition], r.Offset+1)
		}
		return true
	}
	dying := newMember(c.Agents[1], kgo.Dialer(dialer.dial))
	survivor := newMember(c.Agents[2])
	adm := kadm.NewClient(kgoClient(t, c.Agents[0]))

	// Both poll until the group has both members assigned; then records
	// come, and the dying member stops between two polls of a few
	// records each, everything it consumed committed and most of its
	// partitions' records left.
	var survivorPolls sync.WaitGroup
	survivorCtx, stopSurvivor := context.WithCancel(ctx)
	defer func() { stopSurvivor(); survivorPolls.Wait() }()
	survivorPolls.Go(func() {
		for survivorCtx.Err() == nil {
			pctx, pcancel := context.WithTimeout(survivorCtx, 500*time.Millisecond)
			poll(survivor, pctx, 0)
			pcancel()
		}
	})
	for {
		pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		poll(dying, pctx, 10)
		pcancel()
		d, err := adm.DescribeGroups(ctx, groupID)
		if err == nil && d[groupID].State == "Stable" && len(d[groupID].Members) == 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the group never had two members: %+v, %v", d[groupID], err)
		}
	}
	produce(0, half)
	for len(dying.consumed) < 30 {
		pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		poll(dying, pctx, 10)
		pcancel()
		if ctx.Err() != nil {
			t.Fatalf("the dying member consumed %d records", len(dying.consumed))
		}
	}
	dialer.kill()
	died := time.Now()
	t.Logf("member on %s cut after consuming %d records, committed %v", c.Agents[1].NodeID, len(dying.consumed), dying.committed)

	produce(half, 2*half)
	var ends kadm.ListedOffsets
	c.WaitFor(60*time.Second, "the survivor consumes everything", func() bool {
		survivor.mu.Lock()
		defer survivor.mu.Unlock()
		for i := range 2 * half {
			v := fmt.Sprintf("r%d", i)
			if !survivor.consumed[v] && !dying.consumed[v] {
				return false
			}
		}
		return true
	})
	t.Logf("the survivor took over within %v", time.Since(died))
	stopSurvivor()
	survivorPolls.Wait()

	// The partitions the dead member owned began, at the survivor, at
	// the offsets the dead member committed.
	for p, off := range dying.committed {
		if first, ok := survivor.first[p]; !ok || first != off {
			t.Errorf("partition %d: the dead member committed %d, the survivor started at %d (%v)", p, off, first, ok)
		}
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := adm.FetchOffsets(ctx, groupID)
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(partitions) {
		end, _ := ends.Lookup(topic, p)
		got, ok := committed.Lookup(topic, p)
		if !ok || got.At != end.Offset {
			t.Errorf("partition %d: committed %+v, end %d", p, got, end.Offset)
		}
	}
	d, err := adm.DescribeGroups(ctx, groupID)
	if err != nil || len(d[groupID].Members) != 1 || d[groupID].State != "Stable" {
		t.Fatalf("the group after the takeover: %+v, %v", d[groupID], err)
	}
}

// saramaHandler consumes claims and marks every message, which sarama's
// autocommit commits.
type saramaHandler struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (h *saramaHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *saramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *saramaHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		h.mu.Lock()
		h.seen[string(m.Value)] = true
		h.mu.Unlock()
		s.MarkMessage(m, "")
	}
	return nil
}

func (h *saramaHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.seen)
}

// waitCommitted waits until groupID committed the end of every partition
// of topic.
func waitCommitted(t *testing.T, c *Cluster, topic, groupID string, partitions int32) {
	t.Helper()
	adm := kadm.NewClient(kgoClient(t, c.Agents[0]))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// What the last look saw, so that a timeout says whether the commits
	// fell short, the lookups failed or a partition's end moved.
	var last string
	defer func() {
		if t.Failed() {
			t.Logf("the last look at the group's commits: %s", last)
		}
	}()
	c.WaitFor(30*time.Second, "the group commits the end of every partition", func() bool {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			last = fmt.Sprintf("ListEndOffsets: %v", err)
			return false
		}
		committed, err := adm.FetchOffsets(ctx, groupID)
		if err != nil {
			last = fmt.Sprintf("FetchOffsets: %v", err)
			return false
		}
		last = ""
		done := true
		for p := range partitions {
			end, _ := ends.Lookup(topic, p)
			got, ok := committed.Lookup(topic, p)
			last += fmt.Sprintf("partition %d: end %d (err %v), committed %d (found %t, err %v); ", p, end.Offset, end.Err, got.At, ok, got.Err)
			if !ok || got.At != end.Offset {
				done = false
			}
		}
		return done
	})
}

// TestKafkaSaramaGroup: sarama's ConsumerGroup (its default range
// strategy, eager) consumes a topic through one listener and autocommits.
func TestKafkaSaramaGroup(t *testing.T) {
	const topic, groupID, n = "sgroup", "sarama-group", 200
	c := Start(t, Options{Kafka: true})
	a := c.Agents[1]
	groupTopic(t, c, a, topic, 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	produceEach(ctx, t, spreadProducer(t, a, topic), "s", 0, n)
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Interval = 200 * time.Millisecond
	cfg.Consumer.Return.Errors = true
	cg, err := sarama.NewConsumerGroup([]string{a.KafkaAddr}, groupID, cfg)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for err := range cg.Errors() {
			t.Logf("sarama: %v", err)
		}
	}()
	h := &saramaHandler{seen: map[string]bool{}}
	cctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for cctx.Err() == nil {
			if err := cg.Consume(cctx, []string{topic}, h); err != nil && cctx.Err() == nil {
				t.Logf("sarama Consume: %v", err)
				time.Sleep(100 * time.Millisecond)
			}
		}
	})
	defer func() { stop(); wg.Wait(); cg.Close() }()
	c.WaitFor(30*time.Second, "sarama consumes every record", func() bool { return h.count() == n })
	waitCommitted(t, c, topic, groupID, 2)
}

// TestKafkaSegmentioGroup: kafka-go's Reader with a GroupID consumes a
// topic through one listener and commits (CommitMessages).
func TestKafkaSegmentioGroup(t *testing.T) {
	const topic, groupID, n = "kgogroup", "kafka-go-group", 200
	c := Start(t, Options{Kafka: true})
	a := c.Agents[2]
	groupTopic(t, c, a, topic, 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	produceEach(ctx, t, spreadProducer(t, a, topic), "k", 0, n)
	r := segkafka.NewReader(segkafka.ReaderConfig{Brokers: []string{a.KafkaAddr}, GroupID: groupID, Topic: topic,
		MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 300 * time.Millisecond, StartOffset: segkafka.FirstOffset,
		HeartbeatInterval: 500 * time.Millisecond, SessionTimeout: 6 * time.Second})
	defer r.Close()
	seen := map[string]bool{}
	for len(seen) < n {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("fetch after %d: %v", len(seen), err)
		}
		seen[string(m.Value)] = true
		if err := r.CommitMessages(ctx, m); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	waitCommitted(t, c, topic, groupID, 2)
}

// groupTopic creates topic (RF 3, min ISR 2) through a and waits until
// each of its partitions has a leader.
func groupTopic(t *testing.T, c *Cluster, a *Agent, topic string, partitions int) {
	t.Helper()
	if err := a.CreateTopic(TopicSpec{Name: topic, Partitions: partitions, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	for p := range partitions {
		c.WaitLeader(topic, p, 20*time.Second)
	}
}

// spreadProducer is a kgo producer through a's listener that spreads its
// records over topic's partitions, round robin.
//
// kgo's RoundRobinPartitioner spreads over the partitions whose leader the
// client's metadata knows: one loaded while partition 0's leader was not
// yet known (a new topic) put all 200 records of TestKafkaSegmentioGroup
// in partition 1, and partition 0, with nothing to consume, never got the
// commit waitCommitted waits for (the fresh-clone CI of a2e55d7). A
// consistent partitioner is given every partition, and kgo waits for a
// leader of the one it picks.
func spreadProducer(t *testing.T, a *Agent, topic string) *kgo.Client {
	var next atomic.Int64
	roundRobin := kgo.BasicConsistentPartitioner(func(string) func(*kgo.Record, int) int {
		return func(_ *kgo.Record, n int) int { return int((next.Add(1) - 1) % int64(n)) }
	})
	return kgoClient(t, a, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(roundRobin))
}

// produceEach writes the values prefix+i for i in [from, to), each
// acknowledged before the next is sent.
func produceEach(ctx context.Context, t *testing.T, producer *kgo.Client, prefix string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := producer.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "%s%d", prefix, i)}).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
}
