package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

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
