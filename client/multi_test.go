package client

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/logagent/logagent/record"
)

// TestMultiConsumerReadsEveryPartition: ConsumeTopics reads every
// partition of every topic it names, each in order, every record once,
// with its topic and partition; it is caught up once it has returned all
// of them, and counts them in the client's Stats.
func TestMultiConsumerReadsEveryPartition(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("a", 2)
	f.addTopic("b", 1)
	want := map[TopicPartition][]string{}
	for _, tp := range []TopicPartition{{"a", 0}, {"a", 1}, {"b", 0}} {
		for i := range 3 {
			vs := values(i*4, i*4+4)
			for j := range vs {
				vs[j] = tp.String() + "/" + vs[j]
			}
			f.appendBatch(tp.Topic, tp.Partition, buildBatch(t, record.CodecNone, vs...))
			want[tp] = append(want[tp], vs...)
		}
	}
	c := f.newClient()
	ctx := testContext(t)
	m, err := c.ConsumeTopics(ctx, []string{"a", "b"}, OffsetEarliest, WithFetchMaxWait(10*time.Millisecond), WithFetchMaxBytes(100))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if got := m.Assigned(); !slices.Equal(got, []TopicPartition{{"a", 0}, {"a", 1}, {"b", 0}}) {
		t.Fatalf("assigned %v", got)
	}
	got := map[TopicPartition][]string{}
	var bytes int64
	for n := 0; n < 36; n++ {
		r, err := m.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tp := TopicPartition{r.Topic, r.Partition}
		if r.Offset != int64(len(got[tp])) {
			t.Fatalf("%s: offset %d after %d records", tp, r.Offset, len(got[tp]))
		}
		got[tp] = append(got[tp], string(r.Value))
		bytes += recordBytes(&r)
	}
	for tp, vs := range want {
		if !slices.Equal(got[tp], vs) {
			t.Errorf("%s: read %q, want %q", tp, got[tp], vs)
		}
	}
	eventually(t, "caught up", m.CaughtUp)
	if s := c.Stats(); s.RecordsConsumed != 36 || s.BytesConsumed != bytes {
		t.Errorf("stats: %d records, %d bytes consumed; want 36, %d", s.RecordsConsumed, s.BytesConsumed, bytes)
	}
	for _, s := range m.Status() {
		if s.Position != 12 || s.HighWatermark != 12 || s.Committed != -1 {
			t.Errorf("status %+v", s)
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Poll(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Poll after Close: %v, want ErrClosed", err)
	}
}

// TestMultiConsumerStartsEachPartitionWhereAsked: ConsumePartitions starts
// each partition at its own offset, OffsetLatest reading only what comes
// after.
func TestMultiConsumerStartsEachPartitionWhereAsked(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 2)
	appendValues(t, f, record.CodecNone, 0, values(0, 10)...)
	appendValues(t, f, record.CodecNone, 1, values(0, 10)...)
	ctx := testContext(t)
	m, err := f.newClient().ConsumePartitions(map[TopicPartition]int64{{"t", 0}: 7, {"t", 1}: OffsetLatest}, WithFetchMaxWait(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	// Partition 1 resolves "latest" before anything new is appended.
	eventually(t, "latest resolved", func() bool {
		for _, q := range f.fetchesOf(1) {
			if q.Get("offset") == "10" {
				return true
			}
		}
		return false
	})
	appendValues(t, f, record.CodecNone, 1, values(10, 12)...)
	var got []string
	for len(got) < 5 {
		r, err := m.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d:%d", r.Partition, r.Offset))
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"0:7", "0:8", "0:9", "1:10", "1:11"}) {
		t.Fatalf("read %v", got)
	}
	for _, bad := range []map[TopicPartition]int64{nil, {{"t", -1}: 0}, {{"t", 0}: -3}, {{"a/b", 0}: 0}} {
		if _, err := f.newClient().ConsumePartitions(bad); err == nil {
			t.Errorf("ConsumePartitions(%v) accepted", bad)
		}
	}
	if _, err := f.newClient().ConsumePartitions(map[TopicPartition]int64{{"t", 0}: 0}, WithBufferReuse()); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("WithBufferReuse: %v, want ErrInvalidOption", err)
	}
}

// TestMultiConsumerReturnsAFailureAndGoesOn: a partition whose fetch fails
// for good (a corrupt batch) makes Poll return the error once; the next
// Poll fetches it again from where it stopped, and every record of both
// partitions is read once.
func TestMultiConsumerReturnsAFailureAndGoesOn(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 2)
	appendValues(t, f, record.CodecNone, 0, values(0, 3)...)
	appendValues(t, f, record.CodecNone, 1, values(0, 3)...)
	var corrupted atomic.Bool
	f.onFetch = func(int, url.Values) *fakeAnswer {
		if corrupted.CompareAndSwap(false, true) {
			return &fakeAnswer{corrupt: true}
		}
		return nil
	}
	ctx := testContext(t)
	m, err := f.newClient().ConsumePartitions(map[TopicPartition]int64{{"t", 0}: 0, {"t", 1}: 0}, WithFetchMaxWait(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	got, reported := map[int][]Record{}, false
	for len(got[0])+len(got[1]) < 6 {
		records, err := m.Poll(ctx)
		if err != nil {
			if reported || !errors.Is(err, ErrCorruptBatch) {
				t.Fatalf("Poll: %v (corrupt batch reported before: %v)", err, reported)
			}
			reported = true
			continue
		}
		for _, r := range records {
			got[r.Partition] = append(got[r.Partition], r)
		}
	}
	if !reported {
		t.Fatal("the corrupt batch was not reported")
	}
	for partition, records := range got {
		for i, r := range records {
			if r.Offset != int64(i) || string(r.Value) != fmt.Sprintf("v%d", i) {
				t.Errorf("partition %d record %d: offset %d value %q", partition, i, r.Offset, r.Value)
			}
		}
	}
}

// TestClientCloseClosesWhatItMade: Client.Close flushes a producer's
// queued records, stops every goroutine of its producers and consumers,
// and makes every later call fail with ErrClosed.
func TestClientCloseClosesWhatItMade(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 2)
	appendValues(t, f, record.CodecNone, 0, values(0, 3)...)
	before := runtime.NumGoroutine()
	c := f.newClient()
	ctx := testContext(t)
	p, err := c.NewProducer(WithDefaultTopic("t"), WithLinger(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	queued := mustProduce(t, p, ctx, Message{Value: []byte("queued"), Partition: ToPartition(1)})
	m, err := c.ConsumeTopics(ctx, []string{"t"}, OffsetEarliest, WithFetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	single, err := c.NewConsumer("t", 0, OffsetEarliest)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if res := mustResult(t, queued); res.Partition != 1 || res.Offset != 0 {
		t.Fatalf("queued record written at %+v", res)
	}
	if _, err := p.Produce(ctx, Message{Value: []byte("late")}); !errors.Is(err, ErrClosed) {
		t.Errorf("Produce after the client's Close: %v", err)
	}
	if _, err := m.Poll(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Poll after the client's Close: %v", err)
	}
	if _, err := single.Poll(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("a Consumer's Poll after the client's Close: %v", err)
	}
	if _, err := c.DescribeTopic(ctx, "t"); !errors.Is(err, ErrClosed) {
		t.Errorf("DescribeTopic after Close: %v", err)
	}
	if _, err := c.NewProducer(WithDefaultTopic("t")); !errors.Is(err, ErrClosed) {
		t.Errorf("NewProducer after Close: %v", err)
	}
	if _, err := c.ConsumeTopics(ctx, []string{"t"}, OffsetEarliest); !errors.Is(err, ErrClosed) {
		t.Errorf("ConsumeTopics after Close: %v", err)
	}
	if err := c.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// The fake's server side of the closed connections ends too.
	eventually(t, "goroutines gone", func() bool { return runtime.NumGoroutine() <= before })
}

// TestClientCloseWaitsForAnotherClose: a Close while another Close of the
// Client is flushing waits for it (or for its own context): returning at
// once, it let a program that closed its Client twice (a deferred Close and
// a signal handler's) exit while the records were still being sent.
func TestClientCloseWaitsForAnotherClose(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	release, open := holdAnswers(t)
	f.onProduce = func(int, produceCall) *fakeAnswer { return &fakeAnswer{release: release} }
	c := f.newClient()
	ctx := testContext(t)
	p, err := c.NewProducer(WithDefaultTopic("t"), WithLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	queued := mustProduce(t, p, ctx, Message{Value: []byte("v"), Partition: ToPartition(0)})
	first := make(chan error, 1)
	go func() { first <- c.Close(ctx) }()
	eventually(t, "the first Close under way", func() bool {
		_, err := c.NewProducer(WithDefaultTopic("t"))
		return errors.Is(err, ErrClosed)
	})

	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if err := c.Close(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close while another Close flushes: %v, want it to wait until its context ends", err)
	}
	open()
	if err := <-first; err != nil {
		t.Fatalf("first Close: %v", err)
	}
	mustResult(t, queued)
	if err := c.Close(ctx); err != nil {
		t.Errorf("Close after the first one: %v", err)
	}
}

// TestProducerStats: a Producer and its Client count the records written,
// failed and retried, and what is in flight.
func TestProducerStats(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 2)
	release := make(chan struct{})
	f.onProduce = func(call int, pc produceCall) *fakeAnswer {
		switch {
		case pc.partition == 1:
			return &fakeAnswer{status: 400, code: CodeRecordTooLarge}
		case call == 0:
			return &fakeAnswer{status: 503, code: CodeNotEnoughReplicas, retriable: true, release: release}
		}
		return nil
	}
	c := f.newClient()
	p := mustProducer(t, c, "t", WithLinger(0), WithRetryBackoff(time.Millisecond, time.Millisecond))
	ctx := testContext(t)
	m := Message{Key: []byte("key"), Value: []byte("value"), Headers: []Header{{Key: "h", Value: []byte("hv")}}, Partition: ToPartition(0)}
	first := mustProduce(t, p, ctx, m)
	if s := p.Stats(); s.InFlight != 1 || s.InFlightBytes != 11 {
		t.Errorf("in flight: %+v", s)
	}
	close(release)
	mustResult(t, first)
	mustResult(t, mustProduce(t, p, ctx, m))
	m.Partition = ToPartition(1)
	if _, err := mustProduce(t, p, ctx, m).Wait(ctx); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("partition 1: %v", err)
	}
	want := Stats{RecordsProduced: 2, BytesProduced: 22, ProduceErrors: 1, ProduceRetries: 1}
	if s := p.Stats(); s != want {
		t.Errorf("producer stats %+v\nwant           %+v", s, want)
	}
	if s := c.Stats(); s != want {
		t.Errorf("client stats %+v\nwant         %+v", s, want)
	}
}

// TestSecondCloseWaitsForTheFirst: a Close (the Client's, say) while
// another Close of the producer still flushes does not return before it:
// no goroutine of the producer is left when any Close returns.
func TestSecondCloseWaitsForTheFirst(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	release := make(chan struct{})
	var once sync.Once
	// Before the fake's Close, which waits for its requests.
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	f.onProduce = func(int, produceCall) *fakeAnswer { return &fakeAnswer{release: release} }
	c := f.newClient()
	p := mustProducer(t, c, "t", WithLinger(0))
	ctx := testContext(t)
	fut := mustProduce(t, p, ctx, Message{Value: []byte("v"), Partition: ToPartition(0)})
	first := make(chan error, 1)
	go func() { first <- p.Close(ctx) }()
	eventually(t, "the first Close began", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.closed
	})
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := c.Close(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the client's Close during the producer's: %v, want its deadline", err)
	}
	once.Do(func() { close(release) })
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	mustResult(t, fut)
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close after Close: %v", err)
	}
}
