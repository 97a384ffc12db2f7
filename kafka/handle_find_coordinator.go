package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Coordinator key types of FindCoordinator.
const (
	coordinatorGroup       = 0
	coordinatorTransaction = 1
)

// handleFindCoordinator answers the listener itself for every group (the
// sidecar forwards to the group's coordinator inside the cluster) when
// group APIs are served, and TRANSACTIONAL_ID_AUTHORIZATION_FAILED for
// transactions, which are not implemented: a transactional producer fails
// at once, where the retriable COORDINATOR_NOT_AVAILABLE had it retry until
// its timeout (kgo: 27 s, then "context deadline exceeded"), never reaching
// InitProducerId's refusal. v4+ batches keys.
func (s *Server) handleFindCoordinator(_ context.Context, req *kmsg.FindCoordinatorRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	resp.Default()
	code := kerr.CoordinatorNotAvailable.Code
	switch req.CoordinatorType {
	case coordinatorGroup:
		if s.cfg.Groups != nil {
			code = 0
		}
	case coordinatorTransaction:
		code = kerr.TransactionalIDAuthorizationFailed.Code
	default:
		code = kerr.InvalidRequest.Code
	}
	nodeID, host, port := s.cfg.NodeID, s.cfg.Host, s.cfg.Port
	if code != 0 {
		nodeID, host, port = -1, "", -1
	}
	if req.Version < 4 {
		resp.ErrorCode, resp.NodeID, resp.Host, resp.Port = code, nodeID, host, port
		return resp, nil
	}
	for _, key := range req.CoordinatorKeys {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key, c.ErrorCode, c.NodeID, c.Host, c.Port = key, code, nodeID, host, port
		resp.Coordinators = append(resp.Coordinators, c)
	}
	return resp, nil
}
