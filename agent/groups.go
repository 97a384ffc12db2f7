package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/kafkabroker"
	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/group"
	"github.com/logagent/logagent/groupcoord"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/wire"
)

// Consumer groups (docs/design.md §7.3, docs/api.md "Consumer groups"). A
// group request reaches the local sidecar, which sends it to the group's
// coordinator, the leader of the offsets partition the group hashes to:
// this agent's groupcoord.Coordinator, or another agent's through the peer
// API, body unchanged:
//
//	sidecar                                           coordinator
//	POST /v1/replica/groups?op=commit&group=g[&member=m][&topic=t]
//	<the client's JSON body>                  ──►
//	                                    ◄──  200 <the operation's JSON answer>
//	                                    ◄──  503 coordinator_not_available (not the
//	                                         coordinator, loading, Consul or append
//	                                         failed): the sidecar finds the coordinator
//	                                         again and retries until its deadline
//	                                    ◄──  any other error: relayed to the client
//
// Every operation can be retried: a join carries the member id the sidecar
// chose, a commit states offsets, not increments.
const (
	peerGroupsPath = "/v1/replica/groups"
	// groupRouteTimeout bounds how long a sidecar looks for a group's
	// coordinator (a new offsets topic electing its leaders, a failover).
	groupRouteTimeout = 15 * time.Second
	// groupAppendTimeout bounds one append of commits.
	groupAppendTimeout = 10 * time.Second
	groupRetryPause    = 100 * time.Millisecond
	// offsetsSegmentBytes is the segment size of the offsets topic, which
	// bounds what a new coordinator reads besides the restatement.
	offsetsSegmentBytes = 16 << 20
)

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

// groupHost gives groupcoord the agent's offsets partitions and metadata.
type groupHost struct{ a *Agent }

// notLedHere is the error of an offsets partition this agent does not lead.
func notLedHere(p int) error {
	return fmt.Errorf("%w: %s/%d is not led here", groupcoord.ErrNotCoordinator, groupcoord.OffsetsTopic, p)
}

func (h groupHost) leader(p int) (*partition.Replica, *partition.View, bool) {
	r := h.a.replicas.Get(groupcoord.OffsetsTopic, p)
	if r == nil {
		return nil, nil, false
	}
	v := r.CurrentView()
	return r, v, v.Role == roleLeader && !v.DataLoss
}

func (h groupHost) OffsetsLeader(p int) (groupcoord.LeaderState, bool) {
	r, v, ok := h.leader(p)
	if !ok {
		return groupcoord.LeaderState{}, false
	}
	log := r.CurrentLog()
	return groupcoord.LeaderState{Epoch: v.Epoch, LogStartOffset: log.LogStartOffset(),
		HighWatermark: log.HighWatermark(), LogEndOffset: log.LogEndOffset()}, true
}

func (h groupHost) AppendOffsets(ctx context.Context, p int, epoch int32, batch []byte, count int) (int64, error) {
	r, _, ok := h.leader(p)
	if !ok {
		return 0, notLedHere(p)
	}
	resp, apiErr := h.a.appendLocal(r, groupcoord.OffsetsTopic, p, batch, count, replicate.AcksAll, epoch, groupAppendTimeout)
	if apiErr != nil {
		return 0, apiErr
	}
	return *resp.BaseOffset, nil
}

func (h groupHost) TrimOffsets(p int, offset int64) error {
	r, _, ok := h.leader(p)
	if !ok {
		return notLedHere(p)
	}
	_, err := r.CurrentLog().DeleteBefore(offset)
	r.LogTrimmed()
	return err
}

func (h groupHost) ReadOffsets(p int, offset int64, maxBytes int) ([]byte, error) {
	r, _, ok := h.leader(p)
	if !ok {
		return nil, notLedHere(p)
	}
	log := r.CurrentLog()
	return log.ReadBytes(offset, int64(maxBytes), log.HighWatermark())
}

