package election

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
)

// countingTransport counts the requests the Consul API client sends and
// those that failed, for the agent's metrics (Client.ConsulRequests). A
// failure is a request that got no answer, unless its own context ended it
// (a blocking query given up on, a stopping agent), or an answer that says
// Consul or the agent's token is at fault: 5xx, 401, 403, or 429 (Consul
// refusing a connection beyond http_max_conns_per_client, or a request
// beyond its rate limits: nothing was done, and an agent answered only
// that showed no failure). A 404 (no such key, an expired session) or a
// 409 (a guarded transaction refused) is an answer the caller acts on, not
// a failure.
type countingTransport struct {
	next             http.RoundTripper
	requests, errors atomic.Uint64
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.requests.Add(1)
	resp, err := t.next.RoundTrip(req)
	switch {
	case err != nil:
		// A deadline that ran out is no answer (a hung Consul); only a
		// cancellation is the caller giving up.
		if !errors.Is(req.Context().Err(), context.Canceled) {
			t.errors.Add(1)
		}
	case resp.StatusCode >= 500, resp.StatusCode == http.StatusUnauthorized, resp.StatusCode == http.StatusForbidden,
		resp.StatusCode == http.StatusTooManyRequests:
		t.errors.Add(1)
	}
	return resp, err
}

// ConsulRequests returns how many requests this client sent to Consul's
// HTTP API and how many of them failed (countingTransport says which).
func (c *Client) ConsulRequests() (requests, errors uint64) {
	return c.counter.requests.Load(), c.counter.errors.Load()
}

// limitTransport holds at most cap(slots) Consul requests in flight, so
// that thousands of partitions' campaigns, ISR changes and reads cannot
// open more connections than Consul accepts from one address
// (http_max_conns_per_client, 200 by default; beyond it Consul answers
// 429 and closes the connection). Requests wait for a slot, or for their
// context. Exempt are blocking queries (an index parameter: each watch
// holds one for up to its wait time, and would hold a slot as long). The
// session renewals and check passes the lease depends on, which must not
// queue behind the rest either, do not come here (leaseRouter).
type limitTransport struct {
	next  http.RoundTripper
	slots chan struct{}
	// inFlight counts the requests holding a slot, for tests.
	inFlight atomic.Int64
}

func newLimitTransport(next http.RoundTripper, limit int) *limitTransport {
	return &limitTransport{next: next, slots: make(chan struct{}, limit)}
}

func (t *limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if limitExempt(req) {
		return t.next.RoundTrip(req)
	}
	select {
	case t.slots <- struct{}{}:
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	t.inFlight.Add(1)
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		t.release()
		return nil, err
	}
	// The slot is the connection's: it is held until the body is closed.
	resp.Body = &releasingBody{ReadCloser: resp.Body, release: t.release}
	return resp, nil
}

func (t *limitTransport) release() {
	t.inFlight.Add(-1)
	<-t.slots
}

// limitExempt says whether req passes without a slot.
func limitExempt(req *http.Request) bool {
	return req.URL.Query().Has("index")
}

// releasingBody releases its slot once, at the end of the body or at the
// first Close, whichever comes first: net/http reuses the connection at
// either.
type releasingBody struct {
	io.ReadCloser
	release func()
	once    sync.Once
}

func (b *releasingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(b.release)
	}
	return n, err
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}
