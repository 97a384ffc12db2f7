package kafkabroker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/wire"
)

// noTopics is a Consul client whose metadata has no topics.
type noTopics struct{ Coordinator }

func (noTopics) Metadata() *election.Snapshot { return &election.Snapshot{} }

// groupOpSidecar answers the group operations the coordinator would, by
// group id, and records them.
type groupOpSidecar struct {
	servingSidecar
	mu      sync.Mutex
	answers map[string]*reply.APIError
	ops     []string
}

func (s *groupOpSidecar) RunGroupOp(_ context.Context, name, group string, _ []byte, _ time.Duration) ([]byte, *reply.APIError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops = append(s.ops, name+" "+group)
	if e := s.answers[group]; e != nil {
		return nil, e
	}
	return []byte("{}"), nil
}

// TestKadmDeleteGroups: kadm's DeleteGroups reaches the coordinator's
// delete for each group, and its refusals come back as Kafka's codes:
// group_not_empty as NON_EMPTY_GROUP, unknown_group as GROUP_ID_NOT_FOUND.
func TestKadmDeleteGroups(t *testing.T) {
	s := &groupOpSidecar{answers: map[string]*reply.APIError{
		"busy": reply.NewAPIError(fasthttp.StatusConflict, wire.CodeGroupNotEmpty, "group has members", false),
		"nope": reply.NewAPIError(fasthttp.StatusNotFound, wire.CodeUnknownGroup, "no group", false),
	}}
	adm := kadm.NewClient(kgoAgainst(t, New(Config{Sidecar: s, Coordinator: noTopics{}})))
	res, err := adm.DeleteGroups(t.Context(), "gone", "busy", "nope")
	if err != nil {
		t.Fatal(err)
	}
	for g, want := range map[string]error{"gone": nil, "busy": kerr.NonEmptyGroup, "nope": kerr.GroupIDNotFound} {
		if got := res[g].Err; !errors.Is(got, want) || (want == nil) != (got == nil) {
			t.Errorf("%s: %v, want %v", g, got, want)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ops) != 3 {
		t.Errorf("group operations %q, want a delete of each group", s.ops)
	}
	for _, op := range s.ops {
		if op != "delete gone" && op != "delete busy" && op != "delete nope" {
			t.Errorf("group operation %q", op)
		}
	}
}
