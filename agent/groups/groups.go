package groups

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
	"github.com/logagent/logagent/agent/peer"
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
//	Logagent-Timeout-Ms: <what is left of the sidecar's deadline>
//	<the client's JSON body>                  ──►
//	                                    ◄──  200 <the operation's JSON answer>
//	                                    ◄──  503 coordinator_not_available (not the
//	                                         coordinator, loading, Consul or append
//	                                         failed): the sidecar finds the coordinator
//	                                         again and retries until its deadline
//	                                    ◄──  any other error: relayed to the client
//
// Every operation can be retried: a join carries the member id the sidecar
// chose, a commit states offsets, not increments. The sidecar's deadline is
// its caller's (the HTTP request's timeout parameter, the Kafka request's
// deadline), at most groupRouteTimeout (plus a heartbeat's wait), and the
// coordinator runs an operation only as long as the sidecar waits for it
// (PeerContext): an operation the client gave up on and retried or
// followed with a newer commit must not land after it.
const (
	// PeerPath is the peer API's route of group operations.
	PeerPath = "/v1/replica/groups"
	// groupRouteTimeout bounds how long a sidecar looks for a group's
	// coordinator (a new offsets topic electing its leaders, a failover).
	groupRouteTimeout = 15 * time.Second
	// groupAppendTimeout bounds one append of commits.
	groupAppendTimeout = 10 * time.Second
	groupRetryPause    = 100 * time.Millisecond
	// maxPeerTimeout is the longest a sidecar waits for a coordinator's
	// answer; it bounds an operation whose sender did not say (an agent
	// from before wire.HeaderTimeoutMS) or said more.
	maxPeerTimeout = groupRouteTimeout + groupcoord.MaxHeartbeatWait
	// offsetsSegmentBytes is the segment size of the offsets topic, which
	// bounds what a new coordinator reads besides the restatement.
	offsetsSegmentBytes = 16 << 20
)

// host gives groupcoord the agent's offsets partitions and metadata.
type host struct{ r *Router }

// Host is the groupcoord.Host of the agent's coordinator: its offsets
// partitions, the metadata and the partitions' positions.
func (r *Router) Host() groupcoord.Host { return host{r} }

// notLedHere is the error of an offsets partition this agent does not lead.
func notLedHere(p int) error {
	return fmt.Errorf("%w: %s/%d is not led here", groupcoord.ErrNotCoordinator, groupcoord.OffsetsTopic, p)
}

func (h host) leader(p int) (*partition.Replica, *partition.View, bool) {
	r := h.r.s.Replica(groupcoord.OffsetsTopic, p)
	if r == nil {
		return nil, nil, false
	}
	v := r.CurrentView()
	return r, v, v.Role == partition.RoleLeader && !v.DataLoss
}

func (h host) OffsetsLeader(p int) (groupcoord.LeaderState, bool) {
	r, v, ok := h.leader(p)
	if !ok {
		return groupcoord.LeaderState{}, false
	}
	log := r.CurrentLog()
	return groupcoord.LeaderState{Epoch: v.Epoch, LogStartOffset: log.LogStartOffset(),
		HighWatermark: log.HighWatermark(), LogEndOffset: log.LogEndOffset()}, true
}

func (h host) AppendOffsets(ctx context.Context, p int, epoch int32, batch []byte, count int) (int64, error) {
	r, _, ok := h.leader(p)
	if !ok {
		return 0, notLedHere(p)
	}
	base, apiErr := h.r.s.AppendLocal(r, groupcoord.OffsetsTopic, p, batch, count, replicate.AcksAll, epoch, groupAppendTimeout)
	if apiErr != nil {
		return 0, appendError(apiErr)
	}
	return *base, nil
}

// appendError is a refused append of commits as the coordinator takes it:
// one refused before the append (too few in-sync replicas) left the log as
// it was, which its shard needs to know to stay loaded.
func appendError(e *reply.APIError) error {
	if e.Code == wire.CodeNotEnoughReplicas {
		return fmt.Errorf("%w: %w", groupcoord.ErrNotAppended, e)
	}
	return e
}

func (h host) TrimOffsets(p int, offset int64) error {
	r, _, ok := h.leader(p)
	if !ok {
		return notLedHere(p)
	}
	_, err := r.CurrentLog().DeleteBefore(offset)
	r.LogTrimmed()
	return err
}

