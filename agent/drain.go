package agent

import (
	"context"
	"fmt"
	"slices"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/wire"
)

// drainState is an agent's drain as the API shows it (docs/design.md
// §7.7): whether it is being drained, and the partitions that still have a
// replica on it, from this agent's metadata.
type drainState struct {
	Node     string `json:"node"`
	Draining bool   `json:"draining"`
	// Replicas counts the partitions with a replica on the node, and
	// Leaderships those it leads.
	Replicas    int              `json:"replicas"`
	Leaderships int              `json:"leaderships"`
	Partitions  []drainPartition `json:"partitions"`
}

// drainPartition is a partition with a replica on the node being drained.
type drainPartition struct {
	Topic     string   `json:"topic"`
	Partition int      `json:"partition"`
	Replicas  []string `json:"replicas"`
	Leader    string   `json:"leader"`
	// Moving says a move of the partition is in flight.
	Moving bool `json:"moving"`
}

func drainOf(snap *election.Snapshot, node string) drainState {
	out := drainState{Node: node, Draining: snap.IsDraining(node), Partitions: []drainPartition{}}
	for _, name := range snap.Topics() {
		tm, _ := snap.Topic(name)
		for _, pm := range tm.Partitions {
			if !slices.Contains(pm.Replicas, node) {
				continue
			}
			out.Replicas++
			if pm.State.Leader == node {
				out.Leaderships++
			}
			out.Partitions = append(out.Partitions, drainPartition{Topic: name, Partition: pm.Partition, Replicas: pm.Replicas, Leader: pm.State.Leader, Moving: pm.Reassign != nil})
		}
	}
	return out
}

// handleDrain serves POST (start) and DELETE (stop) on
// /v1/nodes/{node}/drain: it writes or removes the node's draining flag,
// and answers once this agent's metadata shows it. The partitions' leaders
// move the replicas off the node, a few at a time; a drain stopped leaves
// the moves in flight to finish. The node must be a live agent or hold a
// replica.
func (a *Agent) handleDrain(on bool) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if !a.serving(ctx) {
			return
		}
		node := pathParam(ctx, "node")
		callCtx, cancel := context.WithTimeout(context.Background(), peerCallTimeout)
		defer cancel()
		agents, err := a.coord.Agents(callCtx)
		if err != nil {
			reply.WriteError(ctx, fasthttp.StatusServiceUnavailable, wire.CodeServiceUnavailable, "cannot list agents: "+err.Error(), true)
			return
		}
		known := slices.ContainsFunc(agents, func(ag election.AgentInfo) bool { return ag.NodeID == node }) ||
			drainOf(a.coord.Metadata(), node).Replicas > 0 || a.coord.Metadata().IsDraining(node)
		if !known {
			reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest,
				fmt.Sprintf("node %q is neither a live agent nor holds a replica", node), false)
			return
		}
		if err := a.coord.SetDraining(callCtx, node, on); err != nil {
			reply.WriteError(ctx, fasthttp.StatusServiceUnavailable, wire.CodeServiceUnavailable, "cannot write the drain: "+err.Error(), true)
			return
		}
		a.waitMetadata(callCtx, func(snap *election.Snapshot) bool { return snap.IsDraining(node) == on })
		status := fasthttp.StatusOK
		if on {
			status = fasthttp.StatusAccepted
		}
		reply.WriteJSON(ctx, status, drainOf(a.coord.Metadata(), node))
	}
}

// handleGetDrain serves GET /v1/nodes/{node}/drain: the drain's progress
// from this agent's metadata.
func (a *Agent) handleGetDrain(ctx *fasthttp.RequestCtx) {
	if !a.serving(ctx) {
		return
	}
	reply.WriteJSON(ctx, fasthttp.StatusOK, drainOf(a.coord.Metadata(), pathParam(ctx, "node")))
}
