package agent

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/wire"
)

func TestReadProducerHeaders(t *testing.T) {
	tests := []struct {
		name             string
		id, epoch, seq   string
		want             producerHeaders
		wantErrSubstring string
	}{
		{name: "none"},
		{name: "all", id: "7", epoch: "2", seq: "40", want: producerHeaders{present: true, id: 7, epoch: 2, seq: 40}},
		{name: "largest", id: "9223372036854775807", epoch: "32767", seq: "2147483647", want: producerHeaders{present: true, id: math.MaxInt64, epoch: math.MaxInt16, seq: math.MaxInt32}},
		{name: "id only", id: "7", wantErrSubstring: "all of"},
		{name: "no sequence", id: "7", epoch: "0", wantErrSubstring: "all of"},
		{name: "negative id", id: "-1", epoch: "0", seq: "0", wantErrSubstring: "not a producer id"},
		{name: "epoch too large", id: "1", epoch: "32768", seq: "0", wantErrSubstring: "not an epoch"},
		{name: "sequence too large", id: "1", epoch: "0", seq: "2147483648", wantErrSubstring: "not a sequence"},
		{name: "not a number", id: "x", epoch: "0", seq: "0", wantErrSubstring: "not a producer id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h fasthttp.RequestHeader
			for k, v := range map[string]string{wire.HeaderProducerID: tc.id, wire.HeaderProducerEpoch: tc.epoch, wire.HeaderSequence: tc.seq} {
				if v != "" {
					h.Set(k, v)
				}
			}
			got, err := readProducerHeaders(&h)
			if tc.wantErrSubstring != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrSubstring) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErrSubstring)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestApplyProducerHeaders(t *testing.T) {
	plain := func() []byte {
		var b record.Builder
		if err := b.Add(1, nil, []byte("v"), nil); err != nil {
			t.Fatal(err)
		}
		batch, err := b.AppendTo(nil)
		if err != nil {
			t.Fatal(err)
		}
		return batch
	}
	stamped := func(id int64, epoch int16, seq int32) []byte {
		b := plain()
		record.StampProducer(b, id, epoch, seq)
		return b
	}
	headers := producerHeaders{present: true, id: 5, epoch: 1, seq: 10}
	tests := []struct {
		name       string
		batch      []byte
		headers    producerHeaders
		partition  bool
		acks       replicate.Acks
		idempotent bool
		errPart    string
	}{
		{name: "plain", batch: plain(), partition: false, acks: replicate.AcksLeader},
		{name: "headers stamp a plain batch", batch: plain(), headers: headers, partition: true, acks: replicate.AcksAll, idempotent: true},
		{name: "batch fields alone", batch: stamped(5, 1, 10), partition: true, acks: replicate.AcksAll, idempotent: true},
		{name: "batch and headers agree", batch: stamped(5, 1, 10), headers: headers, partition: true, acks: replicate.AcksAll, idempotent: true},
		{name: "batch and headers differ", batch: stamped(5, 1, 11), headers: headers, partition: true, acks: replicate.AcksAll, errPart: "differ"},
		{name: "no partition", batch: plain(), headers: headers, acks: replicate.AcksAll, errPart: "names its partition"},
		{name: "acks 1", batch: plain(), headers: headers, partition: true, acks: replicate.AcksLeader, errPart: "acks=all"},
		{name: "negative epoch in the batch", batch: stamped(5, -1, 0), partition: true, acks: replicate.AcksAll, errPart: "not those of an idempotent producer"},
		{name: "negative sequence in the batch", batch: stamped(5, 0, -1), partition: true, acks: replicate.AcksAll, errPart: "not those of an idempotent producer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := applyProducerHeaders(tc.batch, tc.headers, tc.partition, tc.acks)
			if tc.errPart != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errPart) {
					t.Fatalf("error %v, want one containing %q", err, tc.errPart)
				}
				return
			}
			if err != nil || got != tc.idempotent {
				t.Fatalf("idempotent %v, %v; want %v", got, err, tc.idempotent)
			}
			h, err := record.Verify(tc.batch, 0)
			if err != nil {
				t.Fatalf("the batch no longer verifies: %v", err)
			}
			if tc.idempotent && (h.ProducerID() != 5 || h.ProducerEpoch() != 1 || h.BaseSequence() != 10) {
				t.Fatalf("producer fields %d/%d/%d, want 5/1/10", h.ProducerID(), h.ProducerEpoch(), h.BaseSequence())
			}
		})
	}
}

