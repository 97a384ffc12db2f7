package client

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/logagent/logagent/record"

	"github.com/logagent/logagent/wire"
)

// appendValues appends one batch of the given values to a partition of the
// fake and returns its base offset.
func appendValues(t *testing.T, f *fakeAgent, codec record.Codec, partition int, values ...string) int64 {
	t.Helper()
	base, _ := f.appendBatch("t", partition, buildBatch(t, codec, values...))
	return base
}

func buildBatch(t *testing.T, codec record.Codec, values ...string) []byte {
	t.Helper()
	var b record.Builder
	if err := b.SetCodec(codec); err != nil {
		t.Fatal(err)
	}
	for i, v := range values {
		if err := b.Add(1_700_000_000_000+int64(i), []byte("k-"+v), []byte(v), []record.RecordHeader{{Key: "h", Value: []byte(v)}}); err != nil {
			t.Fatal(err)
		}
	}
	batch, err := b.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	return batch
}

func values(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("v%d", i))
	}
	return out
}

func mustConsumer(t *testing.T, c *Client, from int64, opts ...ConsumerOption) *Consumer {
	t.Helper()
	cons, err := c.NewConsumer("t", 0, from, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return cons
}

// checkRecords checks that records are values v<first>... at their offsets.
func checkRecords(t *testing.T, records []Record, first int64) {
	t.Helper()
	for i, r := range records {
		off := first + int64(i)
		want := fmt.Sprintf("v%d", off)
		if r.Offset != off || string(r.Value) != want || string(r.Key) != "k-"+want ||
			len(r.Headers) != 1 || string(r.Headers[0].Value) != want || r.LeaderEpoch != 3 || r.Topic != "t" || r.Partition != 0 {
			t.Fatalf("record %d: %+v, want offset %d value %s", i, r, off, want)
		}
	}
}

func TestConsumerSkipsRecordsBelowItsOffset(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	appendValues(t, f, record.CodecNone, 0, values(0, 10)...)
	appendValues(t, f, record.CodecNone, 0, values(10, 15)...)
	cons := mustConsumer(t, f.newClient(), 5, WithFetchMaxWait(0))
	records, err := cons.Poll(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(records) != 10 {
		t.Fatalf("%d records, want offsets 5 to 14", len(records))
	}
	checkRecords(t, records, 5)
	if cons.Position() != 15 || cons.HighWatermark() != 15 || cons.LogStartOffset() != 0 {
		t.Fatalf("position %d, high watermark %d, log start %d", cons.Position(), cons.HighWatermark(), cons.LogStartOffset())
	}
	q := f.fetchQueries()[0]
	if q.Get("offset") != "5" || q.Get("max_bytes") != "1048576" || q.Has("wait") {
		t.Fatalf("query %v", q)
	}
}

func TestConsumerFollowsMaxBytes(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	for i := range 4 {
		appendValues(t, f, record.CodecNone, 0, values(i*5, i*5+5)...)
	}
	// Smaller than one batch: each answer holds exactly one.
	cons := mustConsumer(t, f.newClient(), OffsetEarliest, WithFetchMaxWait(0), WithFetchMaxBytes(10))
	ctx := testContext(t)
	for i := range 4 {
		records, err := cons.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(records) != 5 {
			t.Fatalf("poll %d: %d records", i, len(records))
		}
		checkRecords(t, records, int64(i*5))
	}
	records, err := cons.Poll(ctx)
	if err != nil || len(records) != 0 || cons.Position() != cons.HighWatermark() {
		t.Fatalf("caught up: %d records, %v; position %d, high watermark %d", len(records), err, cons.Position(), cons.HighWatermark())
	}
}

func TestConsumerFromLatestReadsOnlyNewRecords(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	appendValues(t, f, record.CodecNone, 0, values(0, 10)...)
	cons := mustConsumer(t, f.newClient(), OffsetLatest, WithFetchMaxWait(5*time.Second))
	go func() {
		eventually(t, "the long poll", func() bool { return len(f.fetchQueries()) == 2 })
		// Same batch as offsets 8-12 would make: the consumer must skip
		// nothing of it, as it starts at 10.
		appendValues(t, f, record.CodecNone, 0, values(10, 13)...)
	}()
	r, err := cons.Next(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, []Record{r}, 10)
	qs := f.fetchQueries()
	if qs[0].Get("offset") != "latest" || qs[0].Has("wait") || qs[1].Get("offset") != "10" || qs[1].Get("wait") != "5s" {
		t.Fatalf("queries %v", qs)
	}
	for want := int64(11); want < 13; want++ {
		r, err := cons.Next(testContext(t))
		if err != nil || r.Offset != want {
			t.Fatalf("next: %+v, %v; want offset %d", r, err, want)
		}
	}
}

func TestConsumerFromEarliest(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	appendValues(t, f, record.CodecNone, 0, values(0, 10)...)
	appendValues(t, f, record.CodecNone, 0, values(10, 20)...)
	f.mu.Lock()
	f.topics["t"].partitions[0].logStartOffset = 10 // retention took the first batch
	f.mu.Unlock()
	cons := mustConsumer(t, f.newClient(), OffsetEarliest, WithFetchMaxWait(0))
	records, err := cons.Poll(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, records, 10)
	if len(records) != 10 || cons.Position() != 20 {
		t.Fatalf("%d records, position %d", len(records), cons.Position())
	}
}

func TestConsumerLongPollLoop(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	cons := mustConsumer(t, f.newClient(), 0, WithFetchMaxWait(20*time.Millisecond))
	go func() {
		eventually(t, "three empty long polls", func() bool { return len(f.fetchQueries()) >= 4 })
		appendValues(t, f, record.CodecNone, 0, "v0")
	}()
	r, err := cons.Next(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, []Record{r}, 0)
	for _, q := range f.fetchQueries() {
		if q.Get("offset") != "0" || q.Get("wait") != "20ms" {
			t.Fatalf("query %v", q)
		}
	}
}

func TestConsumerContextEndsALongPoll(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	cons := mustConsumer(t, f.newClient(), 0, WithFetchMaxWait(wire.MaxClientWait))
	ctx, cancel := context.WithCancel(testContext(t))
	go func() {
		eventually(t, "the long poll", func() bool { return len(f.fetchQueries()) == 1 })
		cancel()
	}()
	start := time.Now()
	_, err := cons.Next(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Next: %v, want cancelled", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Next returned %v after the cancellation", d)
	}
}

func TestConsumerRejectsACorruptBatch(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	appendValues(t, f, record.CodecNone, 0, values(0, 3)...)
	f.onFetch = func(int, url.Values) *fakeAnswer { return &fakeAnswer{corrupt: true} }
	cons := mustConsumer(t, f.newClient(), 0, WithFetchMaxWait(0))
	records, err := cons.Poll(testContext(t))
	if !errors.Is(err, ErrCorruptBatch) || !errors.Is(err, record.ErrCorrupt) || records != nil {
		t.Fatalf("Poll: %d records, %v; want ErrCorruptBatch (and record's cause)", len(records), err)
	}
	if n := len(f.fetchQueries()); n != 1 {
		t.Fatalf("%d fetches: corruption was retried", n)
	}
	if cons.Position() != 0 {
		t.Fatalf("position moved to %d", cons.Position())
	}
}

func TestConsumerRejectsAnswersThatBreakTheContract(t *testing.T) {
	first := buildBatch(t, record.CodecNone, values(0, 5)...)
	second := buildBatch(t, record.CodecNone, values(5, 10)...)
	record.SetBaseOffset(second, 5)
	overlapping := buildBatch(t, record.CodecNone, values(0, 5)...)
	record.SetBaseOffset(overlapping, 3)
	cases := []struct {
		name   string
		from   int64
		answer fakeAnswer
		limits *FetchLimits
		want   error
	}{
		{"no offset headers", 0, fakeAnswer{noHeaders: true}, nil, ErrProtocol},
		{"batches out of order", 0, fakeAnswer{body: append(append([]byte(nil), second...), first...)}, nil, ErrProtocol},
		{"batches overlap", 0, fakeAnswer{body: append(append([]byte(nil), first...), overlapping...)}, nil, ErrProtocol},
		{"only records below the offset", 7, fakeAnswer{body: first}, nil, ErrProtocol},
		{"cut short", 0, fakeAnswer{body: first[:len(first)-3]}, nil, record.ErrShort},
		{"larger than asked", 0, fakeAnswer{body: append(append([]byte(nil), first...), second...)}, &FetchLimits{MaxBatchBytes: 100}, ErrProtocol},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeAgent(t)
			f.addTopic("t", 1)
			appendValues(t, f, record.CodecNone, 0, values(0, 10)...)
			f.onFetch = func(int, url.Values) *fakeAnswer { a := c.answer; return &a }
			opts := []ConsumerOption{WithFetchMaxWait(0)}
			if c.limits != nil {
				opts = append(opts, WithFetchLimits(*c.limits), WithFetchMaxBytes(10))
			}
			cons := mustConsumer(t, f.newClient(), c.from, opts...)
			if _, err := cons.Poll(testContext(t)); !errors.Is(err, c.want) {
				t.Fatalf("Poll: %v, want %v", err, c.want)
			}
			if cons.Position() != c.from {
				t.Fatalf("position moved to %d", cons.Position())
			}
		})
	}
}

