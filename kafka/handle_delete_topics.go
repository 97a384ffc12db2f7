package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleDeleteTopics deletes each topic (concurrently), named or, from v6,
// by topic id.
func (s *Server) handleDeleteTopics(ctx context.Context, req *kmsg.DeleteTopicsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
	resp.Default()
	ctx, cancel := requestContext(ctx, req.TimeoutMillis)
	defer cancel()
	targets := req.Topics
	if req.Version < 6 {
		targets = make([]kmsg.DeleteTopicsRequestTopic, len(req.TopicNames))
		for i := range req.TopicNames {
			targets[i] = kmsg.NewDeleteTopicsRequestTopic()
			targets[i].Topic = &req.TopicNames[i]
		}
	}
	var byID map[[16]byte]string
	for _, rt := range targets {
		if rt.Topic == nil && byID == nil {
			byID = make(map[[16]byte]string)
			for _, t := range s.cfg.Broker.Topics() {
				if t.ID != ([16]byte{}) {
					byID[t.ID] = t.Name
				}
			}
		}
	}
	resp.Topics = make([]kmsg.DeleteTopicsResponseTopic, len(targets))
	each(len(targets), func(i int) {
		rt := targets[i]
		t := &resp.Topics[i]
		*t = kmsg.NewDeleteTopicsResponseTopic()
		t.Topic, t.TopicID = rt.Topic, rt.TopicID
		name := ""
		if rt.Topic != nil {
			name = *rt.Topic
		} else if n, ok := byID[rt.TopicID]; ok {
			name = n
			t.Topic = &n
		} else {
			t.ErrorCode = kerr.UnknownTopicID.Code
			return
		}
		if err := s.cfg.Broker.DeleteTopic(ctx, name); err != nil {
			t.ErrorCode = ErrorCode(err)
			msg := err.Error()
			t.ErrorMessage = &msg
		}
	})
	return resp, nil
}
