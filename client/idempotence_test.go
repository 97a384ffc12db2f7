package client

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/wire"
)

// holdAnswers returns a channel that held answers wait on and the function
// that releases them; a test that fails first releases them as it ends, so
// that the fake agent can stop.
func holdAnswers(t *testing.T) (<-chan struct{}, func()) {
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open)
	return release, open
}

// TestIdempotenceOnByDefault checks what an idempotent producer sends, and
// that one that is not sends no producer id at all.
func TestIdempotenceOnByDefault(t *testing.T) {
	cases := []struct {
		name       string
		opts       []ProducerOption
		idempotent bool
	}{
		{"default", nil, true},
		{"asked for", []ProducerOption{WithIdempotence(true)}, true},
		{"turned off", []ProducerOption{WithIdempotence(false)}, false},
		{"acks=1", []ProducerOption{WithAcks(AcksLeader)}, false},
		{"acks=0", []ProducerOption{WithAcks(AcksNone)}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeAgent(t)
			f.addTopic("t", 2)
			p := mustProducer(t, f.newClient(), "t", append([]ProducerOption{WithLinger(0)}, c.opts...)...)
			ctx := testContext(t)
			for i := range 3 {
				if _, err := p.Send(ctx, Message{Value: fmt.Appendf(nil, "v%d", i), Partition: ToPartition(i % 2)}); err != nil {
					t.Fatal(err)
				}
			}
			calls := f.produceCalls()
			if len(calls) != 3 {
				t.Fatalf("%d requests, want 3", len(calls))
			}
			f.mu.Lock()
			inits := f.producerInits
			f.mu.Unlock()
			wantSeq := []int32{0, 0, 1} // per partition, one record each
			for i, pc := range calls {
				h, _, _ := record.ParseHeader(pc.batch, 0)
				if !c.idempotent {
					if pc.idempotent || h.ProducerID() != -1 || h.BaseSequence() != -1 || h.ProducerEpoch() != -1 {
						t.Errorf("request %d: producer headers %v, batch header producer %d/%d/%d", i, pc.idempotent, h.ProducerID(), h.ProducerEpoch(), h.BaseSequence())
					}
					continue
				}
				// The fake checks that the batch header agrees with the headers.
				if !pc.idempotent || pc.producer != calls[0].producer || pc.seq != wantSeq[i] {
					t.Errorf("request %d: idempotent %v producer %+v sequence %d, want %+v sequence %d", i, pc.idempotent, pc.producer, pc.seq, calls[0].producer, wantSeq[i])
				}
			}
			if want := map[bool]int{true: 1}[c.idempotent]; inits != want {
				t.Errorf("%d POST /v1/producers, want %d (one id for every partition)", inits, want)
			}
		})
	}
}

