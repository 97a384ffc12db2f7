package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/testseed"
	"github.com/logagent/logagent/record"
)

func mustProducer(t *testing.T, c *Client, topic string, opts ...ProducerOption) *Producer {
	t.Helper()
	p, err := c.NewProducer(append([]ProducerOption{WithDefaultTopic(topic)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return p
}

func mustProduce(t *testing.T, p *Producer, ctx context.Context, m Message) *Future {
	t.Helper()
	f, err := p.Produce(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func mustResult(t *testing.T, f *Future) *Result {
	t.Helper()
	res, err := f.Wait(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestProducerBatchesRecordsUntilLinger(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 3)
	clock := newFakeClock(false)
	p := mustProducer(t, f.newClient(WithClock(clock)), "t", WithLinger(10*time.Millisecond))
	ctx := testContext(t)

	var futures []*Future
	for i := range 5 {
		futures = append(futures, mustProduce(t, p, ctx, Message{Value: fmt.Appendf(nil, "v%d", i), Partition: ToPartition(1)}))
	}
	// The clock has not moved: the batch cannot have been sent.
	if n := len(f.produceCalls()); n != 0 {
		t.Fatalf("%d requests before the linger passed", n)
	}
	if n := clock.pendingTimers(); n != 1 {
		t.Fatalf("%d linger timers, want 1 (one batch)", n)
	}
	clock.Advance(10 * time.Millisecond)
	for i, fu := range futures {
		res := mustResult(t, fu)
		if *res != (Result{Partition: 1, Offset: int64(i), Epoch: 3}) {
			t.Errorf("record %d: %+v", i, *res)
		}
	}
	calls := f.produceCalls()
	if len(calls) != 1 {
		t.Fatalf("%d requests, want 1", len(calls))
	}
	c := calls[0]
	if c.partition != 1 || c.acks != "all" || c.timeout != "5s" || c.contentType != BatchContentType || len(c.records) != 5 {
		t.Fatalf("request: partition %d acks %q timeout %q type %q, %d records", c.partition, c.acks, c.timeout, c.contentType, len(c.records))
	}
	for i, r := range c.records {
		if string(r.Value) != fmt.Sprintf("v%d", i) || r.Key != nil || r.Timestamp != clock.Now().Add(-10*time.Millisecond).UnixMilli() {
			t.Errorf("record %d: %+v", i, r)
		}
	}
}

func TestProducerSplitsAtMaxBatchBytes(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	clock := newFakeClock(false)
	const maxBatch = 1024
	p := mustProducer(t, f.newClient(WithClock(clock)), "t", WithLinger(time.Hour), WithMaxBatchBytes(maxBatch))
	ctx := testContext(t)

	value := bytes.Repeat([]byte("x"), 300)
	perBatch := (maxBatch - record.HeaderSize) / recordSizeBound(nil, value, nil)
	var futures []*Future
	for i := range 10 {
		v := append(bytes.Clone(value), byte('0'+i))
		futures = append(futures, mustProduce(t, p, ctx, Message{Value: v[1:], Partition: ToPartition(0)}))
	}
	// A batch that the next record does not fit goes without waiting for
	// the linger; the last one waits.
	full := (10+perBatch-1)/perBatch - 1
	eventually(t, "full batches sent", func() bool { return len(f.appendedCalls()) == full })
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	calls := f.appendedCalls()
	total := 0
	for i, c := range calls {
		if len(c.batch) > maxBatch {
			t.Errorf("request %d: batch of %d bytes", i, len(c.batch))
		}
		if i < full && len(c.records) != perBatch {
			t.Errorf("request %d: %d records, want %d", i, len(c.records), perBatch)
		}
		total += len(c.records)
	}
	if total != 10 {
		t.Fatalf("%d records sent, want 10", total)
	}
	for i, fu := range futures {
		if res := mustResult(t, fu); res.Offset != int64(i) {
			t.Errorf("record %d at offset %d", i, res.Offset)
		}
	}
	stored := f.stored("t", 0)
	for i, r := range stored {
		if r.Value[len(r.Value)-1] != byte('0'+i) || r.Offset != int64(i) {
			t.Errorf("stored record %d: offset %d, value ends %q", i, r.Offset, r.Value[len(r.Value)-1])
		}
	}
}

func TestProducerPartitioning(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 4)
	p := mustProducer(t, f.newClient(), "t", WithLinger(0))
	ctx := testContext(t)

	for i := range 20 {
		key := fmt.Appendf(nil, "key-%d", i)
		res, err := p.Send(ctx, Message{Key: key, Value: []byte("v")})
		if err != nil {
			t.Fatal(err)
		}
		if want := PartitionForKey(key, 4); res.Partition != want {
			t.Errorf("key %s went to partition %d, want %d", key, res.Partition, want)
		}
	}
	res, err := p.Send(ctx, Message{Key: []byte("key-1"), Value: []byte("v"), Partition: ToPartition(2)})
	if err != nil || res.Partition != 2 {
		t.Fatalf("explicit partition: %+v, %v", res, err)
	}
	// Keyless records stick to a partition per batch and move on: sent
	// one at a time, they go round-robin.
	counts := make([]int, 4)
	prev := -1
	for range 20 {
		res, err := p.Send(ctx, Message{Value: []byte("v")})
		if err != nil {
			t.Fatal(err)
		}
		if prev >= 0 && res.Partition != (prev+1)%4 {
			t.Errorf("keyless record went to %d after %d", res.Partition, prev)
		}
		prev = res.Partition
		counts[res.Partition]++
	}
	for i, n := range counts {
		if n != 5 {
			t.Errorf("partition %d got %d of 20 keyless records", i, n)
		}
	}
	f.mu.Lock()
	describes := f.describes
	f.mu.Unlock()
	if describes != 1 {
		t.Errorf("%d metadata requests, want 1", describes)
	}
	if _, err := p.Send(ctx, Message{Value: []byte("v"), Partition: ToPartition(9)}); !errors.Is(err, ErrUnknownPartition) {
		t.Errorf("partition 9 of 4: %v", err)
	}
	if _, err := p.Send(ctx, Message{Value: []byte("v"), Partition: ToPartition(-1)}); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("partition -1: %v", err)
	}
	q, err := f.newClient().NewProducer(WithDefaultTopic("missing"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Send(ctx, Message{Value: []byte("v")}); !errors.Is(err, ErrUnknownTopic) {
		t.Errorf("unknown topic: %v", err)
	}
}

func TestProducerRetriesRefusalsBeforeAppend(t *testing.T) {
	cases := []struct {
		status    int
		code      string
		retriable bool
	}{
		{503, CodeNotEnoughReplicas, true},
		{503, CodeLeaderNotAvailable, true},
		{409, CodeNotLeader, true},
		{409, CodeFencedLeaderEpoch, false},
		{503, CodeServiceUnavailable, true},
		{507, CodeInsufficientStorage, true}, // a full disk: refused before the append
		{404, CodeUnknownTopic, true},        // an agent whose metadata lags
	}
	for _, c := range cases {
		t.Run(c.code, func(t *testing.T) {
			f := newFakeAgent(t)
			f.addTopic("t", 1)
			f.onProduce = func(call int, pc produceCall) *fakeAnswer {
				if call < 3 {
					return &fakeAnswer{status: c.status, code: c.code, retriable: c.retriable, retryAfter: "0"}
				}
				return nil
			}
			clock := newFakeClock(true)
			p := mustProducer(t, f.newClient(WithClock(clock)), "t", WithLinger(0), WithRetryBackoff(50*time.Millisecond, 300*time.Millisecond))
			res, err := p.Send(testContext(t), Message{Value: []byte("once"), Partition: ToPartition(0)})
			if err != nil {
				t.Fatal(err)
			}
			if res.Offset != 0 || len(f.produceCalls()) != 4 || len(f.stored("t", 0)) != 1 {
				t.Fatalf("offset %d after %d requests, %d stored", res.Offset, len(f.produceCalls()), len(f.stored("t", 0)))
			}
			// Equal jitter: attempt n waits within [d/2, d], d = 50ms·2ⁿ
			// capped at 300ms.
			waits := clock.durations()
			if len(waits) != 3 {
				t.Fatalf("backoffs %v, want 3", waits)
			}
			for i, w := range waits {
				d := min(50*time.Millisecond<<i, 300*time.Millisecond)
				if w < d/2 || w > d {
					t.Errorf("backoff %d = %v, want within [%v, %v]", i, w, d/2, d)
				}
			}
		})
	}
}

func TestProducerHonoursRetryAfter(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	f.onProduce = func(call int, pc produceCall) *fakeAnswer {
		if call == 0 {
			return &fakeAnswer{status: 503, code: CodeNotEnoughReplicas, retriable: true, retryAfter: "1"}
		}
		return nil
	}
	clock := newFakeClock(true)
	p := mustProducer(t, f.newClient(WithClock(clock)), "t", WithLinger(0), WithRetryBackoff(10*time.Millisecond, 5*time.Second))
	if _, err := p.Send(testContext(t), Message{Value: []byte("v"), Partition: ToPartition(0)}); err != nil {
		t.Fatal(err)
	}
	if waits := clock.durations(); len(waits) != 1 || waits[0] != time.Second {
		t.Fatalf("backoffs %v, want [1s] from Retry-After", waits)
	}
}

func TestProducerWithoutIdempotenceNeverRetriesAnUnknownOutcome(t *testing.T) {
	cases := []struct {
		name     string
		answer   fakeAnswer
		code     string // of the *Error under the OutcomeUnknownError
		appended bool
	}{
		{"ack timeout", fakeAnswer{status: 504, code: CodeAckTimeout, appendFirst: true}, CodeAckTimeout, true},
		{"not enough replicas after append", fakeAnswer{status: 503, code: CodeNotEnoughReplicasAfterAppend, retriable: true, appendFirst: true}, CodeNotEnoughReplicasAfterAppend, true},
		{"not leader after append", fakeAnswer{status: 503, code: CodeNotLeaderAfterAppend, retriable: true, appendFirst: true}, CodeNotLeaderAfterAppend, true},
		{"internal error", fakeAnswer{status: 500, code: "internal"}, "internal", false},
		{"storage error", fakeAnswer{status: 500, code: "storage_error", retriable: true}, "storage_error", false},
		{"connection reset after sending", fakeAnswer{hangUp: true, appendFirst: true}, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeAgent(t)
			f.addTopic("t", 1)
			f.onProduce = func(call int, pc produceCall) *fakeAnswer {
				a := c.answer
				return &a
			}
			p := mustProducer(t, f.newClient(WithClock(newFakeClock(true))), "t", WithLinger(0), WithIdempotence(false))
			_, err := p.Send(testContext(t), Message{Value: []byte("v"), Partition: ToPartition(0)})
			if !errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("error %v does not match ErrOutcomeUnknown", err)
			}
			var unknown *OutcomeUnknownError
			if !errors.As(err, &unknown) || IsRetriable(err) || !strings.Contains(err.Error(), "may have been written") {
				t.Fatalf("error %v: not an OutcomeUnknownError, or retriable", err)
			}
			var e *Error
			if c.code != "" && (!errors.As(err, &e) || e.Code != c.code) {
				t.Fatalf("error %v: want code %s underneath", err, c.code)
			}
			if n := len(f.produceCalls()); n != 1 {
				t.Fatalf("%d requests: a write of unknown outcome was retried", n)
			}
			if got := len(f.stored("t", 0)); got != map[bool]int{true: 1}[c.appended] {
				t.Fatalf("%d records stored", got)
			}
		})
	}
}

func TestProducerFailsOnRefusals(t *testing.T) {
	cases := []struct {
		status   int
		code     string
		sentinel error
	}{
		{413, CodeRecordTooLarge, ErrRecordTooLarge},
		{400, CodeCorruptBatch, nil},
		{400, CodeInvalidRequest, nil},
	}
	for _, c := range cases {
		t.Run(c.code, func(t *testing.T) {
			f := newFakeAgent(t)
			f.addTopic("t", 1)
			f.onProduce = func(int, produceCall) *fakeAnswer { return &fakeAnswer{status: c.status, code: c.code} }
			p := mustProducer(t, f.newClient(WithClock(newFakeClock(true))), "t", WithLinger(0))
			_, err := p.Send(testContext(t), Message{Value: []byte("v"), Partition: ToPartition(0)})
			var e *Error
			if !errors.As(err, &e) || e.Code != c.code || errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("error %v, want code %s and a known outcome", err, c.code)
			}
			if c.sentinel != nil && !errors.Is(err, c.sentinel) {
				t.Errorf("%v does not match %v", err, c.sentinel)
			}
			if n := len(f.produceCalls()); n != 1 {
				t.Fatalf("%d requests, want 1", n)
			}
		})
	}
}

func TestProducerRetriesRefusedConnections(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var dials atomic.Int32
	transport := &http.Transport{DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, network, a)
	}}
	c, err := New(addr, WithClock(newFakeClock(true)), WithHTTPClient(&http.Client{Transport: transport}))
	if err != nil {
		t.Fatal(err)
	}
	p := mustProducer(t, c, "t", WithLinger(0), WithDeliveryTimeout(3*time.Second))
	_, err = p.Send(testContext(t), Message{Value: []byte("v"), Partition: ToPartition(0)})
	if !errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("error %v: want connection refused, with a known outcome", err)
	}
	// Backoff 50ms, 100ms, ... 1s: about seven attempts fit in 3s.
	if n := dials.Load(); n < 4 {
		t.Fatalf("%d attempts, want retries until the delivery timeout", n)
	}
	t.Logf("%d attempts: %v", dials.Load(), err)
}

