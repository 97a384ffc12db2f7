package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/logagent/logagent/record"
)

// testServer is a Server over a loopback listener and a fake Broker.
type testServer struct {
	srv    *Server
	broker *fakeBroker
	addr   string
	done   chan error // Serve's result
}

func startServer(t *testing.T, mutate ...func(*Config)) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host, portStr, _ := net.SplitHostPort(ln.Addr().String())
	port, _ := strconv.Atoi(portStr)
	broker := newFakeBroker()
	cfg := Config{
		Broker:          broker,
		Logger:          hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: testWriter{t}}),
		MaxRequestBytes: 1 << 20,
		NodeID:          7,
		Host:            host,
		Port:            int32(port),
		ClusterID:       "test-cluster",
	}
	for _, m := range mutate {
		m(&cfg)
	}
	ts := &testServer{srv: NewServer(cfg), broker: broker, addr: ln.Addr().String(), done: make(chan error, 1)}
	go func() { ts.done <- ts.srv.Serve(ln) }()
	t.Cleanup(func() {
		if err := ts.srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-ts.done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ts
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

func (ts *testServer) client(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(ts.addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestKgoProduceConsume creates a topic with kadm, produces with kgo
// (idempotent acks=all, the default, and acks=1), consumes from an offset
// with direct partition consumption, and checks offsets and metadata.
func TestKgoProduceConsume(t *testing.T) {
	tests := []struct {
		name string
		opts []kgo.Opt
	}{
		{"idempotent acks=all", nil},
		{"acks=1", []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := startServer(t)
			ctx := testContext(t)
			adm := kadm.NewClient(ts.client(t))
			created, err := adm.CreateTopic(ctx, 2, -1, map[string]*string{"retention.ms": kmsg.StringPtr("1000")}, "events")
			if err != nil || created.Err != nil {
				t.Fatalf("create: %v %v", err, created.Err)
			}
			if created.NumPartitions != 2 || created.ReplicationFactor != 3 {
				t.Fatalf("created %d partitions, replication factor %d", created.NumPartitions, created.ReplicationFactor)
			}

			producer := ts.client(t, append([]kgo.Opt{kgo.DefaultProduceTopic("events"), kgo.RecordPartitioner(kgo.ManualPartitioner())}, tt.opts...)...)
			const n = 50
			for i := range n {
				r := &kgo.Record{Partition: int32(i % 2), Value: fmt.Appendf(nil, "v%d", i)}
				if err := producer.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatalf("produce %d: %v", i, err)
				}
				if want := int64(i / 2); r.Offset != want {
					t.Fatalf("record %d at offset %d, want %d", i, r.Offset, want)
				}
			}

			ends, err := adm.ListEndOffsets(ctx, "events")
			if err != nil {
				t.Fatal(err)
			}
			starts, err := adm.ListStartOffsets(ctx, "events")
			if err != nil {
				t.Fatal(err)
			}
			for p := range int32(2) {
				end, _ := ends.Lookup("events", p)
				start, _ := starts.Lookup("events", p)
				if end.Err != nil || end.Offset != n/2 || start.Err != nil || start.Offset != 0 {
					t.Fatalf("partition %d: start %+v end %+v", p, start, end)
				}
			}

			// Consume partition 1 from offset 10: values v21, v23, ...
			consumer := ts.client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
				"events": {1: kgo.NewOffset().At(10)},
			}), kgo.FetchMaxWait(500*time.Millisecond))
			want := 10
			for want < n/2 {
				fs := consumer.PollFetches(ctx)
				if err := fs.Err(); err != nil {
					t.Fatal(err)
				}
				for _, r := range fs.Records() {
					if r.Partition != 1 || r.Offset != int64(want) || string(r.Value) != fmt.Sprintf("v%d", 2*want+1) {
						t.Fatalf("got %s/%d@%d %q, want offset %d", r.Topic, r.Partition, r.Offset, r.Value, want)
					}
					want++
				}
			}

			meta, err := adm.Metadata(ctx, "events")
			if err != nil {
				t.Fatal(err)
			}
			if meta.Cluster != "test-cluster" || meta.Controller != 7 || len(meta.Brokers) != 1 || meta.Brokers[0].NodeID != 7 {
				t.Fatalf("metadata: cluster %q controller %d brokers %+v", meta.Cluster, meta.Controller, meta.Brokers)
			}
			td := meta.Topics["events"]
			if td.Err != nil || len(td.Partitions) != 2 {
				t.Fatalf("topic: %+v", td)
			}
			for _, p := range td.Partitions {
				if p.Leader != 7 || p.LeaderEpoch != 3 || len(p.Replicas) != 3 || len(p.ISR) != 2 {
					t.Fatalf("partition %+v", p)
				}
			}

			rc, err := adm.DescribeTopicConfigs(ctx, "events")
			if err != nil {
				t.Fatal(err)
			}
			if c, err := rc.On("events", nil); err != nil || len(c.Configs) != 1 || c.Configs[0].Key != "retention.ms" || c.Configs[0].MaybeValue() != "1000" {
				t.Fatalf("configs %+v %v", c, err)
			}
		})
	}
}

