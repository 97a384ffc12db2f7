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

// directory maps node ids to the addresses of the agents registered in
// Consul with a passing check. Metadata names leaders by node id; the peer
// and client addresses come from here. Lookups never wait for Consul: a miss
// starts a refresh in the background, rate-limited, and the caller retries.
type directory struct {
	list   func(ctx context.Context) ([]election.AgentInfo, error)
	log    hclog.Logger
	now    func() time.Time
	minGap time.Duration

	agents atomic.Pointer[map[string]election.AgentInfo]

	mu          sync.Mutex
	refreshing  bool
	lastRefresh time.Time
}

func newDirectory(list func(ctx context.Context) ([]election.AgentInfo, error), log hclog.Logger, now func() time.Time) *directory {
	d := &directory{list: list, log: log, now: now, minGap: 200 * time.Millisecond}
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
	if d.refreshing || d.now().Sub(d.lastRefresh) < d.minGap {
		d.mu.Unlock()
		return
	}
	d.refreshing = true
	d.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), peerCallTimeout)
		defer cancel()
		if err := d.refresh(ctx); err != nil {
			d.log.Warn("cannot list agents", "error", err)
		}
		d.mu.Lock()
		d.refreshing = false
		d.lastRefresh = d.now()
		d.mu.Unlock()
	}()
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