// TestIdempotentProducerResendsAnUnknownOutcome loses the answer (or the
// request) of a batch in several ways: the producer sends it again with the
// same producer id, epoch, sequence and bytes, and the partition ends up
// with one copy.
func TestIdempotentProducerResendsAnUnknownOutcome(t *testing.T) {
	cases := []struct {
		name     string
		answer   fakeAnswer
		appended bool // by the first attempt
	}{
		{"response dropped after the append", fakeAnswer{hangUp: true, appendFirst: true}, true},
		{"request lost", fakeAnswer{hangUp: true}, false},
		{"ack timeout after the append", fakeAnswer{status: 504, code: CodeAckTimeout, appendFirst: true}, true},
		{"ack timeout", fakeAnswer{status: 504, code: CodeAckTimeout}, false},
		{"not leader after append", fakeAnswer{status: 503, code: CodeNotLeaderAfterAppend, retriable: true, appendFirst: true}, true},
		{"not enough replicas after append", fakeAnswer{status: 503, code: CodeNotEnoughReplicasAfterAppend, retriable: true, appendFirst: true}, true},
		{"internal error", fakeAnswer{status: 500, code: "internal"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeAgent(t)
			f.addTopic("t", 1)
			f.onProduce = func(call int, pc produceCall) *fakeAnswer {
				if call == 1 {
					a := c.answer
					return &a
				}
				return nil
			}
			p := mustProducer(t, f.newClient(WithClock(newFakeClock(true))), "t", WithLinger(0))
			ctx := testContext(t)
			if _, err := p.Send(ctx, Message{Value: []byte("first"), Partition: ToPartition(0)}); err != nil {
				t.Fatal(err)
			}
			res, err := p.Send(ctx, Message{Value: []byte("second"), Partition: ToPartition(0)})
			if err != nil {
				t.Fatalf("the resend did not succeed: %v", err)
			}
			if res.Offset != 1 {
				t.Errorf("offset %d, want 1", res.Offset)
			}
			calls, answers := f.produceCalls(), f.produceAnswers()
			if len(calls) != 3 {
				t.Fatalf("%d requests (%v), want 3", len(calls), answers)
			}
			first, resend := calls[1], calls[2]
			if !bytes.Equal(first.batch, resend.batch) || first.producer != resend.producer || first.seq != resend.seq || first.seq != 1 {
				t.Errorf("resend differs: producer %+v/%+v sequence %d/%d, same bytes %v",
					first.producer, resend.producer, first.seq, resend.seq, bytes.Equal(first.batch, resend.batch))
			}
			if want := map[bool]string{true: "duplicate", false: "ok"}[c.appended]; answers[2] != want {
				t.Errorf("resend answered %q, want %q", answers[2], want)
			}
			stored := f.stored("t", 0)
			if len(stored) != 2 || string(stored[0].Value) != "first" || string(stored[1].Value) != "second" {
				t.Fatalf("stored %d records: want first and second once each", len(stored))
			}
		})
	}
}

// TestIdempotentProducerLostBatchInFlight loses batch k while the batches
// after it are in flight: the leader answers them out_of_order_sequence,
// and the producer sends them again once k is written, in order. The
// window stays within WithMaxInFlight meanwhile.
func TestIdempotentProducerLostBatchInFlight(t *testing.T) {
	for _, window := range []int{MaxInFlightIdempotent, 3} {
		t.Run("window "+strconv.Itoa(window), func(t *testing.T) {
			f := newFakeAgent(t)
			f.addTopic("t", 1)
			release, open := holdAnswers(t)
			release0, open0 := holdAnswers(t)
			var released atomic.Bool
			var overflow atomic.Int32
			// Batch 0 confirms the producer; batch 1 is k; batches 2 to
			// window are in flight with k; batch window+1 must wait for k.
			f.onProduce = func(call int, pc produceCall) *fakeAnswer {
				switch {
				case call == 0:
					return &fakeAnswer{release: release0}
				case call == 1:
					return &fakeAnswer{release: release, hangUp: true}
				case pc.seq == int32(window+1) && !released.Load():
					overflow.Add(1)
				}
				return nil
			}
			p := mustProducer(t, f.newClient(WithClock(newFakeClock(true))), "t", WithLinger(0), WithMaxInFlight(window))
			ctx := testContext(t)
			var futures []*Future
			for i := 0; i <= window+1; i++ {
				futures = append(futures, mustProduce(t, p, ctx, Message{Value: fmt.Appendf(nil, "r%d", i), Partition: ToPartition(0)}))
				if i == 1 {
					// k is queued behind batch 0, so the partition is not
					// idle when batch 0 is acknowledged: the window opens
					// (an idle partition starts again with one batch).
					open0()
					mustResult(t, futures[0])
				}
				if i < window {
					// One record, one batch: the next is produced once
					// this one is on the wire.
					eventually(t, fmt.Sprintf("request of record %d", i), func() bool { return len(f.produceCalls()) == i+1 })
				}
			}
			eventually(t, "the batches after k answered out of order", func() bool {
				n := 0
				for _, a := range f.produceAnswers() {
					if a == CodeOutOfOrderSequence {
						n++
					}
				}
				return n == window-1
			})
			// Room for a request past the window to show up, if it were sent.
			time.Sleep(50 * time.Millisecond)
			released.Store(true)
			open()
			for i, fu := range futures {
				res := mustResult(t, fu)
				if res.Offset != int64(i) {
					t.Errorf("record %d at offset %d", i, res.Offset)
				}
			}
			if n := overflow.Load(); n != 0 {
				t.Errorf("batch %d sent while %d older ones were in flight", window+1, window)
			}
			stored := f.stored("t", 0)
			if len(stored) != window+2 {
				t.Fatalf("%d records stored, want %d", len(stored), window+2)
			}
			for i, r := range stored {
				if string(r.Value) != fmt.Sprintf("r%d", i) {
					t.Errorf("offset %d holds %q", i, r.Value)
				}
			}
			t.Logf("answers: %v", f.produceAnswers())
		})
	}
}

