package election

import (
	"net/http"
	"sync/atomic"
)

// countingTransport counts the requests the Consul API client sends and
// those that failed, for the agent's metrics (Client.ConsulRequests). A
// failure is a request that got no answer, unless its own context ended it
// (a blocking query given up on, a stopping agent), or an answer that says
// Consul or the agent's token is at fault: 5xx, 401, 403. A 404 (no such
// key, an expired session) or a 409 (a guarded transaction refused) is an
// answer the caller acts on, not a failure.
type countingTransport struct {
	next             http.RoundTripper
	requests, errors atomic.Uint64
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.requests.Add(1)
	resp, err := t.next.RoundTrip(req)
	switch {
	case err != nil:
		if req.Context().Err() == nil {
			t.errors.Add(1)
		}
	case resp.StatusCode >= 500, resp.StatusCode == http.StatusUnauthorized, resp.StatusCode == http.StatusForbidden:
		t.errors.Add(1)
	}
	return resp, err
}

// ConsulRequests returns how many requests this client sent to Consul's
// HTTP API and how many of them failed (countingTransport says which).
func (c *Client) ConsulRequests() (requests, errors uint64) {
	return c.counter.requests.Load(), c.counter.errors.Load()
}
