package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleListOffsets answers earliest (-2), latest (-1), max timestamp
// (-3, v7+), earliest local (-4, v8+) or the first offset at or after a
// timestamp for each partition. A special timestamp below the version
// that brought it, or one the listener does not know (-5, the latest
// tiered offset of v9, and beyond), is UNSUPPORTED_VERSION, as Kafka
// answers it.
func (s *Server) handleListOffsets(ctx context.Context, req *kmsg.ListOffsetsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	resp.Default()
	ctx, cancel := requestContext(ctx, 0)
	defer cancel()
	type item struct {
		rp *kmsg.ListOffsetsRequestTopicPartition
		p  *kmsg.ListOffsetsResponseTopicPartition
		t  string
	}
	var items []item
	resp.Topics = make([]kmsg.ListOffsetsResponseTopic, len(req.Topics))
	for i := range req.Topics {
		rt := &req.Topics[i]
		t := &resp.Topics[i]
		*t = kmsg.NewListOffsetsResponseTopic()
		t.Topic = rt.Topic
		t.Partitions = make([]kmsg.ListOffsetsResponseTopicPartition, len(rt.Partitions))
		for j := range rt.Partitions {
			p := &t.Partitions[j]
			*p = kmsg.NewListOffsetsResponseTopicPartition()
			p.Partition = rt.Partitions[j].Partition
			items = append(items, item{rp: &rt.Partitions[j], p: p, t: rt.Topic})
		}
	}
	each(len(items), func(i int) {
		it := items[i]
		if !timestampSupported(it.rp.Timestamp, req.Version) {
			it.p.ErrorCode = kerr.UnsupportedVersion.Code
			return
		}
		at, err := s.cfg.Broker.ListOffset(ctx, it.t, it.rp.Partition, it.rp.CurrentLeaderEpoch, it.rp.Timestamp)
		if err != nil {
			it.p.ErrorCode = ErrorCode(err)
			return
		}
		it.p.Offset, it.p.Timestamp, it.p.LeaderEpoch = at.Offset, at.Timestamp, at.LeaderEpoch
	})
	return resp, nil
}

// timestampSupported says whether a ListOffsets of version may ask for
// timestamp.
func timestampSupported(timestamp int64, version int16) bool {
	switch timestamp {
	case MaxTimestamp:
		return version >= 7
	case EarliestLocalTimestamp:
		return version >= 8
	}
	return timestamp >= EarliestTimestamp
}
