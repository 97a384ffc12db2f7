package election

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

// AgentInfo is one registered agent whose check passes.
type AgentInfo struct {
	NodeID     string
	PeerAddr   string
	ClientAddr string
	// ConsulNode is the Consul node the agent registered with.
	ConsulNode string
	// Passing: every Consul check of its registration passes, so it may
	// take new replicas (Liveness.Placeable). An agent alive but in
	// maintenance mode, or with a check in warning, serves all the same.
	Passing bool
	// Version is the build the agent registered (Config.Version), "" for
	// one that registered none.
	Version string
}

// PlacementNodes are the node ids, in the order of agents (Agents sorts
// them, one per node), of the agents that new replicas may be placed on:
// passing every Consul check and not being drained in snap. A new topic's partitions, the offsets topic's and a
// rebalance's moves are placed among them (self-healing applies the same
// rule to the liveness watch: Liveness.Placeable, less the drained).
func PlacementNodes(agents []AgentInfo, snap *Snapshot) []string {
	var nodes []string
	for _, a := range agents {
		if a.Passing && !snap.IsDraining(a.NodeID) {
			nodes = append(nodes, a.NodeID)
		}
	}
	return nodes
}

// Register registers the agent as service "logagent" (ID
// "logagent-<node_id>", meta node_id, peer_addr, client_addr) with a TTL
// check created passing, then keeps the check passing every CheckTTL/3,
// keeps one session linked to it, and keeps the local lease, until
// Deregister or Close. Registering twice is a no-op.
func (c *Client) Register(ctx context.Context) error {
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return ErrClosed
	case c.registration != nil:
		c.mu.Unlock()
		return nil
	}
	regCtx, cancel := context.WithCancel(c.ctx)
	keepAliveCtx, keepAliveCancel := context.WithCancel(regCtx)
	reg := &registration{cancel: cancel, keepAliveCancel: keepAliveCancel, done: make(chan struct{})}
	// Claimed before the I/O so a concurrent Register returns at once.
	c.registration = reg
	c.mu.Unlock()

	if err := c.registerService(ctx); err != nil {
		c.mu.Lock()
		c.registration = nil
		c.mu.Unlock()
		cancel()
		close(reg.done)
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.registration != reg {
		// Closed or deregistered while registering: start nothing.
		cancel()
		close(reg.done)
		return ErrClosed
	}
	c.log.Info("registered", "service_id", c.serviceID, "check_id", c.checkID, "check_ttl", c.cfg.CheckTTL)
	c.wg.Go(func() {
		defer close(reg.done)
		var loops sync.WaitGroup
		loops.Go(func() { c.heartbeatLoop(keepAliveCtx) })
		loops.Go(func() { c.sessionLoop(keepAliveCtx) })
		loops.Go(func() { c.leaseLoop(regCtx) })
		loops.Go(func() { c.strayLoop(regCtx) })
		loops.Wait()
	})
	return nil
}

// registerService (re-)registers the service and its check, passing.
func (c *Client) registerService(ctx context.Context) error {
	reg := &api.AgentServiceRegistration{
		ID:   c.serviceID,
		Name: serviceName,
		Meta: map[string]string{
			metaNodeID:     c.cfg.NodeID,
			metaPeerAddr:   c.cfg.PeerAddr,
			metaClientAddr: c.cfg.ClientAddr,
		},
		Check: &api.AgentServiceCheck{
			CheckID:                        c.checkID,
			Name:                           "logagent alive",
			Notes:                          "passed by the logagent process every third of its TTL",
			TTL:                            c.cfg.CheckTTL.String(),
			Status:                         api.HealthPassing,
			DeregisterCriticalServiceAfter: c.cfg.DeregisterCriticalAfter.String(),
		},
	}
	if c.cfg.Version != "" {
		reg.Meta[metaVersion] = c.cfg.Version
	}
	// The peer address doubles as the service address for DNS users; meta
	// keeps the exact strings.
	if host, port, err := net.SplitHostPort(c.cfg.PeerAddr); err == nil {
		if n, err := strconv.Atoi(port); err == nil {
			reg.Address, reg.Port = host, n
		}
	}
	callCtx, cancel := c.callContext(ctx)
	defer cancel()
	sent := c.clock.Now()
	// Replacing existing checks removes the check of a previous incarnation
	// of this node, which invalidates that incarnation's session.
	err := c.api.Agent().ServiceRegisterOpts(reg, api.ServiceRegisterOpts{ReplaceExistingChecks: true}.WithContext(callCtx))
	if err != nil {
		return consulError(err, fmt.Sprintf("register service %q", c.serviceID), serviceRule)
	}
	done := c.clock.Now()
	c.updateLease(func(l *lease) bool { return l.checkRegistered(sent, done) })
	return nil
}

