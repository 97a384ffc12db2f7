package election

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/logagent/logagent/internal/testseed"
)

// fakeConsulTxn is Consul's KV transaction, as far as the batcher's
// contract depends on it (agent/consul/state/txn.go in Consul 1.14): every
// operation runs against the transaction's own writes, a failure does not
// stop the others, all failures are reported (or, with firstOnly, only the
// first, as another Consul might), and a rollback applies nothing. Each
// operation carries its submission's id in Flags, so the fake can say what
// each submission alone would have met.
type fakeConsulTxn struct {
	mu        sync.Mutex
	index     uint64
	kv        map[string]api.KVPair
	firstOnly bool
	// noIndex rolls every failing request back with an error that names no
	// operation of it.
	noIndex bool
	// lostAnswers makes that many requests fail after being applied or not
	// (applyLost says which), as a timeout does.
	lostAnswers int
	applyLost   bool
	// hideResults drops the results of keys with this prefix, as Consul
	// does for keys the token may not read.
	hideResults string
	// requests holds every request's ops.
	requests []api.TxnOps
	// applied is every submission whose writes committed.
	applied map[uint64]bool
	// aloneFails[id] is the local indexes of the operations of submission
	// id that failed, evaluated alone against the state before its last
	// rolled-back request.
	aloneFails map[uint64][]int
	// block, when set, holds every request until it is closed.
	block chan struct{}
	// started receives each request's op count.
	started chan int
}

func newFakeConsulTxn() *fakeConsulTxn {
	return &fakeConsulTxn{kv: map[string]api.KVPair{}, applied: map[uint64]bool{}, aloneFails: map[uint64][]int{}, started: make(chan int, 1000)}
}

func (f *fakeConsulTxn) send(ctx context.Context, ops api.TxnOps, readOnly bool) (bool, *api.TxnResponse, error) {
	f.mu.Lock()
	block := f.block
	f.mu.Unlock()
	f.started <- len(ops)
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return false, nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, op := range ops {
		if readOnly && op.KV.Verb != api.KVGetOrEmpty && op.KV.Verb != api.KVCheckIndex && op.KV.Verb != api.KVCheckSession {
			return false, nil, fmt.Errorf("write %s in a read-only request", op.KV.Verb)
		}
	}
	f.requests = append(f.requests, ops)
	ok, resp := f.apply(ops)
	if f.lostAnswers > 0 {
		f.lostAnswers--
		if !f.applyLost && ok {
			return false, nil, errors.New("lost answer")
		}
		return false, nil, errors.New("lost answer (applied when it committed)")
	}
	return ok, resp, nil
}

// apply runs ops as Consul does; f.mu is held.
func (f *fakeConsulTxn) apply(ops api.TxnOps) (bool, *api.TxnResponse) {
	view := cloneKV(f.kv)
	idx := f.index + 1
	results, errs := evalOps(view, idx, ops)
	if len(errs) > 0 {
		// What each submission would have met alone.
		bySub := map[uint64]api.TxnOps{}
		var order []uint64
		for _, op := range ops {
			if _, ok := bySub[op.KV.Flags]; !ok {
				order = append(order, op.KV.Flags)
			}
			bySub[op.KV.Flags] = append(bySub[op.KV.Flags], op)
		}
		for _, id := range order {
			_, alone := evalOps(cloneKV(f.kv), idx, bySub[id])
			var local []int
			for _, e := range alone {
				local = append(local, e.OpIndex)
			}
			f.aloneFails[id] = local
		}
		if f.firstOnly {
			errs = errs[:1]
		}
		if f.noIndex {
			errs = api.TxnErrors{{OpIndex: len(ops) + 7, What: "raft apply failed"}}
		}
		return false, &api.TxnResponse{Errors: errs}
	}
	f.index = idx
	f.kv = view
	for _, op := range ops {
		if op.KV.Verb != api.KVGetOrEmpty && op.KV.Verb != api.KVCheckIndex && op.KV.Verb != api.KVCheckSession {
			f.applied[op.KV.Flags] = true
		}
	}
	if f.hideResults != "" {
		results = slices.DeleteFunc(results, func(r *api.TxnResult) bool { return strings.HasPrefix(r.KV.Key, f.hideResults) })
	}
	return true, &api.TxnResponse{Results: results}
}

