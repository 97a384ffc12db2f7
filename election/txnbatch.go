package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/consul/api"
)

// txnBatcher is a group commit for Consul transactions: many partitions'
// small transactions (an election's [lock, cas], an ISR change's
// [check-session, cas, check-index], the consistent read before either)
// share one /v1/txn request of at most maxOpsPerTxn operations, as a log's
// group commit shares one fsync among many writes.
//
// The contract:
//
//   - A submission is a list of at most maxOpsPerTxn KV operations
//     (txnOpResults lists the verbs allowed) and is either read-only or not.
//     Its caller waits for its own outcome, which is exactly what the same
//     list sent alone could have been answered: committed with its own
//     results (resp.Results, in the order of its operations), rolled back
//     with its own errors (resp.Errors, OpIndex counted from its first
//     operation), or an error, after which the outcome is unknown.
//   - One goroutine (run, owned by the Client) takes whatever submissions
//     are queued whenever fewer than maxInflight requests are out, and packs
//     them whole, in order, into one request: nothing waits for a batch to
//     fill, so a lone submission is sent at once, and batches grow only while
//     earlier requests are out (a burst of thousands of campaigns).
//   - Submissions in one request never share a key: Consul runs a rolled-back
//     transaction's operations to the end against the transaction's own
//     writes (agent/consul/state/txn.go, txnDispatch), so a submission's
//     refusal could otherwise come from another's write that was then
//     rolled back. With disjoint keys every operation sees what it would
//     alone: the committed state and its own submission's earlier writes.
//   - Read-only submissions go in read-only requests (only get and check
//     verbs), sent with RequireConsistent: Consul serves a transaction
//     without writes from its read endpoint (Txn.Read, no Raft entry), in the
//     consistency mode asked for, and ?consistent makes its leader confirm
//     its leadership first. Anything that decides leadership reads this way.
//   - Consul transactions are all or nothing. A rolled-back request's
//     resp.Errors names failing operations by index: Consul 1.14 reports
//     every operation that failed its pre-check (ACLs, lock delay) if any
//     did, else every operation that failed to apply (txnDispatch goes on
//     after a failure and collects all). The submissions owning a named
//     operation get their refusal; the others were not applied and go back
//     to the head of the queue for the next request. This is correct whether
//     Consul names every failing operation or only the first.
//   - Progress: a rolled-back request names at least one operation, or (a
//     rollback without a usable index) every submission in it gets the
//     refusal; either way each rolled-back request completes at least one of
//     its submissions, so a queue of n submissions needs at most n rolled
//     back requests. A submission rolled back maxSharedRollbacks times by
//     others' failures is then sent alone, where its outcome is its own: no
//     submission is sent more than maxSharedRollbacks+1 times.
//   - A transport error, a timeout or an answer that is neither a commit
//     nor a rollback gives every submission of the request that error: its
//     outcome is unknown, as it was for a transaction sent alone. A committed
//     request whose results cannot be matched to a submission's operations
//     (Consul leaves out results the token may not read) gives that
//     submission errTxnResultMissing with ok true: applied, results unknown.
//   - A caller whose context ends while its submission is queued gets an
//     error and the submission is dropped unsent; while it is out, the
//     caller gets an error (outcome unknown) and the answer is discarded.
//     When the Client closes, queued submissions get ErrClosed unsent.
type txnBatcher struct {
	send        txnSender
	maxInflight int

	mu sync.Mutex
	// queues holds the waiting submissions, write and read-only apart, in
	// the order they were submitted (retried ones back at the head).
	queues   [2][]*txnSubmission
	inflight int
	nextSeq  uint64
	closed   bool
	// wake is signalled (buffered 1) on a submission and on a request's end.
	wake chan struct{}

	// requests counts the requests sent, submissions the submissions they
	// carried (a retried submission counts again), rollbacks the requests
	// Consul rolled back.
	requests, submissions, rollbacks atomic.Uint64
}

// txnSender sends one transaction; readOnly asks for a consistent read.
// It returns what api.Txn.Txn returns: ok true for committed, false with
// resp for rolled back, an error otherwise.
type txnSender func(ctx context.Context, ops api.TxnOps, readOnly bool) (bool, *api.TxnResponse, error)

// maxSharedRollbacks is how many times a submission may be rolled back by
// other submissions' failures before it is sent alone.
const maxSharedRollbacks = 3

// maxPackScan bounds how far past the head of a queue packing looks for
// submissions to skip over a key already in the batch.
const maxPackScan = 4 * maxOpsPerTxn

// errTxnResultMissing is a committed submission whose results Consul's
// answer did not carry.
var errTxnResultMissing = errors.New("election: consul committed the transaction but left out its results")

type submissionState uint8

const (
	subQueued submissionState = iota
	subSent
	subDone
	// subAbandoned: the caller stopped waiting.
	subAbandoned
)

type txnSubmission struct {
	ops      api.TxnOps
	readOnly bool
	// results is how many results each operation yields when committed.
	results []int
	seq     uint64
	// Guarded by the batcher's mu.
	state     submissionState
	rollbacks int
	done      chan txnOutcome
}

