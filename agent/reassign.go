package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/wire"
)

// reassignRequest is the body of POST
// /v1/topics/{topic}/partitions/{partition}/reassignment.
type reassignRequest struct {
	Replicas []string `json:"replicas"`
}

// reassignment is a partition's move as the API shows it (docs/design.md
// §7.6): the partition's replicas and ISR, and the move in flight, nil when
// there is none.
type reassignment struct {
	Topic     string   `json:"topic"`
	Partition int      `json:"partition"`
	Replicas  []string `json:"replicas"`
	// ISR and Leader are absent from the answer to a POST.
	ISR    []string `json:"isr,omitempty"`
	Leader string   `json:"leader,omitempty"`
	// LeaderAddress is the leader's client API, where the move's progress
	// is read when this agent does not lead.
	LeaderAddress string        `json:"leader_address,omitempty"`
	Move          *reassignMove `json:"reassignment"`
}

// reassignMove is a move in flight, as the API, /v1/status and the
// describe show it.
type reassignMove struct {
	Target   []string `json:"target"`
	Adding   []string `json:"adding"`
	Removing []string `json:"removing"`
	// Cancelled marks a cancel's way back: Target is the list the
	// cancelled move started from, Removing the replicas it had added.
	Cancelled bool `json:"cancelled,omitempty"`
	// Progress is every added replica's catch-up, present when this agent
	// leads the partition, with the leader's log start and end: an added
	// replica fetches from the log start, so the share it holds is
	// (its log end - start) / (end - start).
	Progress             []reassignProgress `json:"progress,omitempty"`
	LeaderLogStartOffset *int64             `json:"leader_log_start_offset,omitempty"`
	LeaderLogEndOffset   *int64             `json:"leader_log_end_offset,omitempty"`
}

// reassignProgress is one added replica as its leader sees it.
type reassignProgress struct {
	Node string `json:"node"`
	// LogEndOffset is the replica's last fetch offset, -1 before its first
	// fetch of this leadership; Lag is the leader's log end less it.
	LogEndOffset int64 `json:"log_end_offset"`
	Lag          int64 `json:"lag"`
	InSync       bool  `json:"in_sync"`
	// CatchUpBytes is what this agent has sent it while it caught up,
	// since it opened the partition (over all its leaderships).
	CatchUpBytes int64 `json:"catch_up_bytes"`
}