func cloneKV(m map[string]api.KVPair) map[string]api.KVPair {
	out := make(map[string]api.KVPair, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// evalOps runs ops against view at index idx, Consul's way: on to the end,
// every failure collected.
func evalOps(view map[string]api.KVPair, idx uint64, ops api.TxnOps) (api.TxnResults, api.TxnErrors) {
	var results api.TxnResults
	var errs api.TxnErrors
	fail := func(i int, format string, args ...any) {
		errs = append(errs, &api.TxnError{OpIndex: i, What: fmt.Sprintf(format, args...)})
	}
	for i, op := range ops {
		kv := op.KV
		cur, exists := view[kv.Key]
		switch kv.Verb {
		case api.KVGetOrEmpty:
			p := cur
			if !exists {
				p = api.KVPair{Key: kv.Key}
			}
			results = append(results, &api.TxnResult{KV: &p})
		case api.KVCAS:
			if (kv.Index == 0 && exists) || (kv.Index != 0 && (!exists || cur.ModifyIndex != kv.Index)) {
				fail(i, "failed to set key %q, index is stale", kv.Key)
				continue
			}
			p := api.KVPair{Key: kv.Key, Value: kv.Value, ModifyIndex: idx, Session: cur.Session}
			view[kv.Key] = p
			results = append(results, &api.TxnResult{KV: &p})
		case api.KVLock:
			if exists && cur.Session != "" && cur.Session != kv.Session {
				fail(i, "failed to lock key %q, lock is already held", kv.Key)
				continue
			}
			p := api.KVPair{Key: kv.Key, Value: kv.Value, ModifyIndex: idx, Session: kv.Session}
			view[kv.Key] = p
			results = append(results, &api.TxnResult{KV: &p})
		case api.KVCheckSession:
			if !exists || cur.Session != kv.Session {
				fail(i, "failed session check for key %q", kv.Key)
				continue
			}
			p := cur
			results = append(results, &api.TxnResult{KV: &p})
		case api.KVCheckIndex:
			if !exists || cur.ModifyIndex != kv.Index {
				fail(i, "failed index check for key %q", kv.Key)
				continue
			}
			p := cur
			results = append(results, &api.TxnResult{KV: &p})
		case api.KVDeleteCAS:
			if !exists || cur.ModifyIndex != kv.Index {
				fail(i, "failed to delete key %q, index is stale", kv.Key)
				continue
			}
			delete(view, kv.Key)
		default:
			fail(i, "verb %s not faked", kv.Verb)
		}
	}
	return results, errs
}

// startBatcher runs a batcher over send until the test ends.
func startBatcher(t *testing.T, send txnSender, maxInflight int) *txnBatcher {
	t.Helper()
	b := newTxnBatcher(send, maxInflight)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { b.run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return b
}

func casOp(id uint64, key string, index uint64) *api.TxnOp {
	return &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: key, Index: index, Value: []byte(fmt.Sprint(id)), Flags: id}}
}

func lockOp(id uint64, key, session string) *api.TxnOp {
	return &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVLock, Key: key, Session: session, Value: []byte(fmt.Sprint(id)), Flags: id}}
}

func checkSessionOp(id uint64, key, session string) *api.TxnOp {
	return &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: key, Session: session, Flags: id}}
}

func getOp(id uint64, key string) *api.TxnOp {
	return &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVGetOrEmpty, Key: key, Flags: id}}
}

// outcome is what one submission got.
type outcome struct {
	ok   bool
	resp *api.TxnResponse
	err  error
}