// TestIdempotentOutcomeStaysUnknownAfterOutOfOrder: batch B's first
// attempt has an unknown outcome, its resend (sent once the leader
// acknowledged the older batch 0) overtakes the older batch A and is
// answered out_of_order_sequence, and B's delivery timeout passes
// before A is written. B fails with an unknown outcome: the out-of-order
// answer said only that the leader did not hold B then, and B's first copy
// (resent by the agent on its own within its timeout) may still land after
// A. The partition goes on under a new producer id. Before, the out-of-order
// answer made B "not written", its sequence was given to the next batch C
// under the same id, and once B's first copy landed the leader answered C
// as a duplicate of it: C was reported written at B's offset, and lost.
func TestIdempotentOutcomeStaysUnknownAfterOutOfOrder(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	releaseP, openP := holdAnswers(t)
	release0, open0 := holdAnswers(t)
	releaseA, openA := holdAnswers(t)
	var staleB produceCall
	var seenB atomic.Bool
	f.onProduce = func(call int, pc produceCall) *fakeAnswer {
		switch v := string(pc.records[0].Value); {
		case v == "p":
			return &fakeAnswer{release: releaseP}
		case v == "0":
			return &fakeAnswer{release: release0}
		case pc.seq == 2 && pc.producer.Epoch == 0 && v == "a":
			return &fakeAnswer{release: releaseA}
		case pc.seq == 3 && v == "b" && !seenB.Swap(true):
			staleB = pc
			return &fakeAnswer{hangUp: true}
		}
		return nil
	}
	clock := newFakeClock(true)
	p := mustProducer(t, f.newClient(WithClock(clock)), "t", WithLinger(0), WithDeliveryTimeout(3*time.Second))
	ctx := testContext(t)
	// Batch 0 is queued behind P, so the partition is not idle when P is
	// acknowledged: the window opens, and A and B go while 0 is in flight.
	prime := mustProduce(t, p, ctx, Message{Value: []byte("p"), Partition: ToPartition(0)})
	eventually(t, "P sent", func() bool { return len(f.produceCalls()) == 1 })
	first := mustProduce(t, p, ctx, Message{Value: []byte("0"), Partition: ToPartition(0)})
	openP()
	mustResult(t, prime)
	eventually(t, "batch 0 sent", func() bool { return len(f.produceCalls()) == 2 })
	a := mustProduce(t, p, ctx, Message{Value: []byte("a"), Partition: ToPartition(0)})
	eventually(t, "A sent", func() bool { return len(f.produceCalls()) == 3 })
	b := mustProduce(t, p, ctx, Message{Value: []byte("b"), Partition: ToPartition(0)})
	eventually(t, "B's first attempt lost", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return !p.queues[TopicPartition{Topic: "t", Partition: 0}].confirmed
	})
	// B's resend waits for the leader to acknowledge a batch again: batch 0.
	open0()
	mustResult(t, first)
	eventually(t, "B's resend answered out of order", func() bool {
		return slices.Contains(f.produceAnswers(), CodeOutOfOrderSequence)
	})
	clock.Advance(time.Minute)
	openA()
	mustResult(t, a)
	if _, err := b.Wait(ctx); !errors.Is(err, ErrOutcomeUnknown) {
		t.Errorf("B, whose first attempt's outcome was unknown: %v, want an unknown outcome", err)
	}
	// B's first copy reaches the leader now.
	if _, code := f.appendProduce(staleB); code != "" {
		t.Fatalf("B's first copy refused: %s", code)
	}
	res, err := p.Send(ctx, Message{Value: []byte("c"), Partition: ToPartition(0)})
	if err != nil {
		t.Fatal(err)
	}
	stored := f.stored("t", 0)
	if res.Offset >= int64(len(stored)) || string(stored[res.Offset].Value) != "c" {
		t.Errorf("C reported written at offset %d, which holds %q", res.Offset, stored[min(res.Offset, int64(len(stored)-1))].Value)
	}
}

