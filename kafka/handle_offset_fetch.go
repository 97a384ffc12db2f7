package kafka

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleOffsetFetch serves OffsetFetch v1-v8 (v0 is ZooKeeper's): one
// group before v8, several from v8, each fetched from its coordinator;
// nil topics ask for every committed offset of the group, a partition
// without one is answered offset -1. Without transactions nothing is ever
// pending, so RequireStable needs nothing.
func (s *Server) handleOffsetFetch(ctx context.Context, req *kmsg.OffsetFetchRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	resp.Default()
	type ask struct {
		group  string
		topics map[string][]int32 // nil: all
		order  []string
	}
	// A topic named twice is answered once with the partitions of both,
	// and a group named twice once: an answer per naming repeated a
	// group's every committed offset, or a topic's last partition list,
	// that many times (a 400 KB frame naming a group of 100 offsets
	// 100,000 times was 13 GB of heap).
	addTopic := func(a *ask, topic string, partitions []int32) {
		if _, ok := a.topics[topic]; !ok {
			a.order = append(a.order, topic)
		}
		a.topics[topic] = append(a.topics[topic], partitions...)
	}
	var asks []ask
	if req.Version < 8 {
		a := ask{group: req.Group}
		if req.Topics != nil {
			a.topics = map[string][]int32{}
			for _, t := range req.Topics {
				addTopic(&a, t.Topic, t.Partitions)
			}
		}
		asks = append(asks, a)
	} else {
		for _, g := range distinctBy(req.Groups, func(g kmsg.OffsetFetchRequestGroup) string { return g.Group }) {
			a := ask{group: g.Group}
			if g.Topics != nil {
				a.topics = map[string][]int32{}
				for _, t := range g.Topics {
					addTopic(&a, t.Topic, t.Partitions)
				}
			}
			asks = append(asks, a)
		}
	}
	type answer struct {
		code   int16
		topics []kmsg.OffsetFetchResponseTopic
	}
	answers := make([]answer, len(asks))
	each(len(asks), func(i int) {
		cctx, cancel := requestContext(ctx, 0)
		defer cancel()
		offsets, err := s.cfg.Groups.FetchOffsets(cctx, asks[i].group)
		if err != nil {
			answers[i].code = ErrorCode(err)
			return
		}
		answers[i].topics = offsetFetchTopics(offsets, asks[i].topics, asks[i].order)
	})
	if req.Version < 2 && answers[0].code != 0 {
		// No top-level error code before v2: the group's goes on every
		// partition asked for, as Kafka answers. An empty answer reads as
		// "nothing committed" (kafka-go then starts the whole group from
		// its StartOffset).
		for _, topic := range asks[0].order {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = topic
			for _, p := range asks[0].topics[topic] {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.ErrorCode = p, -1, answers[0].code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil
	}
	if req.Version < 8 {
		resp.ErrorCode, resp.Topics = answers[0].code, answers[0].topics
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				if resp.Topics[i].Partitions[j].ErrorCode == 0 {
					resp.Topics[i].Partitions[j].ErrorCode = answers[0].code
				}
			}
		}
		return resp, nil
	}
	for i, a := range asks {
		rg := kmsg.NewOffsetFetchResponseGroup()
		rg.Group, rg.ErrorCode = a.group, answers[i].code
		for _, t := range answers[i].topics {
			gt := kmsg.NewOffsetFetchResponseGroupTopic()
			gt.Topic = t.Topic
			for _, p := range t.Partitions {
				gp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
				gp.Partition, gp.Offset, gp.LeaderEpoch, gp.Metadata, gp.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode
				gt.Partitions = append(gt.Partitions, gp)
			}
			rg.Topics = append(rg.Topics, gt)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}

// offsetFetchTopics answers the partitions asked for (every committed one
// when topics is nil), offset -1 for one without a committed offset.
func offsetFetchTopics(offsets []CommittedOffset, topics map[string][]int32, order []string) []kmsg.OffsetFetchResponseTopic {
	byTopic := map[string]map[int32]CommittedOffset{}
	var all []string
	for _, o := range offsets {
		if byTopic[o.Topic] == nil {
			byTopic[o.Topic] = map[int32]CommittedOffset{}
			all = append(all, o.Topic)
		}
		byTopic[o.Topic][o.Partition] = o
	}
	if topics == nil {
		slices.Sort(all)
		order = all
		topics = map[string][]int32{}
		for _, t := range all {
			for p := range byTopic[t] {
				topics[t] = append(topics[t], p)
			}
			slices.Sort(topics[t])
		}
	}
	out := make([]kmsg.OffsetFetchResponseTopic, 0, len(order))
	for _, t := range order {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t
		for _, p := range topics[t] {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = p, -1, -1
			if o, ok := byTopic[t][p]; ok {
				md := o.Metadata
				rp.Offset, rp.Metadata = o.Offset, &md
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		out = append(out, rt)
	}
	return out
}