func (h groupHost) Partitions(topic string) int32 {
	if tm, ok := h.a.coord.Metadata().Topic(topic); ok {
		return int32(tm.Config.Partitions)
	}
	return 0
}

// Positions asks the partition's leader: this agent's replica when it
// leads, else the leader's client API (an empty fetch at the high
// watermark answers with both positions).
func (h groupHost) Positions(ctx context.Context, tp group.TopicPartition) (int64, int64, error) {
	p := int(tp.Partition)
	if r := h.a.replicas.Get(tp.Topic, p); r != nil && r.CurrentView().Role == roleLeader {
		log := r.CurrentLog()
		return log.LogStartOffset(), log.HighWatermark(), nil
	}
	pm, ok := h.a.coord.Metadata().Partition(tp.Topic, p)
	if !ok {
		return 0, 0, fmt.Errorf("%w: %v", groupcoord.ErrUnknownTopic, tp)
	}
	if pm.State.Leader == "" || pm.LeaderSession == "" {
		return 0, 0, errors.New(h.a.noLeaderMessage(tp.Topic, p))
	}
	info, ok := h.a.agents.lookup(pm.State.Leader)
	if !ok || info.ClientAddr == "" {
		return 0, 0, fmt.Errorf("leader %s of %v is not among the registered agents", pm.State.Leader, tp)
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	h.a.clientAPIs.Address(req, info.ClientAddr, "/v1/topics/"+tp.Topic+"/partitions/"+strconv.Itoa(p)+"/records?offset=latest&max_bytes=1")
	req.Header.Set(wire.HeaderProxied, h.a.cfg.NodeID)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if err := h.a.clientAPIs.Client(info.ClientAddr).DoTimeout(req, resp, peerCallTimeout); err != nil {
		return 0, 0, fmt.Errorf("leader %s of %v unreachable: %w", pm.State.Leader, tp, err)
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return 0, 0, reply.RelayedError(resp)
	}
	hw, err1 := strconv.ParseInt(string(resp.Header.Peek(wire.HeaderHighWatermark)), 10, 64)
	lso, err2 := strconv.ParseInt(string(resp.Header.Peek(wire.HeaderLogStartOffset)), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("leader %s of %v answered without positions: %w", pm.State.Leader, tp, err)
	}
	return lso, hw, nil
}

// groupOp is one operation of a coordinator.
type groupOp struct {
	name           string
	group, member  string
	topic          string
	body           []byte
	hasMemberParam bool
}

// withBody makes a group operation that takes a JSON body of type T.
func withBody[T any](run func(a *Agent, ctx context.Context, op groupOp, req T) (any, error)) func(*Agent, context.Context, groupOp) (any, error) {
	return func(a *Agent, ctx context.Context, op groupOp) (any, error) {
		var req T
		if err := decodeStrict(op.body, &req); err != nil {
			return nil, err
		}
		return run(a, ctx, op, req)
	}
}

// groupOps run on this agent's coordinator, by name.
var groupOps = map[string]func(a *Agent, ctx context.Context, op groupOp) (any, error){
	"join": withBody(func(a *Agent, ctx context.Context, op groupOp, req groupcoord.JoinRequest) (any, error) {
		return a.groups.Join(ctx, op.group, req)
	}),
	"heartbeat": withBody(func(a *Agent, ctx context.Context, op groupOp, req groupcoord.HeartbeatRequest) (any, error) {
		return a.groups.Heartbeat(ctx, op.group, op.member, req)
	}),
	"leave": func(a *Agent, ctx context.Context, op groupOp) (any, error) {
		return struct{}{}, a.groups.Leave(ctx, op.group, op.member)
	},
	"commit": withBody(func(a *Agent, ctx context.Context, op groupOp, req groupcoord.CommitRequest) (any, error) {
		return a.groups.Commit(ctx, op.group, req)
	}),
	"offsets": func(a *Agent, ctx context.Context, op groupOp) (any, error) {
		return a.groups.Offsets(ctx, op.group, op.topic)
	},
	"fetch": withBody(func(a *Agent, ctx context.Context, op groupOp, req groupcoord.FetchRequest) (any, error) {
		return a.groups.CheckFetch(ctx, op.group, req)
	}),
	"reset": withBody(func(a *Agent, ctx context.Context, op groupOp, req groupcoord.ResetRequest) (any, error) {
		return a.groups.Reset(ctx, op.group, req)
	}),
	"describe": func(a *Agent, ctx context.Context, op groupOp) (any, error) {
		return a.groups.Describe(ctx, op.group, a.cfg.NodeID)
	},
}

// decodeStrict decodes a group request's body (decodeOneObject) as
// groupcoord's invalid request when it is not one.
func decodeStrict(body []byte, v any) error {
	if err := reply.DecodeOneObject(body, v); err != nil {
		return fmt.Errorf("%w: body: %v", groupcoord.ErrInvalidRequest, err)
	}
	return nil
}

// groupAPIError maps groupcoord's and group's errors to the API's.
func groupAPIError(err error) *reply.APIError {
	var e *reply.APIError
	if errors.As(err, &e) {
		return e
	}
	status, code, retriable := fasthttp.StatusInternalServerError, wire.CodeInternal, false
	switch {
	case errors.Is(err, group.ErrUnknownGroup):
		status, code = fasthttp.StatusNotFound, wire.CodeUnknownGroup
	case errors.Is(err, group.ErrUnknownMember):
		status, code = fasthttp.StatusNotFound, wire.CodeUnknownMember
	case errors.Is(err, group.ErrFencedMemberEpoch):
		status, code = fasthttp.StatusConflict, wire.CodeFencedMemberEpoch
	case errors.Is(err, group.ErrStaleMemberEpoch):
		status, code = fasthttp.StatusConflict, wire.CodeStaleMemberEpoch
	case errors.Is(err, group.ErrNotOwner):
		status, code = fasthttp.StatusConflict, wire.CodeNotOwner
	case errors.Is(err, group.ErrOffsetBeyondHighWatermark):
		status, code = fasthttp.StatusBadRequest, wire.CodeOffsetBeyondHighWatermark
	case errors.Is(err, groupcoord.ErrUnknownTopic):
		status, code = fasthttp.StatusNotFound, wire.CodeUnknownTopic
	case errors.Is(err, groupcoord.ErrGroupNotEmpty), errors.Is(err, group.ErrInconsistentProtocol):
		status, code = fasthttp.StatusConflict, wire.CodeGroupNotEmpty
	case errors.Is(err, group.ErrInvalidInput), errors.Is(err, groupcoord.ErrInvalidRequest):
		status, code = fasthttp.StatusBadRequest, wire.CodeInvalidRequest
	case groupcoord.IsRetriable(err), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		status, code, retriable = fasthttp.StatusServiceUnavailable, wire.CodeCoordinatorNotAvailable, true
	}
	return reply.NewAPIError(status, code, err.Error(), retriable)
}

// runGroupOp sends op to the group's coordinator, wherever it is, until it
// answers or groupRouteTimeout passes, and returns the answer's JSON.
func (a *Agent) runGroupOp(op groupOp, wait time.Duration) ([]byte, *reply.APIError) {
	deadline := a.now().Add(groupRouteTimeout + wait)
	for {
		body, e := a.groupOpOnce(op, deadline)
		if e == nil || e.Code != wire.CodeCoordinatorNotAvailable || a.now().Add(groupRetryPause).After(deadline) {
			return body, e
		}
		select {
		case <-time.After(groupRetryPause):
		case <-a.stopping:
			return nil, e
		}
	}
}

func (a *Agent) groupOpOnce(op groupOp, deadline time.Time) ([]byte, *reply.APIError) {
	p := groupcoord.PartitionFor(op.group, a.cfg.Groups.OffsetsPartitions)
	snap := a.coord.Metadata()
	if _, ok := snap.Topic(groupcoord.OffsetsTopic); !ok {
		if err := a.createOffsetsTopic(); err != nil {
			return nil, err
		}
		snap = a.coord.Metadata()
	}
	pm, ok := snap.Partition(groupcoord.OffsetsTopic, p)
	if !ok {
		return nil, reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeCoordinatorNotAvailable,
			fmt.Sprintf("the offsets topic has no partition %d: groups.offsets_partitions must match the topic's %s", p, groupcoord.OffsetsTopic), true)
	}
	if pm.State.Leader == "" || pm.LeaderSession == "" {
		return nil, reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeCoordinatorNotAvailable,
			"no coordinator: "+a.noLeaderMessage(groupcoord.OffsetsTopic, p), true)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if pm.State.Leader == a.cfg.NodeID {
		v, err := groupOps[op.name](a, ctx, op)
		if err != nil {
			return nil, groupAPIError(err)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, reply.NewAPIError(fasthttp.StatusInternalServerError, wire.CodeInternal, err.Error(), false)
		}
		return b, nil
	}
	info, ok := a.agents.lookup(pm.State.Leader)
	if !ok {
		return nil, reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeCoordinatorNotAvailable,
			"coordinator "+pm.State.Leader+" is not among the registered agents", true)
	}
	req := a.groupPeers.NewRequest(info.PeerAddr, peerGroupsPath)
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType(wire.ContentTypeJSON)
	args := req.URI().QueryArgs()
	args.Set("op", op.name)
	args.Set("group", op.group)
	if op.hasMemberParam {
		args.Set("member", op.member)
	}
	if op.topic != "" {
		args.Set("topic", op.topic)
	}
	req.SetBodyRaw(op.body)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if err := a.groupPeers.Client(info.PeerAddr).DoDeadline(req, resp, deadline); err != nil {
		return nil, reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeCoordinatorNotAvailable,
			"coordinator "+pm.State.Leader+" unreachable: "+err.Error(), true)
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return nil, reply.RelayedError(resp)
	}
	return append([]byte(nil), resp.Body()...), nil
}

