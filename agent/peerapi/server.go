package peerapi

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/reassign"
	"github.com/logagent/logagent/replicate"

	"github.com/logagent/logagent/wire"
)

// Host is what the server asks of the agent it serves in; the agent
// implements it (peerHost in agent/peerhost.go).
type Host interface {
	// Serving answers 503 service_unavailable, and returns false, unless
	// the agent serves (it does until its leaderships are handed over).
	Serving(ctx *fasthttp.RequestCtx) bool
	// Replica is this agent's replica of topic/partition, nil when it
	// holds none.
	Replica(topic string, partition int) *partition.Replica
	// RequestReplica is the replica a peer request names, or nil once it
	// answered for it: 503 unless the agent serves, 409 not_leader when it
	// holds no replica (saying why when its replica is offline). The
	// agent's forwarded produces find their replica the same way.
	RequestReplica(ctx *fasthttp.RequestCtx, topic string, partition int) *partition.Replica
}

// Config is what New takes from the agent.
type Config struct {
	Host Host
	// Stopping is closed when the agent is about to close its listeners:
	// held fetches end.
	Stopping <-chan struct{}
	// LagTimeMax is replication.lag_time_max, which bounds a fetch
	// session's heartbeat and how long it may stay silent.
	LagTimeMax time.Duration
	// CatchUp bounds the answers to replicas a reassignment adds
	// (replication.reassign_max_bytes_per_second); nil is no bound.
	CatchUp *reassign.Throttle
	// FetchServed counts each follower fetch served, a GET's or a
	// session's (metrics).
	FetchServed func()
	Now         func() time.Time
	Logger      hclog.Logger
}

// Server serves the peer API's replication requests: a follower's fetch,
// its fetch session and its epoch end offset query. The agent routes them
// to its handlers behind the peer token; Close ends the fetch sessions.
type Server struct {
	cfg Config
	// sessions are the fetch sessions of the followers of the partitions
	// this agent leads (session.go).
	sessions leaderSessions
}

// New returns a server; its handlers serve at once.
func New(cfg Config) *Server {
	return &Server{cfg: cfg}
}

// Close ends every fetch session and waits until each has let go of its
// parked fetches; a session asked for afterwards ends at once. The
// agent's stop calls it after its listeners closed (the sessions are no
// listener's) and before it stops the partitions.
func (srv *Server) Close() {
	srv.sessions.close()
}

// otherIncarnation refuses a fetch from a replica of another incarnation of
// the topic than r's: after a deletion and a creation under the same name
// epochs start again, so the fetch of a replica whose agent has not seen
// the deletion yet matches the new leader's epochs, and it was counted
// toward the new incarnation's high watermark with the old one's records.
// The follower retries, as after not_leader, until its agent replaces
// the replica.
func otherIncarnation(f peer.Fetch, r *partition.Replica) *reply.APIError {
	if f.TopicID == "" || f.TopicID == r.TopicID() {
		return nil
	}
	return reply.NewAPIError(fasthttp.StatusConflict, wire.CodeInconsistentTopicID,
		fmt.Sprintf("the fetch is of topic id %s, the replica here holds %s of %s", f.TopicID, r.TopicID(), reply.PartitionName(f.Topic, f.Partition)), true)
}

// HandleReplicaFetch serves a follower's fetch: the leader's loop validates
// it and records the follower's progress, then the batches are read from
// the log here, after a long poll when the follower is caught up, and leave
// through sendfile.
func (srv *Server) HandleReplicaFetch(ctx *fasthttp.RequestCtx) {
	srv.cfg.FetchServed()
	f, err := peer.ParseFetch(ctx.QueryArgs())
	if err != nil {
		reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest, err.Error(), false)
		return
	}
	r := srv.cfg.Host.RequestReplica(ctx, f.Topic, f.Partition)
	if r == nil {
		return
	}
	if e := otherIncarnation(f, r); e != nil {
		reply.WriteAPIError(ctx, e)
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
		r.WaitFor(f.MaxWait, srv.cfg.Stopping, nil, func() bool {
			v := r.CurrentView()
			return log.LogEndOffset() > f.FetchOffset || log.HighWatermark() > f.KnownHighWatermark ||
				v.Role != partition.RoleLeader || v.Epoch != f.CurrentLeaderEpoch
		})
		if v := r.CurrentView(); v.Role != partition.RoleLeader || v.Epoch != f.CurrentLeaderEpoch {
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
		if !srv.waitCatchUp(f.MaxWait) {
			pos.Write(&ctx.Response.Header)
			ctx.SetStatusCode(fasthttp.StatusOK)
			return
		}
		maxBytes = srv.cfg.CatchUp.MaxBytes(maxBytes)
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
	if v := r.CurrentView(); v.Role != partition.RoleLeader || v.Epoch != f.CurrentLeaderEpoch {
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
		srv.cfg.CatchUp.Spend(srv.cfg.Now(), int(region.Len))
		r.AddCatchUpBytes(f.ReplicaID, int(region.Len))
	}
	reply.SendRegion(ctx, region)
}

// waitCatchUp holds a catch-up answer until the throttle's debt is paid:
// false when that takes longer than maxWait or the agent stops.
func (srv *Server) waitCatchUp(maxWait time.Duration) bool {
	delay := srv.cfg.CatchUp.Delay(srv.cfg.Now())
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
	case <-srv.cfg.Stopping:
		return false
	}
	return srv.cfg.CatchUp.Delay(srv.cfg.Now()) == 0
}

// HandleEpochEndOffset answers a follower's epoch end offset request.
func (srv *Server) HandleEpochEndOffset(ctx *fasthttp.RequestCtx) {
	q, err := peer.ParseEpochQuery(ctx.QueryArgs())
	if err != nil {
		reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest, err.Error(), false)
		return
	}
	r := srv.cfg.Host.RequestReplica(ctx, q.Topic, q.Partition)
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
