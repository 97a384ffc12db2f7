package election

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/logagent/logagent/internal/consultest"
	"github.com/logagent/logagent/internal/testseed"
)

// sentTxn is one request the batcher sent to Consul, as it was answered.
type sentTxn struct {
	ops      api.TxnOps
	readOnly bool
	ok       bool
	errs     api.TxnErrors
	err      error
}

// txnObserver records the batcher's requests to the real Consul. With
// pauseAfterRead it pauses the batcher after each read-only request, so
// that a test can let the writes its answers bring queue up before they
// are sent. Install it before the client's first batched call.
type txnObserver struct {
	mu             sync.Mutex
	sent           []sentTxn
	pauseAfterRead atomic.Bool
}

func observeTxns(t *testing.T, c *Client) *txnObserver {
	t.Helper()
	o := &txnObserver{}
	send := c.batcher.send
	b := c.batcher
	c.batcher.send = func(ctx context.Context, ops api.TxnOps, readOnly bool) (bool, *api.TxnResponse, error) {
		ok, resp, err := send(ctx, ops, readOnly)
		if readOnly && o.pauseAfterRead.Load() {
			pauseBatcher(b)
		}
		rec := sentTxn{ops: ops, readOnly: readOnly, ok: ok, err: err}
		if resp != nil {
			rec.errs = resp.Errors
		}
		o.mu.Lock()
		o.sent = append(o.sent, rec)
		o.mu.Unlock()
		return ok, resp, err
	}
	return o
}

// pauseBatcher stops b from sending anything new.
func pauseBatcher(b *txnBatcher) {
	b.mu.Lock()
	b.maxInflight = 0
	b.mu.Unlock()
}

// resumeBatcher lets b send again, at most maxInflight requests at once.
func resumeBatcher(b *txnBatcher, maxInflight int) {
	b.mu.Lock()
	b.maxInflight = maxInflight
	b.mu.Unlock()
	b.signal()
}

// waitQueued waits until b's queue (reads or writes) holds n submissions.
func waitQueued(t *testing.T, b *txnBatcher, readOnly bool, n int) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("%d queued submissions", n), func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.queues[queueOf(readOnly)]) >= n
	})
}

func (o *txnObserver) requests() []sentTxn {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.sent)
}

// TestBatchedCampaigns: one agent campaigning for 200 partitions at once
// wins them all with far fewer Consul requests than partitions (one
// consistent read and one election transaction each, unbatched), every
// leadership at epoch 1 in Consul.
func TestBatchedCampaigns(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	admin := srv.Client()
	a := newTestClient(t, srv, "a")
	obs := observeTxns(t, a)
	register(t, a)
	const topic, partitions = "batched", 200
	assignment := make([][]string, partitions)
	for p := range assignment {
		assignment[p] = []string{"a"}
	}
	createTopic(t, a, topic, assignment)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitFor(t, 10*time.Second, "the topic in a's metadata", func() bool {
		_, ok := a.Metadata().Partition(topic, partitions-1)
		return ok
	})

	before, _ := a.ConsulRequests()
	start := time.Now()
	leaderships := make([]*Leadership, partitions)
	errs := make([]error, partitions)
	var wg sync.WaitGroup
	for p := range partitions {
		wg.Go(func() { leaderships[p], errs[p] = a.Campaign(ctx, topic, p) })
	}
	wg.Wait()
	took := time.Since(start)
	after, _ := a.ConsulRequests()
	for p, err := range errs {
		if err != nil {
			t.Fatalf("Campaign %s/%d: %v", topic, p, err)
		}
		if leaderships[p].Epoch() != 1 {
			t.Errorf("%s/%d led at epoch %d, want 1", topic, p, leaderships[p].Epoch())
		}
	}
	sent := obs.requests()
	var reads, writes, maxOps int
	for _, r := range sent {
		if r.readOnly {
			reads++
		} else {
			writes++
		}
		maxOps = max(maxOps, len(r.ops))
	}
	t.Logf("%d campaigns won in %s with %d Consul requests in all: %d read-only and %d write transactions, the largest of %d ops",
		partitions, took.Round(time.Millisecond), after-before, reads, writes, maxOps)
	// Unbatched, the campaigns alone are 2 requests per partition.
	if got := after - before; got >= partitions/2 {
		t.Errorf("%d Consul requests for %d campaigns, want fewer than %d", got, partitions, partitions/2)
	}
	if maxOps > maxOpsPerTxn {
		t.Errorf("a request of %d ops", maxOps)
	}
	for p := range partitions {
		if st := consulState(t, admin, topic, p); st.Leader != "a" || st.Epoch != 1 {
			t.Fatalf("%s/%d state %+v, want leader a epoch 1", topic, p, st)
		}
	}
}