// createOffsetsTopic creates the offsets topic on the first use of a group.
func (a *Agent) createOffsetsTopic() *reply.APIError {
	ctx, cancel := context.WithTimeout(context.Background(), peerCallTimeout)
	defer cancel()
	agents, err := a.coord.Agents(ctx)
	if err != nil {
		return reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeCoordinatorNotAvailable, "cannot list agents: "+err.Error(), true)
	}
	rf := a.cfg.Groups.OffsetsReplicationFactor
	partitions := a.cfg.Groups.OffsetsPartitions
	tc := a.topicConfig(kafkabroker.CreateTopicRequest{Name: groupcoord.OffsetsTopic, Partitions: &partitions, ReplicationFactor: &rf}, len(agents))
	// Small segments and no retention: the coordinators' restatements
	// delete what is superseded, segment by segment, and nothing else may
	// (retention could take the only record of an offset still committed).
	tc.Storage, _ = json.Marshal(partition.TopicStorage{SegmentBytes: offsetsSegmentBytes, NoRetention: true})
	nodes := make([]string, len(agents))
	for i, ag := range agents {
		nodes[i] = ag.NodeID
	}
	assignment, err := election.AssignReplicas(nodes, tc.Partitions, tc.ReplicationFactor)
	if err != nil {
		return reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeCoordinatorNotAvailable,
			fmt.Sprintf("cannot create the offsets topic %s with groups.offsets_replication_factor %d: %v", groupcoord.OffsetsTopic, rf, err), true)
	}
	err = a.coord.CreateTopic(ctx, tc, assignment)
	if err == nil {
		a.log.Info("created the offsets topic", "topic", groupcoord.OffsetsTopic, "partitions", tc.Partitions, "replication_factor", rf)
		err = a.waitTopic(ctx, tc.Name, tc.ID)
	} else if errors.Is(err, election.ErrTopicExists) {
		err = nil
		if _, werr := a.coord.SyncMetadata(ctx); werr != nil {
			err = werr
		}
	}
	if err != nil {
		return reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeCoordinatorNotAvailable, "cannot create the offsets topic: "+err.Error(), true)
	}
	return nil
}

