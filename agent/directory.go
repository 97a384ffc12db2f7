package agent

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/election"
)

// directory maps node ids to the addresses of the agents Consul reports
// alive, in maintenance mode too (they still lead and follow). Metadata
// names leaders by node id; the peer
// and client addresses come from here. Lookups never wait for Consul: a miss
// starts a refresh in the background, rate-limited, and the caller retries.
// The directory owns its background refreshes: stop cancels and waits for
// them.
type directory struct {
	list   func(ctx context.Context) ([]election.AgentInfo, error)
	log    hclog.Logger
	now    func() time.Time
	minGap time.Duration

	agents atomic.Pointer[map[string]election.AgentInfo]

	// ctx ends with stop; every background refresh runs under it, in
	// tasks.
	ctx    context.Context
	cancel context.CancelFunc
	tasks  sync.WaitGroup

	mu          sync.Mutex
	refreshing  bool
	lastRefresh time.Time
	// stopped is set by stop: no refresh starts after it, so no Add
	// follows its Wait.
	stopped bool
}

func newDirectory(list func(ctx context.Context) ([]election.AgentInfo, error), log hclog.Logger, now func() time.Time) *directory {
	ctx, cancel := context.WithCancel(context.Background())
	d := &directory{list: list, log: log, now: now, minGap: 200 * time.Millisecond, ctx: ctx, cancel: cancel}
	empty := map[string]election.AgentInfo{}
	d.agents.Store(&empty)
	return d
}

// lookup returns the agent registered as node; a miss asks Consul again in
// the background.
func (d *directory) lookup(node string) (election.AgentInfo, bool) {
	info, ok := (*d.agents.Load())[node]
	if !ok {
		d.refreshSoon()
	}
	return info, ok
}

// refresh reads the agents from Consul now.
func (d *directory) refresh(ctx context.Context) error {
	agents, err := d.list(ctx)
	if err != nil {
		return err
	}
	m := make(map[string]election.AgentInfo, len(agents))
	for _, a := range agents {
		m[a.NodeID] = a
	}
	d.agents.Store(&m)
	return nil
}

// refreshSoon starts a background refresh unless one runs or ran within
// minGap.
func (d *directory) refreshSoon() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped || d.refreshing || d.now().Sub(d.lastRefresh) < d.minGap {
		return
	}
	d.refreshing = true
	d.tasks.Go(func() {
		ctx, cancel := context.WithTimeout(d.ctx, peerCallTimeout)
		defer cancel()
		if err := d.refresh(ctx); err != nil && d.ctx.Err() == nil {
			d.log.Warn("cannot list agents", "error", err)
		}
		d.mu.Lock()
		d.refreshing = false
		d.lastRefresh = d.now()
		d.mu.Unlock()
	})
}

// start refreshes the directory every interval in the background until
// stop.
func (d *directory) start(interval time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	d.tasks.Go(func() { d.run(d.ctx, interval) })
}

// stop ends the background refreshes and waits for them; lookups still
// answer from the agents last read, without refreshing.
func (d *directory) stop() {
	d.mu.Lock()
	d.stopped = true
	d.mu.Unlock()
	d.cancel()
	d.tasks.Wait()
}

// run refreshes the directory every interval until ctx ends, so changed
// addresses are noticed without a miss.
func (d *directory) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := d.refresh(ctx); err != nil && ctx.Err() == nil {
				d.log.Warn("cannot list agents", "error", err)
			}
		}
	}
}

// all lists the agents last read, by node id.
func (d *directory) all() []election.AgentInfo {
	m := *d.agents.Load()
	out := make([]election.AgentInfo, 0, len(m))
	for _, info := range m {
		out = append(out, info)
	}
	slices.SortFunc(out, func(x, y election.AgentInfo) int { return strings.Compare(x.NodeID, y.NodeID) })
	return out
}