func (h host) ReadOffsets(p int, offset int64, maxBytes int) ([]byte, error) {
	r, _, ok := h.leader(p)
	if !ok {
		return nil, notLedHere(p)
	}
	log := r.CurrentLog()
	return log.ReadBytes(offset, int64(maxBytes), log.HighWatermark())
}

func (h host) Partitions(topic string) int32 {
	if tm, ok := h.r.cfg.Coordinator.Metadata().Topic(topic); ok {
		return int32(tm.Config.Partitions)
	}
	return 0
}

// Positions asks the partition's leader: this agent's replica when it
// leads, else the leader's client API (an empty fetch at the high
// watermark answers with both positions).
func (h host) Positions(ctx context.Context, tp group.TopicPartition) (int64, int64, error) {
	p := int(tp.Partition)
	if r := h.r.s.Replica(tp.Topic, p); r != nil && r.CurrentView().Role == partition.RoleLeader {
		log := r.CurrentLog()
		return log.LogStartOffset(), log.HighWatermark(), nil
	}
	pm, ok := h.r.cfg.Coordinator.Metadata().Partition(tp.Topic, p)
	if !ok {
		return 0, 0, fmt.Errorf("%w: %v", groupcoord.ErrUnknownTopic, tp)
	}
	if pm.State.Leader == "" || pm.LeaderSession == "" {
		return 0, 0, errors.New(h.r.s.NoLeaderMessage(tp.Topic, p))
	}
	info, ok := h.r.s.LookupAgent(pm.State.Leader)
	if !ok || info.ClientAddr == "" {
		return 0, 0, fmt.Errorf("leader %s of %v is not among the registered agents", pm.State.Leader, tp)
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	h.r.cfg.ClientAPIs.Address(req, info.ClientAddr, "/v1/topics/"+tp.Topic+"/partitions/"+strconv.Itoa(p)+"/records?offset=latest&max_bytes=1")
	req.Header.Set(wire.HeaderProxied, h.r.cfg.NodeID)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if err := h.r.cfg.ClientAPIs.Client(info.ClientAddr).DoTimeout(req, resp, peer.CallTimeout); err != nil {
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

// Op is one operation of a coordinator.
type Op struct {
	Name           string
	Group, Member  string
	Topic          string
	Body           []byte
	HasMemberParam bool
}

// withBody makes a group operation that takes a JSON body of type T.
func withBody[T any](run func(r *Router, ctx context.Context, op Op, req T) (any, error)) func(*Router, context.Context, Op) (any, error) {
	return func(r *Router, ctx context.Context, op Op) (any, error) {
		var req T
		if err := DecodeStrict(op.Body, &req); err != nil {
			return nil, err
		}
		return run(r, ctx, op, req)
	}
}

// ops run on this agent's coordinator, by name.
var ops = map[string]func(r *Router, ctx context.Context, op Op) (any, error){
	"join": withBody(func(r *Router, ctx context.Context, op Op, req groupcoord.JoinRequest) (any, error) {
		return r.s.Coordinator().Join(ctx, op.Group, req)
	}),
	"heartbeat": withBody(func(r *Router, ctx context.Context, op Op, req groupcoord.HeartbeatRequest) (any, error) {
		return r.s.Coordinator().Heartbeat(ctx, op.Group, op.Member, req)
	}),
	"leave": func(r *Router, ctx context.Context, op Op) (any, error) {
		return struct{}{}, r.s.Coordinator().Leave(ctx, op.Group, op.Member)
	},
	"commit": withBody(func(r *Router, ctx context.Context, op Op, req groupcoord.CommitRequest) (any, error) {
		return r.s.Coordinator().Commit(ctx, op.Group, req)
	}),
	"offsets": func(r *Router, ctx context.Context, op Op) (any, error) {
		return r.s.Coordinator().Offsets(ctx, op.Group, op.Topic)
	},
	"fetch": withBody(func(r *Router, ctx context.Context, op Op, req groupcoord.FetchRequest) (any, error) {
		return r.s.Coordinator().CheckFetch(ctx, op.Group, req)
	}),
	"reset": withBody(func(r *Router, ctx context.Context, op Op, req groupcoord.ResetRequest) (any, error) {
		return r.s.Coordinator().Reset(ctx, op.Group, req)
	}),
	"delete": func(r *Router, ctx context.Context, op Op) (any, error) {
		return struct{}{}, r.s.Coordinator().Delete(ctx, op.Group)
	},
	"describe": func(r *Router, ctx context.Context, op Op) (any, error) {
		return r.s.Coordinator().Describe(ctx, op.Group, r.cfg.NodeID)
	},
}

// RunLocal runs op on this agent's coordinator, as another agent's Run
// sends it; an operation it does not know is an invalid request.
func (r *Router) RunLocal(ctx context.Context, op Op) (any, error) {
	run, ok := ops[op.Name]
	if !ok {
		return nil, reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeInvalidRequest, "unknown group operation "+strconv.Quote(op.Name), false)
	}
	return run(r, ctx, op)
}

// PeerContext is the context a coordinator runs a sidecar's operation
// under: it ends when the sidecar stops waiting for the answer (timeout,
// wire.HeaderTimeoutMS), at most maxPeerTimeout.
func PeerContext(timeout []byte) (context.Context, context.CancelFunc) {
	d := maxPeerTimeout
	if ms, err := strconv.ParseInt(string(timeout), 10, 64); err == nil && ms < d.Milliseconds() {
		d = time.Duration(max(ms, 0)) * time.Millisecond
	}
	return context.WithTimeout(context.Background(), d)
}

// DecodeStrict decodes a group request's body (reply.DecodeOneObject) as
// groupcoord's invalid request when it is not one.
func DecodeStrict(body []byte, v any) error {
	if err := reply.DecodeOneObject(body, v); err != nil {
		return fmt.Errorf("%w: body: %v", groupcoord.ErrInvalidRequest, err)
	}
	return nil
}

// APIError maps groupcoord's and group's errors to the API's.
func APIError(err error) *reply.APIError {
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
	case errors.Is(err, groupcoord.ErrCommitSuperseded):
		status, code = fasthttp.StatusConflict, wire.CodeCommitSuperseded
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

// Run sends op to the group's coordinator, wherever it is, until it
// answers, and returns the answer's JSON. It gives up when ctx ends (its
// deadline is the caller's: the HTTP request's timeout, the Kafka
// request's) or groupRouteTimeout (plus wait, what the coordinator may hold
// op) passes, the sooner. Retried past the caller's deadline, a commit the
// caller had given up on (and committed again since, maybe through another
// sidecar) landed seconds after the newer one, taking the committed offset
// back.
func (r *Router) Run(ctx context.Context, op Op, wait time.Duration) ([]byte, *reply.APIError) {
	deadline := r.cfg.Now().Add(groupRouteTimeout + wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if !r.cfg.Now().Before(deadline) || ctx.Err() != nil {
		return nil, reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeCoordinatorNotAvailable,
			"the caller's deadline passed before the group operation was sent", true)
	}
	for {
		body, e := r.runOnce(ctx, op, deadline)
		if e == nil || e.Code != wire.CodeCoordinatorNotAvailable || r.cfg.Now().Add(groupRetryPause).After(deadline) {
			return body, e
		}
		select {
		case <-time.After(groupRetryPause):
		case <-ctx.Done():
			return nil, e
		case <-r.cfg.Stopping:
			return nil, e
		}
	}
}

func (r *Router) runOnce(ctx context.Context, op Op, deadline time.Time) ([]byte, *reply.APIError) {
	snap := r.cfg.Coordinator.Metadata()
	if _, ok := snap.Topic(groupcoord.OffsetsTopic); !ok {
		if err := r.createOffsetsTopic(); err != nil {
			return nil, err
		}
		snap = r.cfg.Coordinator.Metadata()
	}
	// Hashed over the topic's partitions, as the coordinator does
	// (groupcoord.Coordinator.offsetsPartitions): the setting only shapes
	// the topic's creation.
	partitions := r.cfg.OffsetsPartitions
	if tm, ok := snap.Topic(groupcoord.OffsetsTopic); ok && len(tm.Partitions) > 0 {
		partitions = len(tm.Partitions)
	}
	p := groupcoord.PartitionFor(op.Group, partitions)
	pm, ok := snap.Partition(groupcoord.OffsetsTopic, p)
	if !ok {
		return nil, reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeCoordinatorNotAvailable,
			fmt.Sprintf("the metadata shows no partition %d of %s yet", p, groupcoord.OffsetsTopic), true)
	}
	if pm.State.Leader == "" || pm.LeaderSession == "" {
		return nil, reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeCoordinatorNotAvailable,
			"no coordinator: "+r.s.NoLeaderMessage(groupcoord.OffsetsTopic, p), true)
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if pm.State.Leader == r.cfg.NodeID {
		v, err := ops[op.Name](r, ctx, op)
		if err != nil {
			return nil, APIError(err)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, reply.NewAPIError(fasthttp.StatusInternalServerError, wire.CodeInternal, err.Error(), false)
		}
		return b, nil
	}
	info, ok := r.s.LookupAgent(pm.State.Leader)
	if !ok {
		return nil, reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeCoordinatorNotAvailable,
			"coordinator "+pm.State.Leader+" is not among the registered agents", true)
	}
	req := r.peerRequest(info.PeerAddr, op, deadline)
	defer fasthttp.ReleaseRequest(req)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if err := r.cfg.Peers.Client(info.PeerAddr).DoDeadline(req, resp, deadline); err != nil {
		return nil, reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeCoordinatorNotAvailable,
			"coordinator "+pm.State.Leader+" unreachable: "+err.Error(), true)
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return nil, reply.RelayedError(resp)
	}
	return append([]byte(nil), resp.Body()...), nil
}