// handleGroupOp serves the client API's group endpoints.
func (a *Agent) handleGroupOp(name string) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if !a.serving(ctx) {
			return
		}
		op := groupOp{name: name, group: pathParam(ctx, "group"), member: pathParam(ctx, "member"),
			hasMemberParam: name == "heartbeat" || name == "leave", body: ctx.PostBody()}
		op.topic = string(ctx.QueryArgs().Peek("topic"))
		var wait time.Duration
		switch name {
		case "join":
			// The sidecar names a new member, so that a join retried after
			// a lost answer is the same member joining again.
			var req groupcoord.JoinRequest
			if err := decodeStrict(op.body, &req); err != nil {
				reply.WriteAPIError(ctx, groupAPIError(err))
				return
			}
			if req.MemberID == "" {
				req.MemberID = groupcoord.NewMemberID()
				op.body, _ = json.Marshal(req)
			}
		case "heartbeat":
			var req groupcoord.HeartbeatRequest
			if err := decodeStrict(op.body, &req); err != nil {
				reply.WriteAPIError(ctx, groupAPIError(err))
				return
			}
			wait = time.Duration(req.WaitMS) * time.Millisecond
		}
		body, e := a.runGroupOp(op, wait)
		if e != nil {
			reply.WriteAPIError(ctx, e)
			return
		}
		ctx.SetStatusCode(fasthttp.StatusOK)
		ctx.SetContentType(wire.ContentTypeJSON)
		ctx.SetBody(append(body, '\n'))
	}
}

