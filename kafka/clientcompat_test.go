package kafka

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestFindCoordinatorForTransactionIsFatal: a transactional producer asks
// FindCoordinator (type 1) before InitProducerId, so the listener's fatal
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED of InitProducerId is only reached
// if FindCoordinator does not answer a retriable code first. Kafka answers
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED there for an id the client may not
// use; the listener answered COORDINATOR_NOT_AVAILABLE, which every client
// retries until its own timeout.
func TestFindCoordinatorForTransactionIsFatal(t *testing.T) {
	ts := startServer(t)
	c := dialRaw(t, ts.addr)
	for _, v := range []int16{3, 4} {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.Version, req.CoordinatorType = v, coordinatorTransaction
		req.CoordinatorKey, req.CoordinatorKeys = "tx", []string{"tx"}
		c.send(c.frame(req))
		resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
		resp.Version = v
		c.read(resp)
		code := resp.ErrorCode
		if v >= 4 {
			code = resp.Coordinators[0].ErrorCode
		}
		if err := kerr.ErrorForCode(code); err == nil || kerr.IsRetriable(err) {
			t.Errorf("FindCoordinator v%d for a transactional id: %v (retriable: clients retry it until their timeout), want a fatal code such as TRANSACTIONAL_ID_AUTHORIZATION_FAILED", v, err)
		}
	}
}

// TestTransactionalProducerFailsFast: what a client sees of the above.
// kgo's transactional producer fails at once with the listener's refusal;
// it retried FindCoordinator until its own timeout (27 s).
func TestTransactionalProducerFailsFast(t *testing.T) {
	ts := startServer(t)
	createTopic(t, ts, "tx-topic", 1)
	cl := ts.client(t, kgo.TransactionalID("tx"), kgo.DefaultProduceTopic("tx-topic"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	err := cl.BeginTransaction()
	if err == nil {
		err = cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr()
	}
	if !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		t.Errorf("transactional produce after %v: %v, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", time.Since(start).Round(time.Millisecond), err)
	}
}

// offsetsUnavailable is a Groups whose coordinator cannot be reached for
// OffsetFetch (a coordinator failover, the group route timing out).
type offsetsUnavailable struct{ Groups }

func (offsetsUnavailable) FetchOffsets(context.Context, string) ([]CommittedOffset, error) {
	return nil, &Error{Code: kerr.CoordinatorNotAvailable.Code}
}

// TestOffsetFetchV1ErrorIsAnswered: OffsetFetch v1 has no top-level error
// code, so Kafka answers a group-level error on each requested partition.
// The listener answered no partitions at all, which a v1 client
// (segmentio/kafka-go's consumer group) reads as "nothing committed" and
// starts the partitions at its StartOffset: a re-read from the start, or
// with LastOffset, records skipped.
func TestOffsetFetchV1ErrorIsAnswered(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.Groups = offsetsUnavailable{} })
	c := dialRaw(t, ts.addr)
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version, req.Group = 1, "g"
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = "t", []int32{0, 1}
	req.Topics = []kmsg.OffsetFetchRequestTopic{rt}
	c.send(c.frame(req))
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	resp.Version = 1
	c.read(resp)
	var got []string
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			got = append(got, t.Topic+":"+kerr.ErrorForCode(p.ErrorCode).Error())
		}
	}
	if len(got) != 2 || !strings.Contains(got[0], "COORDINATOR_NOT_AVAILABLE") || !strings.Contains(got[1], "COORDINATOR_NOT_AVAILABLE") {
		t.Fatalf("OffsetFetch v1 while the coordinator is unavailable answered partitions %v; want t/0 and t/1 with COORDINATOR_NOT_AVAILABLE", got)
	}
}

// countingBroker is the fake Broker, counting the Fetch and ListOffset
// calls in progress and the fetched bytes not yet closed.
type countingBroker struct {
	*fakeBroker
	mu                  sync.Mutex
	calls, peakCalls    int
	openBytes, peakOpen int64
}

func (b *countingBroker) enter() {
	b.mu.Lock()
	b.calls++
	b.peakCalls = max(b.peakCalls, b.calls)
	b.mu.Unlock()
	time.Sleep(20 * time.Millisecond) // a read of a file, or a forward to the leader
}