// startBatchedTopic starts a Consul server and agent a, registered, with
// one batched request in flight at most and its requests observed, and
// creates topic with replicas [a b] for each of its partitions.
func startBatchedTopic(t *testing.T, topic string, partitions int) (*consultest.Server, *Client, *txnObserver) {
	t.Helper()
	srv := consultest.Start(t)
	a := newTestClient(t, srv, "a", func(cfg *Config) { cfg.MaxInflight = 1 })
	obs := observeTxns(t, a)
	register(t, a)
	assignment := make([][]string, partitions)
	for p := range assignment {
		assignment[p] = []string{"a", "b"}
	}
	createTopic(t, a, topic, assignment)
	return srv, a, obs
}

// TestBatchedElectionOneRefused: one partition's leader key is held by
// another session; the election refused for it shares requests with the
// others, which still all win, and it never does.
func TestBatchedElectionOneRefused(t *testing.T) {
	t.Parallel()
	rng := testseed.Rand(t)
	const topic, partitions = "refused", 40
	srv, a, obs := startBatchedTopic(t, topic, partitions)
	admin := srv.Client()
	held := rng.IntN(partitions)
	t.Logf("partition %d's key is held by another session", held)
	other, _, err := admin.Session().Create(&api.SessionEntry{Name: "other", TTL: "60s", LockDelay: time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	heldKey := keyspace{prefix: testPrefix}.leader(topic, held)
	if ok, _, err := admin.KV().Acquire(&api.KVPair{Key: heldKey, Session: other}, nil); err != nil || !ok {
		t.Fatalf("acquire %s: %v, %v", heldKey, ok, err)
	}
	waitFor(t, 10*time.Second, "the held key in a's metadata", func() bool {
		pm, ok := a.Metadata().Partition(topic, held)
		return ok && pm.LeaderSession == other
	})

	// The partition whose key is held is not even tried while a's
	// metadata shows it held: try it the way a campaign does, with the
	// others.
	session, _, _ := a.usableSession()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	won := make([]*Leadership, partitions)
	errs := make([]error, partitions)
	var wg sync.WaitGroup
	// Every read in one request, then every election behind it.
	pauseBatcher(a.batcher)
	for p := range partitions {
		wg.Go(func() {
			pm, _ := a.Metadata().Partition(topic, p)
			won[p], errs[p] = a.tryLead(ctx, pm, 1, session, electClean, Candidate{LogEpoch: NoEpoch})
		})
	}
	waitQueued(t, a.batcher, true, partitions)
	obs.pauseAfterRead.Store(true)
	resumeBatcher(a.batcher, 1)
	waitQueued(t, a.batcher, false, partitions)
	resumeBatcher(a.batcher, 1)
	wg.Wait()
	for p := range partitions {
		switch {
		case errs[p] != nil:
			t.Errorf("%s/%d: %v", topic, p, errs[p])
		case p == held && won[p] != nil:
			t.Errorf("%s/%d won with its key held by another session", topic, p)
		case p != held && won[p] == nil:
			t.Errorf("%s/%d refused", topic, p)
		}
	}
	shared := false
	for _, r := range obs.requests() {
		if r.readOnly || r.ok || len(r.ops) <= 2 {
			continue
		}
		for _, e := range r.errs {
			if r.ops[e.OpIndex].KV.Key == heldKey {
				shared = true
			}
		}
	}
	if !shared {
		t.Errorf("the refused election never shared a request: %+v", obs.requests())
	}
	if st := consulState(t, admin, topic, held); st.Epoch != 0 {
		t.Errorf("held partition's state %+v, want untouched", st)
	}
	for p := range partitions {
		if p == held {
			continue
		}
		if st := consulState(t, admin, topic, p); st.Leader != "a" || st.Epoch != 1 {
			t.Errorf("%s/%d state %+v, want leader a epoch 1", topic, p, st)
		}
	}
}

// TestBatchedISRChangeOneLost: a leader of many partitions changes all
// their ISRs at once, in shared requests, after one of its leader keys was
// released behind its back: that one is ErrNotLeader (Consul refused its
// check-session, op 0 of its own), every other change is written.
func TestBatchedISRChangeOneLost(t *testing.T) {
	t.Parallel()
	rng := testseed.Rand(t)
	const topic, partitions = "isrbatch", 30
	srv, a, obs := startBatchedTopic(t, topic, partitions)
	admin := srv.Client()
	leaderships := make([]*Leadership, partitions)
	for p := range partitions {
		leaderships[p] = campaign(t, a, topic, p)
	}
	lost := rng.IntN(partitions)
	t.Logf("partition %d's leader key is released behind its leader's back", lost)
	lostKey := keyspace{prefix: testPrefix}.leader(topic, lost)
	if ok, _, err := admin.KV().Release(&api.KVPair{Key: lostKey, Session: leaderships[lost].session}, nil); err != nil || !ok {
		t.Fatalf("release %s: %v, %v", lostKey, ok, err)
	}
	obs.mu.Lock()
	obs.sent = nil
	obs.mu.Unlock()
	// Every change queued before any is sent.
	pauseBatcher(a.batcher)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make([]error, partitions)
	var wg sync.WaitGroup
	for p := range partitions {
		l := leaderships[p]
		l.mu.Lock()
		base := l.stateIndex
		l.mu.Unlock()
		// casState, not ProposeISR: the lost one must reach Consul even if
		// a's watch has seen the release already.
		wg.Go(func() {
			errs[p] = a.casState(ctx, l, base, PartitionState{Leader: "a", Epoch: l.Epoch(), ISR: []string{"a"}})
		})
	}
	waitQueued(t, a.batcher, false, partitions)
	resumeBatcher(a.batcher, 1)
	wg.Wait()
	for p := range partitions {
		want := "<nil>"
		if p == lost {
			want = "ErrNotLeader"
		}
		got := fmt.Sprint(errs[p])
		if errors.Is(errs[p], ErrNotLeader) {
			got = "ErrNotLeader"
		}
		if got != want {
			t.Errorf("%s/%d ISR change: %s, want %s", topic, p, got, want)
		}
		st := consulState(t, admin, topic, p)
		wantISR := []string{"a"}
		if p == lost {
			wantISR = []string{"a", "b"}
		}
		if !slices.Equal(st.ISR, wantISR) {
			t.Errorf("%s/%d ISR in Consul %v, want %v", topic, p, st.ISR, wantISR)
		}
	}
	if leaderships[lost].Err() == nil {
		t.Error("the lost leadership did not end")
	}
	writes := 0
	for _, r := range obs.requests() {
		if !r.readOnly {
			writes++
		}
	}
	t.Logf("%d ISR changes in %d write requests", partitions, writes)
	// One rolled back, one committed.
	if writes != 2 {
		t.Errorf("%d write requests for %d ISR changes: not batched", writes, partitions)
	}
}