func TestConsumerOffsetOutOfRange(t *testing.T) {
	setup := func(t *testing.T) *fakeAgent {
		f := newFakeAgent(t)
		f.addTopic("t", 1)
		appendValues(t, f, record.CodecNone, 0, values(0, 10)...)
		appendValues(t, f, record.CodecNone, 0, values(10, 15)...)
		f.mu.Lock()
		f.topics["t"].partitions[0].logStartOffset = 10
		f.mu.Unlock()
		return f
	}
	t.Run("fails by default", func(t *testing.T) {
		f := setup(t)
		cons := mustConsumer(t, f.newClient(), 3, WithFetchMaxWait(0))
		_, err := cons.Poll(testContext(t))
		var e *Error
		if !errors.Is(err, ErrOffsetOutOfRange) || !errors.As(err, &e) || e.LogStartOffset != 10 || e.HighWatermark != 15 {
			t.Fatalf("Poll: %v, want out of range with bounds 10 and 15", err)
		}
		if err := cons.SeekTo(e.LogStartOffset); err != nil {
			t.Fatal(err)
		}
		records, err := cons.Poll(testContext(t))
		if err != nil || len(records) != 5 {
			t.Fatalf("after seek: %d records, %v", len(records), err)
		}
		checkRecords(t, records, 10)
	})
	t.Run("reset to earliest", func(t *testing.T) {
		f := setup(t)
		cons := mustConsumer(t, f.newClient(), 3, WithFetchMaxWait(0), WithOffsetReset(OffsetEarliest))
		records, err := cons.Poll(testContext(t))
		if err != nil || len(records) != 5 {
			t.Fatalf("Poll: %d records, %v", len(records), err)
		}
		checkRecords(t, records, 10)
	})
	t.Run("reset to latest", func(t *testing.T) {
		f := setup(t)
		cons := mustConsumer(t, f.newClient(), 99, WithFetchMaxWait(0), WithOffsetReset(OffsetLatest))
		records, err := cons.Poll(testContext(t))
		if err != nil || len(records) != 0 || cons.Position() != 15 {
			t.Fatalf("Poll: %d records, %v, position %d", len(records), err, cons.Position())
		}
	})
}

