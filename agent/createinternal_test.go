package agent

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/groupcoord"
	"github.com/logagent/logagent/wire"
)

// creatingCoordinator is a Coordinator with one live agent that records
// the topics it is asked to create (and says they exist, so that the
// handler does not wait for them).
type creatingCoordinator struct {
	noTopicsCoordinator
	created []string
}

func (*creatingCoordinator) Agents(context.Context) ([]election.AgentInfo, error) {
	return []election.AgentInfo{{NodeID: "a1", Passing: true}}, nil
}

func (c *creatingCoordinator) CreateTopic(_ context.Context, tc election.TopicConfig, _ [][]string) error {
	c.created = append(c.created, tc.Name)
	return election.ErrTopicExists
}

// TestCreateOffsetsTopicIsRefused: POST /v1/topics refuses the offsets
// topic (403 internal_topic), as the Kafka listener's CreateTopics does.
// It created it with the topic defaults' storage (retention on, default
// segments): retention could then delete the only record of a committed
// offset, and the topic, which alter and delete refuse, could not be
// mended.
func TestCreateOffsetsTopicIsRefused(t *testing.T) {
	a := unitAgent(t)
	coord := &creatingCoordinator{}
	a.coord = coord
	a.state.Store(stateServing)
	rt := &router{}
	rt.add(fasthttp.MethodPost, "/v1/topics", a.handleCreateTopic)
	for _, tc := range []struct {
		name       string
		wantStatus int
		wantCode   string
	}{
		{groupcoord.OffsetsTopic, fasthttp.StatusForbidden, wire.CodeInternalTopic},
		{"orders", fasthttp.StatusConflict, wire.CodeTopicExists},
	} {
		t.Run(tc.name, func(t *testing.T) {
			coord.created = nil
			var ctx fasthttp.RequestCtx
			ctx.Request.Header.SetMethod(fasthttp.MethodPost)
			ctx.Request.SetRequestURI("/v1/topics")
			ctx.Request.SetBodyString(`{"name":"` + tc.name + `","partitions":1}`)
			rt.handle(&ctx)
			var body struct {
				Error struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			_ = json.Unmarshal(ctx.Response.Body(), &body)
			if got := ctx.Response.StatusCode(); got != tc.wantStatus || body.Error.Code != tc.wantCode {
				t.Fatalf("create %s: %d %s, want %d %s (%s)", tc.name, got, body.Error.Code, tc.wantStatus, tc.wantCode, ctx.Response.Body())
			}
			if tc.wantStatus == fasthttp.StatusForbidden && len(coord.created) > 0 {
				t.Fatalf("create %s reached Consul: %v", tc.name, coord.created)
			}
		})
	}
}
