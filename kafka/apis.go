package kafka

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// handler answers one decoded request; a nil reply answers nothing (an
// acks=0 produce), an error closes the connection.
type handler func(s *Server, ctx context.Context, req kmsg.Request) (reply, error)

// api is one entry of the handler table: an API key, the versions the
// listener implements in full, and its handler.
type api struct {
	key      int16
	min, max int16
	handle   handler
	// groups: a group API, served only with Config.Groups.
	groups bool
	// maxBytes is the frame limit of the key (limits.go); zero is
	// Config.MaxRequestBytes.
	maxBytes int32
}

// apis is the handler table (docs/kafka.md "Protocol" gives the reasons
// for each range; limits.go the frame limits). ApiVersions is generated
// from it, so only what is implemented is advertised.
var apis = []api{
	{key: 0, min: 3, max: 11, handle: encodedBy((*Server).handleProduce)},
	{key: 1, min: 4, max: 12, handle: typed((*Server).handleFetch), maxBytes: defaultFrameBytes},
	{key: 2, min: 1, max: 8, handle: encodedBy((*Server).handleListOffsets), maxBytes: defaultFrameBytes},
	{key: 3, min: 0, max: 12, handle: encodedBy((*Server).handleMetadata), maxBytes: defaultFrameBytes},
	{key: 10, min: 0, max: 4, handle: encodedBy((*Server).handleFindCoordinator), maxBytes: defaultFrameBytes},
	{key: 18, min: 0, max: 3, handle: encodedBy((*Server).handleApiVersions), maxBytes: defaultFrameBytes},
	{key: 19, min: 0, max: 7, handle: encodedBy((*Server).handleCreateTopics), maxBytes: defaultFrameBytes},
	{key: 20, min: 0, max: 6, handle: encodedBy((*Server).handleDeleteTopics), maxBytes: defaultFrameBytes},
	{key: 22, min: 0, max: 4, handle: encodedBy((*Server).handleInitProducerID), maxBytes: defaultFrameBytes},
	{key: 23, min: 0, max: 4, handle: encodedBy((*Server).handleOffsetForLeaderEpoch), maxBytes: defaultFrameBytes},
	{key: 32, min: 0, max: 4, handle: encodedBy((*Server).handleDescribeConfigs), maxBytes: defaultFrameBytes},
	{key: 37, min: 0, max: 3, handle: encodedBy((*Server).handleCreatePartitions), maxBytes: defaultFrameBytes},
	{key: 44, min: 0, max: 1, handle: encodedBy((*Server).handleIncrementalAlterConfigs), maxBytes: defaultFrameBytes},
	{key: 8, min: 1, max: 9, handle: encodedBy((*Server).handleOffsetCommit), groups: true, maxBytes: offsetCommitFrameBytes},
	{key: 9, min: 1, max: 8, handle: encodedBy((*Server).handleOffsetFetch), groups: true, maxBytes: defaultFrameBytes},
	{key: 11, min: 0, max: 9, handle: encodedBy((*Server).handleJoinGroup), groups: true, maxBytes: groupFrameBytes},
	{key: 12, min: 0, max: 4, handle: encodedBy((*Server).handleHeartbeat), groups: true, maxBytes: defaultFrameBytes},
	{key: 13, min: 0, max: 5, handle: encodedBy((*Server).handleLeaveGroup), groups: true, maxBytes: defaultFrameBytes},
	{key: 14, min: 0, max: 5, handle: encodedBy((*Server).handleSyncGroup), groups: true, maxBytes: groupFrameBytes},
	{key: 15, min: 0, max: 5, handle: encodedBy((*Server).handleDescribeGroups), groups: true, maxBytes: defaultFrameBytes},
	{key: 16, min: 0, max: 4, handle: encodedBy((*Server).handleListGroups), groups: true, maxBytes: defaultFrameBytes},
	{key: 42, min: 0, max: 2, handle: encodedBy((*Server).handleDeleteGroups), groups: true, maxBytes: defaultFrameBytes},
}

// apiTable indexes the handler table by key and builds the ApiVersions
// table from it, sorted by key.
func apiTable(withGroups bool) (map[int16]api, []kmsg.ApiVersionsResponseApiKey) {
	byKey := make(map[int16]api, len(apis))
	var versions []kmsg.ApiVersionsResponseApiKey
	for _, a := range apis {
		if a.groups && !withGroups {
			continue
		}
		byKey[a.key] = a
		versions = append(versions, kmsg.ApiVersionsResponseApiKey{ApiKey: a.key, MinVersion: a.min, MaxVersion: a.max})
	}
	slices.SortFunc(versions, func(a, b kmsg.ApiVersionsResponseApiKey) int { return int(a.ApiKey) - int(b.ApiKey) })
	return byKey, versions
}

// encodedBy adapts a handler that answers a response kmsg encodes; a nil
// response is no reply.
func encodedBy[R kmsg.Request](f func(*Server, context.Context, R) (kmsg.Response, error)) handler {
	return func(s *Server, ctx context.Context, req kmsg.Request) (reply, error) {
		resp, err := f(s, ctx, req.(R))
		if err != nil || resp == nil {
			return nil, err
		}
		return encoded{resp}, nil
	}
}

// typed adapts a handler that writes its own reply.
func typed[R kmsg.Request, P reply](f func(*Server, context.Context, R) (P, error)) handler {
	return func(s *Server, ctx context.Context, req kmsg.Request) (reply, error) {
		rep, err := f(s, ctx, req.(R))
		if err != nil {
			return nil, err
		}
		return rep, nil
	}
}
