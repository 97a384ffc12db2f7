package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleLeaveGroup serves LeaveGroup v0-v5: one member before v3, a batch
// of them (each answered on its own) from v3.
func (s *Server) handleLeaveGroup(ctx context.Context, req *kmsg.LeaveGroupRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	resp.Default()
	if invalidGroupID(req.Group) {
		resp.ErrorCode = kerr.InvalidGroupID.Code
		return resp, nil
	}
	ids := []string{req.MemberID}
	if req.Version >= 3 {
		ids = ids[:0]
		for _, m := range req.Members {
			ids = append(ids, m.MemberID)
		}
	}
	ctx, cancel := requestContext(ctx, 0)
	defer cancel()
	errs, err := s.cfg.Groups.LeaveGroup(ctx, req.Group, ids)
	resp.ErrorCode = ErrorCode(err)
	if err != nil {
		return resp, nil
	}
	if req.Version < 3 {
		resp.ErrorCode = ErrorCode(errs[0])
		return resp, nil
	}
	for i, m := range req.Members {
		rm := kmsg.NewLeaveGroupResponseMember()
		// A static member leaving by instance id alone names no member:
		// there are none (JoinGroup refuses them).
		rm.MemberID, rm.InstanceID, rm.ErrorCode = m.MemberID, m.InstanceID, ErrorCode(errs[i])
		resp.Members = append(resp.Members, rm)
	}
	return resp, nil
}
