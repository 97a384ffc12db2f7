package groups

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/election"
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

// unavailableCoordinator is a Consul client under which the offsets topic
// cannot be made (no agents to place it on), so that every attempt of a
// group operation is 503 coordinator_not_available; each attempt takes a
// second of the test's clock and is noted.
type unavailableCoordinator struct {
	Coordinator
	mu       sync.Mutex
	now      time.Time
	attempts []time.Time
}

func (c *unavailableCoordinator) Metadata() *election.Snapshot { return &election.Snapshot{} }

func (c *unavailableCoordinator) Agents(context.Context) ([]election.AgentInfo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.attempts = append(c.attempts, c.now)
	c.now = c.now.Add(time.Second)
	return nil, errors.New("Consul is unreachable")
}

func (c *unavailableCoordinator) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// TestRunEndsAtTheCallersDeadline: the sidecar retries an unavailable
// coordinator until groupRouteTimeout (plus the heartbeat's wait) or its
// caller's deadline, the sooner. It retried for its own 15 s whatever the
// caller's: a commit whose client had timed out after 2 s (and committed
// a newer offset since, maybe through another sidecar) reached the
// coordinator seconds later and took the committed offset back.
func TestRunEndsAtTheCallersDeadline(t *testing.T) {
	for _, tc := range []struct {
		name     string
		caller   time.Duration // 0: no deadline
		wait     time.Duration
		attempts int // one a second of the test's clock
	}{
		{"no caller's deadline", 0, 0, 15},
		{"caller gave up sooner", 2 * time.Second, 0, 2},
		{"caller waits longer than the sidecar", time.Minute, 0, 15},
		{"heartbeat's wait, no caller's deadline", 0, 5 * time.Second, 20},
		{"heartbeat's wait, caller sooner", 10 * time.Second, 5 * time.Second, 10},
		{"caller's deadline passed", -time.Second, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The test's clock starts at the real time: the caller's
			// deadline is a context's, which ends in real time, long after
			// the test's clock (a second an attempt) passed it.
			coord := &unavailableCoordinator{now: time.Now()}
			start := coord.now
			r := New(Config{Coordinator: coord, Now: coord.Now})
			ctx := context.Background()
			if tc.caller != 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, start.Add(tc.caller))
				defer cancel()
			}
			_, e := r.Run(ctx, Op{Name: "commit", Group: "g", Body: []byte("{}")}, tc.wait)
			if e == nil || e.Code != wire.CodeCoordinatorNotAvailable {
				t.Errorf("Run answered %v, want coordinator_not_available", e)
			}
			coord.mu.Lock()
			defer coord.mu.Unlock()
			if len(coord.attempts) != tc.attempts {
				last := time.Duration(-1)
				if n := len(coord.attempts); n > 0 {
					last = coord.attempts[n-1].Sub(start)
				}
				t.Errorf("%d attempts, the last %v after the call, want %d (caller's bound %v, wait %v)",
					len(coord.attempts), last, tc.attempts, tc.caller, tc.wait)
			}
		})
	}
}
