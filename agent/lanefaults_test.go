package agent

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/wire"
)

// peerProxy stands between the other agents and one agent's peer API. It
// passes every request on; an armed one answers the next produce forward,
// once the agent behind it has answered, with 500 internal: what a leader
// answers when an unexpected error follows its append.
type peerProxy struct {
	addr  string
	armed atomic.Bool
}

func startPeerProxy(t *testing.T, target string) *peerProxy {
	t.Helper()
	p := &peerProxy{}
	pass := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: target})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != peerProducePath || !p.armed.CompareAndSwap(true, false) {
			pass.ServeHTTP(w, r)
			return
		}
		answered := httptest.NewRecorder()
		pass.ServeHTTP(answered, r)
		w.Header().Set("Content-Type", wire.ContentTypeJSON)
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, `{"error":{"code":%q,"message":"injected in place of the leader's %d answer","retriable":false}}`, wire.CodeInternal, answered.Code)
	}))
	t.Cleanup(srv.Close)
	p.addr = srv.Listener.Addr().String()
	return p
}

// startProxiedCluster starts n agents whose directories give, for each
// agent, the address of a peerProxy in front of its peer API.
func startProxiedCluster(t *testing.T, n int, setup func(*Agent)) (*testCluster, map[string]*peerProxy) {
	t.Helper()
	proxies := map[string]*peerProxy{}
	c := newTestCluster(t, n, "", func(a *Agent) {
		list := a.agents.list
		a.agents.list = func(ctx context.Context) ([]election.AgentInfo, error) {
			agents, err := list(ctx)
			for i := range agents {
				if p, ok := proxies[agents[i].NodeID]; ok {
					agents[i].PeerAddr = p.addr
				}
			}
			return agents, err
		}
		if setup != nil {
			setup(a)
		}
	})
	for _, ta := range c.agents {
		proxies[ta.nodeID] = startPeerProxy(t, ta.peer)
	}
	for _, ta := range c.agents {
		ta.start()
	}
	return c, proxies
}

// sidecarAndLeader creates a topic of one partition and one replica and
// returns its leader and the other agent, whose produces are forwarded.
func sidecarAndLeader(c *testCluster, topic string) (sidecar, leader *testAgent) {
	c.t.Helper()
	c.createTopic(c.agents[0], topic, 1, 1, 1)
	leader, _ = c.waitLeader(topic, 0, 1)
	for _, ta := range c.agents {
		if ta != leader {
			return ta, leader
		}
	}
	c.t.Fatal("no agent other than the leader")
	return nil, nil
}

// TestLaneAfterAnInternalErrorOfTheLeader: a 500 internal from the leader
// may follow its append (the leader loop's Appended failing after the log
// wrote the batch answers it), so a plain request sent on one of the
// sidecar's lanes is resent after it, as after any unknown outcome, and
// the lane does not go back with the sequence it used. Given back, the
// next request went with the same producer id and sequence, and the
// leader answered it as a duplicate of the first: acknowledged, never
// written.
func TestLaneAfterAnInternalErrorOfTheLeader(t *testing.T) {
	c, proxies := startProxiedCluster(t, 2, nil)
	sidecar, leader := sidecarAndLeader(c, "internal")
	sidecar.mustProduce("internal", 0, "warm")

	proxies[leader.nodeID].armed.Store(true)
	status, body := sidecar.produce("internal", 0, "acks=all", wire.ContentTypeNDJSON, []byte("a"))
	if status != 200 {
		t.Errorf("a produce whose first answer was 500 internal: %d %s, want it resent and answered 200", status, body)
	}
	b := sidecar.mustProduce("internal", 0, "b")
	got := leader.fetchValues("internal", 0, 0)
	if got[*b.BaseOffset] != "b" || len(got) != 3 {
		t.Fatalf("b was acknowledged at offset %d; the log holds %v, want warm, a and b", *b.BaseOffset, got)
	}
}

// TestLaneBackAfterTheTimeoutPassedBeforeTheForward: a request whose
// timeout passed before its forward left the sidecar wrote nothing; the
// answer says so and is retriable (503 timeout_before_write), and the lane
// goes back with its sequence. It was 504 ack_timeout, an unknown outcome:
// the client was told its write might be in, and the lane was dropped.
func TestLaneBackAfterTheTimeoutPassedBeforeTheForward(t *testing.T) {
	c := startTestCluster(t, 2, "")
	sidecar, leader := sidecarAndLeader(c, "late")
	sidecar.mustProduce("late", 0, "warm")

	status, body := sidecar.produce("late", 0, "acks=all&timeout=0s", wire.ContentTypeNDJSON, []byte("late"))
	if e := errorCode(t, body); status != 503 || e.Code != wire.CodeTimeoutBeforeWrite || !e.Retriable {
		t.Errorf("a produce whose timeout passed before the forward: %d %s, want 503 timeout_before_write, retriable", status, body)
	}
	lanes := sidecar.agent.lanes
	lanes.mu.Lock()
	free := slices.Clone(lanes.free[partitionKey{topic: "late", partition: 0}])
	lanes.mu.Unlock()
	if len(free) != 1 || free[0].next != 1 {
		t.Errorf("free lanes %+v, want the one lane back at sequence 1", free)
	}
	if got := leader.fetchValues("late", 0, 0); len(got) != 1 {
		t.Errorf("the log holds %v, want warm only", got)
	}
}

