package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleMetadata presents the listener as the only broker: it is the
// controller and the leader of every partition, and each replica and ISR
// entry is its own id, as many as the partition has replicas and in-sync
// replicas, so tools that count them see the replication factor and under-
// replication.
//
// allow_auto_topic_creation is not honoured: a topic is created only by
// CreateTopics (or logagent's own API), never as a side effect of a client
// asking about it, so a typo in a producer's topic is an error, not a new
// topic.
func (s *Server) handleMetadata(_ context.Context, req *kmsg.MetadataRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	resp.Default()
	broker := kmsg.NewMetadataResponseBroker()
	broker.NodeID, broker.Host, broker.Port = s.cfg.NodeID, s.cfg.Host, s.cfg.Port
	resp.Brokers = []kmsg.MetadataResponseBroker{broker}
	if s.cfg.ClusterID != "" {
		resp.ClusterID = &s.cfg.ClusterID
	}
	resp.ControllerID = s.cfg.NodeID

	asked := distinctMetadataTopics(req.Topics)
	if s.cfg.Broker.Serving() != nil {
		// The agent starts or stops and cannot tell which topics exist:
		// UNKNOWN_TOPIC_OR_PARTITION for each had clients fail their
		// buffered records during a restart (franz-go after four such
		// answers); LEADER_NOT_AVAILABLE has them retry.
		for _, rt := range asked {
			mt := kmsg.NewMetadataResponseTopic()
			mt.ErrorCode, mt.Topic, mt.TopicID = kerr.LeaderNotAvailable.Code, rt.Topic, rt.TopicID
			resp.Topics = append(resp.Topics, mt)
		}
		return resp, nil
	}
	topics := s.cfg.Broker.Topics()
	// All topics: an empty list at v0, a null one from v1 on (where an
	// empty list asks for none).
	if (req.Version == 0 && len(req.Topics) == 0) || (req.Version > 0 && req.Topics == nil) {
		for i := range topics {
			resp.Topics = append(resp.Topics, s.metadataTopic(&topics[i]))
		}
		return resp, nil
	}
	byName := make(map[string]*Topic, len(topics))
	byID := make(map[[16]byte]*Topic, len(topics))
	for i := range topics {
		byName[topics[i].Name] = &topics[i]
		if topics[i].ID != ([16]byte{}) {
			byID[topics[i].ID] = &topics[i]
		}
	}
	for _, rt := range asked {
		var t *Topic
		unknown := kerr.UnknownTopicOrPartition.Code
		if rt.Topic != nil {
			t = byName[*rt.Topic]
		} else {
			t = byID[rt.TopicID]
			unknown = kerr.UnknownTopicID.Code
		}
		if t == nil {
			mt := kmsg.NewMetadataResponseTopic()
			mt.ErrorCode = unknown
			mt.Topic = rt.Topic
			mt.TopicID = rt.TopicID
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		resp.Topics = append(resp.Topics, s.metadataTopic(t))
	}
	return resp, nil
}

// distinctMetadataTopics is the topics asked for, each once (by name, or
// by id when it has no name), in the order first asked: Kafka answers the
// set of them. Every answer repeats its topic's partitions, so a 300 KB
// frame naming a topic of 100 partitions 100,000 times was 3.4 GB of heap.
func distinctMetadataTopics(topics []kmsg.MetadataRequestTopic) []kmsg.MetadataRequestTopic {
	return distinctBy(topics, func(rt kmsg.MetadataRequestTopic) topicRef { return topicRefOf(rt.Topic, rt.TopicID) })
}

// topicRef is how a request names a topic: by name, or (from the versions
// that carry topic ids) by id when it gives no name.
type topicRef struct {
	name   string
	id     [16]byte
	byName bool
}

func topicRefOf(name *string, id [16]byte) topicRef {
	if name != nil {
		return topicRef{name: *name, byName: true}
	}
	return topicRef{id: id}
}

// distinctBy is xs without the elements whose key an earlier one has, in
// order: a request may name a topic or group again and again, and an
// answer per naming multiplied the heap.
func distinctBy[T any, K comparable](xs []T, key func(T) K) []T {
	seen := make(map[K]bool, len(xs))
	out := xs[:0:0]
	for _, x := range xs {
		if k := key(x); !seen[k] {
			seen[k] = true
			out = append(out, x)
		}
	}
	return out
}

func (s *Server) metadataTopic(t *Topic) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	name := t.Name
	mt.Topic = &name
	mt.TopicID = t.ID
	mt.IsInternal = t.Internal
	mt.Partitions = make([]kmsg.MetadataResponseTopicPartition, 0, len(t.Partitions))
	for _, p := range t.Partitions {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition = p.Partition
		mp.LeaderEpoch = p.LeaderEpoch
		mp.Leader = s.cfg.NodeID
		if p.Err != nil {
			mp.ErrorCode = ErrorCode(p.Err)
			mp.Leader = -1
		}
		mp.Replicas = s.repeatID(p.Replicas)
		mp.ISR = s.repeatID(p.ISR)
		mp.OfflineReplicas = []int32{}
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}

// repeatID is n copies of the listener's node id.
func (s *Server) repeatID(n int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = s.cfg.NodeID
	}
	return ids
}