func TestConsumerRetriesWhatMayPass(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	appendValues(t, f, record.CodecNone, 0, values(0, 3)...)
	f.onFetch = func(call int, _ url.Values) *fakeAnswer {
		switch call {
		case 0:
			return &fakeAnswer{status: 503, code: CodeLeaderNotAvailable, retriable: true, retryAfter: "0"}
		case 1:
			return &fakeAnswer{hangUp: true}
		case 2:
			return &fakeAnswer{status: 409, code: CodeNotLeader}
		}
		return nil
	}
	clock := newFakeClock(true)
	c := f.newClient(WithClock(clock))
	cons := mustConsumer(t, c, 0, WithFetchMaxWait(0))
	records, err := cons.Poll(testContext(t))
	if err != nil || len(records) != 3 {
		t.Fatalf("Poll: %d records, %v", len(records), err)
	}
	// net/http itself repeats a GET whose reused connection closed before
	// any answer, so the hang-up may cost no backoff of ours.
	waits := clock.durations()
	if n := len(f.fetchQueries()); n != 4 || len(waits) < 2 || len(waits) > 3 {
		t.Fatalf("%d fetches, backoffs %v", n, waits)
	}
	if s := c.Stats(); s.RecordsConsumed != 3 || s.BytesConsumed != 3*(4+2+1+2) || s.FetchErrors != int64(len(waits)) || s.FetchRetries != int64(len(waits)) {
		t.Errorf("stats %+v: want 3 records of 9 bytes, %d failed fetches retried", s, len(waits))
	}

	f.onFetch = func(int, url.Values) *fakeAnswer { return &fakeAnswer{status: 404, code: CodeUnknownPartition} }
	before := len(f.fetchQueries())
	if _, err := cons.Poll(testContext(t)); !errors.Is(err, ErrUnknownPartition) {
		t.Fatalf("Poll: %v, want ErrUnknownPartition", err)
	}
	if n := len(f.fetchQueries()) - before; n != 1 {
		t.Fatalf("%d fetches for an error that will not pass", n)
	}
}

