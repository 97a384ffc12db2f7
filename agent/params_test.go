package agent

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/wire"
)

// noTopicsCoordinator is a Coordinator whose metadata has no topic and
// whose Consul cannot be reached: every topic is unknown.
type noTopicsCoordinator struct{ Coordinator }

func (noTopicsCoordinator) Metadata() *election.Snapshot { return &election.Snapshot{} }

func (noTopicsCoordinator) SyncMetadata(context.Context) (*election.Snapshot, error) {
	return nil, errors.New("no Consul in a unit test")
}

// TestMalformedPartitionIsBadRequest: a {partition} path segment that is
// no partition number is refused 400 invalid_request, before the topic is
// looked up. It was 404 unknown_partition (or unknown_topic), as for a
// partition the topic does not have: a typo read as "not there (yet)".
func TestMalformedPartitionIsBadRequest(t *testing.T) {
	a := unitAgent(t)
	a.coord = noTopicsCoordinator{}
	a.state.Store(stateServing)
	rt := &router{}
	rt.add(fasthttp.MethodGet, "/v1/topics/{topic}/partitions/{partition}/records", a.handleFetch)
	rt.add(fasthttp.MethodPost, "/v1/topics/{topic}/partitions/{partition}/reassignment", a.handleStartReassign)
	rt.add(fasthttp.MethodGet, "/v1/topics/{topic}/partitions/{partition}/reassignment", a.handleGetReassign)
	rt.add(fasthttp.MethodDelete, "/v1/topics/{topic}/partitions/{partition}/reassignment", a.handleCancelReassign)
	for _, tc := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/v1/topics/orders/partitions/abc/records", 400, wire.CodeInvalidRequest},
		{"GET", "/v1/topics/orders/partitions/-1/records", 400, wire.CodeInvalidRequest},
		{"GET", "/v1/topics/orders/partitions/2147483648/records", 400, wire.CodeInvalidRequest},
		{"GET", "/v1/topics/orders/partitions/99999999999999999999/records", 400, wire.CodeInvalidRequest},
		{"GET", "/v1/topics/orders/partitions/0x1/records", 400, wire.CodeInvalidRequest},
		{"POST", "/v1/topics/orders/partitions/abc/reassignment", 400, wire.CodeInvalidRequest},
		{"GET", "/v1/topics/orders/partitions/abc/reassignment", 400, wire.CodeInvalidRequest},
		{"DELETE", "/v1/topics/orders/partitions/-3/reassignment", 400, wire.CodeInvalidRequest},
		// A well-formed partition number of a topic this agent does not
		// know is the topic's 404.
		{"GET", "/v1/topics/orders/partitions/7/records", 404, wire.CodeUnknownTopic},
		{"GET", "/v1/topics/orders/partitions/7/reassignment", 404, wire.CodeUnknownTopic},
		// A malformed topic name still comes first.
		{"GET", "/v1/topics/..%2Fx/partitions/abc/records", 400, wire.CodeInvalidTopicName},
	} {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod(tc.method)
		ctx.Request.SetRequestURI(tc.path)
		rt.handle(&ctx)
		e := errorCode(t, ctx.Response.Body())
		if ctx.Response.StatusCode() != tc.status || e.Code != tc.code {
			t.Errorf("%s %s: %d %s (%s), want %d %s", tc.method, tc.path, ctx.Response.StatusCode(), e.Code, e.Message, tc.status, tc.code)
		}
	}
}

