package election

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// TestHungConsulCountsAsErrors: a Consul that accepts connections but
// never answers (overloaded, wedged, a half-open link) makes every
// non-blocking call end at the client's own CallTimeout. Those requests got
// no answer: logagent_consul_request_errors_total must count them, or the
// LogagentConsulErrors alert ("the agent cannot talk to Consul") stays
// silent in exactly that outage.
func TestHungConsulCountsAsErrors(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	ccfg := api.DefaultConfig()
	ccfg.Address = srv.Listener.Addr().(*net.TCPAddr).String()
	c, err := New(Config{Consul: ccfg, NodeID: "n1", PeerAddr: "127.0.0.1:7171", ClientAddr: "127.0.0.1:7070",
		CallTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := c.consulLeader(context.Background()); err == nil {
			t.Fatal("a hung Consul answered")
		}
	}
	r, e := c.ConsulRequests()
	t.Logf("requests=%d errors=%d", r, e)
	if r != 5 || e != 5 {
		t.Fatalf("5 requests to a hung Consul timed out: counted %d requests and %d errors, want 5 and 5", r, e)
	}
}
