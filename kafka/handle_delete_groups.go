package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleDeleteGroups serves DeleteGroups v0-v2: each group (concurrently)
// is deleted by its coordinator, refused NON_EMPTY_GROUP while it has
// members and GROUP_ID_NOT_FOUND when there is none.
func (s *Server) handleDeleteGroups(ctx context.Context, req *kmsg.DeleteGroupsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	resp.Default()
	resp.Groups = make([]kmsg.DeleteGroupsResponseGroup, len(req.Groups))
	each(len(req.Groups), func(i int) {
		rg := kmsg.NewDeleteGroupsResponseGroup()
		rg.Group = req.Groups[i]
		cctx, cancel := requestContext(ctx, 0)
		defer cancel()
		rg.ErrorCode = ErrorCode(s.cfg.Groups.DeleteGroup(cctx, req.Groups[i]))
		resp.Groups[i] = rg
	})
	return resp, nil
}
