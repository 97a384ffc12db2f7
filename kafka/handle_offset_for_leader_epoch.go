package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleOffsetForLeaderEpoch answers, per partition, the end offset of the
// largest epoch not above the one asked; clients use it to find out
// whether a new leader truncated what they had read.
func (s *Server) handleOffsetForLeaderEpoch(ctx context.Context, req *kmsg.OffsetForLeaderEpochRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	resp.Default()
	ctx, cancel := requestContext(ctx, 0)
	defer cancel()
	type item struct {
		rp *kmsg.OffsetForLeaderEpochRequestTopicPartition
		p  *kmsg.OffsetForLeaderEpochResponseTopicPartition
		t  string
	}
	var items []item
	resp.Topics = make([]kmsg.OffsetForLeaderEpochResponseTopic, len(req.Topics))
	for i := range req.Topics {
		rt := &req.Topics[i]
		t := &resp.Topics[i]
		*t = kmsg.NewOffsetForLeaderEpochResponseTopic()
		t.Topic = rt.Topic
		t.Partitions = make([]kmsg.OffsetForLeaderEpochResponseTopicPartition, len(rt.Partitions))
		for j := range rt.Partitions {
			p := &t.Partitions[j]
			*p = kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			p.Partition = rt.Partitions[j].Partition
			items = append(items, item{rp: &rt.Partitions[j], p: p, t: rt.Topic})
		}
	}
	each(len(items), func(i int) {
		it := items[i]
		epoch, end, err := s.cfg.Broker.EndOffsetForEpoch(ctx, it.t, it.rp.Partition, it.rp.CurrentLeaderEpoch, it.rp.LeaderEpoch)
		if err != nil {
			it.p.ErrorCode = ErrorCode(err)
			it.p.LeaderEpoch, it.p.EndOffset = -1, -1
			return
		}
		it.p.LeaderEpoch, it.p.EndOffset = epoch, end
	})
	return resp, nil
}
