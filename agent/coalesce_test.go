package agent

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/internal/testseed"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/replicate"

	"github.com/logagent/logagent/wire"
)

// fakeLog is a partition behind a coalescer: it appends what it is sent,
// after a delay that keeps sends in flight, and remembers each batch.
type fakeLog struct {
	delay time.Duration
	fail  *reply.APIError

	mu      sync.Mutex
	values  []string
	batches []int // record count of each batch sent
	sizes   []int
}

func (f *fakeLog) produce(_ groupKey, batch []byte, count int, _ time.Time) (produceResponse, *reply.APIError) {
	time.Sleep(f.delay)
	if f.fail != nil {
		return produceResponse{}, f.fail
	}
	d := record.NewDecoder(record.Limits{})
	it, err := d.Records(batch)
	if err != nil {
		return produceResponse{}, reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeCorruptBatch, err.Error(), false)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	base := int64(len(f.values))
	for it.Next() {
		f.values = append(f.values, string(it.Record().Value))
	}
	if err := it.Err(); err != nil || len(f.values)-int(base) != count {
		return produceResponse{}, reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeCorruptBatch, fmt.Sprintf("count %d, err %v", count, err), false)
	}
	f.batches = append(f.batches, count)
	f.sizes = append(f.sizes, len(batch))
	last, epoch := base+int64(count)-1, int32(3)
	return produceResponse{Topic: "t", Partition: 0, BaseOffset: &base, LastOffset: &last, Count: count, Epoch: &epoch}, nil
}

func testBatch(t *testing.T, values []string) []byte {
	t.Helper()
	var b record.Builder
	for _, v := range values {
		if err := b.Add(1, nil, []byte(v), nil); err != nil {
			t.Fatal(err)
		}
	}
	batch, err := b.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	return batch
}

func newTestCoalescer(linger time.Duration, maxBytes int, f *fakeLog) *coalescer {
	pool := &sync.Pool{New: func() any { return record.NewDecoder(record.Limits{}) }}
	return newCoalescer(linger, maxBytes, pool, f.produce)
}

// TestCoalescerGivesEachCallerItsOffsets: concurrent callers of one to four
// records each get offsets that hold exactly their records, in their
// order, while their requests go out combined.
func TestCoalescerGivesEachCallerItsOffsets(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 1))
	const callers, rounds = 32, 10
	f := &fakeLog{delay: 2 * time.Millisecond}
	c := newTestCoalescer(50*time.Millisecond, 1<<20, f)
	key := groupKey{topic: "t", acks: replicate.AcksAll}
	sizes := make([][]int, callers)
	for i := range sizes {
		for range rounds {
			sizes[i] = append(sizes[i], 1+rng.IntN(4))
		}
	}
	type answer struct {
		values []string
		resp   produceResponse
		err    *reply.APIError
	}
	answers := make(chan answer, callers*rounds)
	var wg sync.WaitGroup
	for caller := range callers {
		wg.Go(func() {
			for round, n := range sizes[caller] {
				values := make([]string, n)
				for i := range values {
					values[i] = fmt.Sprintf("c%d-r%d-%d", caller, round, i)
				}
				resp, err := c.submit(key, testBatch(t, values), n, time.Now().Add(time.Second))
				answers <- answer{values, resp, err}
			}
		})
	}
	wg.Wait()
	close(answers)
	for a := range answers {
		if a.err != nil || a.resp.BaseOffset == nil || a.resp.Count != len(a.values) || *a.resp.LastOffset-*a.resp.BaseOffset != int64(len(a.values)-1) {
			t.Fatalf("answer %+v %v for %q", a.resp, a.err, a.values)
		}
		for i, v := range a.values {
			if got := f.values[*a.resp.BaseOffset+int64(i)]; got != v {
				t.Fatalf("offset %d holds %q, its caller was told it holds %q", *a.resp.BaseOffset+int64(i), got, v)
			}
		}
	}
	t.Logf("%d requests sent as %d batches", callers*rounds, len(f.batches))
	if len(f.batches) >= callers*rounds/2 {
		t.Fatalf("%d requests sent as %d batches: hardly any coalescing", callers*rounds, len(f.batches))
	}
}

// TestCoalescerBounds: a request that finds nothing in flight goes at once
// whatever the linger; combined batches stay within max_batch_bytes; a
// failure reaches every caller of the combined batch.
func TestCoalescerBounds(t *testing.T) {
	key := groupKey{topic: "t", acks: replicate.AcksAll}
	t.Run("idle sends at once", func(t *testing.T) {
		f := &fakeLog{}
		c := newTestCoalescer(time.Hour, 1<<20, f)
		start := time.Now()
		if _, err := c.submit(key, testBatch(t, []string{"x"}), 1, time.Now().Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("an idle partition's request waited %s", d)
		}
	})
	t.Run("max batch bytes", func(t *testing.T) {
		one := testBatch(t, []string{"0123456789012345678901234567890123456789"})
		limit := 4 * len(one)
		f := &fakeLog{delay: 5 * time.Millisecond}
		c := newTestCoalescer(time.Second, limit, f)
		var wg sync.WaitGroup
		for range 40 {
			wg.Go(func() {
				if _, err := c.submit(key, one, 1, time.Now().Add(time.Minute)); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		for i, n := range f.batches {
			if n > 4 {
				t.Fatalf("batch %d combines %d requests of %d bytes, over max_batch_bytes %d", i, n, len(one), limit)
			}
		}
	})
	t.Run("failure reaches every caller", func(t *testing.T) {
		f := &fakeLog{delay: 5 * time.Millisecond, fail: reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeNotEnoughReplicas, "isr", true)}
		c := newTestCoalescer(time.Second, 1<<20, f)
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() {
				if resp, err := c.submit(key, testBatch(t, []string{"x"}), 1, time.Now().Add(time.Minute)); err == nil || err.Code != wire.CodeNotEnoughReplicas || resp.BaseOffset != nil {
					t.Errorf("%+v %v, want not_enough_replicas", resp, err)
				}
			})
		}
		wg.Wait()
	})
}