type txnOutcome struct {
	ok   bool
	resp *api.TxnResponse
	err  error
}

func newTxnBatcher(send txnSender, maxInflight int) *txnBatcher {
	return &txnBatcher{send: send, maxInflight: maxInflight, wake: make(chan struct{}, 1)}
}

// txnOpResults says how many results a committed KV operation yields in
// Consul's answer, and whether it only reads. Verbs whose count varies
// (get-tree) or that span keys (delete-tree, which could share keys with
// another submission unseen) are not batched.
func txnOpResults(op *api.TxnOp) (results int, read bool, err error) {
	if op == nil || op.KV == nil || op.Node != nil || op.Service != nil || op.Check != nil {
		return 0, false, fmt.Errorf("election: only KV operations are batched")
	}
	switch op.KV.Verb {
	case api.KVGet, api.KVGetOrEmpty, api.KVCheckSession, api.KVCheckIndex:
		return 1, true, nil
	case api.KVCheckNotExists:
		return 0, true, nil
	case api.KVSet, api.KVCAS, api.KVLock, api.KVUnlock:
		return 1, false, nil
	case api.KVDelete, api.KVDeleteCAS:
		return 0, false, nil
	}
	return 0, false, fmt.Errorf("election: KV verb %q is not batched", op.KV.Verb)
}

