package agent

import (
	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/peerapi"
	"github.com/logagent/logagent/agent/reply"

	"github.com/logagent/logagent/wire"
)

// What the agent gives the peer API's server (agent/peerapi), and what its
// own peer handlers (the forwarded produce, the group operations) share
// with it.

// newPeerAPI returns the server of the followers' fetches and fetch
// sessions, and of epoch queries; Run closes it.
func (a *Agent) newPeerAPI() *peerapi.Server {
	return peerapi.New(peerapi.Config{
		Host:        peerHost{a},
		Stopping:    a.stopping,
		LagTimeMax:  a.cfg.Replication.LagTimeMax,
		CatchUp:     a.catchUp,
		FetchServed: a.metrics.ReplicaFetchServed,
		Now:         a.now,
		Logger:      a.log,
	})
}

// peerHost gives the peer API's server the agent's state and replicas. It
// reads a.replicas at each request: Run makes the manager after the
// listeners start.
type peerHost struct{ a *Agent }

func (h peerHost) Serving(ctx *fasthttp.RequestCtx) bool { return h.a.serving(ctx) }

func (h peerHost) Replica(topic string, p int) *partition.Replica { return h.a.replicas.Get(topic, p) }

func (h peerHost) RequestReplica(ctx *fasthttp.RequestCtx, topic string, p int) *partition.Replica {
	return h.a.peerReplica(ctx, topic, p)
}

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
		msg := "this agent has no replica of " + reply.PartitionName(topic, partition)
		if f, ok := a.replicas.Offline(topic, partition); ok {
			msg = offlineMessage(topic, partition, f)
		}
		reply.WriteAPIError(ctx, reply.NewAPIError(fasthttp.StatusConflict, wire.CodeNotLeader, msg, true))
	}
	return r
}
