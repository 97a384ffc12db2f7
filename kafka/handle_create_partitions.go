package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleCreatePartitions raises each topic's partition count
// (concurrently, Broker.AddPartitions). The agents place the new
// partitions themselves: a manual assignment is refused, and so is a
// topic named twice.
func (s *Server) handleCreatePartitions(ctx context.Context, req *kmsg.CreatePartitionsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
	resp.Default()
	ctx, cancel := requestContext(ctx, req.TimeoutMillis)
	defer cancel()
	named := make(map[string]int, len(req.Topics))
	for _, rt := range req.Topics {
		named[rt.Topic]++
	}
	resp.Topics = make([]kmsg.CreatePartitionsResponseTopic, len(req.Topics))
	each(len(req.Topics), func(i int) {
		rt := req.Topics[i]
		t := &resp.Topics[i]
		*t = kmsg.NewCreatePartitionsResponseTopic()
		t.Topic = rt.Topic
		var err error
		switch {
		case named[rt.Topic] > 1:
			err = &Error{Code: kerr.InvalidRequest.Code, Message: "topic " + rt.Topic + " is named more than once"}
		case rt.Assignment != nil:
			err = &Error{Code: kerr.InvalidReplicaAssignment.Code, Message: "a replica assignment is not taken: the agents place new partitions over the live agents"}
		default:
			err = s.cfg.Broker.AddPartitions(ctx, rt.Topic, rt.Count, req.ValidateOnly)
		}
		if err != nil {
			t.ErrorCode = ErrorCode(err)
			msg := err.Error()
			t.ErrorMessage = &msg
		}
	})
	return resp, nil
}
