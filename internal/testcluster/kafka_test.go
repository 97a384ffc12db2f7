package testcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	segkafka "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/logagent/logagent/internal/testenv"
	"github.com/logagent/logagent/internal/testseed"
)

// Tests of the Kafka listener with Kafka clients nobody here wrote:
// franz-go's kgo and kadm, IBM/sarama, segmentio/kafka-go and kcat
// (librdkafka), against real agents and Consul (docs/kafka.md, "Tested
// clients").

// kgoClient is a franz-go client seeded with one agent's Kafka listener
// only, as an application on that host would be.
func kgoClient(t *testing.T, a *Agent, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(a.KafkaAddr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// consumeAll reads partition p of topic from the start through a's
// listener until want records arrived (or the timeout), and returns the
// values in the order read.
func consumeAll(t *testing.T, a *Agent, topic string, p int32, want int, timeout time.Duration, opts ...kgo.Opt) []string {
	t.Helper()
	cl := kgoClient(t, a, append([]kgo.Opt{kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}})}, opts...)...)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var got []string
	var last int64 = -1
	for len(got) < want {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records of %s/%d through %s before %s", len(got), want, topic, p, a.NodeID, timeout)
		}
		fetches.EachError(func(topic string, p int32, err error) {
			t.Logf("fetch %s/%d: %v (the client retries)", topic, p, err)
		})
		fetches.EachRecord(func(r *kgo.Record) {
			if r.Offset <= last {
				t.Errorf("%s/%d: offset %d after %d", topic, p, r.Offset, last)
			}
			last = r.Offset
			got = append(got, string(r.Value))
		})
	}
	return got
}

