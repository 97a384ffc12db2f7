package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleApiVersions answers the versions of the handler table.
func (s *Server) handleApiVersions(_ context.Context, req *kmsg.ApiVersionsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	resp.Default()
	resp.ApiKeys = s.versions
	return resp, nil
}

// unsupportedApiVersions is the answer to an ApiVersions request of a
// version the listener does not read: UNSUPPORTED_VERSION with the table,
// encoded at version 0, which every client reads (Kafka's behaviour; a
// client then retries with the highest version the table gives).
func (s *Server) unsupportedApiVersions() reply {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 0
	resp.ErrorCode = kerr.UnsupportedVersion.Code
	resp.ApiKeys = s.versions
	return encoded{resp}
}
