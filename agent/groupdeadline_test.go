package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/wire"
)

// hiddenAgent makes one agent's directory leave another agent out, as if
// the two could not reach each other: the first one's sidecar finds no
// address for the coordinator the other one is, and answers its group
// operations 503 coordinator_not_available, retried.
type hiddenAgent struct{ at, node string }

// TestGroupCommitEndsWithItsCallersTimeout: a commit runs only as long as
// its caller waits for it (the timeout parameter). The sidecar retried an
// unavailable coordinator for its own 15 s: a commit whose client had
// timed out after 1 s, and then committed a newer offset through another
// agent, reached the coordinator once it was reachable again and took the
// group's committed offset back (a consumer restarting there reads again
// what was consumed).
func TestGroupCommitEndsWithItsCallersTimeout(t *testing.T) {
	var hide atomic.Pointer[hiddenAgent]
	c := startTestClusterWith(t, 2, "groups {\n  offsets_partitions = 1\n  offsets_replication_factor = 1\n}\n", func(a *Agent) {
		node, list := a.cfg.NodeID, a.agents.list
		a.agents.list = func(ctx context.Context) ([]election.AgentInfo, error) {
			agents, err := list(ctx)
			h := hide.Load()
			if err != nil || h == nil || h.at != node {
				return agents, err
			}
			var out []election.AgentInfo
			for _, info := range agents {
				if info.NodeID != h.node {
					out = append(out, info)
				}
			}
			return out, nil
		}
	})
	c.createTopic(c.agents[0], "t", 1, 1, 1)
	c.waitLeader("t", 0, 1)
	var lines []string
	for i := range 10 {
		lines = append(lines, fmt.Sprintf("r%d", i))
	}
	c.agents[0].mustProduce("t", 0, lines...)

	status, body := c.agents[0].call("POST", "/v1/groups/g/members", wire.ContentTypeJSON, []byte(`{"topics":["t"],"session_timeout_ms":60000}`))
	if status != 200 {
		t.Fatalf("join: %d %s", status, body)
	}
	var member struct {
		MemberID    string `json:"member_id"`
		MemberEpoch int32  `json:"member_epoch"`
		Assigned    []struct {
			Topic string `json:"topic"`
		} `json:"assigned"`
	}
	if err := json.Unmarshal(body, &member); err != nil || len(member.Assigned) != 1 {
		t.Fatalf("join answered %s (%v), want t/0 assigned", body, err)
	}
	status, body = c.agents[0].call("GET", "/v1/groups/g", "", nil)
	var described struct {
		Coordinator string `json:"coordinator"`
	}
	if err := json.Unmarshal(body, &described); status != 200 || err != nil {
		t.Fatalf("describe: %d %s (%v)", status, body, err)
	}
	coordinator, other := c.agents[0], c.agents[1]
	if coordinator.nodeID != described.Coordinator {
		coordinator, other = other, coordinator
	}
	commit := func(offset int) []byte {
		return []byte(fmt.Sprintf(`{"member_id":%q,"member_epoch":%d,"offsets":[{"topic":"t","partition":0,"offset":%d}]}`,
			member.MemberID, member.MemberEpoch, offset))
	}
	committed := func() string {
		status, body := coordinator.call("GET", "/v1/groups/g/offsets?topic=t", "", nil)
		var o struct {
			Offsets []struct {
				Offset int64 `json:"offset"`
			} `json:"offsets"`
		}
		if err := json.Unmarshal(body, &o); status != 200 || err != nil || len(o.Offsets) != 1 {
			return fmt.Sprintf("%d %s", status, strings.TrimSpace(string(body)))
		}
		return fmt.Sprint(o.Offsets[0].Offset)
	}
	setDirectory := func(h *hiddenAgent) {
		hide.Store(h)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := other.agent.agents.refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// The client gives up after its timeout and a moment for the answer
	// to travel.
	setDirectory(&hiddenAgent{at: other.nodeID, node: coordinator.nodeID})
	caller := &http.Client{Timeout: 3 * time.Second}
	resp, err := caller.Post("http://"+other.client+"/v1/groups/g/offsets?timeout=1s", wire.ContentTypeJSON, strings.NewReader(string(commit(5))))
	answered := err == nil
	if answered {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if e := errorCode(t, b); resp.StatusCode != 503 || e.Code != wire.CodeCoordinatorNotAvailable {
			t.Errorf("commit with timeout=1s, the coordinator unreachable: %d %s, want 503 coordinator_not_available", resp.StatusCode, b)
		}
	} else {
		t.Errorf("commit with timeout=1s, the coordinator unreachable: no answer within 3s (%v)", err)
	}

	// The client commits a newer offset through the other agent; then
	// the first one reaches the coordinator again.
	if status, body := coordinator.call("POST", "/v1/groups/g/offsets", wire.ContentTypeJSON, commit(7)); status != 200 {
		t.Fatalf("commit 7: %d %s", status, body)
	}
	setDirectory(nil)
	if got := committed(); got != "7" {
		t.Fatalf("committed offset %s, want 7", got)
	}
	if !answered {
		// The sidecar still holds the commit of 5, for the rest of its 15
		// s: it retries every 100 ms, and the coordinator is reachable.
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) {
			if got := committed(); got != "7" {
				t.Fatalf("committed offset %s after 7: the commit whose caller gave up after 1s landed after the newer one", got)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestGroupTimeoutParamChecked: a group request's timeout is a duration of
// 0s or more, as a produce's; anything else is refused 400 before the
// request is routed.
func TestGroupTimeoutParamChecked(t *testing.T) {
	a := unitAgent(t)
	a.state.Store(stateServing)
	a.coord = &groupStatesCoordinator{}
	rt := &router{}
	rt.add(fasthttp.MethodPost, "/v1/groups/{group}/offsets", a.handleGroupOp("commit"))
	rt.add(fasthttp.MethodGet, "/v1/groups/{group}", a.handleGroupOp("describe"))
	rt.add(fasthttp.MethodGet, "/v1/groups", a.handleListGroups)
	for _, tc := range []struct{ method, path string }{
		{"POST", "/v1/groups/g/offsets?timeout=soon"},
		{"POST", "/v1/groups/g/offsets?timeout=-1s"},
		{"POST", "/v1/groups/g/offsets?timeout=5"},
		{"GET", "/v1/groups/g?timeout=1x"},
		{"GET", "/v1/groups?timeout=soon"},
	} {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod(tc.method)
		ctx.Request.SetRequestURI(tc.path)
		ctx.Request.SetBodyString(`{"member_id":"m","member_epoch":1,"offsets":[]}`)
		rt.handle(&ctx)
		if e := errorCode(t, ctx.Response.Body()); ctx.Response.StatusCode() != 400 || e.Code != wire.CodeInvalidRequest {
			t.Errorf("%s %s: %d %s (%s), want 400 invalid_request", tc.method, tc.path, ctx.Response.StatusCode(), e.Code, e.Message)
		}
	}
}

// groupStatesCoordinator answers the list of stored groups (none) and
// records the deadline it was asked by.
type groupStatesCoordinator struct {
	Coordinator
	deadline time.Time
}

func (c *groupStatesCoordinator) GroupStateValues(ctx context.Context) (map[string][]byte, error) {
	c.deadline, _ = ctx.Deadline()
	return nil, nil
}

// TestListGroupsHonoursTimeout: GET /v1/groups reads Consul as long as its
// caller waits (the timeout parameter), as the other group endpoints run,
// and a Consul call's bound at most. It ignored the parameter, reading
// Consul for up to 5 s whatever the caller's deadline.
func TestListGroupsHonoursTimeout(t *testing.T) {
	a := unitAgent(t)
	a.state.Store(stateServing)
	coord := &groupStatesCoordinator{}
	a.coord = coord
	for _, tc := range []struct {
		query string
		want  time.Time // the caller's deadline; zero for none
	}{
		{"?timeout=2s", a.now().Add(2 * time.Second)},
		{"?timeout=0s", a.now()},
		{"", time.Time{}},
	} {
		coord.deadline = time.Time{}
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod("GET")
		ctx.Request.SetRequestURI("/v1/groups" + tc.query)
		before := time.Now()
		a.handleListGroups(&ctx)
		after := time.Now()
		if ctx.Response.StatusCode() != 200 {
			t.Errorf("GET /v1/groups%s: %d %s, want 200", tc.query, ctx.Response.StatusCode(), ctx.Response.Body())
		}
		got := coord.deadline
		switch {
		case !tc.want.IsZero() && !got.Equal(tc.want):
			t.Errorf("GET /v1/groups%s read Consul by %v, want by the caller's deadline %v", tc.query, got, tc.want)
		case tc.want.IsZero() && (got.Before(before.Add(peerCallTimeout)) || got.After(after.Add(peerCallTimeout))):
			// Without a caller's deadline, the Consul call's own bound
			// (on the real clock: unitAgent's is fixed).
			t.Errorf("GET /v1/groups read Consul by %v, want %v after the request", got, peerCallTimeout)
		}
	}
}
