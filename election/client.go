package election

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
)

// Client is one agent's connection to Consul. Create it with New, call
// Register before campaigning, and Close it to hand leadership over at once.
type Client struct {
	cfg   Config
	api   *api.Client
	log   hclog.Logger
	clock Clock
	keys  keyspace
	// serviceID and checkID identify this agent's registration. The check id
	// carries a per-client incarnation: re-registering after a crash replaces
	// the old check, which invalidates the crashed incarnation's session at
	// once instead of leaving its locks held until the session TTL.
	serviceID string
	checkID   string
	// batcher packs the elections, ISR changes and consistent reads of
	// many partitions into shared transactions (txnbatch.go); batcherOnce
	// starts its goroutine at the first use.
	batcher     *txnBatcher
	batcherOnce sync.Once
	batcherRuns bool
	// renewNow asks the session loop to renew without waiting (buffered 1).
	renewNow chan struct{}
	// strayWake asks the stray-lock loop for a pass (buffered 1; stray.go).
	strayWake chan struct{}

	// counter counts the requests api sends (ConsulRequests).
	counter *countingTransport
	// leaseTransport carries the check passes and session renewals
	// (leaseconn.go); Close closes its connections.
	leaseTransport http.RoundTripper

	// ctx ends every goroutine; cancel is Close's last step.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	watchOnce sync.Once
	snapshot  atomic.Pointer[Snapshot]
	// metaWaits are the campaigns waiting for their partition to change.
	metaWaits metaWaits
	// livenessOnce starts the liveness watch, which keeps liveness.
	livenessOnce sync.Once
	liveness     atomic.Pointer[Liveness]
	// producerIDs hands out this agent's idempotent-producer ids.
	producerIDs *ProducerIDs
	// watchMu guards the blocking queries in flight, which resetWatches
	// cancels, and watchGen, which it increments.
	watchMu      sync.Mutex
	watchGen     uint64
	watchCancels map[uint64]context.CancelFunc
	nextQueryID  uint64
	// syncMu guards lastSync, when SyncMetadata last asked Consul.
	syncMu   sync.Mutex
	lastSync time.Time

	mu sync.Mutex
	// registration is non-nil between Register and Deregister.
	registration *registration
	sessionID    string
	lease        lease
	// sessionChanged is closed and replaced whenever the session or the
	// validity of the lease changes.
	sessionChanged chan struct{}
	leaderships    map[partitionKey]*Leadership
	// busy counts, per partition, the campaigns running (CampaignAs) and
	// the releases of its leader key in flight (Leadership.release): a
	// key the session holds without a leadership is stray only while
	// neither runs (stray.go).
	busy map[partitionKey]int
	// sessionFailure is why the last session creation failed, nil once one
	// succeeds; Campaign reports a permission problem instead of waiting.
	sessionFailure error
	closed         bool
}

// registration holds the goroutines started by Register.
type registration struct {
	// cancel stops the lease keeper and, through keepAliveCancel, the
	// heartbeats and renewals.
	cancel context.CancelFunc
	// keepAliveCancel stops only the check passes and session renewals: what
	// a crashed process stops doing.
	keepAliveCancel context.CancelFunc
	done            chan struct{}
}

type partitionKey struct {
	topic     string
	partition int
}

