package groups

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/peer"
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

// TestPeerOperationEndsWithTheSidecarsWait: the coordinator runs a
// forwarded operation only as long as the sidecar that sent it waits for
// the answer. It ran under context.Background(): a commit the sidecar had
// given up on (answering 503 to its client, which committed again) could
// still wait for a high watermark or an append, and land after the newer
// commit, taking the committed offset back. A request that does not say
// (an older agent's) or says more is bounded by the longest a sidecar
// waits.
func TestPeerOperationEndsWithTheSidecarsWait(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	r := New(Config{Peers: peer.NewClients("", 1<<20, false, nil), Now: func() time.Time { return now }})
	for _, tc := range []struct {
		name   string
		header func() []byte
		want   time.Duration
	}{
		{"sidecar's deadline", func() []byte {
			req := r.peerRequest("127.0.0.1:1", Op{Name: "commit", Group: "g", Body: []byte("{}")}, now.Add(2*time.Second))
			defer fasthttp.ReleaseRequest(req)
			return append([]byte(nil), req.Header.Peek(wire.HeaderTimeoutMS)...)
		}, 2 * time.Second},
		{"deadline passed", func() []byte { return []byte("-5") }, 0},
		{"not said", func() []byte { return nil }, maxPeerTimeout},
		{"more than a sidecar waits", func() []byte { return []byte("3600000") }, maxPeerTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			ctx, cancel := PeerContext(tc.header())
			defer cancel()
			deadline, ok := ctx.Deadline()
			if !ok {
				t.Fatal("the coordinator's context has no deadline")
			}
			// The context measures real time from its making.
			if got := deadline.Sub(start); got < tc.want || got > tc.want+time.Second {
				t.Errorf("the operation may run %v, want %v", got, tc.want)
			}
		})
	}
}
