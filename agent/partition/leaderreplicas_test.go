package partition

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/internal/consultest"
	"github.com/logagent/logagent/segstore"
)

// heldMetadataCoord is the election client but for Metadata, which blocks
// from hold until release: the manager then hands its replicas nothing
// newer, while the campaigns (the client's own snapshots) go on.
type heldMetadataCoord struct {
	*election.Client
	mu       sync.Mutex
	held     chan struct{} // closed by release; nil while not held
	released sync.Once
}

func (c *heldMetadataCoord) Metadata() *election.Snapshot {
	c.mu.Lock()
	held := c.held
	c.mu.Unlock()
	if held != nil {
		<-held
	}
	return c.Client.Metadata()
}

func (c *heldMetadataCoord) hold() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held = make(chan struct{})
}

func (c *heldMetadataCoord) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held != nil {
		c.released.Do(func() { close(c.held) })
	}
}

// TestLeaderStartsFromTheElectionsReplicas: a move adds n4 to [n1 n2] and
// Consul's ISR names it, but n1's replica has not been handed that
// metadata yet when it wins the election, which was decided on the
// snapshot that has it. The leader took its replica set from the
// replica's own metadata, so n4 was a non-replica to it: left out of its
// ISR and proposed out of Consul's with a warning that Consul's ISR names
// agents that are not replicas. It starts from the replica set the
// election was decided on.
func TestLeaderStartsFromTheElectionsReplicas(t *testing.T) {
	srv := consultest.Start(t)
	n2 := startElectionOnly(t, srv, "n2")
	startElectionOnly(t, srv, "n4") // alive: a leader keeps it in the ISR
	const topic = "added"
	createTopic(t, n2, topic, [][]string{{"n1", "n2"}}, 1)
	// n1 out of the ISR: it does not campaign until the move is in place.
	writeConsulState(t, srv, topic, func(st *election.PartitionState) { st.ISR = []string{"n2"} })
	var coord *heldMetadataCoord
	m, _ := startManagerCoord(t, srv, "n1", "", time.Now, segstore.OSFS{}, func(c *election.Client) Coordinator {
		coord = &heldMetadataCoord{Client: c}
		return coord
	})
	// Released before the manager's stop, which waits for its loop.
	t.Cleanup(coord.release)
	waitFor(t, func() bool {
		r := m.Get(topic, 0)
		return r != nil && slices.Equal(r.CurrentView().ISR, []string{"n2"})
	}, "n1's replica handed the state without it")

	coord.hold()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, done, err := n2.StartReassign(ctx, topic, 0, []string{"n1", "n2", "n4"}); err != nil || done {
		t.Fatalf("start the move to [n1 n2 n4]: done %v, %v", done, err)
	}
	// As an earlier leader would have left it: n4 caught up and joined.
	writeConsulState(t, srv, topic, func(st *election.PartitionState) { st.ISR = []string{"n1", "n2", "n4"} })

	r := waitLeading(t, m, topic)
	if isr := r.CurrentView().ISR; !slices.Equal(isr, []string{"n1", "n2", "n4"}) {
		t.Fatalf("n1 leads with ISR %v, want [n1 n2 n4]: the election was decided on replicas [n1 n2 n4]", isr)
	}
}
