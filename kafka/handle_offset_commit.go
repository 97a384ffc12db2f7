package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleOffsetCommit serves OffsetCommit v1-v9 (v0 is ZooKeeper's): all of
// a request's offsets are committed or none, so every partition is
// answered with the same code.
func (s *Server) handleOffsetCommit(ctx context.Context, req *kmsg.OffsetCommitRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	resp.Default()
	code := int16(0)
	if req.InstanceID != nil {
		code = kerr.InvalidRequest.Code
	} else {
		cr := CommitRequest{Group: req.Group, MemberID: req.MemberID, Generation: req.Generation}
		for _, t := range req.Topics {
			for _, p := range t.Partitions {
				oc := OffsetCommit{Topic: t.Topic, Partition: p.Partition, Offset: p.Offset}
				if p.Metadata != nil {
					oc.Metadata = *p.Metadata
				}
				cr.Offsets = append(cr.Offsets, oc)
			}
		}
		if len(cr.Offsets) > 0 {
			cctx, cancel := requestContext(ctx, 0)
			code = ErrorCode(s.cfg.Groups.CommitOffsets(cctx, cr))
			cancel()
		}
	}
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
