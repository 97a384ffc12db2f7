package groups

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/kafkabroker"
	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/group"
	"github.com/logagent/logagent/groupcoord"
	"github.com/logagent/logagent/wire"
)

// The coordinator's side of Kafka's classic consumer groups
// (docs/design.md §7.5, docs/kafka.md "Consumer groups"): the classic_*
// group operations, which the Kafka listener's groups (agent/kafkabroker)
// send to the group's coordinator through Run. The coordinator
// answers the protocol's outcomes as a Kafka error code inside a 200
// answer (kafkabroker.ClassicAnswer), so that they cross the peer hop
// unchanged; only a coordinator that is not there (or not ready) answers
// 503.

// classicOp makes a classic group operation: the protocol's errors go in
// the answer, a retriable one is the coordinator's error (503).
func classicOp[T any](run func(r *Router, ctx context.Context, op Op, req T) (any, error)) func(*Router, context.Context, Op) (any, error) {
	return withBody(func(r *Router, ctx context.Context, op Op, req T) (any, error) {
		v, err := run(r, ctx, op, req)
		if err != nil && (groupcoord.IsRetriable(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
			return nil, err
		}
		ans := kafkabroker.ClassicAnswer{}
		if err != nil {
			ans.ErrorCode, ans.Message = classicCode(err), err.Error()
		}
		if v != nil {
			b, merr := json.Marshal(v)
			if merr != nil {
				return nil, merr
			}
			ans.Result = b
		}
		return ans, nil
	})
}

// classicCode is the Kafka error code of a coordinator's error.
func classicCode(err error) int16 {
	for _, m := range []struct {
		err  error
		kerr *kerr.Error
	}{
		{group.ErrMemberIDRequired, kerr.MemberIDRequired},
		{group.ErrIllegalGeneration, kerr.IllegalGeneration},
		{group.ErrRebalanceInProgress, kerr.RebalanceInProgress},
		{group.ErrInconsistentProtocol, kerr.InconsistentGroupProtocol},
		{group.ErrUnknownMember, kerr.UnknownMemberID},
		{group.ErrUnknownGroup, kerr.GroupIDNotFound},
		{groupcoord.ErrInvalidSessionTimeout, kerr.InvalidSessionTimeout},
		{groupcoord.ErrUnknownTopic, kerr.UnknownTopicOrPartition},
		{groupcoord.ErrGroupNotEmpty, kerr.NonEmptyGroup},
		{group.ErrOffsetBeyondHighWatermark, kerr.OffsetOutOfRange},
		{group.ErrInvalidInput, kerr.InvalidRequest},
		{groupcoord.ErrInvalidRequest, kerr.InvalidRequest},
	} {
		if errors.Is(err, m.err) {
			return m.kerr.Code
		}
	}
	return kerr.UnknownServerError.Code
}

// classicOps are the coordinator's classic operations, added to ops.
var classicOps = map[string]func(r *Router, ctx context.Context, op Op) (any, error){
	"classic_join": classicOp(func(r *Router, ctx context.Context, op Op, req groupcoord.ClassicJoinRequest) (any, error) {
		return r.s.Coordinator().ClassicJoin(ctx, op.Group, req)
	}),
	"classic_sync": classicOp(func(r *Router, ctx context.Context, op Op, req groupcoord.ClassicSyncRequest) (any, error) {
		return r.s.Coordinator().ClassicSync(ctx, op.Group, req)
	}),
	"classic_heartbeat": classicOp(func(r *Router, ctx context.Context, op Op, req groupcoord.ClassicHeartbeatRequest) (any, error) {
		return nil, r.s.Coordinator().ClassicHeartbeat(ctx, op.Group, req)
	}),
	"classic_leave": classicOp(func(r *Router, ctx context.Context, op Op, req groupcoord.ClassicLeaveRequest) (any, error) {
		return r.s.Coordinator().ClassicLeave(ctx, op.Group, req)
	}),
	"classic_commit": classicOp(func(r *Router, ctx context.Context, op Op, req groupcoord.ClassicCommitRequest) (any, error) {
		return nil, r.s.Coordinator().ClassicCommit(ctx, op.Group, req)
	}),
	"classic_describe": classicOp(func(r *Router, ctx context.Context, op Op, _ struct{}) (any, error) {
		return r.s.Coordinator().ClassicDescribe(ctx, op.Group)
	}),
	"classic_list": classicOp(func(r *Router, _ context.Context, _ Op, _ struct{}) (any, error) {
		return r.s.Coordinator().ClassicList(), nil
	}),
}

func init() {
	for name, op := range classicOps {
		ops[name] = op
	}
}

// ClassicListAt asks the agent at peerAddr for its coordinator's list.
func (r *Router) ClassicListAt(ctx context.Context, peerAddr string, out *[]groupcoord.ClassicSummary) error {
	req := r.cfg.Peers.NewRequest(peerAddr, PeerPath)
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType(wire.ContentTypeJSON)
	req.URI().QueryArgs().Set("op", "classic_list")
	req.SetBodyString("{}")
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	deadline := r.cfg.Now().Add(peer.CallTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := r.cfg.Peers.Client(peerAddr).DoDeadline(req, resp, deadline); err != nil {
		return reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeCoordinatorNotAvailable,
			"agent "+peerAddr+" unreachable: "+err.Error(), true)
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return reply.RelayedError(resp)
	}
	var ans kafkabroker.ClassicAnswer
	if err := json.Unmarshal(resp.Body(), &ans); err != nil {
		return fmt.Errorf("groups: undecodable list of %s: %w", peerAddr, err)
	}
	return json.Unmarshal(ans.Result, out)
}
