package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/logagent/logagent/client"
)

// The agent's errors reach a user as one line that says what happened and
// what to do next, instead of the client's chain ("describe topic "x":
// client: unknown_topic (404): no topic "x"") that names the same thing
// three times.

// explained is an error turned into its one line; errors.Is and errors.As
// still see the error it explains.
type explained struct {
	line string
	err  error
}

func (e *explained) Error() string { return e.line }
func (e *explained) Unwrap() error { return e.err }

// reachHint is what to do when no agent answers.
const reachHint = "is the agent running? -addr or $" + client.AddrEnv + " names another"

// explain returns err as one line for a command that talked to the agent at
// addr within timeout (0: no timeout of its own). Usage errors and errors
// that are already explained pass unchanged.
func explain(err error, addr string, timeout time.Duration) error {
	within := ""
	if timeout > 0 {
		within = "-timeout " + timeout.String()
	}
	return explainWithin(err, addr, within)
}

// explainWithin is explain for a command whose time limit within names
// ("-timeout 2s", "5s"; "" for none).
func explainWithin(err error, addr, within string) error {
	var done *explained
	if err == nil || errors.Is(err, errUsage) || errors.As(err, &done) {
		return err
	}
	var apiErr *client.Error
	switch {
	case errors.As(err, &apiErr):
		line := apiErrorLine(apiErr)
		if errors.Is(err, context.DeadlineExceeded) && within != "" {
			// The client retried this answer until the time was up.
			line = "gave up retrying after " + within + ": " + line
		}
		return &explained{line: line, err: err}
	case errors.Is(err, context.DeadlineExceeded):
		line := fmt.Sprintf("no answer from the agent at %s", addr)
		if within != "" {
			line += " within " + within
		}
		if cause := transportCause(err); cause != "" {
			line += " (last attempt: " + cause + ")"
		}
		return &explained{line: line + ": " + reachHint, err: err}
	case transportCause(err) != "":
		return &explained{line: fmt.Sprintf("cannot reach the agent at %s (%s): %s", addr, transportCause(err), reachHint), err: err}
	}
	return err
}

// transportCause is the network error inside err, "" when there is none:
// "dial tcp 127.0.0.1:7070: connect: connection refused".
func transportCause(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) && !errors.Is(ue.Err, context.DeadlineExceeded) && !errors.Is(ue.Err, context.Canceled) {
		return ue.Err.Error()
	}
	var ne *net.OpError
	if errors.As(err, &ne) {
		return ne.Error()
	}
	return ""
}

// apiErrorLine is an error answer of the agent: its message, and where it
// helps, what to look at or do next.
func apiErrorLine(e *client.Error) string {
	msg, code := apiErrorParts(e)
	if clusterNotReady(e.Code) {
		return fmt.Sprintf("%s (%s): 'logagent status' shows the agents and leaders; try again once they are up", msg, code)
	}
	switch e.Code {
	case client.CodeUnknownTopic:
		return msg + ": 'logagent topic list' shows the topics there are"
	case client.CodeTopicExists:
		return msg + ": 'logagent topic describe' shows it"
	case client.CodeUnknownGroup:
		return msg + ": 'logagent group list' shows the groups there are"
	case client.CodeUnauthorized:
		return msg + ": the agent wants its client token: -token-file or $" + TokenEnv
	case client.CodeOffsetOutOfRange:
		return msg + ": " + logBounds(e.LogStartOffset, e.HighWatermark)
	}
	return fmt.Sprintf("%s (%s)", msg, code)
}

// apiErrorParts are an error answer's message and code, the HTTP status
// standing in for either when the answer has none.
func apiErrorParts(e *client.Error) (msg, code string) {
	msg, code = e.Message, e.Code
	if msg == "" {
		msg = fmt.Sprintf("HTTP %d", e.Status)
	}
	if code == "" {
		code = fmt.Sprintf("HTTP %d", e.Status)
	}
	return msg, code
}

// clusterNotReady says whether an error code means that the agents, a
// leader or a coordinator are not there yet.
func clusterNotReady(code string) bool {
	switch code {
	case client.CodeLeaderNotAvailable, client.CodeNotEnoughReplicas, client.CodeServiceUnavailable, client.CodeCoordinatorNotAvailable:
		return true
	}
	return false
}

// logBounds says which offsets a partition holds, from an
// offset_out_of_range answer's bounds (-1 when it gave none).
func logBounds(logStart, hw int64) string {
	switch {
	case logStart < 0 || hw < 0:
		return "-from earliest or -from latest start inside the log"
	case hw == logStart:
		return fmt.Sprintf("the log is empty, the next record gets offset %d (-from earliest or -from latest start there)", hw)
	}
	return fmt.Sprintf("the log holds offsets %d to %d (log start %d, high watermark %d); -from earliest or -from latest start inside it",
		logStart, hw-1, logStart, hw)
}