// TestCoalescerSendsIdempotentBatchesSideBySide: concurrent idempotent
// batches are grouped but never combined: each goes as its own batch (its
// producer header intact) in one group send, and each caller gets its own
// batch's answer, failures included.
func TestCoalescerSendsIdempotentBatchesSideBySide(t *testing.T) {
	f := &fakeLog{delay: 2 * time.Millisecond}
	c := newTestCoalescer(50*time.Millisecond, 1<<20, f)
	var groupsMu sync.Mutex
	var groups []int
	refused := reply.NewAPIError(fasthttp.StatusConflict, wire.CodeOutOfOrderSequence, "refused", false)
	// The leader refuses every 7th producer's batch.
	c.produce = func(key groupKey, b []byte, count int, deadline time.Time) (produceResponse, *reply.APIError) {
		if record.Header(b).ProducerID()%7 == 0 {
			return produceResponse{}, refused
		}
		return f.produce(key, b, count, deadline)
	}
	c.produceGroup = func(key groupKey, batches [][]byte, counts []int, deadline time.Time) ([]produceResponse, []*reply.APIError) {
		groupsMu.Lock()
		groups = append(groups, len(batches))
		groupsMu.Unlock()
		resps, errs := make([]produceResponse, len(batches)), make([]*reply.APIError, len(batches))
		for i, b := range batches {
			resps[i], errs[i] = c.produce(key, b, counts[i], deadline)
		}
		return resps, errs
	}
	key := groupKey{topic: "t", acks: replicate.AcksAll, idempotent: true}
	const callers, rounds = 16, 10
	var wg sync.WaitGroup
	var failures atomic.Int64
	for caller := range callers {
		wg.Go(func() {
			for round := range rounds {
				id := int64(caller*rounds + round)
				b := testBatch(t, []string{fmt.Sprintf("p%d", id)})
				record.StampProducer(b, id, 0, 0)
				resp, err := c.submit(key, b, 1, time.Now().Add(time.Second))
				switch {
				case id%7 == 0:
					if err != refused {
						t.Errorf("producer %d: %v, want its own refusal", id, err)
					}
					failures.Add(1)
				case err != nil:
					t.Errorf("producer %d: %v", id, err)
				default:
					f.mu.Lock()
					got := f.values[*resp.BaseOffset]
					f.mu.Unlock()
					if got != fmt.Sprintf("p%d", id) || resp.Count != 1 {
						t.Errorf("producer %d told offset %d, which holds %q", id, *resp.BaseOffset, got)
					}
				}
			}
		})
	}
	wg.Wait()
	for i, n := range f.batches {
		if n != 1 {
			t.Fatalf("batch %d holds %d records: idempotent batches were combined", i, n)
		}
	}
	sent := 0
	for _, n := range groups {
		sent += n
	}
	t.Logf("%d group sends holding %d of %d batches, %d refused", len(groups), sent, callers*rounds, failures.Load())
	if len(groups) == 0 {
		t.Fatal("no group send: concurrent idempotent batches went one by one")
	}
}

// TestCoalescerMergedBatchWithinMaxBytes: members within max_batch_bytes
// together can make a larger combined batch (a record's timestamp delta
// from the first member's takes more bytes than from its own batch's
// first): such a group goes one by one, each caller answered with its own
// offsets, rather than as a batch over the bound, which a leader whose
// batch limit it is refuses for every caller.
func TestCoalescerMergedBatchWithinMaxBytes(t *testing.T) {
	build := func(ts int64, prefix string, n int) []byte {
		var b record.Builder
		for i := range n {
			if err := b.Add(ts, nil, fmt.Appendf(nil, "%s%d", prefix, i), nil); err != nil {
				t.Fatal(err)
			}
		}
		batch, err := b.AppendTo(nil)
		if err != nil {
			t.Fatal(err)
		}
		return batch
	}
	// b's records are a day after a's: 1 byte of timestamp delta each in
	// their own batch, 5 in a combined one.
	a, b := build(1, "a", 200), build(1+24*3600*1000, "b", 200)
	limit := len(a) + len(b)
	f := &fakeLog{}
	c := newTestCoalescer(time.Second, limit, f)
	ma := &groupMember{batch: a, count: 200, done: make(chan struct{})}
	mb := &groupMember{batch: b, count: 200, done: make(chan struct{})}
	c.send(&produceGroup{key: groupKey{topic: "t", acks: replicate.AcksAll}, members: []*groupMember{ma, mb}, bytes: limit, deadline: time.Now().Add(time.Minute)})
	for i, n := range f.sizes {
		if n > limit {
			t.Fatalf("batch %d is %d bytes, over max_batch_bytes %d", i, n, limit)
		}
	}
	for _, m := range []struct {
		g      *groupMember
		prefix string
	}{{ma, "a"}, {mb, "b"}} {
		if m.g.err != nil || m.g.resp.BaseOffset == nil || *m.g.resp.LastOffset-*m.g.resp.BaseOffset != 199 {
			t.Fatalf("caller %s answered %+v %v", m.prefix, m.g.resp, m.g.err)
		}
		if got := f.values[*m.g.resp.BaseOffset]; got != m.prefix+"0" {
			t.Fatalf("caller %s told offset %d, which holds %q", m.prefix, *m.g.resp.BaseOffset, got)
		}
	}
}