func TestSendWithdrawsAQueuedRecord(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	clock := newFakeClock(false)
	p := mustProducer(t, f.newClient(WithClock(clock)), "t", WithLinger(time.Hour))
	ctx, cancel := context.WithTimeout(testContext(t), 20*time.Millisecond)
	defer cancel()
	_, err := p.Send(ctx, Message{Value: []byte("late"), Partition: ToPartition(0)})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("error %v: want the deadline, with a known outcome", err)
	}
	if err := p.Flush(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if n := len(f.produceCalls()); n != 0 {
		t.Fatalf("a withdrawn record was sent (%d requests)", n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.buffered != 0 {
		t.Fatalf("%d bytes still buffered", p.buffered)
	}
}

// uncomparableCtx is a context a map cannot hold as a key.
type uncomparableCtx struct {
	context.Context
	tags []string
}

// TestProducerWithdrawsTheRecordsOfAnEndedContext: the records of a context
// that ends while they are queued fail with its error, those of other
// contexts (one that cannot be a map key among them) are sent, and no watch
// is left once every record is done.
func TestProducerWithdrawsTheRecordsOfAnEndedContext(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	p := mustProducer(t, f.newClient(), "t", WithLinger(time.Hour))
	ended, end := context.WithCancel(testContext(t))
	defer end()
	kept := uncomparableCtx{Context: testContext(t), tags: []string{"kept"}}
	var endedFutures, keptFutures []*Future
	for i := range 3 {
		endedFutures = append(endedFutures, mustProduce(t, p, ended, Message{Value: fmt.Appendf(nil, "ended%d", i), Partition: ToPartition(0)}))
		keptFutures = append(keptFutures, mustProduce(t, p, kept, Message{Value: fmt.Appendf(nil, "kept%d", i), Partition: ToPartition(0)}))
	}
	p.mu.Lock()
	if n := len(p.watches); n != 2 {
		t.Errorf("%d context watches for 6 records of 2 contexts, want 2", n)
	}
	p.mu.Unlock()
	end()
	for i, fu := range endedFutures {
		if _, err := fu.Wait(testContext(t)); !errors.Is(err, context.Canceled) {
			t.Errorf("record %d of the ended context: %v, want context.Canceled", i, err)
		}
	}
	if err := p.Flush(testContext(t)); err != nil {
		t.Fatal(err)
	}
	for i, fu := range keptFutures {
		if res := mustResult(t, fu); res.Offset != int64(i) {
			t.Errorf("record %d of the other context: offset %d, want %d", i, res.Offset, i)
		}
	}
	calls := f.produceCalls()
	if len(calls) != 1 || len(calls[0].records) != 3 {
		t.Fatalf("requests %+v: want one of the 3 records whose context did not end", calls)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.watches) != 0 || p.buffered != 0 {
		t.Fatalf("%d context watches and %d bytes left after every record is done", len(p.watches), p.buffered)
	}
}

func TestSendWhoseContextEndsInFlightIsUnknown(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	release := make(chan struct{})
	f.onProduce = func(int, produceCall) *fakeAnswer { return &fakeAnswer{release: release} }
	p := mustProducer(t, f.newClient(), "t", WithLinger(0))
	// Before the producer's Close, which waits for the answer.
	defer close(release)
	ctx, cancel := context.WithCancel(testContext(t))
	go func() {
		eventually(t, "the request", func() bool { return len(f.produceCalls()) == 1 })
		cancel()
	}()
	_, err := p.Send(ctx, Message{Value: []byte("v"), Partition: ToPartition(0)})
	if !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v: want an unknown outcome caused by the cancellation", err)
	}
}

func TestRecordWithdrawnBetweenAttempts(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	f.onProduce = func(call int, pc produceCall) *fakeAnswer {
		if call == 0 {
			return &fakeAnswer{status: 503, code: CodeLeaderNotAvailable, retriable: true, retryAfter: "0"}
		}
		return nil
	}
	clock := newFakeClock(false)
	// An idempotent producer sends a batch unchanged once it has a sequence.
	p := mustProducer(t, f.newClient(WithClock(clock)), "t", WithLinger(10*time.Millisecond), WithIdempotence(false))
	ctxA, cancelA := context.WithCancel(testContext(t))
	a := mustProduce(t, p, ctxA, Message{Value: []byte("a"), Partition: ToPartition(0)})
	b := mustProduce(t, p, testContext(t), Message{Value: []byte("b"), Partition: ToPartition(0)})
	clock.Advance(10 * time.Millisecond)
	eventually(t, "the first attempt and its backoff", func() bool {
		return len(f.produceCalls()) == 1 && clock.pendingTimers() == 1
	})
	cancelA()
	<-a.Done()
	if _, err := a.Wait(testContext(t)); !errors.Is(err, context.Canceled) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("record a: %v, want cancelled with a known outcome", err)
	}
	clock.Advance(time.Second)
	if res := mustResult(t, b); res.Offset != 0 {
		t.Fatalf("record b at offset %d", res.Offset)
	}
	calls := f.produceCalls()
	if len(calls) != 2 || len(calls[1].records) != 1 || string(calls[1].records[0].Value) != "b" {
		t.Fatalf("second attempt: %+v", calls)
	}
}