// peerRequest is op as the coordinator at addr gets it, to be answered by
// deadline; the caller releases it.
func (r *Router) peerRequest(addr string, op Op, deadline time.Time) *fasthttp.Request {
	req := r.cfg.Peers.NewRequest(addr, PeerPath)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType(wire.ContentTypeJSON)
	req.Header.Set(wire.HeaderTimeoutMS, strconv.FormatInt(deadline.Sub(r.cfg.Now()).Milliseconds(), 10))
	args := req.URI().QueryArgs()
	args.Set("op", op.Name)
	args.Set("group", op.Group)
	if op.HasMemberParam {
		args.Set("member", op.Member)
	}
	if op.Topic != "" {
		args.Set("topic", op.Topic)
	}
	req.SetBodyRaw(op.Body)
	return req
}

// createOffsetsTopic creates the offsets topic on the first use of a group.
func (r *Router) createOffsetsTopic() *reply.APIError {
	ctx, cancel := context.WithTimeout(context.Background(), peer.CallTimeout)
	defer cancel()
	agents, err := r.cfg.Coordinator.Agents(ctx)
	if err != nil {
		return reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeCoordinatorNotAvailable, "cannot list agents: "+err.Error(), true)
	}
	nodes := election.PlacementNodes(agents, r.cfg.Coordinator.Metadata())
	rf := r.cfg.OffsetsReplicationFactor
	partitions := r.cfg.OffsetsPartitions
	tc := r.s.TopicConfig(kafkabroker.CreateTopicRequest{Name: groupcoord.OffsetsTopic, Partitions: &partitions, ReplicationFactor: &rf}, len(nodes))
	// Small segments and no retention: the coordinators' restatements
	// delete what is superseded, segment by segment, and nothing else may
	// (retention could take the only record of an offset still committed).
	tc.Storage, _ = json.Marshal(partition.TopicStorage{SegmentBytes: offsetsSegmentBytes, NoRetention: true})
	assignment, err := election.AssignReplicas(nodes, tc.Partitions, tc.ReplicationFactor)
	if err != nil {
		return reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeCoordinatorNotAvailable,
			fmt.Sprintf("cannot create the offsets topic %s with groups.offsets_replication_factor %d: %v", groupcoord.OffsetsTopic, rf, err), true)
	}
	err = r.cfg.Coordinator.CreateTopic(ctx, tc, assignment)
	if err == nil {
		r.cfg.Logger.Info("created the offsets topic", "topic", groupcoord.OffsetsTopic, "partitions", tc.Partitions, "replication_factor", rf)
		err = r.s.WaitTopic(ctx, tc.Name, tc.ID)
	} else if errors.Is(err, election.ErrTopicExists) {
		err = nil
		if _, werr := r.cfg.Coordinator.SyncMetadata(ctx); werr != nil {
			err = werr
		}
	}
	if err != nil {
		return reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeCoordinatorNotAvailable, "cannot create the offsets topic: "+err.Error(), true)
	}
	return nil
}
