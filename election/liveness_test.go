package election

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/logagent/logagent/internal/consultest"
)

func TestBuildLiveness(t *testing.T) {
	entry := func(node string, checks ...*api.HealthCheck) *api.ServiceEntry {
		id := serviceName + "-" + node
		for _, hc := range checks {
			if nodeCheck := hc.CheckID == serfHealthCheckID || hc.CheckID == "disk" || hc.CheckID == "_node_maintenance"; !nodeCheck {
				hc.ServiceID = id
			}
		}
		return &api.ServiceEntry{
			Node:    &api.Node{Node: "consul-" + node},
			Service: &api.AgentService{ID: id, Service: serviceName, Meta: map[string]string{metaNodeID: node}},
			Checks:  checks,
		}
	}
	check := func(id, status string) *api.HealthCheck { return &api.HealthCheck{CheckID: id, Status: status} }
	ttl := func(node, status string) *api.HealthCheck { return check(serviceName+"-"+node+":ab12", status) }
	serf := func(status string) *api.HealthCheck { return check(serfHealthCheckID, status) }
	tests := []struct {
		name      string
		entries   []*api.ServiceEntry
		dead      []string // among a, b, c
		placeable []string
	}{
		{"all passing", []*api.ServiceEntry{
			entry("a", ttl("a", api.HealthPassing), serf(api.HealthPassing)),
			entry("b", ttl("b", api.HealthPassing)),
			entry("c", ttl("c", api.HealthPassing)),
		}, nil, []string{"a", "b", "c"}},
		{"its ttl check critical", []*api.ServiceEntry{
			entry("a", ttl("a", api.HealthPassing)),
			entry("b", ttl("b", api.HealthCritical), serf(api.HealthPassing)),
			entry("c", ttl("c", api.HealthPassing)),
		}, []string{"b"}, []string{"a", "c"}},
		{"its node's serfHealth critical", []*api.ServiceEntry{
			entry("a", ttl("a", api.HealthPassing)),
			entry("b", ttl("b", api.HealthPassing)),
			entry("c", ttl("c", api.HealthPassing), serf(api.HealthCritical)),
		}, []string{"c"}, []string{"a", "b"}},
		{"registration gone", []*api.ServiceEntry{
			entry("a", ttl("a", api.HealthPassing)),
			entry("c", ttl("c", api.HealthPassing)),
		}, []string{"b"}, []string{"a", "c"}},
		{"warning, maintenance and unrelated checks are not death, but take no replica", []*api.ServiceEntry{
			entry("a", ttl("a", api.HealthWarning)),
			entry("b", ttl("b", api.HealthPassing), check(serviceMaintenancePrefix+"logagent-b", api.HealthCritical)),
			entry("c", ttl("c", api.HealthPassing), check("disk", api.HealthCritical)), // a node check
		}, nil, nil},
		{"node maintenance", []*api.ServiceEntry{
			entry("a", ttl("a", api.HealthPassing), check("_node_maintenance", api.HealthCritical)),
			entry("b", ttl("b", api.HealthPassing)),
			entry("c", ttl("c", api.HealthPassing)),
		}, nil, []string{"b", "c"}},
		{"alive if any registration is", []*api.ServiceEntry{
			entry("a", ttl("a", api.HealthCritical)),
			entry("a", ttl("a", api.HealthPassing)),
			entry("b", ttl("b", api.HealthPassing)),
			entry("c", ttl("c", api.HealthPassing)),
			{Service: &api.AgentService{ID: "logagent-x"}}, // no node id: ignored
		}, nil, []string{"a", "b", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lv := buildLiveness(7, tt.entries)
			if got := lv.DeadAmong([]string{"a", "b", "c"}); !slices.Equal(got, tt.dead) {
				t.Fatalf("dead %v, want %v", got, tt.dead)
			}
			if got := lv.Placeable(); !slices.Equal(got, tt.placeable) {
				t.Fatalf("placeable %v, want %v", got, tt.placeable)
			}
			if !lv.Dead("never-registered") {
				t.Error("an agent Consul never heard of is not dead")
			}
		})
	}
	if lv := emptyLiveness(); lv.Loaded() || lv.Dead("a") {
		t.Error("a liveness never read from Consul calls someone dead")
	}
}

