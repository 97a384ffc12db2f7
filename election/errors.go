package election

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hashicorp/consul/api"
)

var (
	// ErrInvalidConfig is a Config that cannot work.
	ErrInvalidConfig = errors.New("election: invalid config")
	// ErrInvalidTopic is a topic config or replica assignment that cannot work.
	ErrInvalidTopic = errors.New("election: invalid topic")
	// ErrTopicExists is returned by CreateTopic when any key of the topic
	// already exists.
	ErrTopicExists = errors.New("election: topic exists")
	// ErrUnknownTopic is a topic without a config key.
	ErrUnknownTopic = errors.New("election: unknown topic")
	// ErrUnknownPartition is a partition the metadata does not have.
	ErrUnknownPartition = errors.New("election: unknown partition")
	// ErrNotReplica is a Campaign for a partition this node does not replicate.
	ErrNotReplica = errors.New("election: not a replica")
	// ErrOtherIncarnation is a campaign of a candidate whose log holds
	// another incarnation of the topic (Candidate.TopicID).
	ErrOtherIncarnation = errors.New("election: the candidate holds another incarnation of the topic")
	// ErrNotEnoughAgents is an assignment asking for more replicas than
	// there are agents.
	ErrNotEnoughAgents = errors.New("election: replication factor above the number of agents")
	// ErrCorruptMetadata is a key under the prefix whose value cannot be
	// decoded, or a topic missing some of its keys.
	ErrCorruptMetadata = errors.New("election: corrupt metadata")
	// ErrUnknownProducerID is a producer id that was never allocated.
	ErrUnknownProducerID = errors.New("election: unknown producer id")
	// ErrNotRegistered is a call that needs the agent's registration and
	// session before Register.
	ErrNotRegistered = errors.New("election: not registered")
	// ErrClosed is a call on a closed client, and the loss cause of the
	// leaderships it held.
	ErrClosed = errors.New("election: client closed")
	// ErrPermissionDenied is Consul refusing an operation for lack of an ACL
	// permission; the error is a *PermissionError naming the rule.
	ErrPermissionDenied = errors.New("election: permission denied")

	// ErrNotLeader is a leader-only operation by a node that is not (or is
	// no longer) the leader of that epoch: step down.
	ErrNotLeader = errors.New("election: not leader")
	// ErrConflict is an ISR change that lost a race with another change at
	// the same epoch: re-read the state and decide again.
	ErrConflict = errors.New("election: conflicting state change")
	// ErrValueTooLarge is a value larger than one Consul write takes
	// (MaxGroupStateBytes for a group's state); nothing was written.
	ErrValueTooLarge = errors.New("election: value too large for Consul")

	// Loss causes, from Leadership.Err.

	// ErrSessionLost means Consul no longer has the agent's session.
	ErrSessionLost = errors.New("election: session lost")
	// ErrLeaseExpired means the local lease ran out before a renewal or check
	// pass succeeded: Consul may already have invalidated the session.
	ErrLeaseExpired = errors.New("election: lease expired")
	// ErrLeadershipLost means the leader key or state moved to another
	// session or epoch, or the topic was deleted.
	ErrLeadershipLost = errors.New("election: leadership lost")
	// ErrResigned means Resign was called.
	ErrResigned = errors.New("election: resigned")
)

// PermissionError is Consul's 403 for an operation, with the ACL rule that
// would allow it.
type PermissionError struct {
	// Op is what was attempted, e.g. "create session".
	Op string
	// Rule is the policy rule that grants it, in Consul's HCL syntax.
	Rule string
	// Consul is the reason Consul gave.
	Consul string
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("election: permission denied to %s: the token needs %s (consul: %s)", e.Op, e.Rule, e.Consul)
}

// Is makes errors.Is(err, ErrPermissionDenied) true.
func (e *PermissionError) Is(target error) bool { return target == ErrPermissionDenied }

// ACL rules, as written in acl-policy.hcl.
func keyRule(prefix string) string {
	return fmt.Sprintf("key_prefix %q { policy = \"write\" }", prefix)
}

func keyReadRule(prefix string) string {
	return fmt.Sprintf("key_prefix %q { policy = \"read\" }", prefix)
}

const (
	sessionRule = `session_prefix "" { policy = "write" }`
	serviceRule = `service_prefix "logagent" { policy = "write" }`
	nodeRule    = `node_prefix "" { policy = "read" }`
)

// consulError turns a Consul API error into a PermissionError when Consul
// refused for lack of permission, and otherwise wraps it with what was being
// done.
func consulError(err error, op, rule string) error {
	if reason, denied := permissionDenied(err); denied {
		return &PermissionError{Op: op, Rule: rule, Consul: reason}
	}
	return fmt.Errorf("election: %s: %w", op, err)
}

// permissionDenied recognises Consul's 403s. The API client reports them in
// three shapes: StatusError (most calls), "Unexpected response code: 403"
// (session renew) and "Failed request: <body>" (txn).
func permissionDenied(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	var status api.StatusError
	if errors.As(err, &status) {
		return status.Body, status.Code == http.StatusForbidden
	}
	msg := err.Error()
	for _, marker := range []string{"Permission denied", "ACL not found", "Unexpected response code: 403"} {
		if strings.Contains(msg, marker) {
			return msg, true
		}
	}
	return "", false
}
