package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/config"
)

// Registrar is what the agent needs from Consul to be seen by its peers.
// election.Client implements it; unit tests may fake it.
type Registrar interface {
	// WaitForConsul blocks until Consul answers, retrying with backoff.
	WaitForConsul(ctx context.Context) error
	// Register registers the agent's service and keeps its TTL check
	// passing until Deregister.
	Register(ctx context.Context) error
	// Deregister removes the service and stops passing its check.
	Deregister(ctx context.Context) error
}

// lifecycle states, as reported by /v1/health.
const (
	stateStarting int32 = iota
	stateServing
	stateStopping
)

// stopTimeout bounds each step of a graceful stop, so a stuck Consul or a
// slow client cannot hold the process past systemd's TimeoutStopSec.
const stopTimeout = 5 * time.Second

// Agent is one logagent daemon.
type Agent struct {
	cfg   *config.Config
	log   hclog.Logger
	reg   Registrar
	state atomic.Int32

	// waitingFor says what a starting agent is waiting for, for /v1/health.
	waitingFor atomic.Value
}

// New prepares an agent; Run starts it. reg is normally an election.Client.
func New(cfg *config.Config, log hclog.Logger, reg Registrar) *Agent {
	a := &Agent{cfg: cfg, log: log, reg: reg}
	a.waitingFor.Store("opening the data directory")
	return a
}

// Run opens the data directory, starts the listeners, registers with Consul
// and serves until ctx is cancelled; then it stops gracefully: deregister,
// close the listeners, mark a clean shutdown, release the data directory.
// ready, if not nil, is called once the agent serves.
func (a *Agent) Run(ctx context.Context, ready func()) (err error) {
	dir, err := OpenDataDir(a.cfg.DataDir, a.cfg.NodeID)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := dir.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("agent: release data directory: %w", cerr)
		}
	}()
	a.log.Info("data directory open", "path", dir.Path, "clean_shutdown", dir.CleanShutdown)

	clientLn, err := net.Listen("tcp", a.cfg.Client.Address)
	if err != nil {
		return fmt.Errorf("agent: client API: %w", err)
	}
	peerLn, err := net.Listen("tcp", a.cfg.Peer.Address)
	if err != nil {
		clientLn.Close()
		return fmt.Errorf("agent: peer API: %w", err)
	}

	httpLog := a.log.Named("http").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	clientSrv := newServer(a.clientRoutes().handle, a.cfg.Limits.MaxRequestBytes, httpLog)
	peerSrv := newServer(a.peerRoutes().handle, a.cfg.Limits.MaxRequestBytes, httpLog)

	var wg sync.WaitGroup
	serveErr := make(chan error, 2)
	serve := func(name string, srv *fasthttp.Server, ln net.Listener) {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil {
			serveErr <- fmt.Errorf("agent: %s API stopped: %w", name, err)
		}
	}
	wg.Add(2)
	go serve("client", clientSrv, clientLn)
	go serve("peer", peerSrv, peerLn)
	a.log.Info("listening", "client", clientLn.Addr().String(), "peer", peerLn.Addr().String(),
		"peer_advertise", a.cfg.Peer.AdvertiseAddress)

	runErr := a.join(ctx)
	if runErr == nil {
		a.state.Store(stateServing)
		a.log.Info("agent ready", "node_id", a.cfg.NodeID)
		if err := sdNotify("READY=1"); err != nil {
			a.log.Warn("cannot notify systemd", "error", err)
		}
		if ready != nil {
			ready()
		}
		select {
		case <-ctx.Done():
		case runErr = <-serveErr:
		}
	}

	a.state.Store(stateStopping)
	a.log.Info("stopping")
	if err := sdNotify("STOPPING=1"); err != nil {
		a.log.Warn("cannot notify systemd", "error", err)
	}
	if errors.Is(runErr, context.Canceled) {
		runErr = nil // stopped while starting: a signal, not a failure
	}
	dctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	if err := a.reg.Deregister(dctx); err != nil {
		a.log.Warn("deregister from Consul failed; its TTL check will turn critical", "error", err)
	}
	cancel()
	for _, srv := range []*fasthttp.Server{clientSrv, peerSrv} {
		sctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		if err := srv.ShutdownWithContext(sctx); err != nil {
			a.log.Warn("listener did not close in time", "error", err)
		}
		cancel()
	}
	wg.Wait()
	if runErr != nil {
		return runErr
	}
	if err := dir.MarkCleanShutdown(); err != nil {
		return fmt.Errorf("agent: mark clean shutdown: %w", err)
	}
	a.log.Info("stopped")
	return nil
}

// join makes the agent known to the cluster.
func (a *Agent) join(ctx context.Context) error {
	a.waitingFor.Store("waiting for Consul")
	a.log.Info("connecting to Consul", "address", a.cfg.Consul.API.Address)
	if err := a.reg.WaitForConsul(ctx); err != nil {
		return err
	}
	a.waitingFor.Store("registering with Consul")
	if err := a.reg.Register(ctx); err != nil {
		return fmt.Errorf("agent: register with Consul: %w", err)
	}
	return nil
}

func (a *Agent) clientRoutes() router {
	return router{
		"/v1/health": {{method: fasthttp.MethodGet, handler: a.handleHealth}},
	}
}

func (a *Agent) peerRoutes() router {
	return router{
		"/v1/health": {{method: fasthttp.MethodGet, handler: a.handleHealth}},
	}
}

type healthResponse struct {
	Status string `json:"status"`
	NodeID string `json:"node_id"`
}

// handleHealth answers 200 while the agent serves, 503 while it starts or
// stops, so a load balancer or systemd probe sees the truth.
func (a *Agent) handleHealth(ctx *fasthttp.RequestCtx) {
	switch a.state.Load() {
	case stateServing:
		writeJSON(ctx, fasthttp.StatusOK, healthResponse{Status: "ok", NodeID: a.cfg.NodeID})
	case stateStarting:
		writeError(ctx, fasthttp.StatusServiceUnavailable, codeServiceUnavailable,
			"agent is starting: "+a.waitingFor.Load().(string), true)
	default:
		writeError(ctx, fasthttp.StatusServiceUnavailable, codeServiceUnavailable, "agent is stopping", true)
	}
}