func (b *countingBroker) leave() {
	b.mu.Lock()
	b.calls--
	b.mu.Unlock()
}

func (b *countingBroker) Fetch(ctx context.Context, req FetchRequest) (FetchResult, error) {
	b.enter()
	defer b.leave()
	res, err := b.fakeBroker.Fetch(ctx, req)
	if err != nil || res.Records == nil {
		return res, err
	}
	n := res.Records.Len()
	b.mu.Lock()
	b.openBytes += n
	b.peakOpen = max(b.peakOpen, b.openBytes)
	b.mu.Unlock()
	res.Records = &countedRecords{Records: res.Records, b: b}
	return res, nil
}

func (b *countingBroker) ListOffset(ctx context.Context, topic string, partition int32, epoch int32, ts int64) (OffsetAt, error) {
	b.enter()
	defer b.leave()
	return b.fakeBroker.ListOffset(ctx, topic, partition, epoch, ts)
}

type countedRecords struct {
	Records
	b    *countingBroker
	once sync.Once
}

func (r *countedRecords) Close() error {
	r.once.Do(func() {
		r.b.mu.Lock()
		r.b.openBytes -= r.Records.Len()
		r.b.mu.Unlock()
	})
	return r.Records.Close()
}

func startCountingServer(t *testing.T) (*testServer, *countingBroker) {
	t.Helper()
	cb := &countingBroker{fakeBroker: newFakeBroker()}
	ts := startServer(t, func(c *Config) { c.Broker = cb })
	ts.broker = cb.fakeBroker
	return ts, cb
}