// TestLivenessReportsDeadAgents runs the liveness watch against a real
// Consul: an agent that stops passing its check is dead within the check
// TTL, one that deregistered at once, a passing one never; and a Consul that
// stops answering changes nothing.
func TestLivenessReportsDeadAgents(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	watcher := newTestClient(t, srv, "a")
	crashed := newTestClient(t, srv, "b")
	leaving := newTestClient(t, srv, "c")
	for _, c := range []*Client{watcher, crashed, leaving} {
		register(t, c)
	}
	nodes := []string{"a", "b", "c"}
	// waitLiveness waits for cond on the latest liveness, checking every
	// one it sees on the way for a false death of the passing agent.
	waitLiveness := func(timeout time.Duration, what string, cond func(*Liveness) bool) *Liveness {
		t.Helper()
		deadline := time.After(timeout)
		for {
			lv := watcher.Liveness()
			if lv.Dead("a") {
				t.Fatalf("passing agent a reported dead at index %d (alive %v)", lv.Index, lv.Alive())
			}
			if cond(lv) {
				return lv
			}
			select {
			case <-lv.Changed():
			case <-deadline:
				t.Fatalf("timed out after %v waiting for %s; alive %v at index %d", timeout, what, lv.Alive(), lv.Index)
			}
		}
	}
	waitLiveness(5*time.Second, "every agent alive", func(lv *Liveness) bool {
		return lv.Loaded() && len(lv.DeadAmong(nodes)) == 0 && slices.Equal(lv.Placeable(), nodes)
	})

	// Maintenance mode (consul maint -service): a stays alive (waitLiveness
	// fails on its death) and takes no new replica until it ends.
	agentAPI := srv.Client().Agent()
	if err := agentAPI.EnableServiceMaintenance(serviceName+"-a", "patching"); err != nil {
		t.Fatal(err)
	}
	waitLiveness(5*time.Second, "a not placeable in maintenance", func(lv *Liveness) bool {
		return slices.Equal(lv.Placeable(), []string{"b", "c"})
	})
	// The agents list keeps it (the others route to it), not passing.
	agents, err := watcher.Agents(context.Background())
	if err != nil || len(agents) != 3 || agents[0].NodeID != "a" || agents[0].Passing || !agents[1].Passing || !agents[2].Passing {
		t.Fatalf("Agents() with a in maintenance = %+v, %v; want a, b, c, only a not passing", agents, err)
	}
	if err := agentAPI.DisableServiceMaintenance(serviceName + "-a"); err != nil {
		t.Fatal(err)
	}
	waitLiveness(5*time.Second, "a placeable again", func(lv *Liveness) bool { return slices.Equal(lv.Placeable(), nodes) })

	stopped := time.Now()
	crash(crashed)
	waitLiveness(DefaultCheckTTL+time.Second, "b dead", func(lv *Liveness) bool { return lv.Dead("b") })
	t.Logf("b reported dead %v after its check passes stopped (check ttl %v)", time.Since(stopped).Round(time.Millisecond), DefaultCheckTTL)

	deregistered := time.Now()
	if err := leaving.Deregister(context.Background()); err != nil {
		t.Fatal(err)
	}
	lv := waitLiveness(time.Second, "c dead", func(lv *Liveness) bool { return lv.Dead("c") })
	t.Logf("c reported dead %v after it deregistered", time.Since(deregistered).Round(time.Millisecond))
	if got := lv.DeadAmong(nodes); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("dead %v, want [b c]", got)
	}

	// Unanswered reads publish nothing: a stays alive, nobody comes back.
	srv.Stop()
	time.Sleep(time.Second)
	after := watcher.Liveness()
	if after != lv || after.Dead("a") {
		t.Fatalf("liveness moved from index %d to %d (alive %v) while Consul was down", lv.Index, after.Index, after.Alive())
	}
}