// submitAll submits every list at once (in order, each queued before the
// next) and waits for all of them.
func submitAll(t *testing.T, b *txnBatcher, lists []api.TxnOps, readOnly bool) []outcome {
	t.Helper()
	out := make([]outcome, len(lists))
	var wg sync.WaitGroup
	for i, ops := range lists {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ok, resp, err := b.do(ctx, ops, readOnly)
			out[i] = outcome{ok, resp, err}
		})
		// Keep the order of submission: wait until this one is in, and
		// the first until it is out.
		waitUntil(t, func() bool { return submitted(b) > i && (i > 0 || b.requests.Load() > 0) })
	}
	wg.Wait()
	return out
}

func submitted(b *txnBatcher) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return int(b.nextSeq)
}

func queued(b *txnBatcher) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queues[0]) + len(b.queues[1])
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestTxnBatcherPacking holds the first request out, queues more behind it
// and checks how the next requests are packed and their answers split.
func TestTxnBatcherPacking(t *testing.T) {
	type sub struct {
		ops api.TxnOps
		// want is "ok", "refused <local op indexes>" or "error".
		want string
	}
	cases := []struct {
		name string
		// setup runs on the fake before anything is sent.
		setup func(f *fakeConsulTxn)
		subs  []sub
		// requests is the op counts of the requests after the held first
		// one (which carries the first submission alone).
		requests []int
	}{
		{
			name: "elections packed whole up to 64 ops",
			subs: func() []sub {
				var s []sub
				for i := range 40 {
					id := uint64(i + 1)
					s = append(s, sub{ops: api.TxnOps{lockOp(id, fmt.Sprintf("t/%d/leader", i), "s1"), casOp(id, fmt.Sprintf("t/%d/state", i), 0)}, want: "ok"})
				}
				return s
			}(),
			requests: []int{64, 14},
		},
		{
			name: "three-op submissions never split",
			subs: func() []sub {
				var s []sub
				for i := range 30 {
					id := uint64(i + 1)
					s = append(s, sub{ops: api.TxnOps{casOp(id, fmt.Sprintf("t/%d/a", i), 0), casOp(id, fmt.Sprintf("t/%d/b", i), 0), casOp(id, fmt.Sprintf("t/%d/c", i), 0)}, want: "ok"})
				}
				return s
			}(),
			requests: []int{63, 24},
		},
		{
			name: "a shared key waits for the next request",
			subs: []sub{
				{ops: api.TxnOps{casOp(1, "x", 0)}, want: "ok"},
				{ops: api.TxnOps{casOp(2, "a", 0)}, want: "ok"},
				{ops: api.TxnOps{casOp(3, "a", 0)}, want: "refused 0"},
				{ops: api.TxnOps{casOp(4, "b", 0)}, want: "ok"},
				{ops: api.TxnOps{casOp(5, "a", 0), casOp(5, "c", 0)}, want: "refused 0"},
			},
			// 2 and 4 first; 3 after; 5 with 3's key skipped behind it.
			requests: []int{2, 1, 2},
		},
		{
			name: "one refused election, the others retried and won",
			setup: func(f *fakeConsulTxn) {
				f.kv["t/2/leader"] = api.KVPair{Key: "t/2/leader", Session: "other", ModifyIndex: 1}
			},
			subs: []sub{
				{ops: api.TxnOps{casOp(1, "x", 0)}, want: "ok"},
				{ops: api.TxnOps{lockOp(2, "t/1/leader", "s1"), casOp(2, "t/1/state", 0)}, want: "ok"},
				{ops: api.TxnOps{lockOp(3, "t/2/leader", "s1"), casOp(3, "t/2/state", 0)}, want: "refused 0"},
				{ops: api.TxnOps{lockOp(4, "t/3/leader", "s1"), casOp(4, "t/3/state", 0)}, want: "ok"},
			},
			requests: []int{6, 4},
		},
		{
			name: "only the first failure reported",
			setup: func(f *fakeConsulTxn) {
				f.firstOnly = true
				f.kv["t/2/state"] = api.KVPair{Key: "t/2/state", ModifyIndex: 1}
				f.kv["t/4/state"] = api.KVPair{Key: "t/4/state", ModifyIndex: 1}
			},
			subs: []sub{
				{ops: api.TxnOps{casOp(1, "x", 0)}, want: "ok"},
				{ops: api.TxnOps{casOp(2, "t/1/state", 0)}, want: "ok"},
				{ops: api.TxnOps{checkSessionOp(3, "t/2/state", "s1"), casOp(3, "t/2/state", 5)}, want: "refused 0"},
				{ops: api.TxnOps{casOp(4, "t/3/state", 0)}, want: "ok"},
				{ops: api.TxnOps{casOp(5, "t/4/state", 0)}, want: "refused 0"},
			},
			// 3 refused; then 5; then 2 and 4 commit.
			requests: []int{5, 3, 2},
		},
		{
			name: "every failure reported, own indexes",
			setup: func(f *fakeConsulTxn) {
				f.kv["t/2/state"] = api.KVPair{Key: "t/2/state", ModifyIndex: 1}
			},
			subs: []sub{
				{ops: api.TxnOps{casOp(1, "x", 0)}, want: "ok"},
				{ops: api.TxnOps{casOp(2, "t/1/state", 0)}, want: "ok"},
				{ops: api.TxnOps{checkSessionOp(3, "t/2/state", "s1"), casOp(3, "t/2/state", 5), casOp(3, "t/2/other", 0)}, want: "refused 0 1"},
			},
			requests: []int{4, 1},
		},
		{
			name:  "a rollback naming no operation refuses everyone",
			setup: func(f *fakeConsulTxn) { f.noIndex = true; f.kv["b"] = api.KVPair{Key: "b", ModifyIndex: 1} },
			subs: []sub{
				{ops: api.TxnOps{casOp(1, "x", 0)}, want: "ok"},
				{ops: api.TxnOps{casOp(2, "a", 0)}, want: "refused -1"},
				{ops: api.TxnOps{casOp(3, "b", 0)}, want: "refused -1"},
			},
			requests: []int{2},
		},
		{
			name:  "a lost answer is an error for everyone in it",
			setup: func(f *fakeConsulTxn) { f.lostAnswers = 2 },
			subs: []sub{
				{ops: api.TxnOps{casOp(1, "x", 0)}, want: "error"},
				{ops: api.TxnOps{casOp(2, "a", 0)}, want: "error"},
				{ops: api.TxnOps{casOp(3, "b", 0)}, want: "error"},
			},
			requests: []int{2},
		},
		{
			name:  "results split by key, a hidden one missing",
			setup: func(f *fakeConsulTxn) { f.hideResults = "secret/" },
			subs: []sub{
				{ops: api.TxnOps{casOp(1, "x", 0)}, want: "ok"},
				{ops: api.TxnOps{casOp(2, "a", 0), casOp(2, "a2", 0)}, want: "ok"},
				{ops: api.TxnOps{casOp(3, "secret/b", 0)}, want: "missing"},
				{ops: api.TxnOps{casOp(4, "c", 0), &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: "x", Index: 1, Flags: 4}}, casOp(4, "d", 0)}, want: "ok"},
			},
			requests: []int{6},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeConsulTxn()
			if tc.setup != nil {
				tc.setup(f)
			}
			f.block = make(chan struct{})
			b := startBatcher(t, f.send, 1)
			lists := make([]api.TxnOps, len(tc.subs))
			for i, s := range tc.subs {
				lists[i] = s.ops
			}
			done := make(chan []outcome)
			go func() { done <- submitAll(t, b, lists, false) }()
			// The first goes alone and at once; the rest queue behind it.
			if n := <-f.started; n != len(tc.subs[0].ops) {
				t.Fatalf("first request has %d ops, want the first submission's %d", n, len(tc.subs[0].ops))
			}
			waitUntil(t, func() bool { return queued(b) == len(tc.subs)-1 })
			f.mu.Lock()
			close(f.block)
			f.block = nil
			f.mu.Unlock()
			got := <-done
			f.mu.Lock()
			var sizes []int
			for _, r := range f.requests[1:] {
				sizes = append(sizes, len(r))
			}
			f.mu.Unlock()
			if !slices.Equal(sizes, tc.requests) {
				t.Errorf("requests after the first = %v ops, want %v", sizes, tc.requests)
			}
			for i, s := range tc.subs {
				o := got[i]
				var desc string
				switch {
				case errors.Is(o.err, errTxnResultMissing):
					desc = "missing"
				case o.err != nil:
					desc = "error"
				case o.ok:
					desc = "ok"
					checkResults(t, i, s.ops, o.resp.Results)
				default:
					desc = "refused"
					for _, e := range o.resp.Errors {
						desc += fmt.Sprint(" ", e.OpIndex)
						if e.OpIndex >= 0 && !strings.Contains(e.What, fmt.Sprintf("%q", s.ops[e.OpIndex].KV.Key)) {
							t.Errorf("submission %d: error %d %q is not about its op %d (%s)", i, e.OpIndex, e.What, e.OpIndex, s.ops[e.OpIndex].KV.Key)
						}
					}
				}
				if desc != s.want {
					t.Errorf("submission %d = %s (%+v), want %s", i, desc, o, s.want)
				}
			}
		})
	}
}

