package groups

import (
	"errors"
	"net/http"
	"testing"

	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/groupcoord"
	"github.com/logagent/logagent/wire"
)

// TestAppendErrorSaysNotAppended: the coordinator learns which refused
// appends of commits left the offsets partition's log as it was (too few
// in-sync replicas, refused before the append), and keeps its shard for
// them; any other failure leaves the outcome unknown.
func TestAppendErrorSaysNotAppended(t *testing.T) {
	for _, tc := range []struct {
		code        string
		notAppended bool
	}{
		{wire.CodeNotEnoughReplicas, true},
		{wire.CodeNotEnoughReplicasAfterAppend, false},
		{wire.CodeAckTimeout, false},
		{wire.CodeNotLeader, false},
	} {
		t.Run(tc.code, func(t *testing.T) {
			in := reply.NewAPIError(http.StatusServiceUnavailable, tc.code, "refused", true)
			err := appendError(in)
			if got := errors.Is(err, groupcoord.ErrNotAppended); got != tc.notAppended {
				t.Errorf("%s: ErrNotAppended %v, want %v (%v)", tc.code, got, tc.notAppended, err)
			}
			var e *reply.APIError
			if !errors.As(err, &e) || e.Code != tc.code {
				t.Errorf("%s: the API error is lost: %v", tc.code, err)
			}
		})
	}
}