// handleStartReassign serves POST
// /v1/topics/{topic}/partitions/{partition}/reassignment: it checks that
// every replica named is a live agent and writes the move; the partition's
// leader carries it out. 202 with the move, 200 when there is nothing to
// move.
func (a *Agent) handleStartReassign(ctx *fasthttp.RequestCtx) {
	if !a.serving(ctx) {
		return
	}
	topic, p, err := a.partitionParams(ctx)
	if err != nil {
		writeErr(ctx, err)
		return
	}
	var req reassignRequest
	if err := reply.DecodeOneObject(ctx.PostBody(), &req); err != nil {
		reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest, fmt.Sprintf(`the body must be {"replicas":["n1","n2",...]}: %v`, err), false)
		return
	}
	if len(req.Replicas) == 0 {
		reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest,
			`"replicas" is empty or missing: the body must be {"replicas":["n1","n2",...]}, the new replica list, the first the preferred leader`, false)
		return
	}
	callCtx, cancel := context.WithTimeout(context.Background(), peerCallTimeout)
	defer cancel()
	agents, err := a.coord.Agents(callCtx)
	if err != nil {
		reply.WriteError(ctx, fasthttp.StatusServiceUnavailable, wire.CodeServiceUnavailable, "cannot list agents: "+err.Error(), true)
		return
	}
	before, _ := a.coord.Metadata().Partition(topic, p)
	for _, node := range req.Replicas {
		i := slices.IndexFunc(agents, func(ag election.AgentInfo) bool { return ag.NodeID == node })
		if i < 0 {
			reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest,
				fmt.Sprintf("replica %q is not a live agent (Consul's logagent services)", node), false)
			return
		}
		if !agents[i].Passing && !slices.Contains(before.Replicas, node) {
			reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest,
				fmt.Sprintf("replica %q would be added, but its agent does not pass every Consul check (maintenance mode, a warning) and takes no new replica", node), false)
			return
		}
	}
	// A conflict is the partition's keys changed between the start's read
	// and its write; read again, as a cancel does: a deletion meanwhile is
	// then the topic's 404, not a 503 its client retries forever.
	var m election.Reassignment
	var done bool
	for range reassignConflictTries {
		m, done, err = a.coord.StartReassign(callCtx, topic, p, req.Replicas)
		if !errors.Is(err, election.ErrConflict) {
			break
		}
	}
	switch {
	case errors.Is(err, election.ErrReassignInProgress):
		reply.WriteError(ctx, fasthttp.StatusConflict, wire.CodeReassignmentInProgress, err.Error(), false)
		return
	case errors.Is(err, election.ErrInvalidTopic):
		reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest, err.Error(), false)
		return
	case errors.Is(err, election.ErrUnknownTopic), errors.Is(err, election.ErrUnknownPartition):
		// Deleted (or created again with fewer partitions) since
		// partitionParams found it in the metadata.
		writeMissingPartition(ctx, topic, err)
		return
	case errors.Is(err, election.ErrConflict):
		reply.WriteError(ctx, fasthttp.StatusServiceUnavailable, wire.CodeServiceUnavailable, err.Error(), true)
		return
	case err != nil:
		reply.WriteError(ctx, fasthttp.StatusServiceUnavailable, wire.CodeServiceUnavailable, "cannot start the move: "+err.Error(), true)
		return
	}
	out := reassignment{Topic: topic, Partition: p, Replicas: m.Union()}
	if done {
		reply.WriteJSON(ctx, fasthttp.StatusOK, out)
		return
	}
	out.Move = &reassignMove{Target: m.Target, Adding: m.Adding, Removing: m.Removing}
	// Answer once this agent's metadata shows the move, so that a GET
	// that follows sees it, or shows it done: a move that copies nothing
	// (a reorder, a shrink) its leader completes as soon as it sees it,
	// and this agent's watch may read only after the completion. Waiting
	// for the move alone, the answer waited out its whole timeout then.
	a.waitMetadata(callCtx, func(snap *election.Snapshot) bool {
		pm, ok := snap.Partition(topic, p)
		return ok && (pm.Reassign != nil || (pm.ReplicasIndex > before.ReplicasIndex && slices.Equal(pm.Replicas, m.Target)))
	})
	reply.WriteJSON(ctx, fasthttp.StatusAccepted, out)
}

// reassignConflictTries bounds how often a start or a cancel re-reads the
// partition's keys after they changed under it: a completion, another
// start or cancel, or the topic's deletion that committed first is seen on
// the next read and answered as such.
const reassignConflictTries = 3

// writeMissingPartition answers a start or a cancel that found no topic
// (election.ErrUnknownTopic) or no such partition of it: 404, as a name
// the metadata does not have is answered.
func writeMissingPartition(ctx *fasthttp.RequestCtx, topic string, err error) {
	if errors.Is(err, election.ErrUnknownTopic) {
		reply.WriteAPIError(ctx, reply.UnknownTopic(topic))
		return
	}
	reply.WriteError(ctx, fasthttp.StatusNotFound, wire.CodeUnknownPartition, err.Error(), false)
}

// handleCancelReassign serves DELETE
// /v1/topics/{topic}/partitions/{partition}/reassignment: the move in
// flight goes back to its original replicas (docs/design.md §7.6). 202
// with the way back, once this agent's metadata shows it; 409
// no_reassignment_in_progress when there is no move (never started, or
// completed first), 409 not_enough_replicas when no original replica is in
// the ISR.
func (a *Agent) handleCancelReassign(ctx *fasthttp.RequestCtx) {
	if !a.serving(ctx) {
		return
	}
	topic, p, err := a.partitionParams(ctx)
	if err != nil {
		writeErr(ctx, err)
		return
	}
	callCtx, cancel := context.WithTimeout(context.Background(), peerCallTimeout)
	defer cancel()
	var back election.Reassignment
	for range reassignConflictTries {
		back, err = a.coord.CancelReassign(callCtx, topic, p)
		if !errors.Is(err, election.ErrConflict) {
			break
		}
	}
	switch {
	case errors.Is(err, election.ErrNoReassignment):
		reply.WriteError(ctx, fasthttp.StatusConflict, wire.CodeNoReassignmentInProgress, err.Error(), false)
		return
	case errors.Is(err, election.ErrCancelNotInSync):
		reply.WriteError(ctx, fasthttp.StatusConflict, wire.CodeNotEnoughReplicas, err.Error(), true)
		return
	case errors.Is(err, election.ErrUnknownTopic), errors.Is(err, election.ErrUnknownPartition):
		writeMissingPartition(ctx, topic, err)
		return
	case errors.Is(err, election.ErrInvalidTopic):
		reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest, err.Error(), false)
		return
	case err != nil:
		reply.WriteError(ctx, fasthttp.StatusServiceUnavailable, wire.CodeServiceUnavailable, "cannot cancel the move: "+err.Error(), true)
		return
	}
	a.waitMetadata(callCtx, func(snap *election.Snapshot) bool {
		pm, ok := snap.Partition(topic, p)
		return ok && (pm.Reassign == nil || pm.Reassign.Cancelled)
	})
	reply.WriteJSON(ctx, fasthttp.StatusAccepted, reassignment{Topic: topic, Partition: p, Replicas: back.Union(),
		Move: &reassignMove{Target: back.Target, Adding: back.Adding, Removing: back.Removing, Cancelled: true}})
}