// New checks the configuration and builds a client. It does no I/O.
func New(cfg Config) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	// NewClient fills in the config it is given: work on a copy, and on a
	// copy of the caller's HTTP client, whose transport is wrapped below.
	consulCfg := *cfg.Consul
	if consulCfg.HttpClient != nil {
		hc := *consulCfg.HttpClient
		consulCfg.HttpClient = &hc
	}
	consul, err := api.NewClient(&consulCfg)
	if err != nil {
		return nil, fmt.Errorf("election: consul client: %w", err)
	}
	// NewClient has built the HTTP client the API client keeps (when the
	// caller gave none): its requests are counted from here on.
	next := consulCfg.HttpClient.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	leaseTransport := polledTransport(next, !strings.HasPrefix(cfg.Consul.Address, "unix://"))
	counter := &countingTransport{next: &leaseRouter{lease: leaseTransport, rest: newLimitTransport(next, cfg.MaxConcurrentRequests)}}
	consulCfg.HttpClient.Transport = counter
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		cfg:            cfg,
		api:            consul,
		counter:        counter,
		leaseTransport: leaseTransport,
		log:            cfg.Logger,
		clock:          cfg.Clock,
		keys:           keyspace{prefix: cfg.Prefix},
		serviceID:      serviceName + "-" + cfg.NodeID,
		checkID:        serviceName + "-" + cfg.NodeID + ":" + randomHex(4),
		renewNow:       make(chan struct{}, 1),
		strayWake:      make(chan struct{}, 1),
		ctx:            ctx,
		cancel:         cancel,
		lease:          lease{sessionTTL: cfg.SessionTTL, checkTTL: cfg.CheckTTL, margin: cfg.LeaseMargin},
		sessionChanged: make(chan struct{}),
		leaderships:    map[partitionKey]*Leadership{},
		busy:           map[partitionKey]int{},
	}
	c.snapshot.Store(emptySnapshot())
	c.liveness.Store(emptyLiveness())
	c.producerIDs = NewProducerIDs(c)
	c.batcher = newTxnBatcher(c.sendTxn, cfg.MaxInflight)
	return c, nil
}

// NodeID is this agent's node id.
func (c *Client) NodeID() string { return c.cfg.NodeID }

// WaitForConsul returns once Consul answers with a leader, retrying with a
// capped exponential backoff and logging each wait; it returns ctx.Err()
// when ctx ends first.
func (c *Client) WaitForConsul(ctx context.Context) error {
	bo := newBackoff(100*time.Millisecond, 5*time.Second)
	for attempt := 1; ; attempt++ {
		leader, err := c.consulLeader(ctx)
		if err == nil && leader != "" {
			if attempt > 1 {
				c.log.Info("Consul is available", "address", c.cfg.Consul.Address, "leader", leader)
			}
			return nil
		}
		if err == nil {
			err = errors.New("no Consul leader elected yet")
		}
		delay := bo.delay()
		c.log.Warn("waiting for Consul", "address", c.cfg.Consul.Address, "attempt", attempt,
			"retry_in", delay.Round(time.Millisecond), "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.clock.After(delay):
		}
	}
}

func (c *Client) consulLeader(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	return c.api.Status().LeaderWithQueryOptions((&api.QueryOptions{}).WithContext(ctx))
}

// Close hands over every leadership at once (locks released, which skips
// Consul's lock delay), destroys the session, deregisters the agent and
// stops the watch. The client cannot be used afterwards.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	err := c.Deregister(ctx)
	c.mu.Lock()
	c.broadcastSessionLocked()
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	c.closeLeaseConns()
	return err
}

// halt stops every goroutine without telling Consul anything, leaving the
// registration and session to Consul's timeouts as a crash would.
func (c *Client) halt() {
	c.mu.Lock()
	c.closed = true
	c.registration = nil
	c.broadcastSessionLocked()
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	c.closeLeaseConns()
}

// broadcastSessionLocked wakes everyone waiting on sessionChanged.
func (c *Client) broadcastSessionLocked() {
	close(c.sessionChanged)
	c.sessionChanged = make(chan struct{})
}

// callContext bounds a non-blocking Consul call.
func (c *Client) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.CallTimeout)
}

// getConsistent reads key consistently under the call timeout; nil when the
// key does not exist. op and rule describe the read for errors.
func (c *Client) getConsistent(ctx context.Context, key, op, rule string) (*api.KVPair, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	pair, _, err := c.api.KV().Get(key, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return nil, consulError(err, op, rule)
	}
	return pair, nil
}

func (c *Client) writeOptions(ctx context.Context) *api.WriteOptions {
	return (&api.WriteOptions{}).WithContext(ctx)
}

