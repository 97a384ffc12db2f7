package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleHeartbeat serves Heartbeat v0-v4.
func (s *Server) handleHeartbeat(ctx context.Context, req *kmsg.HeartbeatRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	resp.Default()
	if invalidGroupID(req.Group) {
		resp.ErrorCode = kerr.InvalidGroupID.Code
		return resp, nil
	}
	if req.InstanceID != nil {
		resp.ErrorCode = kerr.InvalidRequest.Code
		return resp, nil
	}
	ctx, cancel := requestContext(ctx, 0)
	defer cancel()
	resp.ErrorCode = ErrorCode(s.cfg.Groups.Heartbeat(ctx, req.Group, req.MemberID, req.Generation))
	return resp, nil
}