// checkResults checks a committed submission's results are its own, in
// order: one per operation that yields one.
func checkResults(t *testing.T, i int, ops api.TxnOps, results api.TxnResults) {
	t.Helper()
	var want []string
	for _, op := range ops {
		if n, _, _ := txnOpResults(op); n == 1 {
			want = append(want, op.KV.Key)
		}
	}
	var got []string
	for _, r := range results {
		got = append(got, r.KV.Key)
	}
	if !slices.Equal(got, want) {
		t.Errorf("submission %d: results for keys %v, want %v", i, got, want)
	}
}

// TestTxnBatcherLoneSubmissionAtOnce: a submission alone is sent without
// waiting for company, and reads go in read-only requests of their own.
func TestTxnBatcherLoneSubmissionAtOnce(t *testing.T) {
	f := newFakeConsulTxn()
	b := startBatcher(t, f.send, 4)
	ctx := context.Background()
	start := time.Now()
	for i := range 20 {
		ok, resp, err := b.do(ctx, api.TxnOps{casOp(uint64(i+1), fmt.Sprint("k", i), 0)}, false)
		if err != nil || !ok || len(resp.Results) != 1 {
			t.Fatalf("write %d: %v %+v %v", i, ok, resp, err)
		}
		ok, resp, err = b.do(ctx, api.TxnOps{getOp(uint64(i+1), fmt.Sprint("k", i))}, true)
		if err != nil || !ok || string(resp.Results[0].KV.Value) != fmt.Sprint(i+1) {
			t.Fatalf("read %d: %v %+v %v", i, ok, resp, err)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("40 lone submissions took %s", took)
	}
	if n := b.requests.Load(); n != 40 {
		t.Errorf("%d requests for 40 lone submissions", n)
	}
	if _, _, err := b.do(ctx, api.TxnOps{casOp(1, "k", 0)}, true); err == nil {
		t.Error("a write in a read-only submission was accepted")
	}
	if _, _, err := b.do(ctx, api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVDeleteTree, Key: "k"}}}, false); err == nil {
		t.Error("a delete-tree was accepted")
	}
	if _, _, err := b.do(ctx, make(api.TxnOps, maxOpsPerTxn+1), false); err == nil {
		t.Error("65 ops were accepted")
	}
}

