package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleDeleteGroups serves DeleteGroups v0-v2: each group (concurrently)
// is deleted by its coordinator, refused NON_EMPTY_GROUP while it has
// members and GROUP_ID_NOT_FOUND when there is none. Kafka takes an empty
// group id here as a group's (for backward compatibility), which no group
// of the sidecar has (group ids are 1 to 255 bytes): GROUP_ID_NOT_FOUND.
// A group named more than once is deleted and answered once, as Kafka
// does (each naming had been a deletion of its own, all but one answered
// GROUP_ID_NOT_FOUND).
func (s *Server) handleDeleteGroups(ctx context.Context, req *kmsg.DeleteGroupsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	resp.Default()
	groups := distinctBy(req.Groups, func(g string) string { return g })
	resp.Groups = make([]kmsg.DeleteGroupsResponseGroup, len(groups))
	each(len(groups), func(i int) {
		rg := kmsg.NewDeleteGroupsResponseGroup()
		rg.Group = groups[i]
		if rg.Group == "" {
			rg.ErrorCode = kerr.GroupIDNotFound.Code
			resp.Groups[i] = rg
			return
		}
		cctx, cancel := requestContext(ctx, 0)
		defer cancel()
		rg.ErrorCode = ErrorCode(s.cfg.Groups.DeleteGroup(cctx, groups[i]))
		resp.Groups[i] = rg
	})
	return resp, nil
}
