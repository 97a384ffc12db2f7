package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleInitProducerID gives an idempotent producer a new id at epoch 0,
// also when it names the id and epoch it used last (v3+, KIP-360's bump):
// Kafka's coordinator answers every request without a transactional id
// so. Bumping the named id's epoch instead answered an epoch the producer
// had passed already when it bumped locally (kgo and the Java producer
// do), which leaders refuse, an id this cluster never handed out with the
// fatal UNKNOWN_PRODUCER_ID, and a stale id with the next epoch of the
// producer that holds it now, fencing it. A transactional id is refused
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
	id, e, err := s.cfg.Broker.InitProducerID(ctx)
	if err != nil {
		resp.ErrorCode = ErrorCode(err)
		return resp, nil
	}
	resp.ProducerID, resp.ProducerEpoch = id, e
	return resp, nil
}