// heartbeatLoop passes the TTL check every CheckTTL/3, registering again if
// Consul lost the check (a Consul agent restarted without its data).
//
// A pass does not wait for the one before it: each leaves on time and may
// take up to CheckTTL, and the lease counts whichever succeed (from when
// each was sent). One pass at a time would fall behind a Consul that
// answers slowly, spacing the passes by their latency, and a pass cut off
// at the interval would be lost even when Consul would have counted it:
// under a failover's load, answers of 1-2 s took every leadership of a
// 10,000-partition agent with its lease (docs/design.md §6, "Registration").
// With the shipped timing (check_ttl 3s, lease margin 500ms) the lease
// holds while passes are answered within 1.5 s of being sent.
func (c *Client) heartbeatLoop(ctx context.Context) {
	interval := c.cfg.CheckTTL / heartbeatsPerTTL
	// After a pass failed, the next one leaves sooner: the lease is
	// running out.
	retry := interval / 4
	results := make(chan passResult, heartbeatsPerTTL)
	var passes sync.WaitGroup
	defer passes.Wait()
	inFlight := 0
	next := c.clock.Now().Add(interval)
	for {
		var due <-chan time.Time
		if inFlight < heartbeatsPerTTL {
			due = c.clock.After(next.Sub(c.clock.Now()))
		}
		select {
		case <-ctx.Done():
			return
		case <-due:
			inFlight++
			next = c.clock.Now().Add(interval)
			passes.Go(func() { results <- c.pass(ctx) })
		case r := <-results:
			inFlight--
			switch {
			case r.err == nil:
				c.updateLease(func(l *lease) bool { return l.checkPassed(r.sent, r.done) })
			case ctx.Err() != nil:
				return
			case unknownCheck(r.err):
				c.log.Warn("health check missing in Consul; registering again", "check_id", c.checkID, "error", r.err)
				c.resetWatches()
				if err := c.registerService(ctx); err != nil && ctx.Err() == nil {
					c.log.Error("register again failed", "error", err)
				}
				next = earlier(next, c.clock.Now().Add(retry))
			default:
				c.logConsulError("health check pass failed", r.err)
				next = earlier(next, r.done.Add(retry))
			}
		}
	}
}

// passResult is one check pass: when it was sent, when its answer came.
type passResult struct {
	sent, done time.Time
	err        error
}

// pass passes the check once. It gives up after CheckTTL: a pass answered
// later proves nothing the lease could still use.
func (c *Client) pass(ctx context.Context) passResult {
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.CheckTTL)
	defer cancel()
	sent := c.clock.Now()
	err := c.api.Agent().UpdateTTLOpts(c.checkID, "", api.HealthPassing, (&api.QueryOptions{}).WithContext(callCtx))
	if err != nil {
		err = consulError(err, fmt.Sprintf("pass check %q", c.checkID), serviceRule)
	}
	return passResult{sent: sent, done: c.clock.Now(), err: err}
}

// unknownCheck recognises the Consul agent not knowing the check.
func unknownCheck(err error) bool {
	var status api.StatusError
	if !errors.As(err, &status) {
		return false
	}
	return status.Code == http.StatusNotFound ||
		strings.Contains(status.Body, "does not have associated TTL") ||
		strings.Contains(status.Body, "Unknown check")
}

// Deregister ends every leadership, releases their locks (no lock delay),
// destroys the session and removes the registration. The client can
// Register again afterwards.
func (c *Client) Deregister(ctx context.Context) error {
	c.mu.Lock()
	reg := c.registration
	if reg == nil {
		c.mu.Unlock()
		return nil
	}
	c.registration = nil
	c.mu.Unlock()
	// The loops stop first so they cannot create a new session behind us.
	reg.cancel()
	<-reg.done

	c.mu.Lock()
	held := c.heldLockKeysLocked()
	sessionID := c.sessionID
	c.loseAllLocked(ErrClosed)
	c.sessionID = ""
	c.lease.sessionLost()
	c.broadcastSessionLocked()
	c.mu.Unlock()

	var errs []error
	if sessionID != "" {
		errs = append(errs, c.releaseLocks(ctx, sessionID, held))
		callCtx, cancel := c.callContext(ctx)
		if _, err := c.api.Session().Destroy(sessionID, c.writeOptions(callCtx)); err != nil {
			errs = append(errs, consulError(err, "destroy session "+sessionID, sessionRule))
		}
		cancel()
	}
	callCtx, cancel := c.callContext(ctx)
	defer cancel()
	if err := c.api.Agent().ServiceDeregisterOpts(c.serviceID, (&api.QueryOptions{}).WithContext(callCtx)); err != nil {
		errs = append(errs, consulError(err, fmt.Sprintf("deregister service %q", c.serviceID), serviceRule))
	}
	c.log.Info("deregistered", "service_id", c.serviceID, "released_locks", len(held))
	return errors.Join(errs...)
}