// rawProduce writes one record as producer id at sequence seq, as another
// instance of the producer would.
func rawProduce(t *testing.T, f *fakeAgent, partition int, id ProducerID, seq int32) {
	t.Helper()
	var b record.Builder
	b.SetProducer(id.ID, id.Epoch, seq)
	if err := b.Add(0, nil, []byte("from the new instance"), nil); err != nil {
		t.Fatal(err)
	}
	body, err := b.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/topics/t/records?acks=all&partition="+strconv.Itoa(partition), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", BatchContentType)
	req.Header.Set(wire.HeaderProducerID, strconv.FormatInt(id.ID, 10))
	req.Header.Set(wire.HeaderProducerEpoch, strconv.Itoa(int(id.Epoch)))
	req.Header.Set(wire.HeaderSequence, strconv.Itoa(int(seq)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("raw produce: %s", resp.Status)
	}
}

// TestIdempotentProducerFenced bumps the producer's epoch as a new instance
// would: the old instance's next batch is refused, and every record it has
// not written yet fails, as does every later Produce.
func TestIdempotentProducerFenced(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 2)
	release, open := holdAnswers(t)
	f.onProduce = func(call int, pc produceCall) *fakeAnswer {
		if pc.idempotent && pc.producer.Epoch == 0 && pc.seq == 1 {
			return &fakeAnswer{release: release}
		}
		return nil
	}
	clock := newFakeClock(false)
	c := f.newClient(WithClock(clock))
	p := mustProducer(t, c, "t", WithLinger(time.Hour))
	ctx := testContext(t)
	first := mustProduce(t, p, ctx, Message{Value: []byte("r0"), Partition: ToPartition(0)})
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mustResult(t, first)
	old := f.produceCalls()[0].producer
	bumped, err := c.ReinitProducer(ctx, old.ID)
	if err != nil {
		t.Fatal(err)
	}
	if bumped != (ProducerID{ID: old.ID, Epoch: old.Epoch + 1}) {
		t.Fatalf("re-init of %+v answered %+v", old, bumped)
	}
	rawProduce(t, f, 0, bumped, 0)

	refused := mustProduce(t, p, ctx, Message{Value: []byte("r1"), Partition: ToPartition(0)})
	clock.Advance(time.Hour) // its linger: it is sent, and held
	eventually(t, "the old instance's request", func() bool { return len(f.produceCalls()) == 3 })
	queued := mustProduce(t, p, ctx, Message{Value: []byte("q"), Partition: ToPartition(1)})
	open()
	for name, fu := range map[string]*Future{"refused": refused, "queued": queued} {
		if _, err := fu.Wait(ctx); !errors.Is(err, ErrInvalidProducerEpoch) || errors.Is(err, ErrOutcomeUnknown) {
			t.Errorf("%s record: %v, want ErrInvalidProducerEpoch with a known outcome", name, err)
		}
	}
	if _, err := p.Produce(ctx, Message{Value: []byte("late"), Partition: ToPartition(1)}); !errors.Is(err, ErrInvalidProducerEpoch) {
		t.Errorf("Produce after the fencing: %v, want ErrInvalidProducerEpoch", err)
	}
	if n := len(f.stored("t", 1)); n != 0 {
		t.Errorf("%d records written to partition 1 by the fenced producer", n)
	}
	if _, err := c.ReinitProducer(ctx, 999999); !errors.Is(err, ErrUnknownProducerID) {
		t.Errorf("re-init of an unknown id: %v, want ErrUnknownProducerID", err)
	}
}

