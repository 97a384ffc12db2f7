package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/groups"
	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/groupcoord"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/wire"
)

// The consumer groups' HTTP handlers (docs/api.md "Consumer groups") and
// what the agent gives the group routing (agent/groups): the handlers
// decode a request, agent/groups routes it to the group's coordinator
// (docs/design.md §7.3).

// refuseInternalTopic answers 403 internal_topic for the offsets topic,
// which only coordinators write: a record they did not write would be
// skipped by every rebuild.
func refuseInternalTopic(ctx *fasthttp.RequestCtx, topic, what string) bool {
	if topic != groupcoord.OffsetsTopic {
		return false
	}
	reply.WriteError(ctx, fasthttp.StatusForbidden, wire.CodeInternalTopic,
		groupcoord.OffsetsTopic+" holds the consumer groups' offsets and is not "+what+" through the API: use the /v1/groups endpoints", false)
	return true
}

// handleGroupOp serves the client API's group endpoints.
func (a *Agent) handleGroupOp(name string) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if !a.serving(ctx) {
			return
		}
		op := groups.Op{Name: name, Group: pathParam(ctx, "group"), Member: pathParam(ctx, "member"),
			HasMemberParam: name == "heartbeat" || name == "leave", Body: ctx.PostBody()}
		op.Topic = string(ctx.QueryArgs().Peek("topic"))
		rctx, cancel, ok := callerContext(ctx, a.now())
		if !ok {
			return
		}
		defer cancel()
		var wait time.Duration
		switch name {
		case "join":
			// The sidecar names a new member, so that a join retried after
			// a lost answer is the same member joining again.
			var req groupcoord.JoinRequest
			if err := groups.DecodeStrict(op.Body, &req); err != nil {
				reply.WriteAPIError(ctx, groups.APIError(err))
				return
			}
			if req.MemberID == "" {
				req.MemberID = groupcoord.NewMemberID()
				op.Body, _ = json.Marshal(req)
			}
		case "heartbeat":
			var req groupcoord.HeartbeatRequest
			if err := groups.DecodeStrict(op.Body, &req); err != nil {
				reply.WriteAPIError(ctx, groups.APIError(err))
				return
			}
			wait = time.Duration(req.WaitMS) * time.Millisecond
		}
		body, e := a.groupRouter.Run(rctx, op, wait)
		if e != nil {
			reply.WriteAPIError(ctx, e)
			return
		}
		ctx.SetStatusCode(fasthttp.StatusOK)
		ctx.SetContentType(wire.ContentTypeJSON)
		ctx.SetBody(append(body, '\n'))
	}
}

// callerContext is the context a group request runs under: it ends when
// its caller stops waiting for the answer, the timeout parameter (as a
// produce's), and has no deadline without it (the sidecar's own bound
// applies). A commit the sidecar retried after its client had timed out
// landed after the client's next commit, taking the committed offset back.
// It answers false having written the error of a bad timeout.
func callerContext(ctx *fasthttp.RequestCtx, now time.Time) (context.Context, context.CancelFunc, bool) {
	v := ctx.QueryArgs().Peek("timeout")
	if len(v) == 0 {
		return context.Background(), func() {}, true
	}
	d, err := time.ParseDuration(string(v))
	if err != nil || d < 0 {
		reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest,
			fmt.Sprintf("timeout=%q must be a duration of 0s or more", v), false)
		return nil, nil, false
	}
	rctx, cancel := context.WithDeadline(context.Background(), now.Add(d))
	return rctx, cancel, true
}

// handlePeerGroupOp serves a sidecar's group operation on this agent's
// coordinator.
func (a *Agent) handlePeerGroupOp(ctx *fasthttp.RequestCtx) {
	if !a.serving(ctx) {
		return
	}
	args := ctx.QueryArgs()
	op := groups.Op{Name: string(args.Peek("op")), Group: string(args.Peek("group")), Member: string(args.Peek("member")),
		Topic: string(args.Peek("topic")), Body: ctx.PostBody()}
	// Only as long as the sidecar waits: a commit it gave up on, appended
	// after its client's next one, took the committed offset back.
	rctx, cancel := groups.PeerContext(ctx.Request.Header.Peek(wire.HeaderTimeoutMS))
	defer cancel()
	v, err := a.groupRouter.RunLocal(rctx, op)
	if err != nil {
		reply.WriteAPIError(ctx, groups.APIError(err))
		return
	}
	reply.WriteJSON(ctx, fasthttp.StatusOK, v)
}