// TestConsumerTimeoutDuringAnAttemptNamesTheRetriedCause: when the context
// ends while a retry is in flight, Poll's error still carries the answer
// that was being retried (a CLI says "gave up retrying: leader not
// available", not "no answer from the agent"); TestConsumeSaysWhatItRetries
// failed on that race in a fresh-clone CI.
func TestConsumerTimeoutDuringAnAttemptNamesTheRetriedCause(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	hold := make(chan struct{})
	defer close(hold)
	f.onFetch = func(call int, _ url.Values) *fakeAnswer {
		if call == 0 {
			return &fakeAnswer{status: 503, code: CodeLeaderNotAvailable, retriable: true, retryAfter: "0"}
		}
		return &fakeAnswer{status: 503, code: CodeLeaderNotAvailable, retriable: true, release: hold}
	}
	cons := mustConsumer(t, f.newClient(WithClock(newFakeClock(true))), 0, WithFetchMaxWait(0))
	ctx, cancel := context.WithTimeout(testContext(t), 300*time.Millisecond)
	defer cancel()
	_, err := cons.Poll(ctx)
	var apiErr *Error
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &apiErr) || apiErr.Code != CodeLeaderNotAvailable {
		t.Fatalf("Poll: %v; want the deadline with the retried %s underneath", err, CodeLeaderNotAvailable)
	}
}

func TestConsumerCopiesCompressedRecords(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	appendValues(t, f, record.CodecGzip, 0, values(0, 4)...)
	appendValues(t, f, record.CodecLZ4, 0, values(4, 8)...)
	appendValues(t, f, record.CodecGzip, 0, values(8, 12)...)
	cons := mustConsumer(t, f.newClient(), 0, WithFetchMaxWait(0))
	records, err := cons.Poll(testContext(t))
	if err != nil || len(records) != 12 {
		t.Fatalf("Poll: %d records, %v", len(records), err)
	}
	// Decoding later batches reuses the decoder's buffer: records of the
	// first ones must not have changed.
	checkRecords(t, records, 0)
}

func TestConsumerOptionsValidated(t *testing.T) {
	c, err := New("")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		partition int
		from      int64
		opts      []ConsumerOption
	}{
		{"negative partition", -1, 0, nil},
		{"offset below earliest", 0, -3, nil},
		{"max bytes", 0, 0, []ConsumerOption{WithFetchMaxBytes(0)}},
		{"negative wait", 0, 0, []ConsumerOption{WithFetchMaxWait(-time.Second)}},
		{"wait over the agent's 30s", 0, 0, []ConsumerOption{WithFetchMaxWait(31 * time.Second)}},
		{"reset to a number", 0, 0, []ConsumerOption{WithOffsetReset(5)}},
		{"no batch limit", 0, 0, []ConsumerOption{WithFetchLimits(FetchLimits{})}},
		{"backoff", 0, 0, []ConsumerOption{WithFetchBackoff(0, time.Second)}},
	}
	for _, tc := range cases {
		if _, err := c.NewConsumer("t", tc.partition, tc.from, tc.opts...); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", tc.name, err)
		}
	}
	cons, err := c.NewConsumer("t", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.SeekTo(-5); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("SeekTo(-5): %v", err)
	}
}