// TestIdempotentProducerDeliveryTimeout retries one batch until the
// delivery timeout, always with the same sequence and bytes; the record
// fails (its outcome unknown if an attempt's was), and the partition goes
// on: with the same id when the batch was surely not written, else with a
// new id, since the sequence after it may be missing.
func TestIdempotentProducerDeliveryTimeout(t *testing.T) {
	cases := []struct {
		name    string
		answer  fakeAnswer
		unknown bool
	}{
		{"ack timeouts", fakeAnswer{status: 504, code: CodeAckTimeout}, true},
		{"refusals before the append", fakeAnswer{status: 503, code: CodeNotEnoughReplicas, retriable: true, retryAfter: "0"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeAgent(t)
			f.addTopic("t", 1)
			var failing atomic.Bool
			failing.Store(true)
			f.onProduce = func(int, produceCall) *fakeAnswer {
				if failing.Load() {
					a := c.answer
					return &a
				}
				return nil
			}
			p := mustProducer(t, f.newClient(WithClock(newFakeClock(true))), "t", WithLinger(0), WithDeliveryTimeout(3*time.Second))
			ctx := testContext(t)
			_, err := p.Send(ctx, Message{Value: []byte("lost"), Partition: ToPartition(0)})
			if err == nil || !strings.Contains(err.Error(), "delivery timeout of 3s") || errors.Is(err, ErrOutcomeUnknown) != c.unknown {
				t.Fatalf("error %v: want the delivery timeout, outcome unknown %v", err, c.unknown)
			}
			var e *Error
			if !errors.As(err, &e) || e.Code != c.answer.code {
				t.Errorf("error %v: want the last attempt's %s underneath", err, c.answer.code)
			}
			calls := f.produceCalls()
			if len(calls) < 4 {
				t.Fatalf("%d attempts, want retries until the delivery timeout", len(calls))
			}
			for i, pc := range calls {
				if !bytes.Equal(pc.batch, calls[0].batch) || pc.producer != calls[0].producer || pc.seq != 0 {
					t.Fatalf("attempt %d differs: producer %+v sequence %d", i, pc.producer, pc.seq)
				}
			}
			failing.Store(false)
			if _, err := p.Send(ctx, Message{Value: []byte("next"), Partition: ToPartition(0)}); err != nil {
				t.Fatal(err)
			}
			next := f.produceCalls()[len(calls)]
			if (next.producer.ID != calls[0].producer.ID) != c.unknown || next.seq != 0 {
				t.Errorf("next batch: producer %+v sequence %d after %+v; a new id: %v", next.producer, next.seq, calls[0].producer, c.unknown)
			}
		})
	}
}

// TestIdempotentProducerUnexplainedOutOfOrder answers out_of_order_sequence
// to a batch that no older batch explains: that batch and the partition's
// pending records fail, saying so, and the partition starts again with a
// new producer id.
func TestIdempotentProducerUnexplainedOutOfOrder(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	release, open := holdAnswers(t)
	f.onProduce = func(call int, pc produceCall) *fakeAnswer {
		if call == 0 {
			return &fakeAnswer{status: 409, code: CodeOutOfOrderSequence, release: release}
		}
		return nil
	}
	p := mustProducer(t, f.newClient(WithClock(newFakeClock(true))), "t", WithLinger(0))
	ctx := testContext(t)
	refused := mustProduce(t, p, ctx, Message{Value: []byte("a"), Partition: ToPartition(0)})
	eventually(t, "the first request", func() bool { return len(f.produceCalls()) == 1 })
	// Queued: the partition has one batch in flight until the leader
	// confirms the producer.
	queued := mustProduce(t, p, ctx, Message{Value: []byte("b"), Partition: ToPartition(0)})
	open()
	for name, fu := range map[string]*Future{"refused": refused, "queued": queued} {
		_, err := fu.Wait(ctx)
		if !errors.Is(err, ErrOutOfOrderSequence) || errors.Is(err, ErrOutcomeUnknown) || !strings.Contains(err.Error(), "sequence 0") {
			t.Errorf("%s record: %v, want ErrOutOfOrderSequence naming the sequence, with a known outcome", name, err)
		}
	}
	if _, err := p.Send(ctx, Message{Value: []byte("c"), Partition: ToPartition(0)}); err != nil {
		t.Fatal(err)
	}
	calls := f.produceCalls()
	if len(calls) != 2 || calls[1].producer.ID == calls[0].producer.ID || calls[1].seq != 0 {
		t.Fatalf("after the failure: %d requests, producer %+v sequence %d", len(calls), calls[len(calls)-1].producer, calls[len(calls)-1].seq)
	}
}