// Agents lists the agents Consul reports alive, by node id, as Liveness
// judges them: an agent in maintenance mode or with a check in warning is
// alive, serves and is listed, with Passing false. Placing new replicas
// takes PlacementNodes of it.
func (c *Client) Agents(ctx context.Context) ([]AgentInfo, error) {
	callCtx, cancel := c.callContext(ctx)
	defer cancel()
	entries, meta, err := c.api.Health().Service(serviceName, "", false, (&api.QueryOptions{}).WithContext(callCtx))
	const op = "list agents"
	rule := serviceRule + " and " + nodeRule
	if err != nil {
		return nil, consulError(err, op, rule)
	}
	if meta.ResultsFilteredByACLs {
		return nil, &PermissionError{Op: op, Rule: rule, Consul: "results filtered by ACLs"}
	}
	byNode := map[string]AgentInfo{}
	for _, e := range entries {
		if e.Service == nil || e.Service.Meta[metaNodeID] == "" {
			continue
		}
		nodeID := e.Service.Meta[metaNodeID]
		alive, passing := registrationHealth(e)
		if !alive {
			continue
		}
		if seen, ok := byNode[nodeID]; ok && (seen.Passing || !passing) {
			continue // an agent registered twice: a passing registration first
		}
		byNode[nodeID] = AgentInfo{
			NodeID:     nodeID,
			PeerAddr:   e.Service.Meta[metaPeerAddr],
			ClientAddr: e.Service.Meta[metaClientAddr],
			ConsulNode: e.Node.Node,
			Passing:    passing,
			Version:    e.Service.Meta[metaVersion],
		}
	}
	agents := slices.Collect(maps.Values(byNode))
	slices.SortFunc(agents, func(a, b AgentInfo) int { return strings.Compare(a.NodeID, b.NodeID) })
	return agents, nil
}

// logConsulError logs a failed background call; permission problems are
// errors (they will not fix themselves), the rest warnings.
func (c *Client) logConsulError(msg string, err error) {
	if errors.Is(err, ErrPermissionDenied) {
		c.log.Error(msg, "error", err)
		return
	}
	c.log.Warn(msg, "error", err)
}

// updateLease applies f to the lease and acts on the result: a revoked lease
// ends every leadership at once, a change of validity wakes campaigns, and a
// lease that needs proof asks for a renewal now.
func (c *Client) updateLease(f func(*lease) (revoked bool)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	wasValid := c.lease.valid(now)
	if f(&c.lease) {
		c.loseAllLocked(ErrLeaseExpired)
		c.log.Warn("lease revoked: stopped leading", "session", c.sessionID)
	}
	if c.lease.valid(now) != wasValid {
		c.broadcastSessionLocked()
	}
	if c.lease.needsProof() {
		c.requestRenewal()
	}
}

// leaseLoop ends every leadership when the lease deadline passes without a
// renewal or pass having moved it.
func (c *Client) leaseLoop(ctx context.Context) {
	for {
		c.mu.Lock()
		now := c.clock.Now()
		if c.lease.expire(now) {
			c.loseAllLocked(ErrLeaseExpired)
			c.broadcastSessionLocked()
			c.requestRenewal()
			c.log.Warn("lease expired: stopped leading", "session", c.sessionID,
				"deadline", c.lease.deadline().Format(time.RFC3339Nano))
		}
		var timer <-chan time.Time
		if c.lease.valid(now) {
			timer = c.clock.After(c.lease.deadline().Sub(now))
		}
		changed := c.sessionChanged
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-timer:
		}
	}
}

// LeaseDeadline is when this agent stops leading unless Consul hears from
// it; zero when it has no valid lease.
func (c *Client) LeaseDeadline() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.lease.valid(c.clock.Now()) {
		return time.Time{}
	}
	return c.lease.deadline()
}