// TestTxnBatcherGoesAloneAfterRollbacks: a submission that others' failures
// keep rolling back is sent alone after maxSharedRollbacks.
func TestTxnBatcherGoesAloneAfterRollbacks(t *testing.T) {
	// Only the first failure is reported, and the victim's op comes last:
	// each request refuses one of the failing ones, the victim is retried.
	f := newFakeConsulTxn()
	f.firstOnly = true
	const failing = maxSharedRollbacks + 2
	for i := range failing {
		f.kv[fmt.Sprint("bad", i)] = api.KVPair{Key: fmt.Sprint("bad", i), ModifyIndex: 1}
	}
	f.block = make(chan struct{})
	b := startBatcher(t, f.send, 1)
	lists := []api.TxnOps{{casOp(100, "first", 0)}}
	for i := range failing {
		lists = append(lists, api.TxnOps{casOp(uint64(i+1), fmt.Sprint("bad", i), 0)})
	}
	lists = append(lists, api.TxnOps{casOp(99, "victim", 0)})
	done := make(chan []outcome)
	go func() { done <- submitAll(t, b, lists, false) }()
	<-f.started
	waitUntil(t, func() bool { return queued(b) == len(lists)-1 })
	f.mu.Lock()
	close(f.block)
	f.block = nil
	f.mu.Unlock()
	got := <-done
	if o := got[len(got)-1]; !o.ok || o.err != nil {
		t.Fatalf("victim = %+v", o)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sent := 0
	var last api.TxnOps
	for _, r := range f.requests {
		if slices.ContainsFunc(r, func(op *api.TxnOp) bool { return op.KV.Flags == 99 }) {
			sent++
			last = r
		}
	}
	if sent != maxSharedRollbacks+1 || len(last) != 1 {
		t.Errorf("victim sent %d times, last with %d ops; want %d times, alone at last", sent, len(last), maxSharedRollbacks+1)
	}
}

// TestTxnBatcherCallerLeaves: a caller whose context ends while queued is
// never sent; one whose request is out gets an error, not a verdict.
func TestTxnBatcherCallerLeaves(t *testing.T) {
	f := newFakeConsulTxn()
	f.block = make(chan struct{})
	b := startBatcher(t, f.send, 1)
	outCtx, cancelOut := context.WithCancel(context.Background())
	outErr := make(chan error, 1)
	go func() {
		_, _, err := b.do(outCtx, api.TxnOps{casOp(1, "out", 0)}, false)
		outErr <- err
	}()
	<-f.started
	queuedCtx, cancelQueued := context.WithCancel(context.Background())
	queuedErr := make(chan error, 1)
	go func() {
		_, _, err := b.do(queuedCtx, api.TxnOps{casOp(2, "queued", 0)}, false)
		queuedErr <- err
	}()
	waitUntil(t, func() bool { return queued(b) == 1 })
	cancelQueued()
	if err := <-queuedErr; err == nil || !strings.Contains(err.Error(), "not sent") {
		t.Errorf("queued caller left with %v, want not sent", err)
	}
	cancelOut()
	if err := <-outErr; err == nil || !strings.Contains(err.Error(), "unknown") {
		t.Errorf("caller of a request out left with %v, want outcome unknown", err)
	}
	f.mu.Lock()
	close(f.block)
	f.block = nil
	f.mu.Unlock()
	ok, _, err := b.do(context.Background(), api.TxnOps{casOp(3, "after", 0)}, false)
	if !ok || err != nil {
		t.Fatalf("after: %v %v", ok, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.requests {
		for _, op := range r {
			if op.KV.Flags == 2 {
				t.Error("the abandoned queued submission was sent")
			}
		}
	}
}

// TestTxnBatcherClose: submissions queued when the batcher stops get
// ErrClosed, and so do later ones.
func TestTxnBatcherClose(t *testing.T) {
	f := newFakeConsulTxn()
	f.block = make(chan struct{})
	b := newTxnBatcher(f.send, 1)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { b.run(ctx) })
	errs := make(chan error, 2)
	submit := func(i int) {
		go func() {
			_, _, err := b.do(context.Background(), api.TxnOps{casOp(uint64(i+1), fmt.Sprint("k", i), 0)}, false)
			errs <- err
		}()
	}
	// One at a time: submitted together, both could share the request.
	submit(0)
	<-f.started
	submit(1)
	waitUntil(t, func() bool { return queued(b) == 1 })
	cancel()
	wg.Wait()
	var got []error
	for range 2 {
		got = append(got, <-errs)
	}
	if !slices.ContainsFunc(got, func(err error) bool { return errors.Is(err, ErrClosed) }) ||
		!slices.ContainsFunc(got, func(err error) bool { return errors.Is(err, context.Canceled) }) {
		t.Errorf("errors at close = %v, want one ErrClosed (queued) and one context.Canceled (out)", got)
	}
	if _, _, err := b.do(context.Background(), api.TxnOps{casOp(3, "k", 0)}, false); !errors.Is(err, ErrClosed) {
		t.Errorf("after close: %v", err)
	}
}

// TestTxnBatcherRandom runs concurrent callers over a few keys, with
// refusals, lost answers and both ways of reporting failures, and checks
// that committed is exactly what Consul applied, that every refusal names
// operations that failed when the submission is evaluated alone, and that
// every caller gets an answer.
func TestTxnBatcherRandom(t *testing.T) {
	seed := testseed.Seed(t)
	for round := range 20 {
		rng := rand.New(rand.NewPCG(seed, uint64(round)))
		f := newFakeConsulTxn()
		f.firstOnly = rng.IntN(2) == 0
		f.lostAnswers = rng.IntN(3)
		f.applyLost = rng.IntN(2) == 0
		b := startBatcher(t, f.send, 1+rng.IntN(4))
		const callers, each = 16, 20
		type result struct {
			ops api.TxnOps
			outcome
		}
		results := make([][]result, callers)
		var wg sync.WaitGroup
		for c := range callers {
			crng := rand.New(rand.NewPCG(seed, uint64(round*1000+c)))
			wg.Go(func() {
				for i := range each {
					id := uint64(c*each + i + 1)
					p := crng.IntN(12)
					var ops api.TxnOps
					switch crng.IntN(4) {
					case 0:
						ops = api.TxnOps{lockOp(id, fmt.Sprint("p", p, "/leader"), fmt.Sprint("s", crng.IntN(2))), casOp(id, fmt.Sprint("p", p, "/state"), uint64(crng.IntN(3)))}
					case 1:
						ops = api.TxnOps{checkSessionOp(id, fmt.Sprint("p", p, "/leader"), fmt.Sprint("s", crng.IntN(2))), casOp(id, fmt.Sprint("p", p, "/state"), uint64(crng.IntN(40)))}
					case 2:
						ops = api.TxnOps{casOp(id, fmt.Sprint("p", p, "/state"), 0)}
					default:
						ops = api.TxnOps{getOp(id, fmt.Sprint("p", p, "/state"))}
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					ok, resp, err := b.do(ctx, ops, ops[0].KV.Verb == api.KVGetOrEmpty)
					cancel()
					results[c] = append(results[c], result{ops, outcome{ok, resp, err}})
				}
			})
		}
		wg.Wait()
		f.mu.Lock()
		for _, rs := range results {
			for _, r := range rs {
				id := r.ops[0].KV.Flags
				write := r.ops[0].KV.Verb != api.KVGetOrEmpty
				switch {
				case r.err != nil:
					// Unknown: either way.
				case r.ok:
					if write && !f.applied[id] {
						t.Errorf("seed %d round %d: submission %d reported committed, not applied", seed, round, id)
					}
					checkResults(t, int(id), r.ops, r.resp.Results)
				default:
					if f.applied[id] {
						t.Errorf("seed %d round %d: submission %d reported refused, but applied", seed, round, id)
					}
					alone := f.aloneFails[id]
					for _, e := range r.resp.Errors {
						if !slices.Contains(alone, e.OpIndex) {
							t.Errorf("seed %d round %d: submission %d refused at op %d (%s); alone it fails at %v", seed, round, id, e.OpIndex, e.What, alone)
						}
					}
				}
			}
		}
		f.mu.Unlock()
		if n := len(f.requests); n >= callers*each {
			t.Errorf("seed %d round %d: %d requests for %d submissions", seed, round, n, callers*each)
		}
	}
}
