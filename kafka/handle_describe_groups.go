package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleDescribeGroups serves DescribeGroups v0-v5, each group from its
// coordinator. Authorized operations are not implemented (there are no
// ACLs): answered as not requested.
func (s *Server) handleDescribeGroups(ctx context.Context, req *kmsg.DescribeGroupsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	resp.Default()
	// A group named twice is described once: each description holds
	// every member's metadata and assignment.
	groups := distinctBy(req.Groups, func(g string) string { return g })
	resp.Groups = make([]kmsg.DescribeGroupsResponseGroup, len(groups))
	each(len(groups), func(i int) {
		rg := kmsg.NewDescribeGroupsResponseGroup()
		rg.Group = groups[i]
		cctx, cancel := requestContext(ctx, 0)
		defer cancel()
		d, err := s.cfg.Groups.DescribeGroup(cctx, groups[i])
		rg.ErrorCode = ErrorCode(err)
		if err == nil {
			rg.State, rg.ProtocolType, rg.Protocol = d.State, d.ProtocolType, d.Protocol
			for _, m := range d.Members {
				rm := kmsg.NewDescribeGroupsResponseGroupMember()
				rm.MemberID, rm.ClientID, rm.ClientHost = m.MemberID, m.ClientID, m.ClientHost
				rm.ProtocolMetadata, rm.MemberAssignment = m.Metadata, m.Assignment
				rg.Members = append(rg.Members, rm)
			}
		}
		resp.Groups[i] = rg
	})
	return resp, nil
}