// TestIdempotentProducerOnAnAgentWithoutIt fails at once, pointing at
// WithIdempotence, against an agent that does not know POST /v1/producers.
func TestIdempotentProducerOnAnAgentWithoutIt(t *testing.T) {
	srv := newFakeAgent(t)
	srv.addTopic("t", 1)
	srv.initAnswer = &fakeAnswer{status: http.StatusNotFound, code: wire.CodeNotFound}
	p := mustProducer(t, srv.newClient(WithClock(newFakeClock(true))), "t", WithLinger(0))
	_, err := p.Send(testContext(t), Message{Value: []byte("v"), Partition: ToPartition(0)})
	if err == nil || !strings.Contains(err.Error(), "WithIdempotence(false)") || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("error %v: want a known failure naming WithIdempotence(false)", err)
	}
	if n := len(srv.produceCalls()); n != 0 {
		t.Fatalf("%d produce requests without a producer id", n)
	}
}

// TestIdempotentProducerForgottenByTheLeader: the leader forgets the
// producer while the partition is idle (retention deleted its last batch,
// or producer.id_expiration passed), and the producer then sends a burst of
// batches. A leader appends a batch of a producer it does not know at any
// sequence, so whichever batch of the burst reaches it first is appended.
// The producer sends the burst's first batch alone, and the others once the
// leader acknowledged it, so the burst lands in order even when the first
// request is slow. Before, the burst went out at once: the later batches
// overtook the slow first one and were appended (sequences 2 and 3 at
// offsets 1 and 2), the first was answered out_of_order_sequence and failed
// although it was never written, and the later records were acknowledged
// after it.
func TestIdempotentProducerForgottenByTheLeader(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	release, open := holdAnswers(t)
	f.onProduce = func(call int, pc produceCall) *fakeAnswer {
		if pc.seq == 1 {
			// The burst's first batch reaches the leader last, if the
			// others are sent with it.
			return &fakeAnswer{release: release}
		}
		return nil
	}
	// One record per batch: each fills its batch.
	p := mustProducer(t, f.newClient(WithClock(newFakeClock(true))), "t", WithLinger(0), WithMaxBatchBytes(record.HeaderSize+1))
	ctx := testContext(t)
	if _, err := p.Send(ctx, Message{Value: []byte("r0"), Partition: ToPartition(0)}); err != nil {
		t.Fatal(err)
	}
	// The partition goes idle: r0's batch leaves the window (Send returns
	// once r0 is acknowledged, before that), and the leader forgets the
	// producer meanwhile.
	eventually(t, "the window empty", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.queues[TopicPartition{Topic: "t", Partition: 0}].window) == 0
	})
	f.forgetProducers("t", 0)
	var futures []*Future
	for i := 1; i <= 3; i++ {
		futures = append(futures, mustProduce(t, p, ctx, Message{Value: fmt.Appendf(nil, "r%d", i), Partition: ToPartition(0)}))
	}
	eventually(t, "the burst's later batches answered, or kept back", func() bool {
		p.mu.Lock()
		q := p.queues[TopicPartition{Topic: "t", Partition: 0}]
		kept := len(q.window) == 1 && len(q.batches) == 2
		p.mu.Unlock()
		answered := 0
		for _, a := range f.produceAnswers() {
			if a != "" {
				answered++
			}
		}
		return kept || answered == 3 // all but the first batch's
	})
	open()
	for i, fu := range futures {
		res, err := fu.Wait(ctx)
		if err != nil {
			t.Errorf("record r%d: %v", i+1, err)
		} else if res.Offset != int64(i+1) {
			t.Errorf("record r%d at offset %d, want %d", i+1, res.Offset, i+1)
		}
	}
	var stored []string
	for _, r := range f.stored("t", 0) {
		stored = append(stored, string(r.Value))
	}
	if want := []string{"r0", "r1", "r2", "r3"}; !slices.Equal(stored, want) {
		t.Errorf("stored %q, want %q", stored, want)
	}
	t.Logf("answers: %v", f.produceAnswers())
}

