package agent

import (
	"errors"
	"math"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/replicate"

	"github.com/logagent/logagent/wire"
)

// requirePeerToken wraps a peer handler: when peer.token_file is set, a
// request must carry "Authorization: Bearer <token>" (compared in constant
// time), or it gets 401 unauthorized.
func (a *Agent) requirePeerToken(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return requireToken(a.peerToken, "logagent peer API", "peer API requests need the shared token (peer.token_file)")(h)
}

// peerReplica finds the replica a peer request names, or answers for it.
func (a *Agent) peerReplica(ctx *fasthttp.RequestCtx, topic string, partition int) *partition.Replica {
	if !a.serving(ctx) {
		return nil
	}
	r := a.replicas.Get(topic, partition)
	if r == nil {
		msg := "this agent has no replica of " + partitionName(topic, partition)
		if f, ok := a.replicas.Offline(topic, partition); ok {
			msg = offlineMessage(topic, partition, f)
		}
		reply.WriteAPIError(ctx, reply.NewAPIError(fasthttp.StatusConflict, wire.CodeNotLeader, msg, true))
	}
	return r
}

// handleReplicaFetch serves a follower's fetch: the leader's loop validates
// it and records the follower's progress, then the batches are read from
// the log here, after a long poll when the follower is caught up, and leave
// through sendfile.
func (a *Agent) handleReplicaFetch(ctx *fasthttp.RequestCtx) {
	a.metrics.ReplicaFetchServed()
	f, err := peer.ParseFetch(ctx.QueryArgs())
	if err != nil {
		reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest, err.Error(), false)
		return
	}
	r := a.peerReplica(ctx, f.Topic, f.Partition)
	if r == nil {
		return
	}
	out := r.LeaderFetch(f.FetchRequest)
	if out.Err != nil {
		reply.WriteAPIError(ctx, peerAPIError(out.Err))
		return
	}
	pos := peer.FetchPositions{
		LeaderEpoch:      out.Result.LeaderEpoch,
		EpochStartOffset: out.Result.EpochStartOffset,
		HighWatermark:    out.Result.HighWatermark,
		LogEndOffset:     out.Result.LogEndOffset,
		LogStartOffset:   out.LogStartOffset,
		Diverging:        out.Result.Diverging,
	}
	if pos.Diverging != nil {
		pos.Write(&ctx.Response.Header)
		ctx.SetStatusCode(fasthttp.StatusOK)
		return
	}
	log := r.CurrentLog()
	if f.MaxWait > 0 && f.FetchOffset >= pos.LogEndOffset && pos.HighWatermark <= f.KnownHighWatermark {
		r.WaitFor(f.MaxWait, a.stopping, nil, func() bool {
			v := r.CurrentView()
			return log.LogEndOffset() > f.FetchOffset || log.HighWatermark() > f.KnownHighWatermark ||
				v.Role != roleLeader || v.Epoch != f.CurrentLeaderEpoch
		})
		if v := r.CurrentView(); v.Role != roleLeader || v.Epoch != f.CurrentLeaderEpoch {
			reply.WriteAPIError(ctx, reply.NewAPIError(fasthttp.StatusConflict, wire.CodeNotLeader, "leadership changed while the fetch waited", true))
			return
		}
	}
	maxBytes := f.MaxBytes
	if out.Throttled {
		// A replica a move adds, catching up: its answer waits until the
		// agent's catch-up budget is paid, and takes a bounded share of
		// it (docs/design.md §7.6). One still waiting at its max_wait
		// goes out empty.
		if !a.waitCatchUp(f.MaxWait) {
			pos.Write(&ctx.Response.Header)
			ctx.SetStatusCode(fasthttp.StatusOK)
			return
		}
		maxBytes = a.catchUp.MaxBytes(maxBytes)
	}
	region, err := log.Read(f.FetchOffset, maxBytes, math.MaxInt64)
	if err != nil {
		reply.WriteAPIError(ctx, reply.StorageError(err))
		return
	}
	// The read ran outside the loop: a leader that stepped down meanwhile
	// may already hold a newer leader's batches. Refuse rather than label
	// them with this epoch (the follower also refuses batches from an epoch
	// above the one it follows).
	if v := r.CurrentView(); v.Role != roleLeader || v.Epoch != f.CurrentLeaderEpoch {
		_ = region.Close()
		reply.WriteAPIError(ctx, reply.NewAPIError(fasthttp.StatusConflict, wire.CodeNotLeader, "leadership changed while the fetch was read", true))
		return
	}
	// The loop answers before it publishes the high watermark this fetch
	// may have moved, so the log's can be the older of the two.
	pos.HighWatermark = max(pos.HighWatermark, log.HighWatermark())
	pos.LogEndOffset = log.LogEndOffset()
	pos.LogStartOffset = log.LogStartOffset()
	pos.Write(&ctx.Response.Header)
	ctx.SetContentType(wire.ContentTypeBatch)
	ctx.SetStatusCode(fasthttp.StatusOK)
	if out.Throttled {
		a.catchUp.Spend(a.now(), int(region.Len))
		r.AddCatchUpBytes(f.ReplicaID, int(region.Len))
	}
	reply.SendRegion(ctx, region)
}

