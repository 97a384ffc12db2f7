package election

import (
	"context"
	"errors"
	"net/http"
	"testing"

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
