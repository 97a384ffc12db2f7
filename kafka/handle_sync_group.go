package kafka

import (
	"bytes"
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleSyncGroup serves SyncGroup v0-v5: the leader's assignment, and
// every member's share of it once the leader sent it.
func (s *Server) handleSyncGroup(ctx context.Context, req *kmsg.SyncGroupRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	resp.Default()
	if invalidGroupID(req.Group) {
		resp.ErrorCode = kerr.InvalidGroupID.Code
		return resp, nil
	}
	if req.InstanceID != nil {
		resp.ErrorCode = kerr.InvalidRequest.Code
		return resp, nil
	}
	sr := SyncGroupRequest{Group: req.Group, MemberID: req.MemberID, Generation: req.Generation}
	if req.ProtocolType != nil {
		sr.ProtocolType = *req.ProtocolType
	}
	if req.Protocol != nil {
		sr.Protocol = *req.Protocol
	}
	if len(req.GroupAssignment) > 0 {
		sr.Assignments = make(map[string][]byte, len(req.GroupAssignment))
		for _, a := range req.GroupAssignment {
			// Copied, as JoinGroup's metadata: the group keeps them past
			// this request's frame buffer.
			sr.Assignments[a.MemberID] = bytes.Clone(a.MemberAssignment)
		}
	}
	// A follower waits for the leader's SyncGroup, or for the rebalance
	// that the leader's session expiring starts: at most the longest
	// session timeout the coordinator takes.
	ctx, cancel := context.WithTimeout(ctx, maxSessionTimeout+joinSlack)
	defer cancel()
	a, err := s.cfg.Groups.SyncGroup(ctx, sr)
	resp.ErrorCode = ErrorCode(err)
	if err == nil {
		resp.MemberAssignment = a
		resp.ProtocolType, resp.Protocol = req.ProtocolType, req.Protocol
	}
	return resp, nil
}