// waitCatchUp holds a catch-up answer until the throttle's debt is paid:
// false when that takes longer than maxWait or the agent stops.
func (a *Agent) waitCatchUp(maxWait time.Duration) bool {
	delay := a.catchUp.Delay(a.now())
	if delay == 0 {
		return true
	}
	if delay > maxWait {
		delay = maxWait
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-a.stopping:
		return false
	}
	return a.catchUp.Delay(a.now()) == 0
}

// handleEpochEndOffset answers a follower's epoch end offset request.
func (a *Agent) handleEpochEndOffset(ctx *fasthttp.RequestCtx) {
	q, err := peer.ParseEpochQuery(ctx.QueryArgs())
	if err != nil {
		reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest, err.Error(), false)
		return
	}
	r := a.peerReplica(ctx, q.Topic, q.Partition)
	if r == nil {
		return
	}
	out := r.EpochQuery(q.EpochRequest)
	if out.Err != nil {
		reply.WriteAPIError(ctx, peerAPIError(out.Err))
		return
	}
	reply.WriteJSON(ctx, fasthttp.StatusOK, peer.EpochEndOffsetJSON{Epoch: out.Answer.Epoch, EndOffset: out.Answer.EndOffset})
}

// peerAPIError maps a refusal of the leader's loop to the peer API's codes.
func peerAPIError(err error) *reply.APIError {
	var oor *partition.OutOfRangeError
	switch {
	case errors.As(err, &oor):
		e := reply.NewAPIError(fasthttp.StatusRequestedRangeNotSatisfiable, wire.CodeOffsetOutOfRange, err.Error(), false)
		e.LogStartOffset, e.LogEndOffset = &oor.LogStartOffset, &oor.LogEndOffset
		return e
	case errors.Is(err, replicate.ErrFencedLeaderEpoch):
		return reply.NewAPIError(fasthttp.StatusConflict, wire.CodeFencedLeaderEpoch, err.Error(), true)
	case errors.Is(err, replicate.ErrUnknownLeaderEpoch):
		return reply.NewAPIError(fasthttp.StatusPreconditionFailed, wire.CodeUnknownLeaderEpoch, err.Error(), true)
	case errors.Is(err, replicate.ErrNotReplica):
		return reply.NewAPIError(fasthttp.StatusForbidden, wire.CodeNotReplica, err.Error(), false)
	case errors.Is(err, replicate.ErrInvalidRequest):
		return reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeInvalidRequest, err.Error(), false)
	case errors.Is(err, partition.ErrNotLeaderHere), errors.Is(err, replicate.ErrNotLeader), errors.Is(err, partition.ErrReplicaStopped):
		return reply.NewAPIError(fasthttp.StatusConflict, wire.CodeNotLeader, err.Error(), true)
	default:
		return reply.StorageError(err)
	}
}