// handlePeerGroupOp serves a sidecar's group operation on this agent's
// coordinator.
func (a *Agent) handlePeerGroupOp(ctx *fasthttp.RequestCtx) {
	if !a.serving(ctx) {
		return
	}
	args := ctx.QueryArgs()
	name := string(args.Peek("op"))
	run, ok := groupOps[name]
	if !ok {
		reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest, "unknown group operation "+strconv.Quote(name), false)
		return
	}
	op := groupOp{name: name, group: string(args.Peek("group")), member: string(args.Peek("member")),
		topic: string(args.Peek("topic")), body: ctx.PostBody()}
	v, err := run(a, context.Background(), op)
	if err != nil {
		reply.WriteAPIError(ctx, groupAPIError(err))
		return
	}
	reply.WriteJSON(ctx, fasthttp.StatusOK, v)
}

// handleListGroups serves GET /v1/groups from Consul.
func (a *Agent) handleListGroups(ctx *fasthttp.RequestCtx) {
	if !a.serving(ctx) {
		return
	}
	cctx, cancel := context.WithTimeout(context.Background(), peerCallTimeout)
	defer cancel()
	list, err := groupcoord.List(cctx, a.coord)
	if err != nil {
		reply.WriteAPIError(ctx, groupAPIError(err))
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
	answer, e := a.runGroupOp(groupOp{name: "fetch", group: groupID, body: body}, 0)
	if e != nil {
		reply.WriteAPIError(ctx, e)
		return false
	}
	var fr groupcoord.FetchResponse
	if err := json.Unmarshal(answer, &fr); err != nil {
		reply.WriteError(ctx, fasthttp.StatusBadGateway, wire.CodeInternal, "undecodable answer from the coordinator: "+err.Error(), true)
		return false
	}
	if len(args.Peek("offset")) == 0 {
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
