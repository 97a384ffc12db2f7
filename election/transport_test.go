package election

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/consultest"
)

// stubTransport answers every request with status, or fails it with err.
type stubTransport struct {
	status int
	err    error
}

func (s stubTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if s.err != nil {
		return nil, s.err
	}
	return &http.Response{StatusCode: s.status, Body: http.NoBody, Request: req}, nil
}

func TestCountingTransport(t *testing.T) {
	errDown := errors.New("connection refused")
	for _, tc := range []struct {
		name      string
		next      stubTransport
		cancelled bool
		failed    bool
	}{
		{name: "answered", next: stubTransport{status: 200}},
		{name: "no such key", next: stubTransport{status: 404}},
		{name: "guarded transaction refused", next: stubTransport{status: 409}},
		{name: "consul failing", next: stubTransport{status: 500}, failed: true},
		{name: "no leader", next: stubTransport{status: 503}, failed: true},
		{name: "token refused", next: stubTransport{status: 403}, failed: true},
		{name: "no token", next: stubTransport{status: 401}, failed: true},
		{name: "too many connections or requests", next: stubTransport{status: 429}, failed: true},
		{name: "unreachable", next: stubTransport{err: errDown}, failed: true},
		{name: "given up by its caller", next: stubTransport{err: context.Canceled}, cancelled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct := &countingTransport{next: tc.next}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancelled {
				cancel()
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:8500/v1/kv/x", nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp, err := ct.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
			want := uint64(0)
			if tc.failed {
				want = 1
			}
			if got := ct.requests.Load(); got != 1 {
				t.Errorf("%d requests counted, want 1", got)
			}
			if got := ct.errors.Load(); got != want {
				t.Errorf("%d errors counted, want %d", got, want)
			}
		})
	}
}

// TestClientCountsConsulRequests: the client's own requests to a real
// Consul are counted, also through an HTTP client the caller supplied, and
// that client is left unwrapped.
func TestClientCountsConsulRequests(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	own := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	for name, opts := range map[string][]func(*Config){
		"built by the api client": nil,
		"given by the caller":     {func(cfg *Config) { cfg.Consul.HttpClient = own }},
	} {
		c := newTestClient(t, srv, "n-"+name[:5], opts...)
		if r, e := c.ConsulRequests(); r != 0 || e != 0 {
			t.Fatalf("%s: %d requests, %d errors before any request", name, r, e)
		}
		register(t, c)
		r, e := c.ConsulRequests()
		if r < 1 || e != 0 {
			t.Fatalf("%s: %d requests, %d errors after registering, want at least 1 and none", name, r, e)
		}
		t.Logf("%s: registering took %d requests", name, r)
	}
	if _, wrapped := own.Transport.(*countingTransport); wrapped {
		t.Fatal("the caller's HTTP client had its transport replaced")
	}
}

// gateTransport answers once open is closed, counting the requests it
// holds at once.
type gateTransport struct {
	open          chan struct{}
	mu            sync.Mutex
	held, maxHeld int
}

func (g *gateTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	g.mu.Lock()
	g.held++
	g.maxHeld = max(g.maxHeld, g.held)
	g.mu.Unlock()
	<-g.open
	g.mu.Lock()
	g.held--
	g.mu.Unlock()
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
}

func TestLimitTransport(t *testing.T) {
	const limit, requests = 4, 40
	gate := &gateTransport{open: make(chan struct{})}
	lt := newLimitTransport(gate, limit)
	// As New puts them together: the lease's requests beside the limit.
	rt := &leaseRouter{lease: gate, rest: lt}
	do := func(ctx context.Context, url string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		return errors.Join(err, resp.Body.Close())
	}
	var wg sync.WaitGroup
	errs := make(chan error, requests)
	for i := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- do(context.Background(), fmt.Sprintf("http://127.0.0.1:8500/v1/txn?n=%d", i))
		}()
	}
	waitFor(t, 10*time.Second, "every slot taken", func() bool { return lt.inFlight.Load() == limit })

	// With every slot taken: a request given up waits no longer than its
	// context, and the exempt ones pass.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := do(ctx, "http://127.0.0.1:8500/v1/kv/x"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a request waiting for a slot past its deadline: %v, want context.DeadlineExceeded", err)
	}
	exempt := make(chan error, 3)
	for _, url := range []string{
		"http://127.0.0.1:8500/v1/kv/logagent/topics/?index=7&recurse=&wait=30000ms",
		"http://127.0.0.1:8500/v1/session/renew/abc",
		"http://127.0.0.1:8500/v1/agent/check/pass/logagent-n1:1",
	} {
		go func() { exempt <- do(context.Background(), url) }()
	}
	waitFor(t, 10*time.Second, "the exempt requests beside them", func() bool { gate.mu.Lock(); defer gate.mu.Unlock(); return gate.held == limit+3 })

	close(gate.open)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for range 3 {
		if err := <-exempt; err != nil {
			t.Error(err)
		}
	}
	if gate.maxHeld != limit+3 || lt.inFlight.Load() != 0 || len(lt.slots) != 0 {
		t.Errorf("at most %d requests held at once (want %d: the limit and the 3 exempt ones), %d in flight and %d slots taken at the end (want 0)",
			gate.maxHeld, limit+3, lt.inFlight.Load(), len(lt.slots))
	}
}
