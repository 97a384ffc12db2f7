package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleInitProducerID gives an idempotent producer its id, or the next
// epoch of the id it has (v3+, KIP-360). A transactional id is refused
// with TRANSACTIONAL_ID_AUTHORIZATION_FAILED: transactions are not
// implemented, and clients take that code as fatal, so a transactional
// producer fails at once instead of retrying what can never succeed.
func (s *Server) handleInitProducerID(ctx context.Context, req *kmsg.InitProducerIDRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.Default()
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if req.TransactionalID != nil {
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return resp, nil
	}
	ctx, cancel := requestContext(ctx, 0)
	defer cancel()
	producerID, epoch := int64(-1), int16(-1)
	if req.Version >= 3 {
		producerID, epoch = req.ProducerID, req.ProducerEpoch
	}
	id, e, err := s.cfg.Broker.InitProducerID(ctx, producerID, epoch)
	if err != nil {
		resp.ErrorCode = ErrorCode(err)
		return resp, nil
	}
	resp.ProducerID, resp.ProducerEpoch = id, e
	return resp, nil
}