// TestKafkaFranzGo: kadm creates a topic, an idempotent acks=all kgo
// producer writes to its three partitions through one agent's listener,
// each partition is consumed back with ConsumePartitions, every record
// exactly once and in order; ListOffsets answers earliest, latest and by
// timestamp. A producer and a consumer on an agent that holds no replica
// of a partition go through the sidecar's forwarding and fetch proxy.
func TestKafkaFranzGo(t *testing.T) {
	const topic, perPartition = "kgo", 200
	c := Start(t, Options{Kafka: true})
	a := c.Agents[0]
	adm := kadm.NewClient(kgoClient(t, a))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	created, err := adm.CreateTopic(ctx, 3, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")}, topic)
	if err != nil || created.Err != nil {
		t.Fatalf("kadm create topic: %v %v", err, created.Err)
	}
	for p := range 3 {
		c.WaitLeader(topic, p, 20*time.Second)
	}
	// kadm returns the topic's error as its own too.
	if resp, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, "compacted"); !errors.Is(err, kerr.InvalidConfig) || !errors.Is(resp.Err, kerr.InvalidConfig) {
		t.Errorf("create a compacted topic: %v, topic error %v; want INVALID_CONFIG", err, resp.Err)
	}

	before := time.Now().Add(-time.Second).UnixMilli()
	prod := kgoClient(t, a, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var records []*kgo.Record
	for i := range perPartition {
		for p := range int32(3) {
			records = append(records, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%d-%d", p, i)})
		}
	}
	if err := prod.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	for p := range int32(3) {
		got := consumeAll(t, a, topic, p, perPartition, 30*time.Second)
		for i, v := range got {
			if want := fmt.Sprintf("%d-%d", p, i); v != want {
				t.Fatalf("partition %d record %d is %q, want %q (every record once, in order)", p, i, v, want)
			}
		}
	}

	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	atTime, err := adm.ListOffsetsAfterMilli(ctx, before, topic)
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(3) {
		s, _ := starts.Lookup(topic, p)
		e, _ := ends.Lookup(topic, p)
		at, _ := atTime.Lookup(topic, p)
		if s.Err != nil || e.Err != nil || at.Err != nil || s.Offset != 0 || e.Offset != perPartition || at.Offset != 0 {
			t.Errorf("partition %d: ListOffsets earliest %d (%v), latest %d (%v), after %d ms %d (%v); want 0, %d, 0",
				p, s.Offset, s.Err, e.Offset, e.Err, before, at.Offset, at.Err, perPartition)
		}
	}

	checkLeaderEpochFencing(ctx, t, adm, kgoClient(t, a), topic)

	// Forwarding: a one-replica topic, written and read through an agent
	// that holds no replica of it.
	const single = "kgo-single"
	if err := a.CreateTopic(TopicSpec{Name: single, Partitions: 1, ReplicationFactor: 1, MinInsyncReplicas: 1}); err != nil {
		t.Fatal(err)
	}
	leader, _ := c.WaitLeader(single, 0, 20*time.Second)
	other := otherAgent(t, c, leader)
	fwd := kgoClient(t, other, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var fwdRecords []*kgo.Record
	for i := range 50 {
		fwdRecords = append(fwdRecords, &kgo.Record{Topic: single, Value: fmt.Appendf(nil, "f-%d", i)})
	}
	if err := fwd.ProduceSync(ctx, fwdRecords...).FirstErr(); err != nil {
		t.Fatalf("produce through %s (leader %s): %v", other.NodeID, leader.NodeID, err)
	}
	got := consumeAll(t, other, single, 0, 50, 30*time.Second)
	for i, v := range got {
		if want := fmt.Sprintf("f-%d", i); v != want {
			t.Fatalf("forwarded record %d is %q, want %q", i, v, want)
		}
	}
	if p, err := leader.DescribePartition(single, 0); err != nil || p.HighWatermark == nil || *p.HighWatermark != 50 {
		t.Fatalf("the leader's replica: %+v %v, want high watermark 50", p, err)
	}
}

// checkLeaderEpochFencing sends Fetch, ListOffsets and OffsetForLeaderEpoch
// for partition 0 of topic with a current_leader_epoch one above and one
// below the one Metadata reports: Kafka answers UNKNOWN_LEADER_EPOCH and
// FENCED_LEADER_EPOCH, and a client that acted on the answer of a newer or
// an older leader would read the wrong log.
func checkLeaderEpochFencing(ctx context.Context, t *testing.T, adm *kadm.Client, cl *kgo.Client, topic string) {
	t.Helper()
	meta, err := adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	epoch := meta.Topics[topic].Partitions[0].LeaderEpoch
	type epochCase struct {
		current int32
		want    error // nil: answered
	}
	cases := []epochCase{{epoch + 1, kerr.UnknownLeaderEpoch}, {epoch, nil}}
	if epoch > 0 {
		cases = append(cases, epochCase{epoch - 1, kerr.FencedLeaderEpoch})
	} else {
		t.Errorf("partition 0 of %s is at leader epoch %d: no older epoch to fence", topic, epoch)
	}
	for _, tc := range cases {
		fetch := kmsg.NewPtrFetchRequest()
		fetch.Version, fetch.ReplicaID, fetch.MaxBytes = 12, -1, 1<<20
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = topic
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.CurrentLeaderEpoch, fp.PartitionMaxBytes, fp.LogStartOffset = tc.current, 1<<20, -1
		ft.Partitions = append(ft.Partitions, fp)
		fetch.Topics = append(fetch.Topics, ft)

		list := kmsg.NewPtrListOffsetsRequest()
		list.ReplicaID = -1
		lt := kmsg.NewListOffsetsRequestTopic()
		lt.Topic = topic
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.CurrentLeaderEpoch, lp.Timestamp = tc.current, -1
		lt.Partitions = append(lt.Partitions, lp)
		list.Topics = append(list.Topics, lt)

		epochs := kmsg.NewPtrOffsetForLeaderEpochRequest()
		epochs.ReplicaID = -1
		et := kmsg.NewOffsetForLeaderEpochRequestTopic()
		et.Topic = topic
		ep := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		ep.CurrentLeaderEpoch, ep.LeaderEpoch = tc.current, epoch
		et.Partitions = append(et.Partitions, ep)
		epochs.Topics = append(epochs.Topics, et)

		codes := map[string]int16{}
		if r, err := cl.Request(ctx, fetch); err != nil {
			t.Fatalf("fetch: %v", err)
		} else {
			codes["Fetch"] = r.(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode
		}
		if r, err := cl.Request(ctx, list); err != nil {
			t.Fatalf("list offsets: %v", err)
		} else {
			codes["ListOffsets"] = r.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].ErrorCode
		}
		if r, err := cl.Request(ctx, epochs); err != nil {
			t.Fatalf("offset for leader epoch: %v", err)
		} else {
			codes["OffsetForLeaderEpoch"] = r.(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0].ErrorCode
		}
		for api, code := range codes {
			if err := kerr.ErrorForCode(code); !errors.Is(err, tc.want) {
				t.Errorf("%s with current_leader_epoch %d (Metadata's %d): %v, want %v", api, tc.current, epoch, err, tc.want)
			}
		}
	}
}

// TestKafkaSarama: IBM/sarama's idempotent SyncProducer and a partition
// consumer (Consumer.ConsumePartition).
func TestKafkaSarama(t *testing.T) {
	const topic, n = "sarama", 100
	c := Start(t, Options{Kafka: true})
	a := c.Agents[0]
	if err := a.CreateTopic(TopicSpec{Name: topic, Partitions: 1, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	c.WaitLeader(topic, 0, 20*time.Second)
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Idempotent = true
	cfg.Producer.Retry.Max = 10
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Consumer.Return.Errors = true
	prod, err := sarama.NewSyncProducer([]string{a.KafkaAddr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := range n {
		p, off, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: 0, Value: sarama.StringEncoder(fmt.Sprintf("s-%d", i))})
		if err != nil || p != 0 || off != int64(i) {
			t.Fatalf("send %d: partition %d offset %d, %v", i, p, off, err)
		}
	}
	cons, err := sarama.NewConsumer([]string{a.KafkaAddr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	pc, err := cons.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	timeout := time.After(30 * time.Second)
	for i := range n {
		select {
		case m := <-pc.Messages():
			if m.Offset != int64(i) || string(m.Value) != fmt.Sprintf("s-%d", i) {
				t.Fatalf("message %d: offset %d value %q", i, m.Offset, m.Value)
			}
		case err := <-pc.Errors():
			t.Fatalf("consume: %v", err)
		case <-timeout:
			t.Fatalf("consumed %d of %d messages", i, n)
		}
	}
}

// TestKafkaSegmentio: segmentio/kafka-go's Writer and a Reader on a
// partition (no group).
func TestKafkaSegmentio(t *testing.T) {
	const topic, n = "kafkago", 100
	c := Start(t, Options{Kafka: true})
	a := c.Agents[0]
	if err := a.CreateTopic(TopicSpec{Name: topic, Partitions: 1, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	c.WaitLeader(topic, 0, 20*time.Second)
	// kafka-go keeps the first Metadata answer for its MetadataTTL (6 s)
	// and gives up on a partition without a leader in it: wait until the
	// listener's agent has seen the election.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	meta := &segkafka.Client{Addr: segkafka.TCP(a.KafkaAddr)}
	c.WaitFor(20*time.Second, a.NodeID+"'s Kafka metadata naming a leader", func() bool {
		m, err := meta.Metadata(ctx, &segkafka.MetadataRequest{Topics: []string{topic}})
		return err == nil && len(m.Topics) == 1 && len(m.Topics[0].Partitions) == 1 && m.Topics[0].Partitions[0].Error == nil
	})
	w := &segkafka.Writer{Addr: segkafka.TCP(a.KafkaAddr), Topic: topic, RequiredAcks: segkafka.RequireAll, BatchTimeout: 10 * time.Millisecond}
	defer w.Close()
	var msgs []segkafka.Message
	for i := range n {
		msgs = append(msgs, segkafka.Message{Key: []byte("k"), Value: fmt.Appendf(nil, "g-%d", i)})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("write: %v", err)
	}
	r := segkafka.NewReader(segkafka.ReaderConfig{Brokers: []string{a.KafkaAddr}, Topic: topic, Partition: 0, MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 500 * time.Millisecond})
	defer r.Close()
	for i := range n {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if m.Offset != int64(i) || string(m.Value) != fmt.Sprintf("g-%d", i) {
			t.Fatalf("message %d: offset %d value %q", i, m.Offset, m.Value)
		}
	}
}

// kcatBinary is Debian's kcat (make kcat installs it), or LOGAGENT_KCAT.
func kcatBinary(t *testing.T) string {
	if p := os.Getenv("LOGAGENT_KCAT"); p != "" {
		return p
	}
	p, err := exec.LookPath("kcat")
	if err != nil {
		testenv.SkipUnlessCI(t, "!!! NO KCAT: %s IS SKIPPED; install it as root with `make kcat` (apt-get install kcat) or set LOGAGENT_KCAT", t.Name())
	}
	return p
}

// TestKafkaKcat: kcat (librdkafka) produces lines with -P and consumes
// them back with -C -e.
func TestKafkaKcat(t *testing.T) {
	const topic, n = "kcat", 100
	kcat := kcatBinary(t)
	c := Start(t, Options{Kafka: true})
	a := c.Agents[0]
	if err := a.CreateTopic(TopicSpec{Name: topic, Partitions: 1, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	c.WaitLeader(topic, 0, 20*time.Second)
	var lines []string
	for i := range n {
		lines = append(lines, fmt.Sprintf("line-%d", i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	produce := exec.CommandContext(ctx, kcat, "-P", "-b", a.KafkaAddr, "-t", topic, "-p", "0", "-X", "acks=all", "-X", "enable.idempotence=true")
	produce.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := produce.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
	consume := exec.CommandContext(ctx, kcat, "-C", "-b", a.KafkaAddr, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q")
	var stderr bytes.Buffer
	consume.Stderr = &stderr
	out, err := consume.Output()
	if err != nil {
		t.Fatalf("kcat -C: %v\n%s", err, stderr.String())
	}
	if got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n"); strings.Join(got, ",") != strings.Join(lines, ",") {
		t.Fatalf("kcat -C read %d lines, want %d in order:\n%s\nstderr: %s", len(got), n, out, stderr.String())
	}
}

// TestKafkaFetchUsesSendfile: a kgo consumer reading 64 MiB through the
// leader's Kafka listener in 8 MiB fetches; the leader sends the batches
// with sendfile(2), which its read system call count shows, as
// TestReplicaFetchUsesSendfile does for the peer API: a copy through user
// space would take a read per buffer (16384 of 4 KiB), sendfile a few
// calls per answer.
func TestKafkaFetchUsesSendfile(t *testing.T) {
	const topic, batchBytes, batches = "kafkazerocopy", 1 << 20, 64
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 17))
	c := Start(t, Options{Agents: 1, Kafka: true})
	a := c.Agents[0]
	if err := a.CreateTopic(TopicSpec{Name: topic, Partitions: 1, ReplicationFactor: 1, MinInsyncReplicas: 1}); err != nil {
		t.Fatal(err)
	}
	c.WaitLeader(topic, 0, 20*time.Second)
	value := make([]byte, batchBytes-4096)
	for i := range value {
		value[i] = byte(rng.Uint32())
	}
	for range batches {
		if _, err := a.Produce(topic, 0, ContentTypeBatch, buildBatch(t, [][]byte{value}), "1", 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	before := readSyscalls(t, a.PID())
	start := time.Now()
	got := consumeAll(t, a, topic, 0, batches, time.Minute, kgo.FetchMaxBytes(8<<20), kgo.FetchMaxPartitionBytes(8<<20))
	elapsed := time.Since(start)
	reads := readSyscalls(t, a.PID()) - before
	for i, v := range got {
		if v != string(value) {
			t.Fatalf("record %d differs from what was written", i)
		}
	}
	total := int64(batches * batchBytes)
	t.Logf("kgo consumed %d MiB through the Kafka listener in %s; the agent made %d read-side system calls meanwhile (a 4 KiB copy loop needs %d)",
		total>>20, elapsed.Round(time.Millisecond), reads, total/4096)
	if limit := total / (256 << 10); reads > limit {
		t.Fatalf("%d read-side system calls for %d bytes of Kafka fetches (limit %d): the batches are copied through user space, not sent with sendfile",
			reads, total, limit)
	}
}

// TestKafkaFailoverUnderLoad: an idempotent acks=all kgo producer writes
// through an agent's listener while the partition's leader is killed with
// SIGKILL; every record the producer saw acknowledged is in the log
// exactly once, and no record is there twice.
func TestKafkaFailoverUnderLoad(t *testing.T) {
	const topic = "kgofailover"
	c := Start(t, Options{Kafka: true})
	leader, _ := createReplicatedTopic(t, c, topic)
	via := otherAgent(t, c, leader)
	prod := kgoClient(t, via, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(time.Millisecond), kgo.RecordDeliveryTimeout(30*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	acked := map[string]int64{}
	var failed int
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				v := fmt.Sprintf("w%d-%d", w, i)
				prod.Produce(context.Background(), &kgo.Record{Topic: topic, Value: []byte(v)}, func(r *kgo.Record, err error) {
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						failed++
						return
					}
					acked[v] = r.Offset
				})
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	time.Sleep(time.Second)
	leader.Kill()
	t.Logf("killed leader %s (-9) while producing through %s", leader.NodeID, via.NodeID)
	newLeader, _ := c.WaitLeader(topic, 0, 30*time.Second)
	time.Sleep(2 * time.Second)
	cancel()
	wg.Wait()
	if err := prod.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n := len(acked)
	mu.Unlock()
	if n == 0 {
		t.Fatal("no record acknowledged")
	}
	ends, err := kadm.NewClient(kgoClient(t, via)).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(topic, 0)
	got := consumeAll(t, via, topic, 0, int(end.Offset), time.Minute)
	seen := map[string]int{}
	for _, v := range got {
		seen[v]++
	}
	for v, k := range seen {
		if k > 1 {
			t.Errorf("record %q is in the log %d times", v, k)
		}
	}
	for v := range acked {
		if seen[v] != 1 {
			t.Errorf("acknowledged record %q is in the log %d times", v, seen[v])
		}
	}
	t.Logf("%d records acknowledged, %d failed, %d in the log (new leader %s)", n, failed, len(got), newLeader.NodeID)
}