// TestInitProducerRefusesBadBodies: POST /v1/producers takes {} or
// {"producer_id": N} only; anything else is 400 invalid_request before
// Consul is asked (the unit agent has no coordinator to ask).
func TestInitProducerRefusesBadBodies(t *testing.T) {
	a := unitAgent(t)
	a.state.Store(stateServing)
	for _, body := range []string{`{"producer_id":"7"}`, `{"id":7}`, `{} {}`, `[7]`, `{"producer_id":7`, `null x`} {
		t.Run(body, func(t *testing.T) {
			var ctx fasthttp.RequestCtx
			ctx.Request.Header.SetMethod(fasthttp.MethodPost)
			ctx.Request.SetBodyString(body)
			a.handleInitProducer(&ctx)
			if ctx.Response.StatusCode() != fasthttp.StatusBadRequest || !strings.Contains(string(ctx.Response.Body()), `"code":"`+wire.CodeInvalidRequest+`"`) {
				t.Fatalf("%s: %d %s, want 400 %s", body, ctx.Response.StatusCode(), ctx.Response.Body(), wire.CodeInvalidRequest)
			}
		})
	}
}

// TestUnknownOutcome: the produce errors after which the leader may have
// appended the batch are those an idempotent sender resends and after which
// a lane is dropped (its next sequence is not known); the refusals that
// appended nothing are not. storage_error may follow the append (the log
// failed writing or syncing it, and the recovered log may keep it): a lane
// given back after it would hand the same sequence to the next request,
// which the leader would answer as a duplicate of the first, unwritten.
func TestUnknownOutcome(t *testing.T) {
	for _, tc := range []struct {
		status  int
		code    string
		unknown bool
	}{
		{fasthttp.StatusGatewayTimeout, wire.CodeAckTimeout, true},
		{fasthttp.StatusServiceUnavailable, wire.CodeNotLeaderAfterAppend, true},
		{fasthttp.StatusServiceUnavailable, wire.CodeNotEnoughReplicasAfterAppend, true},
		{fasthttp.StatusServiceUnavailable, wire.CodeStorageError, true},
		{fasthttp.StatusBadGateway, wire.CodeInternal, true},
		{fasthttp.StatusInternalServerError, wire.CodeInternal, true},
		{fasthttp.StatusServiceUnavailable, wire.CodeNotEnoughReplicas, false},
		{fasthttp.StatusServiceUnavailable, wire.CodeLeaderNotAvailable, false},
		{fasthttp.StatusConflict, wire.CodeNotLeader, false},
		{fasthttp.StatusConflict, wire.CodeOutOfOrderSequence, false},
		{fasthttp.StatusInsufficientStorage, wire.CodeInsufficientStorage, false},
		{fasthttp.StatusBadRequest, wire.CodeCorruptBatch, false},
	} {
		t.Run(tc.code, func(t *testing.T) {
			if got := unknownOutcome(reply.NewAPIError(tc.status, tc.code, "x", false)); got != tc.unknown {
				t.Fatalf("unknownOutcome(%d %s) = %v, want %v", tc.status, tc.code, got, tc.unknown)
			}
		})
	}
}

// TestLanesTakeBoundedByDeadline: a new lane's producer id is asked for by
// the deadline take is given (the request's), not by a fixed Consul call
// timeout: a produce with timeout=500ms waited up to 5 s for a slow
// Consul. A free lane is taken without asking, unless a fresh one is asked
// for (after a leader refused a lane), and then within the same deadline.
func TestLanesTakeBoundedByDeadline(t *testing.T) {
	deadline := time.Unix(1_700_000_000, 0).Add(500 * time.Millisecond)
	var asked []time.Time
	l := newLanes(func(ctx context.Context) (int64, int16, error) {
		d, ok := ctx.Deadline()
		if !ok {
			t.Fatal("the allocation has no deadline")
		}
		asked = append(asked, d)
		return int64(len(asked)), 0, nil
	})
	key := partitionKey{topic: "t"}
	ln, err := l.take(key, deadline, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || !asked[0].Equal(deadline) {
		t.Fatalf("allocation deadlines %v, want [%v]", asked, deadline)
	}
	l.give(key, ln)
	if again, err := l.take(key, deadline, false); err != nil || again != ln || len(asked) != 1 {
		t.Fatalf("take after give = %v, %v after %d allocations; want the free lane without allocating", again, err, len(asked))
	}
	l.give(key, ln)
	fresh, err := l.take(key, deadline, true)
	if err != nil || fresh == ln || len(asked) != 2 || !asked[1].Equal(deadline) {
		t.Fatalf("fresh take = %v, %v, allocation deadlines %v; want a new lane allocated by %v", fresh, err, asked, deadline)
	}
}