// do submits ops and waits for their outcome (see txnBatcher).
func (b *txnBatcher) do(ctx context.Context, ops api.TxnOps, readOnly bool) (bool, *api.TxnResponse, error) {
	if len(ops) == 0 || len(ops) > maxOpsPerTxn {
		return false, nil, fmt.Errorf("election: a batched transaction takes 1 to %d operations, not %d", maxOpsPerTxn, len(ops))
	}
	s := &txnSubmission{ops: ops, readOnly: readOnly, results: make([]int, len(ops)), done: make(chan txnOutcome, 1)}
	for i, op := range ops {
		n, read, err := txnOpResults(op)
		if err != nil {
			return false, nil, err
		}
		if readOnly && !read {
			return false, nil, fmt.Errorf("election: %s in a read-only transaction", op.KV.Verb)
		}
		s.results[i] = n
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return false, nil, ErrClosed
	}
	s.seq = b.nextSeq
	b.nextSeq++
	q := queueOf(readOnly)
	b.queues[q] = append(b.queues[q], s)
	b.mu.Unlock()
	b.signal()

	select {
	case o := <-s.done:
		return o.ok, o.resp, o.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch s.state {
	case subDone:
		o := <-s.done
		return o.ok, o.resp, o.err
	case subQueued:
		// Dropped by the next pack; never sent in this round. An earlier
		// round was rolled back, so nothing of it was applied.
		s.state = subAbandoned
		return false, nil, fmt.Errorf("election: transaction not sent: %w", context.Cause(ctx))
	default:
		s.state = subAbandoned
		return false, nil, fmt.Errorf("election: transaction outcome unknown: %w", context.Cause(ctx))
	}
}

func queueOf(readOnly bool) int {
	if readOnly {
		return 1
	}
	return 0
}

func (b *txnBatcher) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// run sends batches until ctx ends, then waits for the requests out and
// fails what is still queued with ErrClosed.
func (b *txnBatcher) run(ctx context.Context) {
	var requests sync.WaitGroup
	defer func() {
		requests.Wait()
		b.mu.Lock()
		b.closed = true
		for q := range b.queues {
			for _, s := range b.queues[q] {
				b.completeLocked(s, txnOutcome{err: ErrClosed})
			}
			b.queues[q] = nil
		}
		b.mu.Unlock()
	}()
	for ctx.Err() == nil {
		b.mu.Lock()
		var batch []*txnSubmission
		if b.inflight < b.maxInflight {
			batch = b.packLocked()
		}
		if batch != nil {
			b.inflight++
		}
		b.mu.Unlock()
		if batch == nil {
			select {
			case <-ctx.Done():
				return
			case <-b.wake:
			}
			continue
		}
		requests.Go(func() { b.sendBatch(ctx, batch) })
	}
}

// packLocked takes the next batch off the queue whose head waited longest:
// submissions whole and in order, up to maxOpsPerTxn operations, skipping
// (and keeping queued, in place) one that shares a key with the batch or
// with a submission skipped before it. A submission marked to go alone
// goes alone. Nil when nothing is queued.
func (b *txnBatcher) packLocked() []*txnSubmission {
	q := -1
	for i := range b.queues {
		// Callers that left are dropped here, or where a scan meets them.
		for len(b.queues[i]) > 0 && b.queues[i][0].state == subAbandoned {
			b.queues[i][0] = nil
			b.queues[i] = b.queues[i][1:]
		}
		if len(b.queues[i]) > 0 && (q < 0 || b.queues[i][0].seq < b.queues[q][0].seq) {
			q = i
		}
	}
	if q < 0 {
		return nil
	}
	queue := b.queues[q]
	var batch, skipped []*txnSubmission
	ops := 0
	keys := map[string]bool{}
	i := 0
	for ; i < len(queue) && i < maxPackScan; i++ {
		s := queue[i]
		if s.state == subAbandoned {
			continue
		}
		alone := s.rollbacks >= maxSharedRollbacks
		if ops+len(s.ops) > maxOpsPerTxn || (alone && len(batch) > 0) {
			break
		}
		shared := sharesKey(s, keys)
		for _, op := range s.ops {
			keys[op.KV.Key] = true
		}
		if shared {
			skipped = append(skipped, s)
			continue
		}
		s.state = subSent
		batch = append(batch, s)
		ops += len(s.ops)
		if alone {
			i++
			break
		}
	}
	// The head is live, so the batch holds at least it.
	if len(skipped) == 0 {
		b.queues[q] = queue[i:]
	} else {
		b.queues[q] = append(skipped, queue[i:]...)
	}
	return batch
}

func sharesKey(s *txnSubmission, keys map[string]bool) bool {
	for _, op := range s.ops {
		if keys[op.KV.Key] {
			return true
		}
	}
	return false
}

// sendBatch sends one batch and hands every submission its outcome, or
// queues it again when another's failure rolled it back.
func (b *txnBatcher) sendBatch(ctx context.Context, batch []*txnSubmission) {
	var ops api.TxnOps
	for _, s := range batch {
		ops = append(ops, s.ops...)
	}
	b.requests.Add(1)
	b.submissions.Add(uint64(len(batch)))
	ok, resp, err := b.send(ctx, ops, batch[0].readOnly)

	b.mu.Lock()
	defer func() {
		b.inflight--
		b.mu.Unlock()
		b.signal()
	}()
	switch {
	case err != nil:
		for _, s := range batch {
			b.completeLocked(s, txnOutcome{err: err})
		}
	case resp == nil:
		for _, s := range batch {
			b.completeLocked(s, txnOutcome{err: errors.New("election: consul answered a transaction without a body")})
		}
	case ok:
		results := resp.Results
		for _, s := range batch {
			own, missing := takeResults(s, &results)
			o := txnOutcome{ok: true, resp: &api.TxnResponse{Results: own}}
			if missing {
				o.err = errTxnResultMissing
			}
			b.completeLocked(s, o)
		}
	default:
		b.rollbacks.Add(1)
		b.splitRollbackLocked(batch, resp.Errors)
	}
}

// takeResults takes s's results off the front of results: one for each of
// its operations that yields one, matched by key, since Consul drops the
// results of keys the token may not read without saying which.
func takeResults(s *txnSubmission, results *api.TxnResults) (api.TxnResults, bool) {
	var own api.TxnResults
	missing := false
	for i, op := range s.ops {
		for range s.results[i] {
			rs := *results
			if len(rs) > 0 && rs[0] != nil && rs[0].KV != nil && rs[0].KV.Key == op.KV.Key {
				own = append(own, rs[0])
				*results = rs[1:]
			} else {
				missing = true
			}
		}
	}
	return own, missing
}

// splitRollbackLocked gives the submissions owning a failed operation their
// refusal, with their own operation indexes, and queues the others again.
func (b *txnBatcher) splitRollbackLocked(batch []*txnSubmission, errs api.TxnErrors) {
	owned := make([]api.TxnErrors, len(batch))
	attributed := false
	for _, e := range errs {
		if e == nil {
			continue
		}
		start := 0
		for i, s := range batch {
			if e.OpIndex >= start && e.OpIndex < start+len(s.ops) {
				owned[i] = append(owned[i], &api.TxnError{OpIndex: e.OpIndex - start, What: e.What})
				attributed = true
				break
			}
			start += len(s.ops)
		}
	}
	if !attributed {
		// A rollback that names no operation of the request: nothing was
		// applied, and nobody can be told apart. Every submission gets the
		// refusal, with the reasons and no index of theirs.
		var reasons api.TxnErrors
		for _, e := range errs {
			if e != nil {
				reasons = append(reasons, &api.TxnError{OpIndex: -1, What: e.What})
			}
		}
		for _, s := range batch {
			b.completeLocked(s, txnOutcome{resp: &api.TxnResponse{Errors: reasons}})
		}
		return
	}
	var again [2][]*txnSubmission
	for i, s := range batch {
		switch {
		case len(owned[i]) > 0:
			b.completeLocked(s, txnOutcome{resp: &api.TxnResponse{Errors: owned[i]}})
		case s.state == subAbandoned:
		default:
			s.rollbacks++
			s.state = subQueued
			q := queueOf(s.readOnly)
			again[q] = append(again[q], s)
		}
	}
	for q := range again {
		if len(again[q]) > 0 {
			b.queues[q] = append(again[q], b.queues[q]...)
		}
	}
}

// completeLocked hands s its outcome unless its caller left.
func (b *txnBatcher) completeLocked(s *txnSubmission, o txnOutcome) {
	if s.state == subAbandoned || s.state == subDone {
		return
	}
	s.state = subDone
	s.done <- o
}
