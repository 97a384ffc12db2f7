package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// ErrInvalidConfig reports a plan or workload configuration that cannot run.
var ErrInvalidConfig = errors.New("bench: invalid configuration")

// ErrWorkerDone is returned by an Op that has nothing more to do (a consumer
// that reached its end offset): its worker stops, and the call counts as no
// request.
var ErrWorkerDone = errors.New("bench: worker done")

// Hard caps of a run whose Plan leaves HardCap at 0.
const (
	// DefaultDrain is how long past its Duration a run may take to finish
	// the requests in flight and, in an open loop, the scheduled requests
	// not yet issued.
	DefaultDrain = 30 * time.Second
	// DefaultCountCap bounds a run that has a Count but no Duration.
	DefaultCountCap = 10 * time.Minute
)

// Request is one request a worker is asked to make.
type Request struct {
	// Seq numbers the requests of a run from 0, in schedule order.
	Seq int64
	// Intended is when the request was due: its scheduled time in an open
	// loop, the time the worker started it in a closed loop. Latency is
	// measured from it.
	Intended time.Time
}

// Done is what a successful request moved.
type Done struct {
	Records int64
	// Bytes counts record keys, values and headers, not framing.
	Bytes int64
}

// Op makes one request. Each worker of a run calls its own Op, one call at a
// time; ctx ends at the run's hard cap.
type Op func(ctx context.Context, req Request) (Done, error)

// Plan says when a run issues requests and when it ends.
type Plan struct {
	// Rate is the target in requests per second. A positive rate is an
	// open loop: request n is due at start + n/Rate whatever happened to
	// the others, and waits for a free worker if there is none. 0 is a
	// closed loop: each worker issues its next request when its previous
	// one is answered.
	Rate float64
	// Duration stops issuing requests due at or after start + Duration;
	// 0 means no time bound (Count must be set).
	Duration time.Duration
	// Count stops after this many requests; 0 means no count bound.
	Count int64
	// HardCap ends the run this long after its start, whatever is in
	// flight: those requests fail as canceled and, in an open loop,
	// requests already due but not issued count as unsent. 0 means
	// Duration + DefaultDrain, or DefaultCountCap without a Duration.
	HardCap time.Duration
	// Clock defaults to SystemClock.
	Clock Clock
	// Progress, when set, is called with the totals so far every
	// ProgressInterval (default 1s), never after Run returns.
	Progress         func(Progress)
	ProgressInterval time.Duration
}

// Progress is a run's totals so far.
type Progress struct {
	Elapsed  time.Duration
	Requests int64
	Records  int64
	Bytes    int64
	Errors   int64
}

func (p Plan) validate(workers int) error {
	switch {
	case workers <= 0:
		return fmt.Errorf("%w: no workers", ErrInvalidConfig)
	case math.IsNaN(p.Rate) || math.IsInf(p.Rate, 0) || p.Rate < 0:
		return fmt.Errorf("%w: rate %v", ErrInvalidConfig, p.Rate)
	case p.Duration < 0 || p.Count < 0 || p.HardCap < 0 || p.ProgressInterval < 0:
		return fmt.Errorf("%w: negative duration, count, hard cap or progress interval", ErrInvalidConfig)
	case p.Duration == 0 && p.Count == 0:
		return fmt.Errorf("%w: a run needs a duration or a count", ErrInvalidConfig)
	case p.HardCap > 0 && p.HardCap < p.Duration:
		return fmt.Errorf("%w: hard cap %v is shorter than the duration %v", ErrInvalidConfig, p.HardCap, p.Duration)
	}
	return nil
}

func (p Plan) hardCap() time.Duration {
	switch {
	case p.HardCap > 0:
		return p.HardCap
	case p.Duration > 0:
		return p.Duration + DefaultDrain
	}
	return DefaultCountCap
}

// Run makes requests with one worker per op, as plan says, and returns what
// they did once the last one is answered or the hard cap has passed. The
// Result's Workload and Config are left for the caller. It fails only for
// an invalid plan; a canceled ctx ends the run like the hard cap.
func Run(ctx context.Context, plan Plan, ops []Op) (*Result, error) {
	if err := plan.validate(len(ops)); err != nil {
		return nil, err
	}
	r := &runner{plan: plan, clock: orSystemClock(plan.Clock)}
	if plan.Rate > 0 {
		r.nsPerRequest = 1e9 / plan.Rate
	}
	r.start = r.clock.Now()
	r.end = r.start.Add(plan.Duration)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopCap := r.clock.AfterFunc(plan.hardCap(), cancel)
	defer stopCap()

	progressCtx, stopProgress := context.WithCancel(runCtx)
	var progressDone sync.WaitGroup
	if plan.Progress != nil {
		progressDone.Add(1)
		go func() {
			defer progressDone.Done()
			r.reportProgress(progressCtx)
		}()
	}

	stats := make([]workerStats, len(ops))
	var unsent int64
	if plan.Rate > 0 {
		unsent = r.openLoop(runCtx, ops, stats)
	} else {
		r.closedLoop(runCtx, ops, stats)
	}
	elapsed := r.clock.Now().Sub(r.start)
	stopProgress()
	progressDone.Wait()

	res := &Result{Elapsed: elapsed}
	for i := range stats {
		res.merge(&stats[i])
	}
	if unsent > 0 {
		res.addErrors(KindUnsent, unsent, fmt.Sprintf("%d request(s) were due but not issued when the run was stopped", unsent))
	}
	return res, nil
}

