package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleDeleteTopics deletes each topic (concurrently), named or, from v6,
// by topic id. A name or id the request gives more than once is answered
// once, INVALID_REQUEST, and not deleted, as Kafka's controller answers it
// (each naming had been a deletion of its own, all but one answered
// UNKNOWN_TOPIC_OR_PARTITION).
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
	targets, duplicates := splitDuplicateTopics(targets)
	for _, rt := range duplicates {
		t := kmsg.NewDeleteTopicsResponseTopic()
		t.Topic, t.TopicID = rt.Topic, rt.TopicID
		t.ErrorCode = kerr.InvalidRequest.Code
		msg := "Duplicate topic name."
		if rt.Topic == nil {
			msg = "Duplicate topic id."
		}
		t.ErrorMessage = &msg
		resp.Topics = append(resp.Topics, t)
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
	answered := len(resp.Topics)
	resp.Topics = append(resp.Topics, make([]kmsg.DeleteTopicsResponseTopic, len(targets))...)
	each(len(targets), func(i int) {
		rt := targets[i]
		t := &resp.Topics[answered+i]
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

// splitDuplicateTopics returns the deletion targets named (or, without a
// name, identified) once, and one target for each name or id given more
// than once.
func splitDuplicateTopics(targets []kmsg.DeleteTopicsRequestTopic) (once, duplicates []kmsg.DeleteTopicsRequestTopic) {
	keyOf := func(rt kmsg.DeleteTopicsRequestTopic) topicRef { return topicRefOf(rt.Topic, rt.TopicID) }
	count := make(map[topicRef]int, len(targets))
	for _, rt := range targets {
		count[keyOf(rt)]++
	}
	for _, rt := range targets {
		switch n := count[keyOf(rt)]; {
		case n == 1:
			once = append(once, rt)
		case n > 1:
			duplicates = append(duplicates, rt)
			count[keyOf(rt)] = 0 // answered once
		}
	}
	return once, duplicates
}
