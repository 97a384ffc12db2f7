package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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

// completedCoordinator answers a start only once this agent's metadata
// shows the move over: its leader completed it before this agent's watch
// showed it in flight, as when the watch's next read (WatchMinGap after
// its last) comes after both writes. A move that copies nothing, a
// reorder or a shrink, is completed by its leader as soon as it sees it.
type completedCoordinator struct {
	Coordinator
}

func (c *completedCoordinator) StartReassign(ctx context.Context, topic string, partition int, target []string) (election.Reassignment, bool, error) {
	m, done, err := c.Coordinator.StartReassign(ctx, topic, partition, target)
	if err != nil || done {
		return m, done, err
	}
	for {
		snap := c.Metadata()
		if pm, ok := snap.Partition(topic, partition); ok && pm.Reassign == nil && slices.Equal(pm.Replicas, target) {
			return m, false, nil
		}
		select {
		case <-snap.Changed():
		case <-ctx.Done():
			return m, false, ctx.Err()
		}
	}
}

// TestStartReassignAnswersAMoveAlreadyOver: a POST reassignment answers
// once this agent's metadata shows the move, so that a GET after it sees
// it; a reorder, which its leader completes at once, may never be shown
// in flight there (the watch read after its completion). The answer then
// waited out its whole timeout (peerCallTimeout, 5 s) for a move long
// over: rebalance -execute, whose leadership moves are reorders, could sit 5 s
// on such a move. A metadata that shows the move done answers too.
func TestStartReassignAnswersAMoveAlreadyOver(t *testing.T) {
	c := startTestClusterWith(t, 2, "", func(a *Agent) {
		a.coord = &completedCoordinator{Coordinator: a.coord}
	})
	n1 := c.agents[0]
	c.createTopic(n1, "reorder", 1, 2, 1)
	var replicas []string
	c.waitFor(10*time.Second, "reorder/0 led with both replicas in the ISR", func() bool {
		pm, ok := n1.coord.Metadata().Partition("reorder", 0)
		replicas = pm.Replicas
		return ok && pm.LeaderSession != "" && len(pm.State.ISR) == 2
	})
	target := []string{replicas[1], replicas[0]}
	body, err := json.Marshal(map[string][]string{"replicas": target})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	status, answer := n1.call(http.MethodPost, "/v1/topics/reorder/partitions/0/reassignment", "application/json", body)
	took := time.Since(start)
	if status != http.StatusAccepted {
		t.Fatalf("POST reassignment of a reorder: %d %s, want 202", status, answer)
	}
	if took >= peerCallTimeout {
		t.Fatalf("POST reassignment of a reorder its leader completed at once answered after %s: it waited out its %s timeout for a move already over", took, peerCallTimeout)
	}
	t.Logf("answered in %s: %s", took, answer)
}

// TestStartReassignRefusesBadReplicaLists: every replica list a move
// cannot take is 400 invalid_request, not retriable, saying what is wrong.
// An empty or missing list was answered `the body must be
// {"replicas":[...]}: <nil>`, the decoder's error where there was none.
func TestStartReassignRefusesBadReplicaLists(t *testing.T) {
	c := startTestCluster(t, 2, "")
	n1 := c.agents[0]
	c.createTopic(n1, "bad", 1, 2, 2)
	for _, tc := range []struct {
		name, body string
		says       string
	}{
		{"empty list", `{"replicas":[]}`, `"replicas" is empty`},
		{"null list", `{"replicas":null}`, `"replicas" is empty`},
		{"no list", `{}`, `"replicas" is empty`},
		{"a node twice", `{"replicas":["n1","n1"]}`, `"n1" is invalid or repeated`},
		{"an unknown node", `{"replicas":["n1","n9"]}`, `"n9" is not a live agent`},
		{"fewer than min_insync_replicas", `{"replicas":["n1"]}`, "fewer replicas than min_insync_replicas 2"},
		{"another field", `{"replicas":["n1","n2"],"force":true}`, `unknown field "force"`},
		{"not an object", `["n1","n2"]`, "not a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := n1.call(http.MethodPost, "/v1/topics/bad/partitions/0/reassignment", "application/json", []byte(tc.body))
			e := errorCode(t, body)
			if status != http.StatusBadRequest || e.Code != wire.CodeInvalidRequest || e.Retriable {
				t.Fatalf("POST %s: %d %s (retriable %t): %s, want 400 %s", tc.body, status, e.Code, e.Retriable, e.Message, wire.CodeInvalidRequest)
			}
			if !strings.Contains(e.Message, tc.says) || strings.Contains(e.Message, "<nil>") {
				t.Fatalf("POST %s answered %q, want it to say %q", tc.body, e.Message, tc.says)
			}
		})
	}
}