type runner struct {
	plan         Plan
	clock        Clock
	start, end   time.Time
	nsPerRequest float64
	live         liveCounters
}

// liveCounters are the totals that Progress reports while workers run.
type liveCounters struct {
	requests, records, bytes, errors atomic.Int64
}

// openLoop issues requests on the schedule until it is over or runCtx ends,
// and returns how many were due but never issued.
func (r *runner) openLoop(runCtx context.Context, ops []Op, stats []workerStats) (unsent int64) {
	tickets := make(chan Request)
	workersGone := make(chan struct{})
	var workers sync.WaitGroup
	for i, op := range ops {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for req := range tickets {
				if r.issue(runCtx, op, req, &stats[i]) {
					return
				}
			}
		}()
	}
	go func() {
		workers.Wait()
		close(workersGone)
	}()
	unsent = r.dispatch(runCtx, tickets, workersGone)
	<-workersGone
	return unsent
}

// dispatch hands each request to a free worker at its due time or, when
// every worker is busy, as soon as one is free: the request keeps its due
// time, so the wait is charged to its latency.
func (r *runner) dispatch(ctx context.Context, tickets chan<- Request, workersGone <-chan struct{}) (unsent int64) {
	defer close(tickets)
	for seq := int64(0); ; seq++ {
		if r.plan.Count > 0 && seq >= r.plan.Count {
			return 0
		}
		due := r.due(seq)
		if r.plan.Duration > 0 && !due.Before(r.end) {
			return 0
		}
		if err := r.clock.SleepUntil(ctx, due); err != nil {
			return r.dueFrom(seq)
		}
		select {
		case tickets <- Request{Seq: seq, Intended: due}:
		case <-ctx.Done():
			return r.dueFrom(seq)
		case <-workersGone:
			return r.dueFrom(seq)
		}
	}
}

// due is the scheduled time of request seq.
func (r *runner) due(seq int64) time.Time {
	return r.start.Add(time.Duration(float64(seq) * r.nsPerRequest))
}

// dueFrom counts the requests from seq on that are due by now and belong to
// the run.
func (r *runner) dueFrom(seq int64) int64 {
	last := r.lastDueBy(r.clock.Now())
	if r.plan.Count > 0 {
		last = min(last, r.plan.Count-1)
	}
	if r.plan.Duration > 0 {
		last = min(last, r.lastDueBy(r.end.Add(-1)))
	}
	return max(last-seq+1, 0)
}

// lastDueBy is the last request due at or before t, -1 if none.
func (r *runner) lastDueBy(t time.Time) int64 {
	elapsed := t.Sub(r.start)
	if elapsed < 0 {
		return -1
	}
	seq := int64(float64(elapsed) / r.nsPerRequest)
	// The division and due's multiplication may round apart by one.
	for !r.due(seq + 1).After(t) {
		seq++
	}
	for seq >= 0 && r.due(seq).After(t) {
		seq--
	}
	return seq
}

// closedLoop runs each worker back to back until the duration or the count
// is used up, runCtx ends, or its op is done.
func (r *runner) closedLoop(runCtx context.Context, ops []Op, stats []workerStats) {
	var claimed atomic.Int64
	var workers sync.WaitGroup
	for i, op := range ops {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for runCtx.Err() == nil {
				now := r.clock.Now()
				if r.plan.Duration > 0 && !now.Before(r.end) {
					return
				}
				seq := claimed.Add(1) - 1
				if r.plan.Count > 0 && seq >= r.plan.Count {
					return
				}
				if r.issue(runCtx, op, Request{Seq: seq, Intended: now}, &stats[i]) {
					return
				}
			}
		}()
	}
	workers.Wait()
}

// issue makes one request and counts its outcome; it reports whether the
// worker is done.
func (r *runner) issue(ctx context.Context, op Op, req Request, s *workerStats) (workerDone bool) {
	done, err := op(ctx, req)
	if errors.Is(err, ErrWorkerDone) {
		return true
	}
	if err != nil {
		s.fail(err)
		r.live.errors.Add(1)
		return false
	}
	s.latency.Record(r.clock.Now().Sub(req.Intended))
	s.requests++
	s.records += done.Records
	s.bytes += done.Bytes
	r.live.requests.Add(1)
	r.live.records.Add(done.Records)
	r.live.bytes.Add(done.Bytes)
	return false
}

func (r *runner) reportProgress(ctx context.Context) {
	interval := r.plan.ProgressInterval
	if interval == 0 {
		interval = time.Second
	}
	for next := r.start.Add(interval); ; next = next.Add(interval) {
		if r.clock.SleepUntil(ctx, next) != nil {
			return
		}
		r.plan.Progress(Progress{
			Elapsed:  r.clock.Now().Sub(r.start),
			Requests: r.live.requests.Load(),
			Records:  r.live.records.Load(),
			Bytes:    r.live.bytes.Load(),
			Errors:   r.live.errors.Load(),
		})
	}
}

// workerStats is one worker's own tally, merged into the Result at the end.
type workerStats struct {
	latency  Histogram
	requests int64
	records  int64
	bytes    int64
	errors   map[string]int64
	examples map[string]string
}

func (s *workerStats) fail(err error) {
	kind := ErrorKind(err)
	if s.errors == nil {
		s.errors, s.examples = map[string]int64{}, map[string]string{}
	}
	s.errors[kind]++
	if _, ok := s.examples[kind]; !ok {
		s.examples[kind] = err.Error()
	}
}