// handleListGroups serves GET /v1/groups from Consul, as long as its
// caller waits (the timeout parameter, as the other group endpoints) and
// at most a Consul call's bound.
func (a *Agent) handleListGroups(ctx *fasthttp.RequestCtx) {
	if !a.serving(ctx) {
		return
	}
	rctx, cancelCaller, ok := callerContext(ctx, a.now())
	if !ok {
		return
	}
	defer cancelCaller()
	cctx, cancel := context.WithTimeout(rctx, peerCallTimeout)
	defer cancel()
	list, err := groupcoord.List(cctx, a.coord)
	if err != nil {
		reply.WriteAPIError(ctx, groups.APIError(err))
		return
	}
	reply.WriteJSON(ctx, fasthttp.StatusOK, list)
}

// groupFetch checks a fetch that names a group (the member must own the
// partition) and, without an offset, starts it at the committed offset or
// the reset policy. The group parameters are then removed, so a proxied
// fetch is not checked twice. It answers false having written the error.
func (a *Agent) groupFetch(ctx *fasthttp.RequestCtx, topic string, partition int) bool {
	args := ctx.QueryArgs()
	groupID := string(args.Peek("group"))
	epoch, err := strconv.ParseInt(string(args.Peek("member_epoch")), 10, 32)
	if err != nil {
		reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest, "a fetch for a group needs member_id and member_epoch", false)
		return false
	}
	reset := string(args.Peek("reset"))
	if reset != "" && reset != "earliest" && reset != "latest" {
		reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest, "reset is earliest or latest, not "+strconv.Quote(reset), false)
		return false
	}
	body, _ := json.Marshal(groupcoord.FetchRequest{MemberID: string(args.Peek("member_id")), MemberEpoch: int32(epoch),
		Topic: topic, Partition: int32(partition)})
	answer, e := a.groupRouter.Run(context.Background(), groups.Op{Name: "fetch", Group: groupID, Body: body}, 0)
	if e != nil {
		reply.WriteAPIError(ctx, e)
		return false
	}
	var fr groupcoord.FetchResponse
	if err := json.Unmarshal(answer, &fr); err != nil {
		reply.WriteError(ctx, fasthttp.StatusBadGateway, wire.CodeInternal, "undecodable answer from the coordinator: "+err.Error(), true)
		return false
	}
	if !args.Has("offset") {
		switch {
		case fr.Committed >= 0:
			args.Set("offset", strconv.FormatInt(fr.Committed, 10))
		case reset == "latest":
			args.Set("offset", "latest")
		default:
			args.Set("offset", "earliest")
		}
	}
	for _, k := range []string{"group", "member_id", "member_epoch", "reset"} {
		args.Del(k)
	}
	return true
}

// newGroupRouter returns the group routing of this agent's sidecar; peers
// sends its group operations to other agents' coordinators.
func (a *Agent) newGroupRouter(peers *peer.Clients) *groups.Router {
	return groups.New(groups.Config{
		Sidecar:                  sidecarService{a},
		Coordinator:              a.coord,
		NodeID:                   a.cfg.NodeID,
		OffsetsPartitions:        a.cfg.Groups.OffsetsPartitions,
		OffsetsReplicationFactor: a.cfg.Groups.OffsetsReplicationFactor,
		Peers:                    peers,
		ClientAPIs:               a.clientAPIs,
		Stopping:                 a.stopping,
		Now:                      a.now,
		Logger:                   a.log,
	})
}

// The methods of groups.Sidecar that kafkabroker.Sidecar does not ask for.

func (s sidecarService) Coordinator() *groupcoord.Coordinator { return s.a.groups }

func (s sidecarService) AppendLocal(r *partition.Replica, topic string, p int, batch []byte, count int, acks replicate.Acks, epoch int32, timeout time.Duration) (*int64, *reply.APIError) {
	resp, apiErr := s.a.appendLocal(r, topic, p, batch, count, acks, epoch, timeout)
	return resp.BaseOffset, apiErr
}

func (s sidecarService) WaitTopic(ctx context.Context, name, id string) error {
	return s.a.waitTopic(ctx, name, id)
}
