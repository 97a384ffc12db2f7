package bench

import (
	"context"
	"errors"
	"strconv"

	"github.com/logagent/logagent/client"
	"github.com/logagent/logagent/record"
)

// Kinds of failed requests besides the agent's own error codes
// (client.Error.Code, such as "not_enough_replicas" or "ack_timeout").
const (
	// KindUnsent: due in an open loop but not issued before the run was
	// stopped (hard cap, Ctrl-C).
	KindUnsent = "unsent"
	// KindCanceled: in flight when the run was stopped.
	KindCanceled = "canceled"
	// KindOutcomeUnknown: the connection was lost after the request was
	// sent, or the answer broke the API contract in a way that leaves the
	// write's fate open (client.ErrOutcomeUnknown without an agent code).
	KindOutcomeUnknown = "outcome_unknown"
	// KindConnection: the agent could not be reached.
	KindConnection = "connection"
	// KindCorrupt: a fetched batch failed verification (record.ErrCorrupt).
	KindCorrupt = "corrupt"
	// KindProtocol: an answer that breaks the API contract.
	KindProtocol = "protocol"
	// KindOther: anything else.
	KindOther = "other"
)

// ErrorKind names the kind of a failed request's error, for counting: the
// agent's error code when it sent one, else one of the Kind constants.
func ErrorKind(err error) string {
	var agentErr *client.Error
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return KindCanceled
	case errors.As(err, &agentErr):
		if agentErr.Code == "" {
			return "http_" + strconv.Itoa(agentErr.Status)
		}
		return agentErr.Code
	case errors.Is(err, client.ErrOutcomeUnknown):
		return KindOutcomeUnknown
	case errors.Is(err, record.ErrCorrupt):
		return KindCorrupt
	case errors.Is(err, client.ErrProtocol):
		return KindProtocol
	case client.IsRetriable(err), errors.Is(err, errConnection):
		return KindConnection
	}
	return KindOther
}
