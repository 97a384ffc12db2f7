package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// healthPath is the agent's health endpoint.
const healthPath = "/v1/health"

// retryNoteEvery is how often the same failed attempt is reported again
// while the client keeps retrying it.
const retryNoteEvery = 5 * time.Second

// maxNotedBody bounds how much of an error answer is read for its note.
const maxNotedBody = 64 << 10

// retryNotes is the transport of the commands whose client retries on its
// own (produce's deliveries, consume's fetches): it reports on stderr each
// attempt that failed in a way the client retries (no answer, or an answer
// the agent marks retriable), so that waiting on an agent that is down or
// a partition without a leader is never silent. A cause is reported when
// it changes, and again every retryNoteEvery while it lasts.
type retryNotes struct {
	next    http.RoundTripper
	out     io.Writer
	command string // "consume"
	until   string // how long the retries go on, for the note
	now     func() time.Time

	mu   sync.Mutex
	last string
	at   time.Time
}

// retryingHTTPClient returns the HTTP client of a command that retries:
// the client package's own transport settings, with retryNotes on top.
// follow says the retries go on until Ctrl-C, else until timeout.
func retryingHTTPClient(stderr io.Writer, command string, follow bool, timeout time.Duration) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// As the client's own: an idempotent producer may have up to five
	// requests per partition in flight, and each consumer holds one poll.
	t.MaxIdleConnsPerHost = 64
	until := fmt.Sprintf("until -timeout %s", timeout)
	if follow {
		until = "until Ctrl-C"
	}
	return &http.Client{Transport: &retryNotes{next: t, out: stderr, command: command, until: until, now: time.Now}}
}

func (n *retryNotes) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := n.next.RoundTrip(req)
	if req.URL.Path == healthPath {
		// checkAgent's one question, never retried: its failure is
		// the command's.
		return resp, err
	}
	if err != nil {
		if req.Context().Err() == nil {
			n.note(fmt.Sprintf("no answer from %s (%v)", req.URL.Host, err))
		}
		return resp, err
	}
	if resp.StatusCode < 500 && resp.StatusCode != http.StatusConflict {
		return resp, nil
	}
	// The body is read for its code and message and handed on unchanged.
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, maxNotedBody))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		return resp, nil
	}
	var answer struct {
		Error *struct {
			Code      string `json:"code"`
			Message   string `json:"message"`
			Retriable bool   `json:"retriable"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &answer) == nil && answer.Error != nil && answer.Error.Retriable {
		n.note(fmt.Sprintf("%s (%s)", answer.Error.Message, answer.Error.Code))
	}
	return resp, nil
}

func (n *retryNotes) note(cause string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	if cause == n.last && now.Sub(n.at) < retryNoteEvery {
		return
	}
	n.last, n.at = cause, now
	fmt.Fprintf(n.out, "logagent %s: %s; retrying %s\n", n.command, cause, n.until)
}
