package election

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// Liveness is which agents Consul says are alive, as of one Consul index of
// the health of service "logagent". It is immutable; Changed is closed once
// a newer one exists.
//
// An agent is dead when Consul says so: it has no registration (never
// registered, deregistered, or its node is gone) or every registration it
// has is failing a check its session is linked to (its own TTL check, or its
// Consul node's serfHealth) — the same condition that invalidates its
// session. A warning, or maintenance mode, is not death. A failed read
// changes nothing: the last good answer stays, so no agent is ever called
// dead because Consul could not be asked.
//
// An agent is placeable when it has a registration whose every check
// passes (Consul's "passing" filter; AgentInfo.Passing in Client.Agents):
// only those take new replicas. An agent in maintenance mode (its service's or
// its node's) or with a check in warning is alive, keeps its replicas and
// leaderships, and takes none.
type Liveness struct {
	// Index is the Consul index of the health read; 0 until the first one.
	Index     uint64
	alive     map[string]bool
	placeable map[string]bool
	changed   chan struct{}
}

func emptyLiveness() *Liveness {
	return &Liveness{alive: map[string]bool{}, placeable: map[string]bool{}, changed: make(chan struct{})}
}

// Loaded reports whether the liveness was read from Consul. Before that
// nobody is dead.
func (lv *Liveness) Loaded() bool { return lv.Index > 0 }

// Changed is closed when a newer liveness replaces this one.
func (lv *Liveness) Changed() <-chan struct{} { return lv.changed }

// Dead reports whether Consul says the agent with this node id is dead.
func (lv *Liveness) Dead(nodeID string) bool { return lv.Loaded() && !lv.alive[nodeID] }

// Alive lists the node ids of the agents Consul says are alive, sorted.
func (lv *Liveness) Alive() []string { return slices.Sorted(maps.Keys(lv.alive)) }

// Placeable lists the node ids of the agents that may take new replicas,
// sorted: those with a registration whose every check passes.
func (lv *Liveness) Placeable() []string { return slices.Sorted(maps.Keys(lv.placeable)) }

// NotPassing lists the agents alive but not placeable (maintenance mode, a
// check in warning), sorted.
func (lv *Liveness) NotPassing() []string {
	return slices.DeleteFunc(lv.Alive(), func(id string) bool { return lv.placeable[id] })
}

// DeadAmong returns the members of ids Consul says are dead, in their order.
func (lv *Liveness) DeadAmong(ids []string) []string {
	var dead []string
	for _, id := range ids {
		if lv.Dead(id) {
			dead = append(dead, id)
		}
	}
	return dead
}

// buildLiveness reads the health of every registration of the service,
// passing or not: an agent is alive if any of its registrations is, and
// placeable if any has every check passing.
func buildLiveness(index uint64, entries []*api.ServiceEntry) *Liveness {
	lv := emptyLiveness()
	lv.Index = index
	for _, e := range entries {
		if e.Service == nil || e.Service.Meta[metaNodeID] == "" {
			continue
		}
		nodeID := e.Service.Meta[metaNodeID]
		alive, passing := registrationHealth(e)
		if alive {
			lv.alive[nodeID] = true
		}
		if passing {
			lv.placeable[nodeID] = true
		}
	}
	return lv
}

// registrationHealth judges one registration of the service: alive unless
// it fails a check its session is linked to, passing when every check
// passes (which implies alive).
func registrationHealth(e *api.ServiceEntry) (alive, passing bool) {
	if e.Service == nil {
		return false, false
	}
	alive = !slices.ContainsFunc(e.Checks, func(hc *api.HealthCheck) bool {
		return hc.Status == api.HealthCritical && linkedToSession(hc, e.Service.ID)
	})
	passing = !slices.ContainsFunc(e.Checks, func(hc *api.HealthCheck) bool { return hc.Status != api.HealthPassing })
	return alive, passing
}

// serviceMaintenancePrefix starts the check id of Consul's service
// maintenance mode, which is critical without the agent having died.
const serviceMaintenancePrefix = "_service_maintenance:"

// linkedToSession says whether a check is of the kind an agent's session is
// linked to: a check of its service (its TTL check), or its node's
// serfHealth.
func linkedToSession(hc *api.HealthCheck, serviceID string) bool {
	if hc.CheckID == serfHealthCheckID {
		return true
	}
	return hc.ServiceID == serviceID && !strings.HasPrefix(hc.CheckID, serviceMaintenancePrefix)
}

// Liveness returns the latest liveness, starting its watch on first use.
// Before the first read from Consul it is not Loaded and says nobody is
// dead.
func (c *Client) Liveness() *Liveness {
	c.livenessOnce.Do(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		// Close waits for the goroutines only after setting closed: none
		// may start after that.
		if !c.closed {
			c.wg.Go(c.livenessLoop)
		}
	})
	return c.liveness.Load()
}

// livenessLoop is the blocking query on the health of service "logagent",
// every state included. It reads consistently: a check that went critical
// may show a little late, but a stale read could show an agent that came
// back as still dead.
func (c *Client) livenessLoop() {
	const op = "watch agent health"
	rule := serviceRule + " and " + nodeRule
	c.blockingLoop("liveness", func() time.Duration { return c.cfg.WatchMinGap }, func(ctx context.Context, waitIndex uint64) (uint64, func(uint64), error) {
		q := (&api.QueryOptions{WaitIndex: waitIndex, WaitTime: c.cfg.WatchWait, RequireConsistent: true}).WithContext(ctx)
		entries, meta, err := c.api.Health().Service(serviceName, "", false, q)
		switch {
		case err != nil:
			return 0, nil, consulError(err, op, rule)
		case meta.ResultsFilteredByACLs:
			// A registration hidden from us would look deregistered.
			return 0, nil, &PermissionError{Op: op, Rule: rule, Consul: "results filtered by ACLs"}
		}
		return meta.LastIndex, func(index uint64) {
			lv := buildLiveness(index, entries)
			old := c.liveness.Swap(lv)
			close(old.changed)
			c.logLivenessChange(old, lv)
		}, nil
	})
}

// logLivenessChange logs the agents that died or came back, and those that
// went in or out of maintenance mode (or a warning).
func (c *Client) logLivenessChange(old, lv *Liveness) {
	var died, back []string
	for id := range old.alive {
		if !lv.alive[id] {
			died = append(died, id)
		}
	}
	for id := range lv.alive {
		if old.Loaded() && !old.alive[id] {
			back = append(back, id)
		}
	}
	if len(died) > 0 || len(back) > 0 {
		slices.Sort(died)
		slices.Sort(back)
		c.log.Info("agent liveness changed", "dead", died, "alive_again", back, "alive", lv.Alive())
	}
	if was, now := old.NotPassing(), lv.NotPassing(); !slices.Equal(was, now) {
		c.log.Info("agents alive but not passing every check (maintenance mode, a warning) take no new replica", "not_passing", now, "before", was)
	}
}
