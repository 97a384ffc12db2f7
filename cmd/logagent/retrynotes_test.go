package main

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// roundTripFunc is a fake transport, for retryNotes' unit test only.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestRetryNotes: each failed attempt the client retries is said once per
// cause, again after retryNoteEvery while it lasts, and not at all for the
// health check or for answers the agent does not mark retriable; the body
// reaches the client unchanged.
func TestRetryNotes(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var answer func() (*http.Response, error)
	var out bytes.Buffer
	n := &retryNotes{out: &out, command: "consume", until: "until -timeout 10s", now: func() time.Time { return now },
		next: roundTripFunc(func(*http.Request) (*http.Response, error) { return answer() })}
	unavailable := `{"error":{"code":"leader_not_available","message":"t/0 has no leader now","retriable":true}}`
	respond := func(status int, body string) func() (*http.Response, error) {
		return func() (*http.Response, error) {
			return &http.Response{StatusCode: status, Body: io.NopCloser(strings.NewReader(body))}, nil
		}
	}
	refused := func() (*http.Response, error) { return nil, errors.New("connection refused") }
	steps := []struct {
		path    string
		answer  func() (*http.Response, error)
		advance time.Duration
		note    string // "" for none
	}{
		{"/v1/topics/t/partitions/0/records", respond(503, unavailable), 0,
			"logagent consume: t/0 has no leader now (leader_not_available); retrying until -timeout 10s\n"},
		{"/v1/topics/t/partitions/0/records", respond(503, unavailable), time.Second, ""},
		{"/v1/topics/t/partitions/0/records", respond(503, unavailable), retryNoteEvery,
			"logagent consume: t/0 has no leader now (leader_not_available); retrying until -timeout 10s\n"},
		{"/v1/topics/t/partitions/0/records", refused, 0,
			"logagent consume: no answer from agent:7070 (connection refused); retrying until -timeout 10s\n"},
		{"/v1/health", refused, retryNoteEvery, ""},
		{"/v1/topics/t/partitions/0/records", respond(404, `{"error":{"code":"unknown_topic","message":"no topic","retriable":false}}`), 0, ""},
		{"/v1/topics/t/partitions/0/records", respond(200, "batches"), 0, ""},
	}
	for i, s := range steps {
		now = now.Add(s.advance)
		answer = s.answer
		out.Reset()
		req, _ := http.NewRequest(http.MethodGet, "http://agent:7070"+s.path, nil)
		resp, err := n.RoundTrip(req)
		if got := out.String(); got != s.note {
			t.Errorf("step %d: noted %q, want %q", i, got, s.note)
		}
		if err != nil {
			continue
		}
		if body, _ := io.ReadAll(resp.Body); resp.StatusCode == 503 && string(body) != unavailable {
			t.Errorf("step %d: body %q reached the client, want it unchanged", i, body)
		}
	}
}
