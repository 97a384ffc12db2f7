package agent

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/wire"
)

// deletingCoordinator deletes a topic when a start of a move of it is
// asked for, before or (conflict) after the start has read it.
type deletingCoordinator struct {
	Coordinator
	mu sync.Mutex
	// conflict makes the first start after the deletion answer what its
	// transaction does when the topic's config went between its read and
	// its write (ErrConflict), instead of doing it.
	conflict bool
	deleted  bool
}

func (c *deletingCoordinator) StartReassign(ctx context.Context, topic string, partition int, target []string) (election.Reassignment, bool, error) {
	c.mu.Lock()
	first := !c.deleted
	c.deleted = true
	c.mu.Unlock()
	if first {
		if err := c.DeleteTopic(ctx, topic); err != nil {
			return election.Reassignment{}, false, err
		}
		if c.conflict {
			return election.Reassignment{}, false, fmt.Errorf("%w: %s/%d changed while the move was written: op 0: index is stale", election.ErrConflict, topic, partition)
		}
	}
	return c.Coordinator.StartReassign(ctx, topic, partition, target)
}

// TestStartReassignOfATopicDeletedMeanwhile: a POST reassignment whose
// topic is deleted after the agent found it in its metadata is 404
// unknown_topic, the answer to a topic the metadata does not have; it was
// 503 service_unavailable (retriable), and a client retried a move of a
// topic that is gone for ever.
func TestStartReassignOfATopicDeletedMeanwhile(t *testing.T) {
	for _, tc := range []struct {
		name     string
		conflict bool
	}{
		{"deleted before the start reads it", false},
		{"deleted between the start's read and its write", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startTestClusterWith(t, 1, "", func(a *Agent) {
				a.coord = &deletingCoordinator{Coordinator: a.coord, conflict: tc.conflict}
			})
			n1 := c.agents[0]
			c.createTopic(n1, "doomed", 1, 1, 1)
			status, body := n1.call(http.MethodPost, "/v1/topics/doomed/partitions/0/reassignment", "application/json", []byte(`{"replicas":["n1"]}`))
			e := errorCode(t, body)
			if status != http.StatusNotFound || e.Code != wire.CodeUnknownTopic || e.Retriable {
				t.Fatalf("POST reassignment of a topic deleted meanwhile: %d %s (retriable %t): %s, want 404 %s", status, e.Code, e.Retriable, e.Message, wire.CodeUnknownTopic)
			}
		})
	}
}
