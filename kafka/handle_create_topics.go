package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleCreateTopics creates each topic (concurrently) through the Broker.
// -1 partitions or replication factor take the cluster default. A manual
// replica assignment is refused (INVALID_REPLICA_ASSIGNMENT: logagent
// places replicas itself), and so is a config with a null value
// (INVALID_CONFIG) and a topic named twice (INVALID_REQUEST, as Kafka).
// From v5 the answer carries the topic's partitions, replication factor
// and configs as created.
func (s *Server) handleCreateTopics(ctx context.Context, req *kmsg.CreateTopicsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	resp.Default()
	ctx, cancel := requestContext(ctx, req.TimeoutMillis)
	defer cancel()
	names := make(map[string]int, len(req.Topics))
	for _, rt := range req.Topics {
		names[rt.Topic]++
	}
	resp.Topics = make([]kmsg.CreateTopicsResponseTopic, len(req.Topics))
	each(len(req.Topics), func(i int) {
		rt := &req.Topics[i]
		t := &resp.Topics[i]
		*t = kmsg.NewCreateTopicsResponseTopic()
		t.Topic = rt.Topic
		fail := func(code int16, msg string) {
			t.ErrorCode = code
			t.ErrorMessage = &msg
		}
		spec := TopicSpec{Name: rt.Topic, ValidateOnly: req.ValidateOnly}
		if rt.NumPartitions > 0 {
			spec.Partitions = rt.NumPartitions
		}
		if rt.ReplicationFactor > 0 {
			spec.ReplicationFactor = rt.ReplicationFactor
		}
		switch {
		case names[rt.Topic] > 1:
			fail(kerr.InvalidRequest.Code, "the topic appears twice in the request")
			return
		case len(rt.ReplicaAssignment) > 0:
			fail(kerr.InvalidReplicaAssignment.Code, "manual replica assignment is not supported: logagent places replicas")
			return
		case rt.NumPartitions == 0 || rt.NumPartitions < -1:
			fail(kerr.InvalidPartitions.Code, "partitions must be positive, or -1 for the default")
			return
		case rt.ReplicationFactor == 0 || rt.ReplicationFactor < -1:
			fail(kerr.InvalidReplicationFactor.Code, "replication factor must be positive, or -1 for the default")
			return
		}
		for _, c := range rt.Configs {
			if c.Value == nil {
				fail(kerr.InvalidConfig.Code, "config "+c.Name+" has a null value")
				return
			}
			if spec.Configs == nil {
				spec.Configs = make(map[string]string, len(rt.Configs))
			}
			spec.Configs[c.Name] = *c.Value
		}
		if err := s.cfg.Broker.CreateTopic(ctx, spec); err != nil {
			fail(ErrorCode(err), err.Error())
			return
		}
		if req.Version >= 5 && !req.ValidateOnly {
			s.describeCreated(t)
		}
	})
	return resp, nil
}

// describeCreated fills a created topic's v5+ fields from the metadata and
// its configs; what cannot be read stays at its default (-1, no configs).
func (s *Server) describeCreated(t *kmsg.CreateTopicsResponseTopic) {
	for _, topic := range s.cfg.Broker.Topics() {
		if topic.Name != t.Topic {
			continue
		}
		t.TopicID = topic.ID
		t.NumPartitions = int32(len(topic.Partitions))
		if len(topic.Partitions) > 0 {
			t.ReplicationFactor = int16(topic.Partitions[0].Replicas)
		}
	}
	configs, err := s.cfg.Broker.TopicConfigs(t.Topic)
	if err != nil {
		return
	}
	for _, name := range sortedKeys(configs) {
		c := kmsg.NewCreateTopicsResponseTopicConfig()
		value := configs[name]
		c.Name, c.Value, c.ReadOnly = name, &value, true
		c.Source = int8(kmsg.ConfigSourceDynamicTopicConfig)
		t.Configs = append(t.Configs, c)
	}
}