// TestPlainProduceAfterEveryLaneRefused: when the leader refuses every
// lane a plain request tries (invalid_producer_epoch: it does not know the
// lanes' state as the sidecar does, and here the fresh lanes too are given
// the stale producer id and epoch), nothing was written, and the request
// goes without idempotence, as when no lane can be had; with its timeout
// passed, it is answered 503 timeout_before_write (a local append would
// land after the deadline, an unknown outcome nobody resends). The client,
// which sent no producer fields, got 409 out_of_order_sequence: not
// retriable, and about a sequence it never sent.
func TestPlainProduceAfterEveryLaneRefused(t *testing.T) {
	var allocated atomic.Int32
	c := startTestClusterWith(t, 1, "", func(a *Agent) {
		a.lanes.alloc = func(context.Context) (int64, int16, error) {
			allocated.Add(1)
			return 77, 0, nil
		}
	})
	n1 := c.agents[0]
	c.createTopic(n1, "refused", 1, 1, 1)
	c.waitLeader("refused", 0, 1)
	// Producer 77 is at epoch 1 on the partition; the sidecar's lanes of
	// that id, the free ones and the new ones, are at epoch 0.
	header := http.Header{wire.HeaderProducerID: {"77"}, wire.HeaderProducerEpoch: {"1"}, wire.HeaderSequence: {"0"}}
	if status, body := c.callAddr(n1.client, "POST", "/v1/topics/refused/records?partition=0", wire.ContentTypeNDJSON, []byte("idempotent"), header); status != 200 {
		t.Fatalf("idempotent produce: %d %s", status, body)
	}
	n1.agent.lanes.give(partitionKey{topic: "refused", partition: 0}, &lane{id: 77, next: 7})

	status, body := n1.produce("refused", 0, "acks=all&timeout=0s", wire.ContentTypeNDJSON, []byte("late"))
	if e := errorCode(t, body); status != 503 || e.Code != wire.CodeTimeoutBeforeWrite || !e.Retriable {
		t.Errorf("a plain produce whose lane the leader refused after its timeout: %d %s, want 503 timeout_before_write, retriable", status, body)
	}
	if n := allocated.Load(); n != 0 {
		t.Errorf("%d producer ids allocated after the timeout passed, want none", n)
	}
	status, body = n1.produce("refused", 0, "acks=all", wire.ContentTypeNDJSON, []byte("plain"))
	if status != 200 {
		t.Errorf("a plain produce whose lanes the leader refused: %d %s, want it sent without idempotence and written", status, body)
	}
	if n := allocated.Load(); n != laneAttempts {
		t.Errorf("%d producer ids allocated, want %d: a new lane for each attempt", n, laneAttempts)
	}
	if got := n1.fetchValues("refused", 0, 0); len(got) != 2 || got[1] != "plain" {
		t.Errorf("the log holds %v, want the idempotent record and the plain one once", got)
	}
}

// TestPlainProduceRetriesOnAFreshLane: after the leader refused a lane
// (out_of_order_sequence: its state of the lane's producer is not the
// sidecar's), the retry is sent on a new producer id, not on another free
// lane of the partition, which may be as stale: one request took three
// stale lanes from the pool, one after the other, and then went without
// idempotence. Now it is written on a fresh lane at its second attempt,
// and the other stale lanes stay free.
func TestPlainProduceRetriesOnAFreshLane(t *testing.T) {
	c := startTestCluster(t, 1, "")
	n1 := c.agents[0]
	c.createTopic(n1, "stale", 1, 1, 1)
	c.waitLeader("stale", 0, 1)
	// Producer 77 is at sequence 1 on the partition; the sidecar's free
	// lanes of that id think it is at 7.
	header := http.Header{wire.HeaderProducerID: {"77"}, wire.HeaderProducerEpoch: {"0"}, wire.HeaderSequence: {"0"}}
	if status, body := c.callAddr(n1.client, "POST", "/v1/topics/stale/records?partition=0", wire.ContentTypeNDJSON, []byte("idempotent"), header); status != 200 {
		t.Fatalf("idempotent produce: %d %s", status, body)
	}
	key := partitionKey{topic: "stale", partition: 0}
	lanes := n1.agent.lanes
	for range laneAttempts {
		lanes.give(key, &lane{id: 77, next: 7})
	}

	if status, body := n1.produce("stale", 0, "acks=all", wire.ContentTypeNDJSON, []byte("plain")); status != 200 {
		t.Fatalf("a plain produce whose first lane the leader refused: %d %s", status, body)
	}
	lanes.mu.Lock()
	free := slices.Clone(lanes.free[key])
	lanes.mu.Unlock()
	var stale, fresh int
	for _, ln := range free {
		switch {
		case ln.id == 77 && ln.next == 7:
			stale++
		case ln.id != 77 && ln.next == 1:
			fresh++
		}
	}
	if len(free) != laneAttempts || stale != laneAttempts-1 || fresh != 1 {
		t.Errorf("free lanes %+v, want the %d stale lanes not tried and a new one at sequence 1, which wrote the record", free, laneAttempts-1)
	}
	if got := n1.fetchValues("stale", 0, 0); len(got) != 2 || got[1] != "plain" {
		t.Errorf("the log holds %v, want the idempotent record and the plain one once", got)
	}
}