// TestFetchParamsCheckedBeforeTheReplica: a fetch's offset and max_bytes
// are read before the agent decides who serves it. At an agent with no
// replica and no leader to proxy to, a malformed offset was answered 503
// leader_not_available (retriable: a client retried a request that could
// never succeed), and offset= or max_bytes= with no value were taken as
// absent; each is 400 now, and a partition number the topic does not have
// stays 404.
func TestFetchParamsCheckedBeforeTheReplica(t *testing.T) {
	c := startTestCluster(t, 2, "")
	c.createTopic(c.agents[0], "solo", 1, 1, 1)
	leader, _ := c.waitLeader("solo", 0, 1)
	other := c.agents[0]
	if other == leader {
		other = c.agents[1]
	}
	if err := leader.stop(); err != nil {
		t.Fatal(err)
	}
	// Control: a well-formed fetch finds nobody to serve it.
	c.waitFor(20*time.Second, "the partition without a leader at "+other.nodeID, func() bool {
		status, body := other.call("GET", "/v1/topics/solo/partitions/0/records?offset=0", "", nil)
		return status == 503 && errorCode(t, body).Code == wire.CodeLeaderNotAvailable
	})
	for _, tc := range []struct {
		path   string
		status int
		code   string
	}{
		{"/v1/topics/solo/partitions/0/records?offset=abc", 400, wire.CodeInvalidOffset},
		{"/v1/topics/solo/partitions/0/records?offset=-1", 400, wire.CodeInvalidOffset},
		{"/v1/topics/solo/partitions/0/records?offset=99999999999999999999", 400, wire.CodeInvalidOffset},
		{"/v1/topics/solo/partitions/0/records?offset=", 400, wire.CodeInvalidOffset},
		{"/v1/topics/solo/partitions/0/records?max_bytes=", 400, wire.CodeInvalidRequest},
		{"/v1/topics/solo/partitions/0/records?max_bytes=0", 400, wire.CodeInvalidRequest},
		{"/v1/topics/solo/partitions/0/records?max_bytes=2147483648", 400, wire.CodeInvalidRequest},
		{"/v1/topics/solo/partitions/abc/records", 400, wire.CodeInvalidRequest},
		{"/v1/topics/solo/partitions/1/records", 404, wire.CodeUnknownPartition},
		{"/v1/topics/solo/partitions/0/records?offset=0", 503, wire.CodeLeaderNotAvailable},
	} {
		status, body := other.call("GET", tc.path, "", nil)
		if e := errorCode(t, body); status != tc.status || e.Code != tc.code {
			t.Errorf("GET %s at %s (no leader): %d %s (%s), want %d %s", tc.path, other.nodeID, status, e.Code, e.Message, tc.status, tc.code)
		}
	}
}

// TestUnknownQueryParameterRefused: every route of the client API but the
// open and the pass-through ones (health, metrics, the status page, pprof)
// refuses a query parameter it does not take, 400 invalid_request naming
// it and what the route takes, before its handler runs. A typo was
// ignored: partiton=2 had the record written to another partition, ofset=5
// a consumer read from the log's start. The parameters a route takes
// reach its handler (here a starting agent's 503).
func TestUnknownQueryParameterRefused(t *testing.T) {
	a := unitAgent(t)
	rt := a.clientRoutes()
	call := func(method, uri string) (int, reply.APIError) {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod(method)
		ctx.Request.SetRequestURI(uri)
		rt.handle(&ctx)
		return ctx.Response.StatusCode(), errorCode(t, ctx.Response.Body())
	}
	checked := 0
	for _, r := range rt.routes {
		path := "/" + strings.Join(r.pattern, "/")
		if path == "/v1/health" || !strings.HasPrefix(path, "/v1/") {
			continue
		}
		checked++
		uri := strings.NewReplacer("{topic}", "orders", "{partition}", "0", "{node}", "n2", "{group}", "g", "{member}", "m").Replace(path)
		status, e := call(r.method, uri+"?bogus=1")
		if status != 400 || e.Code != wire.CodeInvalidRequest || !strings.Contains(e.Message, `unknown query parameter "bogus"`) {
			t.Errorf("%s %s?bogus=1: %d %s %q, want 400 %s naming bogus", r.method, uri, status, e.Code, e.Message, wire.CodeInvalidRequest)
		}
	}
	if checked < 25 {
		t.Errorf("checked %d routes of the client API, want every /v1 route but health", checked)
	}
	for _, tc := range []struct {
		method, uri string
		status      int
		message     string
	}{
		{"POST", "/v1/topics/orders/records?partiton=2", 400,
			`unknown query parameter "partiton": POST /v1/topics/{topic}/records takes partition, key, acks, timeout`},
		{"GET", "/v1/topics/orders/partitions/0/records?ofset=5", 400, `unknown query parameter "ofset"`},
		{"GET", "/v1/topics?x", 400, `unknown query parameter "x": GET /v1/topics takes no query parameter`},
		{"POST", "/v1/topics/orders/records?partition=2&key=k&acks=all&timeout=1s", 503, ""},
		{"GET", "/v1/topics/orders/partitions/0/records?offset=5&max_bytes=10&wait=1s&last_fetched_epoch=1", 503, ""},
		{"GET", "/v1/groups/g/offsets?topic=orders&timeout=1s", 503, ""},
		{"GET", "/v1/groups?timeout=1s", 503, ""},
		{"GET", "/v1/topics?", 503, ""},
		{"GET", "/v1/health?probe=1", 503, ""},
	} {
		status, e := call(tc.method, tc.uri)
		if status != tc.status || !strings.Contains(e.Message, tc.message) {
			t.Errorf("%s %s: %d %s %q, want %d %q", tc.method, tc.uri, status, e.Code, e.Message, tc.status, tc.message)
		}
	}
}
