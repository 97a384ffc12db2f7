package election

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/logagent/logagent/internal/consultest"
)

// txnCounter counts the transactions (the only writes ProducerIDs makes)
// through one client's HTTP transport; before, when set, runs before each
// is sent.
type txnCounter struct {
	base   http.RoundTripper
	before func()

	mu                                      sync.Mutex
	sent, committed, inflight, peakInflight int
}

func newTxnCounter() *txnCounter {
	return &txnCounter{base: http.DefaultTransport.(*http.Transport).Clone()}
}

func (tc *txnCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Path != "/v1/txn" {
		return tc.base.RoundTrip(req)
	}
	tc.mu.Lock()
	tc.sent++
	tc.inflight++
	tc.peakInflight = max(tc.peakInflight, tc.inflight)
	before := tc.before
	tc.mu.Unlock()
	if before != nil {
		before()
	}
	resp, err := tc.base.RoundTrip(req)
	tc.mu.Lock()
	tc.inflight--
	if err == nil && resp.StatusCode == http.StatusOK {
		tc.committed++
	}
	tc.mu.Unlock()
	return resp, err
}

func (tc *txnCounter) setBefore(before func()) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	tc.before = before
}

func (tc *txnCounter) counts() (sent, committed, peak int) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.sent, tc.committed, tc.peakInflight
}

func withTransport(rt http.RoundTripper) func(*Config) {
	return func(cfg *Config) { cfg.Consul.HttpClient = &http.Client{Transport: rt} }
}

func withPrefix(prefix string) func(*Config) {
	return func(cfg *Config) { cfg.Prefix = prefix }
}

func newTestProducerIDs(t *testing.T, srv *consultest.Server, node string, opts ...func(*Config)) *ProducerIDs {
	t.Helper()
	return NewProducerIDs(newTestClient(t, srv, node, opts...))
}

func allocate(t *testing.T, p *ProducerIDs) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, epoch, err := p.Allocate(ctx)
	if err != nil || epoch != 0 {
		t.Fatalf("Allocate() = %d, epoch %d, %v; want epoch 0", id, epoch, err)
	}
	return id
}