// rawConn speaks the protocol by hand, to send what clients would not.
type rawConn struct {
	t    *testing.T
	conn net.Conn
	corr int32
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, conn: c}
}

// frame encodes req as a client would, with the next correlation id.
func (c *rawConn) frame(req kmsg.Request) []byte {
	c.corr++
	return kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw")).AppendRequest(nil, req, c.corr)
}

func (c *rawConn) send(b []byte) {
	c.t.Helper()
	if _, err := c.conn.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

// read reads one response frame and decodes it into resp.
func (c *rawConn) read(resp kmsg.Response) int32 {
	c.t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(c.conn, size[:]); err != nil {
		c.t.Fatalf("read response: %v", err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c.conn, body); err != nil {
		c.t.Fatalf("read response: %v", err)
	}
	corr := int32(binary.BigEndian.Uint32(body))
	body = body[4:]
	if resp.IsFlexible() && resp.Key() != apiVersionsKey {
		if body[0] != 0 {
			c.t.Fatalf("response header has %d tags", body[0])
		}
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		c.t.Fatalf("decode %T: %v", resp, err)
	}
	return corr
}

// expectClosed checks that the server closes the connection without
// answering.
func (c *rawConn) expectClosed() {
	c.t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.conn.Read(make([]byte, 1))
	if n != 0 || (!errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err)) {
		c.t.Fatalf("read %d bytes, %v; want the connection closed", n, err)
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

func batchOf(t testing.TB, values ...string) []byte {
	t.Helper()
	var b record.Builder
	for i, v := range values {
		if err := b.Add(1700000000000+int64(i), nil, []byte(v), nil); err != nil {
			t.Fatal(err)
		}
	}
	batch, err := b.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	return batch
}

func produceRequest(version int16, acks int16, topic string, partitionRecords ...[]byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = version, acks, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	for i, r := range partitionRecords {
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = int32(i), r
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = []kmsg.ProduceRequestTopic{rt}
	return req
}

func metadataRequest(version int16) *kmsg.MetadataRequest {
	req := kmsg.NewPtrMetadataRequest()
	req.Version = version
	return req
}

func createTopic(t *testing.T, ts *testServer, name string, partitions int32) {
	t.Helper()
	if err := ts.broker.CreateTopic(context.Background(), TopicSpec{Name: name, Partitions: partitions}); err != nil {
		t.Fatal(err)
	}
}

// TestPipelinedRequestsAnsweredInOrder sends requests back to back in one
// write, the first a produce the broker holds for a while, and reads the
// answers: in request order, and the partitions of the produce appended.
func TestPipelinedRequestsAnsweredInOrder(t *testing.T) {
	ts := startServer(t)
	createTopic(t, ts, "t", 2)
	ts.broker.produceDelay = map[int32]time.Duration{0: 200 * time.Millisecond}
	c := dialRaw(t, ts.addr)
	var out []byte
	out = append(out, c.frame(produceRequest(9, -1, "t", batchOf(t, "a"), batchOf(t, "b", "c")))...)
	out = append(out, c.frame(metadataRequest(12))...)
	out = append(out, c.frame(produceRequest(7, 1, "t", batchOf(t, "d"), batchOf(t, "e")))...)
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 3
	out = append(out, c.frame(av)...)
	c.send(out)

	p1 := kmsg.NewPtrProduceResponse()
	p1.Version = 9
	if corr := c.read(p1); corr != 1 {
		t.Fatalf("first answer has correlation id %d", corr)
	}
	for _, p := range p1.Topics[0].Partitions {
		if p.ErrorCode != 0 || p.BaseOffset != 0 {
			t.Fatalf("first produce: %+v", p)
		}
	}
	m := kmsg.NewPtrMetadataResponse()
	m.Version = 12
	if corr := c.read(m); corr != 2 || len(m.Topics) != 1 {
		t.Fatalf("second answer: correlation id %d, %d topics", corr, len(m.Topics))
	}
	p2 := kmsg.NewPtrProduceResponse()
	p2.Version = 7
	if corr := c.read(p2); corr != 3 {
		t.Fatalf("third answer has correlation id %d", corr)
	}
	// The second produce was appended after the first, which the broker
	// held: offsets follow the first request's.
	if got := []int64{p2.Topics[0].Partitions[0].BaseOffset, p2.Topics[0].Partitions[1].BaseOffset}; got[0] != 1 || got[1] != 2 {
		t.Fatalf("second produce at %v, want [1 2]", got)
	}
	avr := kmsg.NewPtrApiVersionsResponse()
	avr.Version = 3
	if corr := c.read(avr); corr != 4 || avr.ErrorCode != 0 {
		t.Fatalf("fourth answer: correlation id %d, error %d", corr, avr.ErrorCode)
	}
}

// TestProduceAcksZero: an acks=0 produce is appended and answered with
// nothing (the next answer on the connection is the next request's); a
// failed one closes the connection.
func TestProduceAcksZero(t *testing.T) {
	ts := startServer(t)
	createTopic(t, ts, "t", 1)
	c := dialRaw(t, ts.addr)
	c.send(append(c.frame(produceRequest(8, 0, "t", batchOf(t, "a"))), c.frame(metadataRequest(1))...))
	m := kmsg.NewPtrMetadataResponse()
	m.Version = 1
	if corr := c.read(m); corr != 2 {
		t.Fatalf("first answer has correlation id %d, want the metadata's (2)", corr)
	}
	if n := ts.broker.produceCalls(); n != 1 {
		t.Fatalf("broker saw %d produces", n)
	}

	c.send(c.frame(produceRequest(8, 0, "missing", batchOf(t, "a"))))
	c.expectClosed()

	// And with kgo: the broker has seen the two produces above (the
	// second failed) and now a third.
	cl := ts.client(t, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite(), kgo.DefaultProduceTopic("t"))
	ctx := testContext(t)
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("b")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for ts.broker.produceCalls() != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("broker saw %d produces, want 3", ts.broker.produceCalls())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBadFrames sends what no client should: each one closes the
// connection unanswered, and the broker sees no produce.
func TestBadFrames(t *testing.T) {
	sized := func(n int32, rest ...byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(n)), rest...)
	}
	header := func(key, version int16) []byte {
		b := binary.BigEndian.AppendUint16(nil, uint16(key))
		b = binary.BigEndian.AppendUint16(b, uint16(version))
		b = binary.BigEndian.AppendUint32(b, 1)
		return binary.BigEndian.AppendUint16(b, 0xffff) // null client id
	}
	withSize := func(b []byte) []byte { return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...) }
	tests := []struct {
		name  string
		bytes func(t *testing.T, c *rawConn) []byte
	}{
		{"size -1", func(*testing.T, *rawConn) []byte { return sized(-1) }},
		{"size 0", func(*testing.T, *rawConn) []byte { return sized(0) }},
		{"size over the limit", func(*testing.T, *rawConn) []byte { return sized(1<<20+1, make([]byte, 100)...) }},
		{"short header", func(*testing.T, *rawConn) []byte { return withSize([]byte{0, 3, 0}) }},
		{"unknown key", func(*testing.T, *rawConn) []byte { return withSize(header(9999, 0)) }},
		{"unsupported key", func(*testing.T, *rawConn) []byte { return withSize(header(29, 0)) }}, // DescribeAcls
		{"produce v2", func(t *testing.T, c *rawConn) []byte {
			return c.frame(produceRequest(2, -1, "t", batchOf(t, "a")))
		}},
		{"fetch v13", func(t *testing.T, c *rawConn) []byte {
			req := kmsg.NewPtrFetchRequest()
			req.Version = 13
			return c.frame(req)
		}},
		{"truncated produce", func(t *testing.T, c *rawConn) []byte {
			f := c.frame(produceRequest(9, -1, "t", batchOf(t, "a")))
			f = f[:len(f)-20]
			binary.BigEndian.PutUint32(f, uint32(len(f)-4))
			return f
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := startServer(t)
			createTopic(t, ts, "t", 1)
			c := dialRaw(t, ts.addr)
			c.send(tt.bytes(t, c))
			c.expectClosed()
			if n := ts.broker.produceCalls(); n != 0 {
				t.Fatalf("broker saw %d produces", n)
			}
		})
	}
}

// TestUnsupportedApiVersions: an ApiVersions request of a version the
// listener does not read is answered UNSUPPORTED_VERSION, at v0, with the
// table; kgo then connects with a version it has.
func TestUnsupportedApiVersions(t *testing.T) {
	ts := startServer(t)
	c := dialRaw(t, ts.addr)
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 4 // flexible, past the advertised 3
	c.send(c.frame(req))
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 0
	if corr := c.read(resp); corr != 1 {
		t.Fatalf("correlation id %d", corr)
	}
	if resp.ErrorCode != kerr.UnsupportedVersion.Code || len(resp.ApiKeys) != apisWithoutGroups() {
		t.Fatalf("error %d, %d keys, want %d", resp.ErrorCode, len(resp.ApiKeys), apisWithoutGroups())
	}
	for _, k := range resp.ApiKeys {
		if k.ApiKey == apiVersionsKey && (k.MinVersion != 0 || k.MaxVersion != 3) {
			t.Fatalf("ApiVersions advertised %d-%d", k.MinVersion, k.MaxVersion)
		}
	}
	// The connection stays usable.
	ok := kmsg.NewPtrApiVersionsRequest()
	ok.Version = 3
	c.send(c.frame(ok))
	resp3 := kmsg.NewPtrApiVersionsResponse()
	resp3.Version = 3
	if corr := c.read(resp3); corr != 2 || resp3.ErrorCode != 0 {
		t.Fatalf("correlation id %d, error %d", corr, resp3.ErrorCode)
	}
}

// TestApiTable: every advertised range is one kmsg can decode, and the
// table is what ApiVersions answers.
func TestApiTable(t *testing.T) {
	for _, a := range apis {
		req := kmsg.RequestForKey(a.key)
		if req == nil || a.min < 0 || a.min > a.max || a.max > req.MaxVersion() {
			t.Fatalf("key %d: versions %d-%d", a.key, a.min, a.max)
		}
	}
	ts := startServer(t)
	cl := ts.client(t)
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(testContext(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if want := apisWithoutGroups(); len(resp.ApiKeys) != want {
		t.Fatalf("advertised %d keys, the table has %d without the group APIs", len(resp.ApiKeys), want)
	}
}

// apisWithoutGroups is how many APIs a server without Groups advertises,
// as startServer's servers have none.
func apisWithoutGroups() int {
	n := 0
	for _, a := range apis {
		if !a.groups {
			n++
		}
	}
	return n
}

// TestProduceRefusesBadBatches: per partition, what is not exactly one
// valid v2 batch is refused with Kafka's code and not written; acks
// outside {0, 1, -1} and transactional producers are refused whole.
func TestProduceRefusesBadBatches(t *testing.T) {
	good := func(t *testing.T) []byte { return batchOf(t, "a", "b") }
	tests := []struct {
		name    string
		records func(t *testing.T) []byte
		mutate  func(*kmsg.ProduceRequest)
		code    int16
	}{
		{"bad crc", func(t *testing.T) []byte { b := good(t); b[len(b)-1] ^= 1; return b }, nil, kerr.CorruptMessage.Code},
		{"magic 1", func(t *testing.T) []byte { b := good(t); b[16] = 1; return b }, nil, kerr.InvalidRecord.Code},
		{"two batches", func(t *testing.T) []byte { return append(good(t), good(t)...) }, nil, kerr.InvalidRecord.Code},
		{"truncated batch", func(t *testing.T) []byte { b := good(t); return b[:len(b)-3] }, nil, kerr.InvalidRecord.Code},
		{"shorter than a header", func(*testing.T) []byte { return make([]byte, 20) }, nil, kerr.InvalidRecord.Code},
		{"null records", func(*testing.T) []byte { return nil }, nil, kerr.InvalidRecord.Code},
		{"transactional batch", func(t *testing.T) []byte {
			b := good(t)
			attrs := binary.BigEndian.Uint16(b[21:])
			binary.BigEndian.PutUint16(b[21:], attrs|1<<4)
			binary.BigEndian.PutUint32(b[17:], record.Checksum(b))
			return b
		}, nil, kerr.UnsupportedForMessageFormat.Code},
		{"acks 2", good, func(r *kmsg.ProduceRequest) { r.Acks = 2 }, kerr.InvalidRequiredAcks.Code},
		{"transactional id", good, func(r *kmsg.ProduceRequest) { r.TransactionID = kmsg.StringPtr("tx") }, kerr.TransactionalIDAuthorizationFailed.Code},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := startServer(t)
			createTopic(t, ts, "t", 1)
			// By hand: kgo sets acks from its own configuration.
			c := dialRaw(t, ts.addr)
			req := produceRequest(9, -1, "t", tt.records(t))
			if tt.mutate != nil {
				tt.mutate(req)
			}
			c.send(c.frame(req))
			resp := kmsg.NewPtrProduceResponse()
			resp.Version = req.Version
			c.read(resp)
			if got := resp.Topics[0].Partitions[0].ErrorCode; got != tt.code {
				t.Fatalf("error %v, want %v", kerr.ErrorForCode(got), kerr.ErrorForCode(tt.code))
			}
			if n := ts.broker.produceCalls(); n != 0 {
				t.Fatalf("broker saw %d produces", n)
			}
		})
	}
}

// TestFetchLongPoll: a fetch with min_bytes 1 on a partition without new
// data waits for a produce, and one without any returns after max_wait.
func TestFetchLongPoll(t *testing.T) {
	ts := startServer(t)
	createTopic(t, ts, "t", 1)
	ctx := testContext(t)
	cl := ts.client(t)
	fetch := func(wait time.Duration) (*kmsg.FetchResponse, time.Duration) {
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 12, int32(wait/time.Millisecond), 1, 1<<20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "t"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.PartitionMaxBytes = 1 << 20
		rt.Partitions = []kmsg.FetchRequestTopicPartition{rp}
		req.Topics = []kmsg.FetchRequestTopic{rt}
		start := time.Now()
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp, time.Since(start)
	}

	resp, took := fetch(300 * time.Millisecond)
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || len(p.RecordBatches) != 0 || took < 300*time.Millisecond {
		t.Fatalf("empty fetch: %+v after %v", p, took)
	}

	go func() {
		time.Sleep(100 * time.Millisecond)
		ts.broker.Produce(context.Background(), ProduceRequest{Topic: "t", Batch: batchOf(t, "x"), Records: 1, Acks: -1})
	}()
	resp, took = fetch(20 * time.Second)
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != 0 || p.HighWatermark != 1 || len(p.RecordBatches) == 0 || took > 10*time.Second {
		t.Fatalf("fetch: %+v after %v", p, took)
	}
	ts.broker.waitRecordsClosed(t)
}

// TestFetchMaxBytes: the first partition with data gets its batch even
// over max_bytes; a later one that does not fit gets none, but its high
// watermark.
func TestFetchMaxBytes(t *testing.T) {
	ts := startServer(t)
	createTopic(t, ts, "t", 2)
	ctx := context.Background()
	big := batchOf(t, string(make([]byte, 500)))
	for p := range int32(2) {
		if _, err := ts.broker.Produce(ctx, ProduceRequest{Topic: "t", Partition: p, Batch: big, Records: 1, Acks: -1}); err != nil {
			t.Fatal(err)
		}
	}
	cl := ts.client(t)
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MaxBytes = 11, 100
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "t"
	for p := range int32(2) {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.PartitionMaxBytes = p, 1<<20
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = []kmsg.FetchRequestTopic{rt}
	resp, err := req.RequestWith(testContext(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	ps := resp.Topics[0].Partitions
	if len(ps[0].RecordBatches) != len(big) || len(ps[1].RecordBatches) != 0 || ps[1].HighWatermark != 1 {
		t.Fatalf("partition 0: %d bytes; partition 1: %d bytes, high watermark %d", len(ps[0].RecordBatches), len(ps[1].RecordBatches), ps[1].HighWatermark)
	}
	ts.broker.waitRecordsClosed(t)
}

// TestCloseEndsConnections: Close returns with clients connected and
// mid-poll, Serve returns nil, and the connections are closed.
func TestCloseEndsConnections(t *testing.T) {
	ts := startServer(t)
	createTopic(t, ts, "t", 1)
	c := dialRaw(t, ts.addr)
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 12, 60000, 1, 1<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "t"
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes = 1 << 20
	rt.Partitions = []kmsg.FetchRequestTopicPartition{rp}
	req.Topics = []kmsg.FetchRequestTopic{rt}
	c.send(c.frame(req))
	idle := dialRaw(t, ts.addr)
	time.Sleep(100 * time.Millisecond) // the fetch is waiting
	start := time.Now()
	if err := ts.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-ts.done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	ts.done <- nil // for the cleanup
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %v", d)
	}
	c.expectClosed()
	idle.expectClosed()
}

func TestIdleConnectionsClosed(t *testing.T) {
	const idle = 300 * time.Millisecond
	ts := startServer(t, func(c *Config) { c.IdleTimeout = idle })
	quiet := dialRaw(t, ts.addr)
	busy := dialRaw(t, ts.addr)
	// busy asks every idle/3 for three idle timeouts: each request moves
	// its deadline, so it stays open while quiet, which asks nothing,
	// is closed.
	for end := time.Now().Add(3 * idle); time.Now().Before(end); time.Sleep(idle / 3) {
		req := kmsg.NewPtrApiVersionsRequest()
		busy.send(busy.frame(req))
		busy.read(req.ResponseKind())
	}
	quiet.expectClosed()
	req := kmsg.NewPtrApiVersionsRequest()
	busy.send(busy.frame(req))
	busy.read(req.ResponseKind())
}
