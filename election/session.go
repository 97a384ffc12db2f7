package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"
)

// proofRetry is how often a lease waiting for proof retries its renewal;
// short, because every leadership waits on it.
const proofRetry = 200 * time.Millisecond

// sessionLoop keeps one session: creates it (once the check passes), renews
// it every SessionTTL/2 and whenever the lease needs proof, and on loss
// ends every leadership and creates a new one.
func (c *Client) sessionLoop(ctx context.Context) {
	createBackoff := newBackoff(250*time.Millisecond, 2*time.Second)
	renewBackoff := newBackoff(250*time.Millisecond, time.Second)
	var next time.Time
	for ctx.Err() == nil {
		c.mu.Lock()
		id := c.sessionID
		needsProof := c.lease.needsProof()
		c.mu.Unlock()

		if id == "" {
			err := c.createSession(ctx)
			c.mu.Lock()
			if c.sessionFailure != nil || err != nil {
				c.sessionFailure = err
				c.broadcastSessionLocked()
			}
			c.mu.Unlock()
			if err != nil {
				if ctx.Err() == nil {
					c.logConsulError("create session failed", err)
				}
				c.sleep(ctx, createBackoff.delay())
				continue
			}
			createBackoff.reset()
			next = c.clock.Now().Add(c.cfg.SessionTTL / renewalsPerTTL)
			continue
		}
		if needsProof {
			next = earliest(next, c.clock.Now().Add(proofRetry))
		}
		select {
		case <-ctx.Done():
			return
		case <-c.renewNow:
		case <-c.clock.After(next.Sub(c.clock.Now())):
		}

		sent := c.clock.Now()
		entry, err := c.renewSession(ctx, id)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			c.logConsulError("session renewal failed", err)
			next = c.clock.Now().Add(renewBackoff.delay())
		case entry == nil:
			c.sessionGone(id)
		default:
			renewBackoff.reset()
			c.updateLease(func(l *lease) bool {
				l.sessionRenewed(sent)
				return false
			})
			next = sent.Add(c.cfg.SessionTTL / renewalsPerTTL)
		}
	}
}

// createSession creates the agent's session: TTL SessionTTL, LockDelay sent
// explicitly, behavior release, linked to the agent's TTL check and (unless
// NoSerfHealth) the node's serfHealth. The body is built here rather than
// with Session().Create because that omits empty check lists, and Consul
// then adds serfHealth.
func (c *Client) createSession(ctx context.Context) error {
	nodeChecks := []string{}
	if !c.cfg.NoSerfHealth {
		nodeChecks = append(nodeChecks, serfHealthCheckID)
	}
	body := map[string]any{
		"Name":          c.serviceID,
		"TTL":           c.cfg.SessionTTL.String(),
		"LockDelay":     fmt.Sprintf("%dms", c.cfg.LockDelay.Milliseconds()),
		"Behavior":      sessionBehavior,
		"NodeChecks":    nodeChecks,
		"ServiceChecks": []api.ServiceCheck{{ID: c.checkID}},
	}
	var out struct{ ID string }
	callCtx, cancel := c.callContext(ctx)
	defer cancel()
	sent := c.clock.Now()
	if _, err := c.api.Raw().Write("/v1/session/create", body, &out, c.writeOptions(callCtx)); err != nil {
		return consulError(err, "create session", sessionRule)
	}
	if out.ID == "" {
		return errors.New("election: create session: consul returned no id")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ctx.Err() != nil {
		// Deregister is under way and will not know about this session:
		// it holds nothing, and dies with the check Deregister removes.
		return ctx.Err()
	}
	c.sessionID = out.ID
	c.lease.sessionCreated(sent)
	c.broadcastSessionLocked()
	c.log.Info("session created", "session", out.ID, "ttl", c.cfg.SessionTTL, "lock_delay", c.cfg.LockDelay,
		"node_checks", nodeChecks, "service_check", c.checkID)
	return nil
}

// renewSession returns nil, nil when Consul no longer has the session.
func (c *Client) renewSession(ctx context.Context, id string) (*api.SessionEntry, error) {
	callCtx, cancel := c.callContext(ctx)
	defer cancel()
	entry, _, err := c.api.Session().Renew(id, c.writeOptions(callCtx))
	if err != nil {
		return nil, consulError(err, "renew session "+id, sessionRule)
	}
	return entry, nil
}

// sessionGone ends every leadership of a session Consul no longer has, so
// the loop creates a new one.
func (c *Client) sessionGone(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sessionID != id {
		return
	}
	c.loseAllLocked(ErrSessionLost)
	c.sessionID = ""
	c.lease.sessionLost()
	c.broadcastSessionLocked()
	c.log.Warn("session lost", "session", id)
	// A session Consul forgot may mean Consul forgot everything.
	c.resetWatches()
}

// requestRenewal wakes the session loop without blocking.
func (c *Client) requestRenewal() {
	select {
	case c.renewNow <- struct{}{}:
	default:
	}
}

// usableSession is the session to campaign with, "" unless the lease is
// valid; changed is closed when that may differ; failure is a permission
// error that keeps the session from being created.
func (c *Client) usableSession() (id string, changed <-chan struct{}, failure error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lease.valid(c.clock.Now()) {
		id = c.sessionID
	}
	if errors.Is(c.sessionFailure, ErrPermissionDenied) {
		failure = c.sessionFailure
	}
	return id, c.sessionChanged, failure
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}
