package agent

import (
	"context"
	"slices"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/reassign"
	"github.com/logagent/logagent/wire"
)

// rebalancePlan is GET /v1/rebalance: the moves that even out replicas
// and preferred leaders over the live agents not being drained
// (reassign.Rebalance), and each agent's counts before and after them.
type rebalancePlan struct {
	Agents []rebalanceAgent `json:"agents"`
	Moves  []rebalanceMove  `json:"moves"`
}

type rebalanceAgent struct {
	Node                  string `json:"node"`
	Replicas              int    `json:"replicas"`
	PreferredLeaders      int    `json:"preferred_leaders"`
	ReplicasAfter         int    `json:"replicas_after"`
	PreferredLeadersAfter int    `json:"preferred_leaders_after"`
}

type rebalanceMove struct {
	Topic     string   `json:"topic"`
	Partition int      `json:"partition"`
	Replicas  []string `json:"replicas"`
	Target    []string `json:"target"`
}

// handleRebalancePlan serves GET /v1/rebalance from this agent's metadata
// and Consul's live agents. It writes nothing: logagent rebalance
// -execute starts each move with POST .../reassignment.
func (a *Agent) handleRebalancePlan(ctx *fasthttp.RequestCtx) {
	if !a.serving(ctx) {
		return
	}
	callCtx, cancel := context.WithTimeout(context.Background(), peerCallTimeout)
	defer cancel()
	live, err := a.coord.Agents(callCtx)
	if err != nil {
		reply.WriteError(ctx, fasthttp.StatusServiceUnavailable, wire.CodeServiceUnavailable, "cannot list agents: "+err.Error(), true)
		return
	}
	snap := a.coord.Metadata()
	reply.WriteJSON(ctx, fasthttp.StatusOK, planRebalance(snap, election.PlacementNodes(live, snap)))
}

func planRebalance(snap *election.Snapshot, agents []string) rebalancePlan {
	var parts []reassign.Placement
	for _, name := range snap.Topics() {
		tm, _ := snap.Topic(name)
		if tm.Err != nil {
			continue // corrupt metadata: nothing is decided from it
		}
		for _, pm := range tm.Partitions {
			parts = append(parts, reassign.Placement{Topic: name, Partition: pm.Partition, Replicas: pm.Replicas, Moving: pm.Reassign != nil})
		}
	}
	changes := reassign.Rebalance(parts, agents)
	out := rebalancePlan{Agents: []rebalanceAgent{}, Moves: []rebalanceMove{}}
	count := func(replicas []string, node string) (int, int) {
		i := slices.Index(replicas, node)
		if i < 0 {
			return 0, 0
		}
		if i == 0 {
			return 1, 1
		}
		return 1, 0
	}
	for _, node := range agents {
		ag := rebalanceAgent{Node: node}
		for _, p := range parts {
			after := p.Replicas
			for _, c := range changes {
				if c.Topic == p.Topic && c.Partition == p.Partition {
					after = c.To
				}
			}
			r, l := count(p.Replicas, node)
			ra, la := count(after, node)
			ag.Replicas, ag.PreferredLeaders = ag.Replicas+r, ag.PreferredLeaders+l
			ag.ReplicasAfter, ag.PreferredLeadersAfter = ag.ReplicasAfter+ra, ag.PreferredLeadersAfter+la
		}
		out.Agents = append(out.Agents, ag)
	}
	for _, c := range changes {
		out.Moves = append(out.Moves, rebalanceMove{Topic: c.Topic, Partition: c.Partition, Replicas: c.From, Target: c.To})
	}
	return out
}