func TestProducerCloseFlushes(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 2)
	p := mustProducer(t, f.newClient(WithClock(newFakeClock(false))), "t", WithLinger(time.Hour))
	ctx := testContext(t)
	var futures []*Future
	for i := range 6 {
		futures = append(futures, mustProduce(t, p, ctx, Message{Value: []byte("v"), Partition: ToPartition(i % 2)}))
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for i, fu := range futures {
		select {
		case <-fu.Done():
		default:
			t.Fatalf("record %d pending after Close", i)
		}
		if _, err := fu.Wait(ctx); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if _, err := p.Produce(ctx, Message{Value: []byte("v"), Partition: ToPartition(0)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Produce after Close: %v", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestProducerCloseAbortsWhenItsContextEnds(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 2)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	f.onProduce = func(call int, pc produceCall) *fakeAnswer {
		if pc.partition == 0 {
			return &fakeAnswer{release: release}
		}
		return &fakeAnswer{status: 503, code: CodeLeaderNotAvailable, retriable: true, retryAfter: "0"}
	}
	// The clock never moves: the refused record waits in its backoff.
	clock := newFakeClock(false)
	p := mustProducer(t, f.newClient(WithClock(clock)), "t", WithLinger(0))
	ctx := testContext(t)
	inFlight := mustProduce(t, p, ctx, Message{Value: []byte("v"), Partition: ToPartition(0)})
	retrying := mustProduce(t, p, ctx, Message{Value: []byte("w"), Partition: ToPartition(1)})
	eventually(t, "both requests, one backing off", func() bool {
		return len(f.produceCalls()) == 2 && clock.pendingTimers() == 1
	})
	closeCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := p.Close(closeCtx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v, want its deadline", err)
	}
	if _, err := inFlight.Wait(ctx); !errors.Is(err, ErrOutcomeUnknown) {
		t.Errorf("in-flight record: %v, want an unknown outcome", err)
	}
	if _, err := retrying.Wait(ctx); !errors.Is(err, ErrClosed) || errors.Is(err, ErrOutcomeUnknown) {
		t.Errorf("retrying record: %v, want ErrClosed with a known outcome", err)
	}
}

func TestProduceBlocksWhileTheBufferIsFull(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	f.onProduce = func(int, produceCall) *fakeAnswer { return &fakeAnswer{release: release} }
	p := mustProducer(t, f.newClient(), "t", WithLinger(0), WithMaxBatchBytes(1024), WithMaxBufferedBytes(1024))
	ctx := testContext(t)
	big := bytes.Repeat([]byte("x"), 600)
	first := mustProduce(t, p, ctx, Message{Value: big, Partition: ToPartition(0)})
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if _, err := p.Produce(short, Message{Value: big, Partition: ToPartition(0)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Produce into a full buffer: %v, want its deadline", err)
	}
	once.Do(func() { close(release) })
	mustResult(t, first)
	if res := mustResult(t, mustProduce(t, p, ctx, Message{Value: big, Partition: ToPartition(0)})); res.Offset != 1 {
		t.Fatalf("second record at %d", res.Offset)
	}
}

// TestProduceIntoAFullBufferSendsLingeringBatches: a Produce that finds the
// buffer full of records that only wait for their linger does not wait
// for the linger: those batches go at once, and their answers make room.
// (Kafka's accumulator sends every batch while a producer waits for
// memory.) The clock never moves: before, the Produce waited out the hour.
func TestProduceIntoAFullBufferSendsLingeringBatches(t *testing.T) {
	cases := []struct {
		name       string
		partitions []int // of the records that fill the buffer, then of the one that waits
	}{
		{"one partition", []int{0, 0}},
		{"several partitions", []int{0, 1, 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeAgent(t)
			f.addTopic("t", 3)
			p := mustProducer(t, f.newClient(WithClock(newFakeClock(false))), "t",
				WithLinger(time.Hour), WithMaxBatchBytes(1024), WithMaxBufferedBytes(1024))
			ctx := testContext(t)
			size := 1000 / len(c.partitions)
			var futures []*Future
			for _, part := range c.partitions[:len(c.partitions)-1] {
				futures = append(futures, mustProduce(t, p, ctx, Message{Value: bytes.Repeat([]byte("x"), size), Partition: ToPartition(part)}))
			}
			short, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			last, err := p.Produce(short, Message{Value: bytes.Repeat([]byte("y"), size), Partition: ToPartition(c.partitions[len(c.partitions)-1])})
			if err != nil {
				t.Fatalf("Produce into a buffer full of lingering records: %v", err)
			}
			for _, fu := range futures {
				mustResult(t, fu)
			}
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			mustResult(t, last)
		})
	}
}

func TestProducerAcksAndCompression(t *testing.T) {
	cases := []struct {
		acks       Acks
		codec      Compression
		wantAcks   string
		wantOffset int64
	}{
		{AcksAll, CompressionNone, "all", 0},
		{AcksLeader, CompressionGzip, "1", 0},
		{AcksNone, CompressionZstd, "0", -1},
	}
	for _, c := range cases {
		t.Run(c.wantAcks, func(t *testing.T) {
			f := newFakeAgent(t)
			f.addTopic("t", 1)
			p := mustProducer(t, f.newClient(), "t", WithLinger(0), WithAcks(c.acks), WithCompression(c.codec), WithAckTimeout(1500*time.Millisecond))
			value := bytes.Repeat([]byte("compressible "), 50)
			res, err := p.Send(testContext(t), Message{Key: []byte{}, Value: value, Headers: []Header{{Key: "h", Value: nil}}, Partition: ToPartition(0)})
			if err != nil {
				t.Fatal(err)
			}
			if res.Offset != c.wantOffset {
				t.Errorf("offset %d, want %d", res.Offset, c.wantOffset)
			}
			call := f.produceCalls()[0]
			h, _, _ := record.ParseHeader(call.batch, 0)
			if call.acks != c.wantAcks || call.timeout != "1.5s" || h.Codec() != record.Codec(c.codec) {
				t.Errorf("acks %q timeout %q codec %v", call.acks, call.timeout, h.Codec())
			}
			r := call.records[0]
			if r.Key == nil || len(r.Key) != 0 || !bytes.Equal(r.Value, value) || len(r.Headers) != 1 || r.Headers[0].Value != nil {
				t.Errorf("record %+v", r)
			}
		})
	}
}

func TestProducerCopiesTheMessage(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	clock := newFakeClock(false)
	p := mustProducer(t, f.newClient(WithClock(clock)), "t", WithLinger(time.Millisecond))
	key, value := []byte("key"), []byte("value")
	headers := []Header{{Key: "h", Value: []byte("x")}}
	fu := mustProduce(t, p, testContext(t), Message{Key: key, Value: value, Headers: headers, Partition: ToPartition(0)})
	copy(key, "KEY")
	copy(value, "VALUE")
	headers[0].Value[0] = 'X'
	clock.Advance(time.Millisecond)
	mustResult(t, fu)
	r := f.stored("t", 0)[0]
	if string(r.Key) != "key" || string(r.Value) != "value" || string(r.Headers[0].Value) != "x" {
		t.Fatalf("stored %q=%q %q: the producer kept the caller's slices", r.Key, r.Value, r.Headers[0].Value)
	}
}

func TestProducerOptionsValidated(t *testing.T) {
	c, err := New("")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][]ProducerOption{
		"acks":                             {WithAcks(Acks(7))},
		"linger":                           {WithLinger(-time.Second)},
		"batch bytes":                      {WithMaxBatchBytes(record.HeaderSize)},
		"buffer":                           {WithMaxBatchBytes(4096), WithMaxBufferedBytes(2048)},
		"ack timeout":                      {WithAckTimeout(0)},
		"ack timeout over the agent's 30s": {WithAckTimeout(31 * time.Second)},
		"backoff order":                    {WithRetryBackoff(time.Second, time.Millisecond)},
		"unknown codec":                    {WithCompression(Compression(6))},
		"delivery limit":                   {WithDeliveryTimeout(-1)},
		"no in flight":                     {WithMaxInFlight(0)},
		"too many":                         {WithMaxInFlight(MaxInFlightIdempotent + 1)},
		"idempotent ack":                   {WithAcks(AcksLeader), WithIdempotence(true)},
	}
	for name, opts := range cases {
		if _, err := c.NewProducer(append(opts, WithDefaultTopic("t"))...); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
	for _, s := range []string{"all", "-1", "1", "0"} {
		a, err := ParseAcks(s)
		if err != nil || (s != "-1" && a.String() != s) {
			t.Errorf("ParseAcks(%q) = %v, %v", s, a, err)
		}
	}
	if _, err := ParseAcks("2"); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("ParseAcks(2): %v", err)
	}
}

func TestClassifyAttempt(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want attemptOutcome
	}{
		{"success", nil, attemptWritten},
		{"not sent", &transportError{err: syscall.ECONNREFUSED}, attemptRetry},
		{"sent, no answer", &transportError{err: errors.New("EOF"), written: true}, attemptUnknown},
		{"answer breaks the contract", fmt.Errorf("%w: count", ErrProtocol), attemptUnknown},
		{"retriable before append", &Error{Status: 503, Code: CodeNotEnoughReplicas, Retriable: true}, attemptRetry},
		{"retriable flag on an after-append code", &Error{Status: 503, Code: CodeNotEnoughReplicasAfterAppend, Retriable: true}, attemptUnknown},
		{"unknown 5xx, even marked retriable", &Error{Status: 503, Code: "overloaded", Retriable: true}, attemptUnknown},
		{"4xx marked retriable", &Error{Status: 429, Code: "slow_down", Retriable: true}, attemptRetry},
		{"4xx", &Error{Status: 400, Code: CodeInvalidRequest}, attemptFailed},
		{"local build error", record.ErrTimestampRange, attemptFailed},
	}
	for _, c := range cases {
		if got := classifyAttempt(c.err); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// TestProducerRandomized sends records from several goroutines, with keys,
// without, and to named partitions, while the agent refuses some requests
// before appending and, for an idempotent producer, leaves the outcome of
// others unknown (appended or not). Every record must be written exactly
// once, where its Result says, and one goroutine's records to a partition
// in order.
func TestProducerRandomized(t *testing.T) {
	refusals := []fakeAnswer{
		{status: 503, code: CodeNotEnoughReplicas, retriable: true, retryAfter: "0"},
		{status: 503, code: CodeLeaderNotAvailable, retriable: true, retryAfter: "0"},
		{status: 503, code: CodeServiceUnavailable, retriable: true, retryAfter: "0"},
	}
	unknowns := []fakeAnswer{
		{status: 504, code: CodeAckTimeout, appendFirst: true},
		{status: 504, code: CodeAckTimeout},
		{status: 503, code: CodeNotLeaderAfterAppend, retriable: true, appendFirst: true},
		{hangUp: true, appendFirst: true},
		{hangUp: true},
	}
	cases := []struct {
		name   string
		opts   []ProducerOption
		faults []fakeAnswer
	}{
		{"not idempotent, refusals", []ProducerOption{WithIdempotence(false)}, refusals},
		{"idempotent, refusals and unknown outcomes", nil, append(append([]fakeAnswer(nil), refusals...), unknowns...)},
		{"idempotent, two in flight", []ProducerOption{WithMaxInFlight(2)}, unknowns},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { testProducerRandomized(t, c.opts, c.faults) })
	}
}

func testProducerRandomized(t *testing.T, opts []ProducerOption, faults []fakeAnswer) {
	rng := testseed.Rand(t)
	var rngMu sync.Mutex
	intn := func(n int) int {
		rngMu.Lock()
		defer rngMu.Unlock()
		return rng.IntN(n)
	}
	f := newFakeAgent(t)
	f.addTopic("t", 3)
	f.onProduce = func(int, produceCall) *fakeAnswer {
		if intn(5) == 0 {
			a := faults[intn(len(faults))]
			return &a
		}
		return nil
	}
	opts = append([]ProducerOption{WithLinger(time.Millisecond), WithMaxBatchBytes(2048)}, opts...)
	p := mustProducer(t, f.newClient(WithClock(newFakeClock(true))), "t", opts...)
	ctx := testContext(t)
	type sent struct {
		value string
		res   *Result
	}
	const workers, perWorker = 6, 60
	results := make([][]sent, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				m := Message{Value: fmt.Appendf(nil, "w%d-%d", w, i)}
				switch intn(3) {
				case 0:
					m.Key = fmt.Appendf(nil, "k%d", intn(10))
				case 1:
					m.Partition = ToPartition(intn(3))
				}
				var res *Result
				var err error
				if intn(2) == 0 {
					res, err = p.Send(ctx, m)
				} else {
					var fu *Future
					if fu, err = p.Produce(ctx, m); err == nil {
						res, err = fu.Wait(ctx)
					}
				}
				if err != nil {
					t.Errorf("worker %d record %d: %v", w, i, err)
					return
				}
				results[w] = append(results[w], sent{string(m.Value), res})
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	stored := make([][]record.Record, 3)
	total := 0
	for part := range 3 {
		stored[part] = f.stored("t", part)
		total += len(stored[part])
	}
	if total != workers*perWorker {
		t.Fatalf("%d records stored, want %d", total, workers*perWorker)
	}
	answers := map[string]int{}
	for _, a := range f.produceAnswers() {
		answers[a]++
	}
	t.Logf("answers: %v", answers)
	for w, rs := range results {
		last := map[int]int64{}
		for _, s := range rs {
			part, off := s.res.Partition, s.res.Offset
			if off < 0 || off >= int64(len(stored[part])) || string(stored[part][off].Value) != s.value {
				t.Fatalf("worker %d: %q reported at %d/%d, not stored there", w, s.value, part, off)
			}
			if prev, ok := last[part]; ok && off <= prev {
				t.Errorf("worker %d: offsets in partition %d went from %d to %d", w, part, prev, off)
			}
			last[part] = off
		}
	}
}

// TestProducerWritesSeveralTopics: one idempotent Producer takes the topic
// per record: keyed records land on their key's partition of their own
// topic, once each and in order, under one producer id whose sequences are
// counted per topic and partition; a message without a topic is refused.
func TestProducerWritesSeveralTopics(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("a", 2)
	f.addTopic("b", 3)
	c := f.newClient()
	p, err := c.NewProducer(WithLinger(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	ctx := testContext(t)
	if _, err := p.Produce(ctx, Message{Value: []byte("v")}); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("no topic: %v, want ErrInvalidOption", err)
	}
	if _, err := p.Produce(ctx, Message{Topic: "a/b", Value: []byte("v")}); !errors.Is(err, ErrInvalidTopicName) {
		t.Fatalf("topic a/b: %v, want ErrInvalidTopicName", err)
	}
	type sent struct {
		topic, key, value string
		future            *Future
	}
	var all []sent
	for i := range 60 {
		topic := []string{"a", "b"}[i%2]
		key, value := fmt.Sprintf("k%d", i%7), fmt.Sprintf("%s-%d", topic, i)
		all = append(all, sent{topic, key, value, mustProduce(t, p, ctx, Message{Topic: topic, Key: []byte(key), Value: []byte(value)})})
	}
	want := map[TopicPartition][]string{}
	for _, s := range all {
		res := mustResult(t, s.future)
		n := map[string]int{"a": 2, "b": 3}[s.topic]
		if res.Partition != PartitionForKey([]byte(s.key), n) {
			t.Errorf("%s key %s on partition %d, want %d", s.topic, s.key, res.Partition, PartitionForKey([]byte(s.key), n))
		}
		tp := TopicPartition{s.topic, res.Partition}
		if res.Offset != int64(len(want[tp])) {
			t.Errorf("%s at offset %d, want %d", s.value, res.Offset, len(want[tp]))
		}
		want[tp] = append(want[tp], s.value)
	}
	for tp, values := range want {
		var got []string
		for _, r := range f.stored(tp.Topic, tp.Partition) {
			got = append(got, string(r.Value))
		}
		if !slices.Equal(got, values) {
			t.Errorf("%s holds %q, want %q", tp, got, values)
		}
	}
	nextSeq := map[TopicPartition]int32{}
	var ids []int64
	for _, call := range f.appendedCalls() {
		tp := TopicPartition{call.topic, call.partition}
		if !call.idempotent || call.seq != nextSeq[tp] {
			t.Errorf("%s: request idempotent %v at sequence %d, want %d", tp, call.idempotent, call.seq, nextSeq[tp])
		}
		nextSeq[tp] += int32(len(call.records))
		ids = append(ids, call.producer.ID)
	}
	if slices.Sort(ids); len(slices.Compact(ids)) != 1 {
		t.Errorf("producer ids %v, want one for every topic", slices.Compact(ids))
	}
}

// TestProducerTopicsShareOneBuffer: WithMaxBufferedBytes bounds the records
// of every topic together, not each topic's.
func TestProducerTopicsShareOneBuffer(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("a", 1)
	f.addTopic("b", 1)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	f.onProduce = func(int, produceCall) *fakeAnswer { return &fakeAnswer{release: release} }
	p := mustProducer(t, f.newClient(), "a", WithLinger(0), WithMaxBatchBytes(1024), WithMaxBufferedBytes(1024))
	ctx := testContext(t)
	big := bytes.Repeat([]byte("x"), 600)
	first := mustProduce(t, p, ctx, Message{Value: big, Partition: ToPartition(0)})
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if _, err := p.Produce(short, Message{Topic: "b", Value: big, Partition: ToPartition(0)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Produce to b while a fills the buffer: %v, want its deadline", err)
	}
	once.Do(func() { close(release) })
	mustResult(t, first)
	if res := mustResult(t, mustProduce(t, p, ctx, Message{Topic: "b", Value: big, Partition: ToPartition(0)})); res.Offset != 0 {
		t.Fatalf("b's record at %d", res.Offset)
	}
}

// TestProducerStickyPartitionPerTopic: keyless records of each topic fill
// a batch of that topic's sticky partition and then move to its next,
// whatever the other topics do in between.
func TestProducerStickyPartitionPerTopic(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("a", 3)
	f.addTopic("b", 3)
	value := []byte("0123456789")
	perRecord := recordSizeBound(nil, value, nil)
	p, err := f.newClient().NewProducer(WithLinger(time.Hour), WithMaxBatchBytes(record.HeaderSize+2*perRecord))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	ctx := testContext(t)
	futures := map[string][]*Future{}
	for i := range 12 {
		topic := []string{"a", "b"}[i%2]
		futures[topic] = append(futures[topic], mustProduce(t, p, ctx, Message{Topic: topic, Value: value}))
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for topic, fs := range futures {
		var got []int
		for _, fu := range fs {
			got = append(got, mustResult(t, fu).Partition)
		}
		if want := []int{0, 0, 1, 1, 2, 2}; !slices.Equal(got, want) {
			t.Errorf("topic %s: keyless records on partitions %v, want %v", topic, got, want)
		}
	}
}

// BenchmarkProduceBatches produces records of 100 bytes in requests of 100,
// as `logagent bench produce` does (one context for the whole run, a Flush
// per request), against the fake agent: the producer's per-record work.
func BenchmarkProduceBatches(b *testing.B) {
	for _, workers := range []int{1, 4} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			f := newFakeAgent(b)
			f.addTopic("t", workers)
			c := f.newClient()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			const perRequest = 100
			value := make([]byte, 100)
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := range workers {
				p, err := c.NewProducer(WithDefaultTopic("t"), WithLinger(time.Hour))
				if err != nil {
					b.Fatal(err)
				}
				defer p.Close(context.Background())
				wg.Go(func() {
					futures := make([]*Future, 0, perRequest)
					for range b.N / perRequest / workers {
						futures = futures[:0]
						for range perRequest {
							fu, err := p.Produce(ctx, Message{Value: value, Partition: ToPartition(w)})
							if err != nil {
								b.Error(err)
								return
							}
							futures = append(futures, fu)
						}
						if err := p.Flush(ctx); err != nil {
							b.Error(err)
							return
						}
						for _, fu := range futures {
							if _, err := fu.Wait(ctx); err != nil {
								b.Error(err)
								return
							}
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

// TestProduceWaitingForAnotherPartitionCountKeepsItsContext: a Produce
// that waits while another one reads the topic's partition count returns
// when its own context ends, as Produce says, however long the other read
// takes.
func TestProduceWaitingForAnotherPartitionCountKeepsItsContext(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 3)
	release, open := holdAnswers(t)
	reading := make(chan struct{})
	f.onDescribe = func(call int) *fakeAnswer {
		if call > 0 {
			return nil
		}
		close(reading)
		return &fakeAnswer{release: release}
	}
	p := mustProducer(t, f.newClient(), "t")
	ctx := testContext(t)
	first := make(chan error, 1)
	go func() {
		_, err := p.Produce(context.Background(), Message{Value: []byte("a")})
		first <- err
	}()
	<-reading

	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	second := make(chan error, 1)
	go func() {
		_, err := p.Produce(short, Message{Value: []byte("b")})
		second <- err
	}()
	select {
	case err := <-second:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Produce waiting for the partition count: %v, want its deadline", err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("Produce still waits for another's partition count 5s after its context ended")
		open()
		<-second
	}
	open()
	if err := <-first; err != nil {
		t.Fatalf("first Produce: %v", err)
	}
}
