package agent

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/ui"
)

// uiAgentsTimeout bounds the status page's read of the agents list, as
// /v1/status bounds its own: past it the page shows the agents as last
// seen, and says so.
const uiAgentsTimeout = time.Second

// uiSource is the status page's view of the cluster (ui.Source): the
// metadata and the agents from Consul, the positions from this agent's own
// replicas, as /v1/status reads them.
type uiSource struct {
	a *Agent

	mu sync.Mutex
	// seen are the addresses of every agent seen registered since this one
	// started, so that an agent that dies stays on the page as down
	// instead of vanishing with its passing check.
	seen map[string]election.AgentInfo
}

func newUISource(a *Agent) *uiSource {
	return &uiSource{a: a, seen: map[string]election.AgentInfo{}}
}

// State implements ui.Source.
func (s *uiSource) State(ctx context.Context) (ui.State, error) {
	a := s.a
	current := a.state.Load()
	snap := a.coord.Metadata()
	st := ui.State{
		TimeUnixMilli: a.now().UnixMilli(),
		Self:          ui.Self{NodeID: a.cfg.NodeID, State: stateName(current)},
	}
	for _, name := range snap.Topics() {
		tm, _ := snap.Topic(name)
		t := ui.Topic{Name: name, ReplicationFactor: tm.Config.ReplicationFactor, MinInsyncReplicas: tm.Config.MinInsyncReplicas}
		if tm.Err != nil {
			t.Error = tm.Err.Error()
		}
		for _, pm := range tm.Partitions {
			p := ui.Partition{Partition: pm.Partition, Epoch: pm.State.Epoch, Replicas: pm.Replicas, ISR: pm.State.ISR}
			// As the topic description: a leader whose key nobody holds
			// any more is no leader.
			if pm.LeaderSession != "" {
				p.Leader = pm.State.Leader
			}
			// The replicas exist once the agent has served (as in
			// handleStatus).
			if current != stateStarting {
				s.addReplica(&p, name)
			}
			p.Move = uiMove(a.moveStatus(name, pm))
			t.Partitions = append(t.Partitions, p)
		}
		st.Topics = append(st.Topics, t)
	}
	st.Agents, st.Warnings = s.agents(ctx, snap)
	// The page's byte rates: the metrics' produce and fetch counters,
	// summed over the topics.
	t := a.metrics.Totals()
	st.Counters = &ui.Counters{ProduceRecords: t.ProduceRecords, ProduceBytes: t.ProduceBytes, FetchBytes: t.FetchBytes}
	return st, nil
}

// addReplica adds this agent's replica of the partition, if it has one:
// its role and positions, and the leader's own view when it leads.
func (s *uiSource) addReplica(p *ui.Partition, topic string) {
	a := s.a
	r := a.replicas.Get(topic, p.Partition)
	if r == nil {
		if _, ok := a.replicas.Offline(topic, p.Partition); ok {
			p.Role = roleOffline
		}
		return
	}
	v, log := r.CurrentView(), r.CurrentLog()
	hw, leo, lso := log.HighWatermark(), log.LogEndOffset(), log.LogStartOffset()
	p.Role, p.HighWatermark, p.LogEndOffset, p.LogStartOffset = v.Role.String(), &hw, &leo, &lso
	if v.Role == roleLeader {
		// Fresher than the metadata watch.
		p.Leader, p.Epoch, p.ISR = a.cfg.NodeID, v.Epoch, v.ISR
	}
}

// agents lists every agent the cluster knows: those registered now, those
// seen registered before, those the metadata names as replicas, and this
// one. An agent is up when Consul reports it alive (in maintenance mode or
// with a check in warning it is up and not passing); when Consul does not
// answer, the liveness watch's last word decides, and a warning says so.
func (s *uiSource) agents(ctx context.Context, snap *election.Snapshot) ([]ui.Agent, []string) {
	a := s.a
	var warnings []string
	callCtx, cancel := context.WithTimeout(ctx, uiAgentsTimeout)
	live, err := a.coord.Agents(callCtx)
	cancel()
	alive := map[string]election.AgentInfo{}
	for _, info := range live {
		alive[info.NodeID] = info
	}
	isUp := func(id string) bool { _, ok := alive[id]; return ok }
	notPassing := func(id string) bool { info, ok := alive[id]; return ok && !info.Passing }
	if err != nil {
		lv := a.coord.Liveness()
		isUp = func(id string) bool { return !lv.Dead(id) }
		np := lv.NotPassing()
		notPassing = func(id string) bool { return slices.Contains(np, id) }
		live = a.agents.all()
		warnings = append(warnings, fmt.Sprintf("Consul did not answer the agents list (%v): up and down as Consul last said, addresses as last seen", err))
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	for _, info := range live {
		s.seen[info.NodeID] = info
	}
	known := maps.Clone(s.seen)
	if _, ok := known[a.cfg.NodeID]; !ok {
		known[a.cfg.NodeID] = election.AgentInfo{NodeID: a.cfg.NodeID, ClientAddr: a.cfg.Client.Address, PeerAddr: a.cfg.Peer.AdvertiseAddress}
	}
	for _, name := range snap.Topics() {
		tm, _ := snap.Topic(name)
		for _, pm := range tm.Partitions {
			for _, id := range pm.Replicas {
				if _, ok := known[id]; !ok {
					known[id] = election.AgentInfo{NodeID: id}
				}
			}
		}
	}
	out := make([]ui.Agent, 0, len(known))
	for _, id := range slices.Sorted(maps.Keys(known)) {
		info := known[id]
		out = append(out, ui.Agent{NodeID: id, ClientAddress: info.ClientAddr, PeerAddress: info.PeerAddr, Up: isUp(id), NotPassing: notPassing(id), Draining: snap.IsDraining(id), Version: info.Version})
	}
	return out, warnings
}

// uiMove is a move in flight as the page shows it; nil for none.
func uiMove(m *reassignMove) *ui.Move {
	if m == nil {
		return nil
	}
	out := &ui.Move{Target: m.Target, Adding: m.Adding, Removing: m.Removing, Cancelled: m.Cancelled}
	for _, p := range m.Progress {
		out.Progress = append(out.Progress, ui.MoveProgress{Node: p.Node, LogEndOffset: p.LogEndOffset, Lag: p.Lag, InSync: p.InSync, CatchUpBytes: p.CatchUpBytes})
	}
	return out
}
