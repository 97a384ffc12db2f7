package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/logagent/logagent/client"
	"github.com/logagent/logagent/record"
)

// stallOp answers every request at once, except request stallSeq, which the
// agent answers only at start+stallUntil.
func stallOp(clock *fakeClock, start time.Time, stallSeq int64, stallUntil time.Duration) Op {
	return func(ctx context.Context, req Request) (Done, error) {
		if req.Seq == stallSeq {
			clock.advanceTo(start.Add(stallUntil))
		}
		return Done{Records: 1, Bytes: 10}, nil
	}
}

// latenciesAtLeast counts the recorded latencies of at least d, to the
// histogram's precision.
func latenciesAtLeast(h *Histogram, d time.Duration) int64 {
	var n int64
	for i, c := range h.counts {
		if lowest, _ := bucketRange(i); lowest >= int64(d) {
			n += c
		}
	}
	return n
}

func TestOpenLoopChargesStallToEveryRequestDueDuringIt(t *testing.T) {
	// 1000 requests/s for 1 s, one worker. Request 100 (due at 100 ms) is
	// answered at 300 ms: requests 101-299 were due during the stall and
	// are served late, each charged from its own due time.
	clock := newFakeClock()
	start := clock.Now()
	res, err := Run(context.Background(), Plan{Rate: 1000, Duration: time.Second, Clock: clock},
		[]Op{stallOp(clock, start, 100, 300*time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 1000 || res.ErrorCount() != 0 || res.Records != 1000 || res.Bytes != 10000 {
		t.Fatalf("requests %d errors %v records %d bytes %d, want 1000 requests of the schedule, no errors",
			res.Requests, res.Errors, res.Records, res.Bytes)
	}
	h := &res.Latency
	// The dispatcher may move the virtual clock by one interval (1 ms)
	// while a worker is reading it, so every bound allows 1 ms.
	if got := h.Max(); got < 200*time.Millisecond || got > 201*time.Millisecond {
		t.Errorf("max %v, want the stalled request's 200ms", got)
	}
	// Requests due at 100..199 ms waited over 101 ms (200 ms down to 101
	// ms): 100 of them.
	if got := latenciesAtLeast(h, 101*time.Millisecond); got < 99 || got > 101 {
		t.Errorf("%d requests waited over 101ms, want about 100", got)
	}
	// The stall adds 200+199+...+1 ms = 20.1 s over 1000 requests.
	if got := h.Mean(); got < 20*time.Millisecond || got > 21200*time.Microsecond {
		t.Errorf("mean %v, want about 20.1ms", got)
	}
	if got := h.Quantile(0.99); got < 188*time.Millisecond || got > 192*time.Millisecond {
		t.Errorf("p99 %v, want about 190ms (the 11th slowest)", got)
	}
	if got := h.Quantile(0.5); got > 1010*time.Microsecond {
		t.Errorf("p50 %v, want at most one interval", got)
	}
}

func TestClosedLoopChargesStallOnce(t *testing.T) {
	// The same stall in a closed loop: the worker asks nothing while it
	// waits, so only the stalled request is slow. This is the coordinated
	// omission that the open loop avoids.
	clock := newFakeClock()
	start := clock.Now()
	res, err := Run(context.Background(), Plan{Count: 1000, Clock: clock},
		[]Op{stallOp(clock, start, 100, 300*time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 1000 {
		t.Fatalf("requests %d, want 1000", res.Requests)
	}
	if got := latenciesAtLeast(&res.Latency, time.Millisecond); got != 1 {
		t.Errorf("%d slow requests, want 1", got)
	}
	if res.Latency.Quantile(0.999) != 0 || res.Latency.Max() != 300*time.Millisecond {
		t.Errorf("p99.9 %v max %v, want 0 and 300ms", res.Latency.Quantile(0.999), res.Latency.Max())
	}
}

func TestHardCapEndsRunAndCountsWhatItCut(t *testing.T) {
	// 100 requests/s for 1 s with a 2 s hard cap and one worker. Request 10
	// hangs until the run is canceled, and the clock reaches 3 s
	// meanwhile: requests 11-99 were due and never issued.
	clock := newFakeClock()
	start := clock.Now()
	op := func(ctx context.Context, req Request) (Done, error) {
		if req.Seq == 10 {
			clock.advanceTo(start.Add(3 * time.Second))
			<-ctx.Done()
			return Done{}, fmt.Errorf("produce: %w", ctx.Err())
		}
		return Done{Records: 1}, nil
	}
	res, err := Run(context.Background(), Plan{Rate: 100, Duration: time.Second, HardCap: 2 * time.Second, Clock: clock}, []Op{op})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 10 || res.Errors[KindCanceled] != 1 || res.Errors[KindUnsent] != 89 {
		t.Errorf("requests %d, errors %v: want 10 requests, 1 canceled, 89 unsent", res.Requests, res.Errors)
	}
	if !strings.Contains(res.Examples[KindUnsent], "not issued") {
		t.Errorf("unsent example %q", res.Examples[KindUnsent])
	}
}

func TestOpenLoopCountBound(t *testing.T) {
	clock := newFakeClock()
	var seqs sync.Map
	op := func(ctx context.Context, req Request) (Done, error) {
		if _, dup := seqs.LoadOrStore(req.Seq, true); dup {
			return Done{}, fmt.Errorf("request %d issued twice", req.Seq)
		}
		return Done{Records: 2}, nil
	}
	res, err := Run(context.Background(), Plan{Rate: 500, Count: 50, Clock: clock}, []Op{op, op, op})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 50 || res.Records != 100 || res.ErrorCount() != 0 {
		t.Errorf("requests %d records %d errors %v, want 50, 100, none", res.Requests, res.Records, res.Errors)
	}
	// 50 requests 2 ms apart: the last is due at 98 ms.
	if res.Elapsed < 98*time.Millisecond || res.Elapsed > 100*time.Millisecond {
		t.Errorf("elapsed %v, want about 98ms", res.Elapsed)
	}
}

func TestClosedLoopCountAndWorkerDone(t *testing.T) {
	cases := []struct {
		name         string
		plan         Plan
		perWorker    int // requests before ErrWorkerDone; 0 never
		workers      int
		wantRequests int64
	}{
		{"count bound", Plan{Count: 103}, 0, 4, 103},
		{"workers done before the duration", Plan{Duration: time.Hour}, 5, 3, 15},
		{"duration bound", Plan{Duration: 50 * time.Millisecond}, 0, 1, 50},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clock := newFakeClock()
			c.plan.Clock = clock
			var seqs sync.Map
			var ops []Op
			for range c.workers {
				calls := 0
				ops = append(ops, func(ctx context.Context, req Request) (Done, error) {
					if c.perWorker > 0 && calls == c.perWorker {
						return Done{}, ErrWorkerDone
					}
					calls++
					if _, dup := seqs.LoadOrStore(req.Seq, true); dup {
						return Done{}, fmt.Errorf("request %d issued twice", req.Seq)
					}
					// Each request takes 1 ms of the (shared) clock.
					clock.advanceTo(req.Intended.Add(time.Millisecond))
					return Done{Records: 1}, nil
				})
			}
			res, err := Run(context.Background(), c.plan, ops)
			if err != nil {
				t.Fatal(err)
			}
			if res.ErrorCount() != 0 || res.Requests != c.wantRequests {
				t.Errorf("requests %d errors %v, want %d", res.Requests, res.Errors, c.wantRequests)
			}
		})
	}
}

func TestRunCountsErrorsByKind(t *testing.T) {
	errs := []error{
		&client.OutcomeUnknownError{Cause: &client.Error{Status: 504, Code: client.CodeAckTimeout}},
		fmt.Errorf("produce: %w", &client.Error{Status: 503, Code: client.CodeNotEnoughReplicas}),
		&client.Error{Status: 503, Code: client.CodeNotEnoughReplicas},
		nil,
	}
	var i atomic.Int64
	op := func(ctx context.Context, req Request) (Done, error) {
		err := errs[i.Add(1)-1]
		if err != nil {
			return Done{Records: 99}, err
		}
		return Done{Records: 1}, nil
	}
	res, err := Run(context.Background(), Plan{Count: int64(len(errs)), Clock: newFakeClock()}, []Op{op})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{client.CodeAckTimeout: 1, client.CodeNotEnoughReplicas: 2}
	if len(res.Errors) != len(want) || res.Errors[client.CodeAckTimeout] != 1 || res.Errors[client.CodeNotEnoughReplicas] != 2 {
		t.Errorf("errors %v, want %v", res.Errors, want)
	}
	if res.Requests != 1 || res.Records != 1 || res.Latency.Count() != 1 {
		t.Errorf("requests %d records %d latencies %d: failed requests must not count", res.Requests, res.Records, res.Latency.Count())
	}
	if got := res.ErrorRatio(); got != 0.75 {
		t.Errorf("error ratio %v, want 0.75", got)
	}
}

func TestErrorKind(t *testing.T) {
	// A refused connection to a loopback port nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	_, refused := c.Health(context.Background())
	if refused == nil {
		t.Fatal("health of a closed port succeeded")
	}

	cases := []struct {
		err  error
		want string
	}{
		{&client.Error{Status: 503, Code: client.CodeNotEnoughReplicas}, client.CodeNotEnoughReplicas},
		{&client.OutcomeUnknownError{Cause: &client.Error{Status: 504, Code: client.CodeAckTimeout}}, client.CodeAckTimeout},
		{&client.Error{Status: 502, Message: "Bad Gateway"}, "http_502"},
		{&client.OutcomeUnknownError{Cause: io.ErrUnexpectedEOF}, KindOutcomeUnknown},
		{&client.OutcomeUnknownError{Cause: context.Canceled}, KindCanceled},
		{fmt.Errorf("flush: %w", context.DeadlineExceeded), KindCanceled},
		{fmt.Errorf("fetch: %w", record.ErrCorrupt), KindCorrupt},
		{fmt.Errorf("fetch: %w", client.ErrProtocol), KindProtocol},
		{refused, KindConnection},
		{errors.New("something else"), KindOther},
	}
	for _, c := range cases {
		if got := ErrorKind(c.err); got != c.want {
			t.Errorf("ErrorKind(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

func TestPlanValidation(t *testing.T) {
	op := func(ctx context.Context, req Request) (Done, error) { return Done{}, nil }
	cases := []struct {
		name string
		plan Plan
		ops  []Op
	}{
		{"no workers", Plan{Count: 1}, nil},
		{"negative rate", Plan{Rate: -1, Count: 1}, []Op{op}},
		{"NaN rate", Plan{Rate: math.NaN(), Count: 1}, []Op{op}},
		{"infinite rate", Plan{Rate: math.Inf(1), Count: 1}, []Op{op}},
		{"unbounded", Plan{Rate: 10}, []Op{op}},
		{"negative duration", Plan{Duration: -time.Second}, []Op{op}},
		{"hard cap below duration", Plan{Duration: time.Minute, HardCap: time.Second}, []Op{op}},
	}
	for _, c := range cases {
		if _, err := Run(context.Background(), c.plan, c.ops); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: err %v, want ErrInvalidConfig", c.name, err)
		}
	}
}

func TestProgressStopsWithRun(t *testing.T) {
	var calls atomic.Int64
	var returned atomic.Bool
	progress := func(p Progress) {
		if returned.Load() {
			t.Error("progress reported after Run returned")
		}
		if p.Elapsed <= 0 || p.Requests < 0 {
			t.Errorf("progress %+v", p)
		}
		calls.Add(1)
	}
	op := func(ctx context.Context, req Request) (Done, error) {
		time.Sleep(time.Millisecond)
		return Done{Records: 1, Bytes: 1000}, nil
	}
	res, err := Run(context.Background(), Plan{Duration: 150 * time.Millisecond, Progress: progress, ProgressInterval: 20 * time.Millisecond}, []Op{op})
	returned.Store(true)
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() < 2 || res.Requests == 0 {
		t.Errorf("%d progress calls, %d requests", calls.Load(), res.Requests)
	}

	var out bytes.Buffer
	show, clear := ProgressPrinter(&out)
	show(Progress{Elapsed: time.Second, Requests: 10, Records: 1000, Bytes: 2e6})
	show(Progress{Elapsed: 2 * time.Second, Requests: 20, Records: 3000, Bytes: 4e6, Errors: 1})
	clear()
	if s := out.String(); !strings.Contains(s, "\r") || !strings.Contains(s, "2000 records/s") || !strings.Contains(s, "1 errors") {
		t.Errorf("progress output %q", s)
	}
}

func TestResultReports(t *testing.T) {
	res := &Result{
		Workload: "e2e", Config: map[string]any{"acks": "all", "topic": "t"},
		Elapsed: 2 * time.Second, Requests: 10, Records: 1000, Bytes: 4e6,
		EndToEnd: &Histogram{}, NotConsumed: 3,
	}
	res.addErrors(client.CodeAckTimeout, 2, "client: ack_timeout (504)")
	for i := range 10 {
		res.Latency.Record(time.Duration(i+1) * time.Millisecond)
		res.EndToEnd.Record(time.Duration(i+1) * 2 * time.Millisecond)
	}
	var js bytes.Buffer
	if err := res.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Workload         string           `json:"workload"`
		RecordsPerSecond float64          `json:"records_per_second"`
		MBPerSecond      float64          `json:"mb_per_second"`
		ErrorCount       int64            `json:"error_count"`
		Errors           map[string]int64 `json:"errors"`
		Latency          LatencySummary   `json:"latency_us"`
		EndToEnd         *LatencySummary  `json:"end_to_end_latency_us"`
		NotConsumed      *int64           `json:"not_consumed"`
	}
	if err := json.Unmarshal(js.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, js.String())
	}
	near := func(got, want float64) bool { return math.Abs(got-want) <= want*0.01 }
	if got.Workload != "e2e" || got.RecordsPerSecond != 500 || got.MBPerSecond != 2 || got.ErrorCount != 2 ||
		got.Errors[client.CodeAckTimeout] != 2 || !near(got.Latency.P50, 5000) || got.Latency.Max != 10000 ||
		got.Latency.Mean != 5500 || got.EndToEnd == nil || !near(got.EndToEnd.P90, 18000) ||
		got.NotConsumed == nil || *got.NotConsumed != 3 {
		t.Errorf("JSON report: %s", js.String())
	}

	var table bytes.Buffer
	if err := res.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"500.0 records/s", "2.00 MB/s", "10 ok, 2 failed", "ack_timeout=2", "p99.9", "end-to-end", "not consumed", "acks=all"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}
