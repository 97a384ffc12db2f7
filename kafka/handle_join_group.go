package kafka

import (
	"bytes"
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// joinSlack is what a JoinGroup may wait beyond its rebalance timeout: the
// coordinator ends the join phase at that deadline and answers then.
const joinSlack = 10 * time.Second

// maxSessionTimeout is the longest session timeout the coordinator takes
// (groupcoord.MaxSessionTimeout).
const maxSessionTimeout = 5 * time.Minute

// handleJoinGroup serves JoinGroup v0-v9 on the group's coordinator. A
// static member (group.instance.id, v5+) is refused with INVALID_REQUEST:
// static membership is not implemented (docs/kafka.md "Consumer groups").
func (s *Server) handleJoinGroup(ctx context.Context, req *kmsg.JoinGroupRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.Default()
	resp.MemberID = req.MemberID
	if invalidGroupID(req.Group) {
		resp.ErrorCode = kerr.InvalidGroupID.Code
		return resp, nil
	}
	if req.InstanceID != nil {
		s.log.Warn("refused a static group member: group.instance.id is not supported", "group", req.Group, "instance_id", *req.InstanceID)
		resp.ErrorCode = kerr.InvalidRequest.Code
		return resp, nil
	}
	jr := JoinGroupRequest{Group: req.Group, MemberID: req.MemberID, ProtocolType: req.ProtocolType,
		SessionTimeout:       time.Duration(req.SessionTimeoutMillis) * time.Millisecond,
		RebalanceTimeout:     time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond,
		RequireKnownMemberID: req.Version >= 4}
	if req.Version == 0 {
		// v0 has no rebalance timeout: the session timeout is both.
		jr.RebalanceTimeout = jr.SessionTimeout
	}
	for _, p := range req.Protocols {
		// Copied: the decoded request's bytes are the connection's frame
		// buffer, which the next request overwrites, and the group keeps
		// the metadata for the members' next joins.
		jr.Protocols = append(jr.Protocols, GroupProtocol{Name: p.Name, Metadata: bytes.Clone(p.Metadata)})
	}
	ctx, cancel := context.WithTimeout(ctx, max(jr.RebalanceTimeout, jr.SessionTimeout)+joinSlack)
	defer cancel()
	r, err := s.cfg.Groups.JoinGroup(ctx, jr)
	resp.ErrorCode = ErrorCode(err)
	if r.MemberID != "" {
		resp.MemberID = r.MemberID
	}
	if err != nil {
		return resp, nil
	}
	resp.Generation, resp.LeaderID = r.Generation, r.Leader
	resp.Protocol = &r.Protocol
	if req.Version >= 7 {
		resp.ProtocolType = &r.ProtocolType
	}
	for _, m := range r.Members {
		rm := kmsg.NewJoinGroupResponseMember()
		rm.MemberID, rm.ProtocolMetadata = m.MemberID, m.Metadata
		resp.Members = append(resp.Members, rm)
	}
	return resp, nil
}