// TestIdempotentProducerForgottenWhileResending: two batches in flight are
// refused before the append (not_leader), and the leader that answers
// their resends does not know the producer (retention deleted its last
// batch, or producer.id_expiration passed during a long leader change). The
// producer resends them one at a time, oldest first, until the leader
// acknowledges one, so the partition keeps their order. Before, both
// resends went at once: the later one reached the leader first and was
// appended, and the older one was answered out_of_order_sequence and failed
// although it was never written.
func TestIdempotentProducerForgottenWhileResending(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	release0, open0 := holdAnswers(t)
	releaseA, openA := holdAnswers(t)
	refuse := make(chan struct{})
	var firsts atomic.Int32
	var seenA, seenB atomic.Bool
	f.onProduce = func(call int, pc produceCall) *fakeAnswer {
		v := string(pc.records[0].Value)
		switch {
		case call == 0:
			return &fakeAnswer{release: release0}
		case v == "a" && !seenA.Swap(true), v == "b" && !seenB.Swap(true):
			// Both first attempts are refused once both are in flight,
			// and the producer is forgotten before either resend.
			if firsts.Add(1) == 2 {
				f.forgetProducers("t", 0)
				close(refuse)
			}
			return &fakeAnswer{release: refuse, status: 409, code: CodeNotLeader, retriable: true}
		case v == "a":
			return &fakeAnswer{release: releaseA}
		}
		return nil
	}
	p := mustProducer(t, f.newClient(WithClock(newFakeClock(true))), "t", WithLinger(0))
	ctx := testContext(t)
	first := mustProduce(t, p, ctx, Message{Value: []byte("0"), Partition: ToPartition(0)})
	eventually(t, "batch 0 sent", func() bool { return len(f.produceCalls()) == 1 })
	// A is queued behind batch 0, so the partition is not idle when batch
	// 0 is acknowledged: the window opens, and B goes while A is in flight.
	a := mustProduce(t, p, ctx, Message{Value: []byte("a"), Partition: ToPartition(0)})
	open0()
	mustResult(t, first)
	eventually(t, "A sent", func() bool { return len(f.produceCalls()) == 2 })
	b := mustProduce(t, p, ctx, Message{Value: []byte("b"), Partition: ToPartition(0)})
	eventually(t, "B's resend answered, or B kept back until A is acknowledged", func() bool {
		calls, answers := f.produceCalls(), f.produceAnswers()
		resentA, answeredB := false, 0
		for i, pc := range calls {
			switch v := string(pc.records[0].Value); {
			case v == "a" && i > 1:
				resentA = true
			case v == "b" && i < len(answers) && answers[i] != "":
				answeredB++
			}
		}
		p.mu.Lock()
		confirmed := p.queues[TopicPartition{Topic: "t", Partition: 0}].confirmed
		p.mu.Unlock()
		return answeredB == 2 || resentA && answeredB == 1 && !confirmed
	})
	openA()
	for name, fu := range map[string]*Future{"a": a, "b": b} {
		if _, err := fu.Wait(ctx); err != nil {
			t.Errorf("record %s: %v", name, err)
		}
	}
	var stored []string
	for _, r := range f.stored("t", 0) {
		stored = append(stored, string(r.Value))
	}
	if want := []string{"0", "a", "b"}; !slices.Equal(stored, want) {
		t.Errorf("stored %q, want %q", stored, want)
	}
	t.Logf("answers: %v", f.produceAnswers())
}
