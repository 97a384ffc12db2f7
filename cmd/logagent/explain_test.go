package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/logagent/logagent/client"
)

// TestExplain: the agent's errors and the lack of an answer become one line
// that does not repeat itself and says what to do next.
func TestExplain(t *testing.T) {
	addr := "http://127.0.0.1:7070"
	refused := &url.Error{Op: "Get", URL: addr + "/v1/topics", Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}}
	outOfRange := &client.Error{Status: 416, Code: client.CodeOffsetOutOfRange, Message: "offset 999 is outside the log", LogStartOffset: 10, HighWatermark: 42}
	cases := []struct {
		name    string
		err     error
		timeout time.Duration
		want    string
	}{
		{"unknown topic, wrapped twice", fmt.Errorf("describe topic %q: %w", "x", &client.Error{Status: 404, Code: client.CodeUnknownTopic, Message: `no topic "x"`}), 0,
			`no topic "x": 'logagent topic list' shows the topics there are`},
		{"offset out of range", fmt.Errorf("fetch t/0 at offset 999: %w", outOfRange), 0,
			"offset 999 is outside the log: the log holds offsets 10 to 41 (log start 10, high watermark 42); -from earliest or -from latest start inside it"},
		{"offset of an empty log", &client.Error{Status: 416, Code: client.CodeOffsetOutOfRange, Message: "offset 5 is outside the log", LogStartOffset: 3, HighWatermark: 3}, 0,
			"offset 5 is outside the log: the log is empty, the next record gets offset 3 (-from earliest or -from latest start there)"},
		{"no bounds", &client.Error{Status: 416, Code: client.CodeOffsetOutOfRange, Message: "offset 5 is outside the log", LogStartOffset: -1, HighWatermark: -1}, 0,
			"offset 5 is outside the log: -from earliest or -from latest start inside the log"},
		{"token", &client.Error{Status: 401, Code: client.CodeUnauthorized, Message: "missing bearer token"}, 0,
			"missing bearer token: the agent wants its client token: -token-file or $LOGAGENT_TOKEN"},
		{"other code", &client.Error{Status: 400, Code: client.CodeInvalidRequest, Message: "partitions 0 is outside 1 to 1000"}, 0,
			"partitions 0 is outside 1 to 1000 (invalid_request)"},
		{"not JSON", &client.Error{Status: 502, Message: "<html>bad gateway</html>"}, 0, "<html>bad gateway</html> (HTTP 502)"},
		{"refused", fmt.Errorf("list topics: %w", refused), 0,
			"cannot reach the agent at " + addr + " (dial tcp: connect: connection refused): " + reachHint},
		{"no answer in time", fmt.Errorf("list topics: %w", &url.Error{Op: "Get", URL: addr, Err: context.DeadlineExceeded}), 2 * time.Second,
			"no answer from the agent at " + addr + " within -timeout 2s: " + reachHint},
		{"retried until the time was up", fmt.Errorf("%w (last attempt: %w)", context.DeadlineExceeded, &client.Error{Status: 503, Code: client.CodeLeaderNotAvailable, Message: "t/0 has no leader now"}), time.Second,
			"gave up retrying after -timeout 1s: t/0 has no leader now (leader_not_available): 'logagent status' shows the agents and leaders; try again once they are up"},
		{"usage passes", fmt.Errorf("%w: -n must not be negative", errUsage), 0, "usage: -n must not be negative"},
		{"other errors pass", errors.New("stdin after line 3: read error"), 0, "stdin after line 3: read error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := explain(c.err, addr, c.timeout)
			if got.Error() != c.want {
				t.Errorf("explain:\n got %s\nwant %s", got, c.want)
			}
			if !errors.Is(got, c.err) {
				t.Errorf("explain lost the error it explains")
			}
			if again := explain(got, addr, c.timeout); again.Error() != c.want {
				t.Errorf("explained twice: %s", again)
			}
		})
	}
}