// TestConsumerBufferReuse: WithBufferReuse reads each fetch into the
// memory of the one before, and the records are still right; without it,
// records of an earlier Poll stay intact.
func TestConsumerBufferReuse(t *testing.T) {
	for _, reuse := range []bool{false, true} {
		t.Run(fmt.Sprintf("reuse=%v", reuse), func(t *testing.T) {
			f := newFakeAgent(t)
			f.addTopic("t", 1)
			// Batches of the same size from offset 10 on (values v10 to v24).
			for i := range 5 {
				appendValues(t, f, record.CodecNone, 0, values(i*5, i*5+5)...)
			}
			opts := []ConsumerOption{WithFetchMaxWait(0), WithFetchMaxBytes(10)}
			if reuse {
				opts = append(opts, WithBufferReuse())
			}
			cons := mustConsumer(t, f.newClient(), 10, opts...)
			ctx := testContext(t)
			first, err := cons.Poll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			checkRecords(t, first, 10)
			firstValue := &first[0].Value[0]
			for i := 3; i < 5; i++ {
				records, err := cons.Poll(ctx)
				if err != nil {
					t.Fatal(err)
				}
				checkRecords(t, records, int64(i*5))
				if shared := &records[0].Value[0] == firstValue; shared != reuse {
					t.Fatalf("poll %d: record memory shared with the first poll's: %v, want %v", i, shared, reuse)
				}
			}
			if !reuse {
				checkRecords(t, first, 10)
			}
		})
	}
}

// TestCompressedFetchMemoryBounded: max bytes bounds a fetch's compressed
// bytes and the decompressed limit one batch; one Poll decoded every batch
// of the answer at once, so its memory grew with the compression ratio (32
// zstd batches of 768 KiB of zeros in a 64 KiB fetch: 24 MiB). Decoding
// stops once the records copied out of compressed batches pass the larger
// of the two, and the next Poll goes on from there: every record once, in
// order.
func TestCompressedFetchMemoryBounded(t *testing.T) {
	const (
		maxBytes        = 64 << 10
		maxDecompressed = 1 << 20
		batches         = 32
		recordsPerBatch = 3
		valueBytes      = 256 << 10
	)
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	zeros := make([]byte, valueBytes)
	for range batches {
		var b record.Builder
		if err := b.SetCodec(record.CodecZstd); err != nil {
			t.Fatal(err)
		}
		for range recordsPerBatch {
			if err := b.Add(1_700_000_000_000, nil, zeros, nil); err != nil {
				t.Fatal(err)
			}
		}
		batch, err := b.AppendTo(nil)
		if err != nil {
			t.Fatal(err)
		}
		f.appendBatch("t", 0, batch)
	}
	cons := mustConsumer(t, f.newClient(), 0, WithFetchMaxWait(0), WithFetchMaxBytes(maxBytes),
		WithFetchLimits(FetchLimits{MaxBatchBytes: 16 << 20, MaxDecompressedBytes: maxDecompressed}))
	next := int64(0)
	for polls := 0; next < batches*recordsPerBatch; polls++ {
		if polls > batches*recordsPerBatch {
			t.Fatalf("%d polls and only up to offset %d", polls, next)
		}
		records, err := cons.Poll(testContext(t))
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, r := range records {
			if r.Offset != next {
				t.Fatalf("record at offset %d, want %d", r.Offset, next)
			}
			next++
			total += len(r.Key) + len(r.Value)
		}
		// What passes the budget is the batch that crossed it.
		if bound := max(maxBytes, maxDecompressed) + maxDecompressed; total > bound {
			t.Fatalf("one Poll with max bytes %d and %d decompressed bytes a batch held %d records, %d bytes decompressed (bound %d)",
				maxBytes, maxDecompressed, len(records), total, bound)
		}
	}
}