// handleGetReassign serves GET
// /v1/topics/{topic}/partitions/{partition}/reassignment: the move in
// flight, if any, from this agent's metadata, with its progress when this
// agent leads.
func (a *Agent) handleGetReassign(ctx *fasthttp.RequestCtx) {
	if !a.serving(ctx) {
		return
	}
	topic, p, err := a.partitionParams(ctx)
	if err != nil {
		writeErr(ctx, err)
		return
	}
	pm, _ := a.coord.Metadata().Partition(topic, p)
	reply.WriteJSON(ctx, fasthttp.StatusOK, a.describeReassign(topic, pm))
}

// describeReassign is pm's move as the API shows it.
func (a *Agent) describeReassign(topic string, pm election.PartitionMeta) reassignment {
	out := reassignment{Topic: topic, Partition: pm.Partition, Replicas: pm.Replicas, ISR: pm.State.ISR}
	if pm.LeaderSession != "" {
		out.Leader = pm.State.Leader
		if info, ok := a.agents.lookup(out.Leader); ok {
			out.LeaderAddress = info.ClientAddr
		}
	}
	if r := a.replicas.Get(topic, pm.Partition); r != nil {
		if v := r.CurrentView(); v.Role == roleLeader {
			out.Leader, out.ISR = a.cfg.NodeID, v.ISR
		}
	}
	out.Move = a.moveStatus(topic, pm)
	return out
}

// moveStatus is pm's move in flight, nil when there is none, with each
// added replica's progress when this agent leads the partition.
func (a *Agent) moveStatus(topic string, pm election.PartitionMeta) *reassignMove {
	if pm.Reassign == nil {
		return nil
	}
	m := &reassignMove{Target: pm.Reassign.Target, Adding: pm.Reassign.Adding, Removing: pm.Reassign.Removing, Cancelled: pm.Reassign.Cancelled}
	r := a.replicas.Get(topic, pm.Partition)
	if r == nil || r.CurrentView().Role != roleLeader {
		return m
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	progress := r.Progress(ctx)
	sent := r.CatchUpBytes()
	start := r.CurrentLog().LogStartOffset()
	var leaderEnd int64
	for _, s := range progress {
		if s.ID == a.cfg.NodeID {
			leaderEnd = s.LogEndOffset
		}
	}
	for _, s := range progress {
		if !slices.Contains(pm.Reassign.Adding, s.ID) {
			continue
		}
		lag := leaderEnd - max(s.LogEndOffset, 0)
		m.Progress = append(m.Progress, reassignProgress{Node: s.ID, LogEndOffset: s.LogEndOffset, Lag: lag, InSync: s.InSync, CatchUpBytes: sent[s.ID]})
	}
	m.LeaderLogStartOffset, m.LeaderLogEndOffset = &start, &leaderEnd
	return m
}

// waitMetadata waits until this agent's metadata satisfies ok or ctx ends.
func (a *Agent) waitMetadata(ctx context.Context, ok func(*election.Snapshot) bool) {
	for {
		snap := a.coord.Metadata()
		if ok(snap) {
			return
		}
		select {
		case <-snap.Changed():
		case <-ctx.Done():
			return
		}
	}
}