// TestFetchMemoryBoundedByMaxBytes: one Fetch names a partition 1000
// times (nothing forbids it) with max_bytes 64 KiB. Kafka reads the
// partitions one after the other under the shrinking max_bytes, so it
// holds about max_bytes at most. The listener read every entry at once,
// each up to min(partition_max_bytes, max_bytes), a goroutine each, and
// applied max_bytes afterwards: it held entries × max_bytes (in the
// agent, a forwarded partition's answer is in memory, up to the fetch body
// limit each) and ran as many Broker calls as the request has entries.
func TestFetchMemoryBoundedByMaxBytes(t *testing.T) {
	ts, cb := startCountingServer(t)
	createTopic(t, ts, "t", 1)
	value := strings.Repeat("x", 16<<10)
	if _, err := ts.broker.Produce(context.Background(), ProduceRequest{Topic: "t", Batch: batchOf(t, value), Records: 1, Acks: -1}); err != nil {
		t.Fatal(err)
	}
	const entries, maxBytes = 1000, 64 << 10
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MaxBytes, req.MaxWaitMillis, req.MinBytes = 11, maxBytes, 0, 1
	req.ReplicaID, req.SessionEpoch = -1, -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "t"
	for range entries {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = 0, 0, maxBytes
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = []kmsg.FetchRequestTopic{rt}
	c := dialRaw(t, ts.addr)
	c.send(c.frame(req))
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	resp.Version = req.Version
	c.read(resp)
	ts.broker.waitRecordsClosed(t)
	cb.mu.Lock()
	peakOpen, peakCalls := cb.peakOpen, cb.peakCalls
	cb.mu.Unlock()
	t.Logf("one fetch of %d entries, max_bytes %d: %d Broker.Fetch calls at once, %d bytes of records held at once", entries, maxBytes, peakCalls, peakOpen)
	// What is kept, and what the reads in flight hold before they are
	// counted: it held every entry's read (16,456,000 bytes).
	if bound := int64(maxBytes + maxConcurrentItems*maxBytes); peakOpen > bound {
		t.Errorf("a fetch with max_bytes %d held %d bytes of records at once (%d entries); want at most max_bytes and a read per item in flight, %d", maxBytes, peakOpen, entries, bound)
	}
	if peakCalls > 64 {
		t.Errorf("a fetch of %d entries ran %d Broker.Fetch calls at once: one goroutine per entry, unbounded", entries, peakCalls)
	}
}

// TestListOffsetsFanOutBounded: every handler with per-item Broker calls
// (ListOffsets, OffsetForLeaderEpoch, CreateTopics, DeleteTopics,
// CreatePartitions, IncrementalAlterConfigs, DescribeGroups, Produce,
// Fetch) started one goroutine per item of the request, and the items are
// bounded only by the frame (100 MiB: millions of 17-byte ListOffsets
// partitions, each a goroutine of at least 2 KiB of stack).
func TestListOffsetsFanOutBounded(t *testing.T) {
	ts, cb := startCountingServer(t)
	createTopic(t, ts, "t", 1)
	const entries = 1000
	req := kmsg.NewPtrListOffsetsRequest()
	req.Version, req.ReplicaID = 4, -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "t"
	for range entries {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = 0, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = []kmsg.ListOffsetsRequestTopic{rt}
	c := dialRaw(t, ts.addr)
	c.send(c.frame(req))
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	resp.Version = req.Version
	c.read(resp)
	cb.mu.Lock()
	peak := cb.peakCalls
	cb.mu.Unlock()
	t.Logf("one ListOffsets of %d partitions: %d Broker.ListOffset calls at once", entries, peak)
	if peak > 64 {
		t.Errorf("one ListOffsets of %d partitions ran %d Broker calls (goroutines) at once: unbounded fan-out", entries, peak)
	}
}

// wireErr is an error of the sidecar's HTTP API, as the agent's Broker
// returns them (reply.APIError carries a wire code).
type wireErr string

func (e wireErr) Error() string    { return "sidecar: " + string(e) }
func (e wireErr) WireCode() string { return string(e) }

// failingBroker answers every Fetch and Produce with err.
type failingBroker struct {
	*fakeBroker
	err error
}

func (b *failingBroker) Fetch(context.Context, FetchRequest) (FetchResult, error) {
	return FetchResult{}, b.err
}

func (b *failingBroker) Produce(context.Context, ProduceRequest) (ProduceResult, error) {
	return ProduceResult{}, b.err
}

// javaFetchCodes are the partition error codes the Java consumer handles
// in a Fetch answer (FetchCollector.handleInitializeErrors); any other
// code throws IllegalStateException("Unexpected error code ...") out of
// poll(). A Kafka broker answers a partition it cannot serve with
// NOT_LEADER_OR_FOLLOWER, never LEADER_NOT_AVAILABLE, BROKER_NOT_AVAILABLE
// or REQUEST_TIMED_OUT.
var javaFetchCodes = map[int16]bool{
	0: true, -1: true, 1: true, 2: true, 3: true, 6: true, 9: true, 29: true, 56: true,
	74: true, 75: true, 78: true, 100: true, 103: true,
}

// TestFetchErrorsJavaConsumersHandle: the errors the agent's Broker.Fetch
// returns while a leadership moves (leader_not_available: no leader, or
// the leader unreachable), while the agent starts or stops
// (service_unavailable) or when a forward times out must reach a Java
// consumer as codes it handles; and the produce of an agent that is not
// serving must be retriable for the Java producer (BROKER_NOT_AVAILABLE
// is not: BrokerNotAvailableException is no RetriableException).
func TestFetchErrorsJavaConsumersHandle(t *testing.T) {
	for _, e := range []error{wireErr("leader_not_available"), wireErr("service_unavailable"), context.DeadlineExceeded} {
		fb := &failingBroker{fakeBroker: newFakeBroker(), err: e}
		ts := startServer(t, func(c *Config) { c.Broker = fb })
		c := dialRaw(t, ts.addr)

		req := oneFetch(12, 1<<20)
		c.send(c.frame(req))
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		resp.Version = req.Version
		c.read(resp)
		if code := resp.Topics[0].Partitions[0].ErrorCode; !javaFetchCodes[code] {
			t.Errorf("Broker.Fetch error %v: the partition is answered %v, which the Java consumer's poll() throws IllegalStateException on", e, kerr.ErrorForCode(code))
		}
	}

	fb := &failingBroker{fakeBroker: newFakeBroker(), err: wireErr("service_unavailable")}
	ts := startServer(t, func(c *Config) { c.Broker = fb })
	c := dialRaw(t, ts.addr)
	preq := produceRequest(9, -1, "t", batchOf(t, "v"))
	c.send(c.frame(preq))
	presp := preq.ResponseKind().(*kmsg.ProduceResponse)
	presp.Version = preq.Version
	c.read(presp)
	// BROKER_NOT_AVAILABLE (8) is not a RetriableException in the Java
	// client; these are.
	javaRetriable := map[int16]bool{5: true, 6: true, 7: true, 19: true, 20: true, 56: true, 3: true}
	if code := presp.Topics[0].Partitions[0].ErrorCode; !javaRetriable[code] {
		t.Errorf("produce to an agent that is not serving: %v, which the Java producer does not retry (the records fail)", kerr.ErrorForCode(code))
	}
}

// TestStalledReaderConnectionClosed: a client that sends a Fetch and then
// stops reading (a stopped or hung process: its kernel keeps the
// connection open with a zero window) left the connection goroutine
// blocked in the answer's write forever, holding the fetch's Records (in
// the agent, segment file regions): the idle timeout was a read deadline
// only. Kafka closes a connection that makes no progress either way for
// connections.max.idle.ms.
func TestStalledReaderConnectionClosed(t *testing.T) {
	const idle = 300 * time.Millisecond
	ts := startServer(t, func(c *Config) { c.IdleTimeout = idle })
	createTopic(t, ts, "t", 1)
	value := strings.Repeat("x", 2<<20)
	for range 24 { // 48 MiB: more than loopback's socket buffers hold
		if _, err := ts.broker.Produce(context.Background(), ProduceRequest{Topic: "t", Batch: batchOf(t, value), Records: 1, Acks: -1}); err != nil {
			t.Fatal(err)
		}
	}
	c := dialRaw(t, ts.addr)
	c.send(c.frame(oneFetch(11, 64<<20)))
	// The client reads nothing. Within a few idle timeouts the listener
	// should give up on the connection and close what it holds.
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		ts.broker.mu.Lock()
		opened := ts.broker.opened
		ts.broker.mu.Unlock()
		if opened > 0 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("the fetch never reached the broker")
		}
	}
	deadline := time.Now().Add(20 * idle)
	for {
		ts.broker.mu.Lock()
		open := ts.broker.opened - ts.broker.closed
		ts.broker.mu.Unlock()
		if open == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v after the fetch (idle timeout %v), the connection of a client that does not read is still held, with %d Records open", 20*idle, idle, open)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// oneFetch is a consumer's Fetch of t/0 from offset 0, without a session,
// of at most maxBytes.
func oneFetch(version int16, maxBytes int32) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MaxBytes, req.ReplicaID, req.SessionEpoch = version, maxBytes, -1, -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "t"
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes = maxBytes
	rt.Partitions = []kmsg.FetchRequestTopicPartition{rp}
	req.Topics = []kmsg.FetchRequestTopic{rt}
	return req
}

// TestMetadataWhileNotServing: while the agent starts or stops, Metadata
// answers each topic asked for LEADER_NOT_AVAILABLE, which clients retry.
// It answered UNKNOWN_TOPIC_OR_PARTITION (the agent's topic list is empty
// then), on which franz-go fails a producer's buffered records after four
// answers (UnknownTopicRetries), well inside an agent's restart.
func TestMetadataWhileNotServing(t *testing.T) {
	ts := startServer(t)
	createTopic(t, ts, "t", 1)
	ts.broker.mu.Lock()
	ts.broker.notServing = wireErr("service_unavailable")
	ts.broker.mu.Unlock()
	c := dialRaw(t, ts.addr)
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 12
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr("t")
	req.Topics = []kmsg.MetadataRequestTopic{rt}
	c.send(c.frame(req))
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	resp.Version = req.Version
	c.read(resp)
	if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != kerr.LeaderNotAvailable.Code {
		t.Fatalf("Metadata of t while the agent is not serving: %+v, want t answered LEADER_NOT_AVAILABLE", resp.Topics)
	}
}
