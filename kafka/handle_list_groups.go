package kafka

import (
	"context"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleListGroups serves ListGroups v0-v4: every group of the cluster
// (the sidecar is its only broker), filtered by state from v4 in any
// case, as Kafka's broker does ("stable" and "Stable" name one state).
func (s *Server) handleListGroups(ctx context.Context, req *kmsg.ListGroupsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	resp.Default()
	cctx, cancel := requestContext(ctx, 0)
	defer cancel()
	groups, err := s.cfg.Groups.ListGroups(cctx)
	resp.ErrorCode = ErrorCode(err)
	for _, g := range groups {
		if len(req.StatesFilter) > 0 && !slices.ContainsFunc(req.StatesFilter, func(state string) bool {
			return strings.EqualFold(state, g.State)
		}) {
			continue
		}
		rg := kmsg.NewListGroupsResponseGroup()
		rg.Group, rg.ProtocolType, rg.GroupState = g.Group, g.ProtocolType, g.State
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}