func putKey(t *testing.T, admin *api.Client, key, value string) {
	t.Helper()
	if _, err := admin.KV().Put(&api.KVPair{Key: key, Value: []byte(value)}, nil); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func counterValue(t *testing.T, admin *api.Client) int64 {
	t.Helper()
	pair, _, err := admin.KV().Get(keyspace{prefix: testPrefix}.producerIDs(), &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil {
		t.Fatalf("get the producer id counter: %v, %v", pair, err)
	}
	next, err := strconv.ParseInt(string(pair.Value), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return next
}

// TestProducerIDsUniqueAcrossAgents: agents allocating concurrently never
// hand out an id twice, and Consul sees one write per block of 1000 ids,
// one at a time per agent.
func TestProducerIDsUniqueAcrossAgents(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	const agents, perAgent, goroutines = 3, 3000, 6
	counters := make([]*txnCounter, agents)
	allocators := make([]*ProducerIDs, agents)
	for i := range agents {
		counters[i] = newTxnCounter()
		allocators[i] = newTestProducerIDs(t, srv, "n"+strconv.Itoa(i), withTransport(counters[i]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ids := make([][]int64, agents*goroutines)
	errs := make([]error, agents*goroutines)
	var wg sync.WaitGroup
	for a, p := range allocators {
		for g := range goroutines {
			slot := a*goroutines + g
			wg.Go(func() {
				for range perAgent / goroutines {
					id, epoch, err := p.Allocate(ctx)
					if err == nil && epoch != 0 {
						err = fmt.Errorf("id %d at epoch %d, want 0", id, epoch)
					}
					if err != nil {
						errs[slot] = err
						return
					}
					ids[slot] = append(ids[slot], id)
				}
			})
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	all := slices.Sorted(slices.Values(slices.Concat(ids...)))
	if len(all) != agents*perAgent {
		t.Fatalf("%d ids, want %d", len(all), agents*perAgent)
	}
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			t.Fatalf("id %d handed out twice", all[i])
		}
	}
	if next := counterValue(t, srv.Client()); all[len(all)-1] >= next {
		t.Fatalf("id %d handed out, counter says %d is the next unreserved", all[len(all)-1], next)
	}
	lost := 0
	for i, tc := range counters {
		sent, committed, peak := tc.counts()
		t.Logf("n%d: %d ids, %d transactions sent, %d committed, at most %d in flight", i, perAgent, sent, committed, peak)
		if committed != perAgent/producerIDBlock || peak != 1 {
			t.Errorf("n%d: %d transactions committed and %d in flight at once for %d ids; want one per block of %d, one at a time",
				i, committed, peak, perAgent, producerIDBlock)
		}
		lost += sent - committed
	}
	t.Logf("%d CAS rounds lost to another agent and retried", lost)
}

// TestProducerIDsReservationRetriesLostCAS: a reservation that loses its
// CAS to another agent's reads the counter again and takes the next block.
func TestProducerIDsReservationRetriesLostCAS(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	other := newTestProducerIDs(t, srv, "other")
	racer := newTxnCounter()
	p := newTestProducerIDs(t, srv, "racer", withTransport(racer))

	var otherID int64
	racer.setBefore(func() {
		// Runs after p read the counter, before its CAS reaches Consul.
		racer.setBefore(nil)
		otherID = allocate(t, other)
	})
	id := allocate(t, p)
	sent, committed, _ := racer.counts()
	if sent != 2 || committed != 1 {
		t.Fatalf("%d transactions sent, %d committed; want the lost CAS and its retry", sent, committed)
	}
	if id < otherID+producerIDBlock {
		t.Fatalf("id %d is inside the block [%d, %d) the other agent reserved first", id, otherID, otherID+producerIDBlock)
	}
	t.Logf("other agent's block starts at %d, the retried reservation's at %d", otherID, id)

	t.Run("bounded", func(t *testing.T) {
		admin := srv.Client()
		key := keyspace{prefix: testPrefix}.producerIDs()
		loser := newTxnCounter()
		loser.setBefore(func() {
			putKey(t, admin, key, strconv.FormatInt(counterValue(t, admin)+producerIDBlock, 10))
		})
		p := newTestProducerIDs(t, srv, "loser", withTransport(loser))
		_, _, err := p.Allocate(context.Background())
		if sent, committed, _ := loser.counts(); !errors.Is(err, ErrConflict) || sent != producerCASAttempts || committed != 0 {
			t.Fatalf("Allocate against a writer that always wins = %v after %d transactions, %d committed; want ErrConflict after %d",
				err, sent, committed, producerCASAttempts)
		}
		t.Log(err)
	})
}

// laterClock is the real clock moved on by a fixed offset.
type laterClock struct{ offset time.Duration }

func (c laterClock) Now() time.Time                         { return time.Now().Add(c.offset) }
func (c laterClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// TestProducerIDsAfterCounterRewind: a counter that went back, as after a
// Consul snapshot restore a second later, does not bring back ids already
// handed out.
func TestProducerIDsAfterCounterRewind(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	admin := srv.Client()
	before := allocate(t, newTestProducerIDs(t, srv, "a"))
	aSecondLater := func(cfg *Config) { cfg.Clock = laterClock{offset: time.Second} }
	tests := []struct {
		name   string
		rewind func()
	}{
		{name: "counter at 0", rewind: func() { putKey(t, admin, keyspace{prefix: testPrefix}.producerIDs(), "0") }},
		{name: "counter gone", rewind: func() {
			if _, err := admin.KV().Delete(keyspace{prefix: testPrefix}.producerIDs(), nil); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		tt.rewind()
		if after := allocate(t, newTestProducerIDs(t, srv, "b", aSecondLater)); after < before+producerIDBlock {
			t.Fatalf("%s: id %d handed out again or inside the block [%d, %d) reserved before", tt.name, after, before, before+producerIDBlock)
		}
	}
}

func TestProducerIDsBump(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	admin := srv.Client()
	p := newTestProducerIDs(t, srv, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	epochKey := func(id int64) string { return keyspace{prefix: testPrefix}.producerEpoch(id) }

	t.Run("epochs 0, 1, 2", func(t *testing.T) {
		id := allocate(t, p)
		for _, want := range []int16{1, 2} {
			gotID, epoch, err := p.Bump(ctx, id)
			if err != nil || gotID != id || epoch != want {
				t.Fatalf("Bump(%d) = %d, epoch %d, %v; want %d, epoch %d", id, gotID, epoch, err, id, want)
			}
		}
		// Another agent bumps the same id on from the epoch in Consul.
		gotID, epoch, err := newTestProducerIDs(t, srv, "b").Bump(ctx, id)
		if err != nil || gotID != id || epoch != 3 {
			t.Fatalf("Bump(%d) on another agent = %d, epoch %d, %v; want epoch 3", id, gotID, epoch, err)
		}
	})

	t.Run("epoch limit", func(t *testing.T) {
		id := allocate(t, p)
		putKey(t, admin, epochKey(id), strconv.Itoa(math.MaxInt16-1))
		if gotID, epoch, err := p.Bump(ctx, id); err != nil || gotID != id || epoch != math.MaxInt16 {
			t.Fatalf("Bump(%d) at epoch %d = %d, epoch %d, %v; want epoch %d", id, math.MaxInt16-1, gotID, epoch, err, math.MaxInt16)
		}
		newID, epoch, err := p.Bump(ctx, id)
		if err != nil || newID == id || epoch != 0 {
			t.Fatalf("Bump(%d) at epoch %d = %d, epoch %d, %v; want a new id with epoch 0", id, math.MaxInt16, newID, epoch, err)
		}
		if other := allocate(t, p); other == newID {
			t.Fatalf("the new id %d was handed out again", newID)
		}
		if gotID, epoch, err := p.Bump(ctx, newID); err != nil || gotID != newID || epoch != 1 {
			t.Fatalf("Bump(%d) of the new id = %d, epoch %d, %v; want epoch 1", newID, gotID, epoch, err)
		}
	})

	t.Run("concurrent bumps get distinct epochs", func(t *testing.T) {
		id := allocate(t, p)
		others := []*ProducerIDs{p, newTestProducerIDs(t, srv, "c")}
		const perAgent = 10
		epochs := make([][]int16, len(others))
		errs := make([]error, len(others))
		var wg sync.WaitGroup
		for i, q := range others {
			wg.Go(func() {
				for range perAgent {
					gotID, epoch, err := q.Bump(ctx, id)
					if err == nil && gotID != id {
						err = fmt.Errorf("Bump(%d) answered id %d", id, gotID)
					}
					if err != nil {
						errs[i] = err
						return
					}
					epochs[i] = append(epochs[i], epoch)
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		got := slices.Sorted(slices.Values(slices.Concat(epochs...)))
		for i, epoch := range got {
			if epoch != int16(i+1) {
				t.Fatalf("epochs %v, want 1 to %d each once", got, len(others)*perAgent)
			}
		}
	})

	t.Run("unknown ids", func(t *testing.T) {
		next := counterValue(t, admin)
		for _, id := range []int64{-1, next, next + 1, math.MaxInt64} {
			if gotID, epoch, err := p.Bump(ctx, id); !errors.Is(err, ErrUnknownProducerID) {
				t.Errorf("Bump(%d) with the counter at %d = %d, epoch %d, %v; want ErrUnknownProducerID", id, next, gotID, epoch, err)
			}
		}
		fresh := newTestProducerIDs(t, srv, "fresh", withPrefix("logagent-test-fresh/"))
		if _, _, err := fresh.Bump(ctx, 0); !errors.Is(err, ErrUnknownProducerID) {
			t.Errorf("Bump(0) before any allocation = %v; want ErrUnknownProducerID", err)
		}
	})

	t.Run("corrupt values", func(t *testing.T) {
		id := allocate(t, p)
		for _, value := range []string{"-1", "32768", "one", ""} {
			putKey(t, admin, epochKey(id), value)
			if _, _, err := p.Bump(ctx, id); !errors.Is(err, ErrCorruptMetadata) {
				t.Errorf("Bump(%d) with epoch %q stored = %v; want ErrCorruptMetadata", id, value, err)
			}
		}
		const prefix = "logagent-test-corrupt/"
		putKey(t, admin, keyspace{prefix: prefix}.producerIDs(), "12x")
		if _, _, err := newTestProducerIDs(t, srv, "d", withPrefix(prefix)).Allocate(ctx); !errors.Is(err, ErrCorruptMetadata) {
			t.Errorf("Allocate with counter %q stored = %v; want ErrCorruptMetadata", "12x", err)
		}
	})
}

// TestProducerIDsConsulDown: ids of the block in hand are still handed out
// without Consul; past them, and for bumps, the error is Consul's, none of
// the sentinels that mean something else to the agent.
func TestProducerIDsConsulDown(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	c := newTestClient(t, srv, "a")
	p := NewProducerIDs(c)
	first := allocate(t, p)
	srv.Stop()
	for i := int64(1); i < producerIDBlock; i++ {
		if id := allocate(t, p); id != first+i {
			t.Fatalf("id %d from the block in hand, want %d", id, first+i)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	calls := map[string]func() error{
		"Allocate": func() error { _, _, err := p.Allocate(ctx); return err },
		"Bump":     func() error { _, _, err := p.Bump(ctx, first); return err },
	}
	for name, call := range calls {
		err := call()
		if err == nil {
			t.Fatalf("%s with Consul down succeeded", name)
		}
		for _, sentinel := range []error{ErrUnknownProducerID, ErrCorruptMetadata, ErrPermissionDenied, ErrConflict, ErrClosed, context.DeadlineExceeded} {
			if errors.Is(err, sentinel) {
				t.Fatalf("%s with Consul down = %v, which is %v", name, err, sentinel)
			}
		}
		t.Logf("%s: %v", name, err)
	}
	if err := c.Close(ctx); err != nil {
		t.Logf("close: %v", err)
	}
	if _, _, err := p.Allocate(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Allocate after Close = %v; want ErrClosed", err)
	}
}

// TestProducerIDsACL: the shipped policy covers the producer keys, and a
// token without it is told which rule is missing.
func TestProducerIDsACL(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t, consultest.WithACL())
	admin := srv.Client()
	policyRules, err := os.ReadFile("acl-policy.hcl")
	if err != nil {
		t.Fatal(err)
	}
	rules := strings.ReplaceAll(string(policyRules), `"`+DefaultPrefix+`"`, `"`+testPrefix+`"`)
	policy, _, err := admin.ACL().PolicyCreate(&api.ACLPolicy{Name: "logagent", Rules: rules}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := admin.ACL().TokenCreate(&api.ACLToken{Policies: []*api.ACLTokenPolicyLink{{ID: policy.ID}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	withToken := func(secret string) func(*Config) { return func(cfg *Config) { cfg.Consul.Token = secret } }

	p := newTestProducerIDs(t, srv, "a", withToken(tok.SecretID))
	id := allocate(t, p)
	if _, epoch, err := p.Bump(ctx, id); err != nil || epoch != 1 {
		t.Fatalf("Bump(%d) with the shipped policy = epoch %d, %v", id, epoch, err)
	}

	anon := newTestProducerIDs(t, srv, "anon", withToken(""))
	calls := map[string]func() error{
		"Allocate": func() error { _, _, err := anon.Allocate(ctx); return err },
		"Bump":     func() error { _, _, err := anon.Bump(ctx, id); return err },
	}
	for name, call := range calls {
		err := call()
		var perm *PermissionError
		if !errors.As(err, &perm) || perm.Rule != keyRule(testPrefix) {
			t.Errorf("%s without a token = %v; want a PermissionError naming %s", name, err, keyRule(testPrefix))
			continue
		}
		t.Logf("%s: %v", name, err)
	}
}