// txn runs a transaction under the call timeout; ok false means Consul
// rolled it back (resp.Errors says why). op and rule describe it for
// errors: Consul reports missing permissions inside a txn as a rollback,
// which is returned as a *PermissionError instead.
func (c *Client) txn(ctx context.Context, ops api.TxnOps, op, rule string) (bool, *api.TxnResponse, error) {
	ok, resp, err := c.sendTxn(ctx, ops, false)
	return txnResult(ok, resp, err, op, rule)
}

// sendTxn sends one transaction under the call timeout, a read-only one
// with RequireConsistent (Consul answers a transaction without writes from
// its read path, in the consistency mode asked for).
func (c *Client) sendTxn(ctx context.Context, ops api.TxnOps, readOnly bool) (bool, *api.TxnResponse, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	ok, resp, _, err := c.api.Txn().Txn(ops, (&api.QueryOptions{RequireConsistent: readOnly}).WithContext(ctx))
	return ok, resp, err
}

// txnResult turns a transaction's outcome into txn's answer.
func txnResult(ok bool, resp *api.TxnResponse, err error, op, rule string) (bool, *api.TxnResponse, error) {
	if err != nil {
		return false, nil, consulError(err, op, rule)
	}
	if !ok {
		for _, e := range resp.Errors {
			if _, denied := permissionDenied(errors.New(e.What)); denied {
				return false, resp, &PermissionError{Op: op, Rule: rule, Consul: e.What}
			}
		}
	}
	return ok, resp, nil
}

// batchedTxn is txn through the batcher: ops (at most maxOpsPerTxn, on keys
// of one partition) may share a request with other partitions' (txnBatcher
// says how the outcome stays each one's own). The call timeout bounds the
// wait in the queue and the request.
func (c *Client) batchedTxn(ctx context.Context, ops api.TxnOps, op, rule string) (bool, *api.TxnResponse, error) {
	ok, resp, err := c.submitTxn(ctx, ops, false)
	return txnResult(ok, resp, err, op, rule)
}

// readConsistent reads key consistently through the batcher, in a
// read-only transaction of get-or-empty operations with RequireConsistent;
// nil when the key does not exist. op and rule describe the read for
// errors. A result Consul filtered out is a *PermissionError, as its 403 is
// for a plain read.
func (c *Client) readConsistent(ctx context.Context, key, op, rule string) (*api.KVPair, error) {
	ops := api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVGetOrEmpty, Key: key}}}
	ok, resp, err := c.submitTxn(ctx, ops, true)
	switch {
	case errors.Is(err, errTxnResultMissing):
		return nil, &PermissionError{Op: op, Rule: rule, Consul: "the result was filtered out by ACLs"}
	case err != nil:
		return nil, consulError(err, op, rule)
	case !ok:
		if _, _, err := txnResult(false, resp, nil, op, rule); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("election: %s: %s", op, txnErrors(resp))
	}
	pair := resp.Results[0].KV
	if pair.ModifyIndex == 0 {
		// get-or-empty answers a missing key with an empty entry.
		return nil, nil
	}
	return pair, nil
}

// submitTxn hands ops to the batcher, starting it at the first use.
func (c *Client) submitTxn(ctx context.Context, ops api.TxnOps, readOnly bool) (bool, *api.TxnResponse, error) {
	c.batcherOnce.Do(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		// Close waits for the goroutines only after setting closed: none
		// may start after that.
		if !c.closed {
			c.batcherRuns = true
			c.wg.Go(func() { c.batcher.run(c.ctx) })
		}
	})
	if !c.batcherRuns {
		return false, nil, ErrClosed
	}
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	return c.batcher.do(ctx, ops, readOnly)
}

// waitChange waits until changed is closed: ctx.Err() when ctx ends first,
// ErrClosed when the client is closed first.
func (c *Client) waitChange(ctx context.Context, changed <-chan struct{}) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.ctx.Done():
		return ErrClosed
	case <-changed:
		return nil
	}
}

// sleep waits d or until ctx ends, reporting false in the latter case.
func (c *Client) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-c.clock.After(d):
		return true
	}
}
