package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/kafkabroker"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/group"
	"github.com/logagent/logagent/groupcoord"
	"github.com/logagent/logagent/wire"
)

// The coordinator's side of Kafka's classic consumer groups
// (docs/design.md §7.5, docs/kafka.md "Consumer groups"): the classic_*
// group operations, which the Kafka listener's groups (agent/kafkabroker)
// send to the group's coordinator through runGroupOp. The coordinator
// answers the protocol's outcomes as a Kafka error code inside a 200
// answer (kafkabroker.ClassicAnswer), so that they cross the peer hop
// unchanged; only a coordinator that is not there (or not ready) answers
// 503.

// classicOp makes a classic group operation: the protocol's errors go in
// the answer, a retriable one is the coordinator's error (503).
func classicOp[T any](run func(a *Agent, ctx context.Context, op groupOp, req T) (any, error)) func(*Agent, context.Context, groupOp) (any, error) {
	return withBody(func(a *Agent, ctx context.Context, op groupOp, req T) (any, error) {
		v, err := run(a, ctx, op, req)
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

// classicOps are the coordinator's classic operations, added to groupOps.
var classicOps = map[string]func(a *Agent, ctx context.Context, op groupOp) (any, error){
	"classic_join": classicOp(func(a *Agent, ctx context.Context, op groupOp, req groupcoord.ClassicJoinRequest) (any, error) {
		return a.groups.ClassicJoin(ctx, op.group, req)
	}),
	"classic_sync": classicOp(func(a *Agent, ctx context.Context, op groupOp, req groupcoord.ClassicSyncRequest) (any, error) {
		return a.groups.ClassicSync(ctx, op.group, req)
	}),
	"classic_heartbeat": classicOp(func(a *Agent, ctx context.Context, op groupOp, req groupcoord.ClassicHeartbeatRequest) (any, error) {
		return nil, a.groups.ClassicHeartbeat(ctx, op.group, req)
	}),
	"classic_leave": classicOp(func(a *Agent, ctx context.Context, op groupOp, req groupcoord.ClassicLeaveRequest) (any, error) {
		return a.groups.ClassicLeave(ctx, op.group, req)
	}),
	"classic_commit": classicOp(func(a *Agent, ctx context.Context, op groupOp, req groupcoord.ClassicCommitRequest) (any, error) {
		return nil, a.groups.ClassicCommit(ctx, op.group, req)
	}),
	"classic_describe": classicOp(func(a *Agent, ctx context.Context, op groupOp, _ struct{}) (any, error) {
		return a.groups.ClassicDescribe(ctx, op.group)
	}),
	"classic_list": classicOp(func(a *Agent, _ context.Context, _ groupOp, _ struct{}) (any, error) {
		return a.groups.ClassicList(), nil
	}),
}

func init() {
	for name, op := range classicOps {
		groupOps[name] = op
	}
}

// classicListAt asks the agent at peerAddr for its coordinator's list.
func (a *Agent) classicListAt(ctx context.Context, peerAddr string, out *[]groupcoord.ClassicSummary) error {
	req := a.groupPeers.NewRequest(peerAddr, peerGroupsPath)
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType(wire.ContentTypeJSON)
	req.URI().QueryArgs().Set("op", "classic_list")
	req.SetBodyString("{}")
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	deadline := a.now().Add(peerCallTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := a.groupPeers.Client(peerAddr).DoDeadline(req, resp, deadline); err != nil {
		return reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeCoordinatorNotAvailable,
			"agent "+peerAddr+" unreachable: "+err.Error(), true)
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return reply.RelayedError(resp)
	}
	var ans kafkabroker.ClassicAnswer
	if err := json.Unmarshal(resp.Body(), &ans); err != nil {
		return fmt.Errorf("agent: undecodable list of %s: %w", peerAddr, err)
	}
	return json.Unmarshal(ans.Result, out)
}
