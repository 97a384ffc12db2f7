package partition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/internal/consultest"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"
)

// unknownThenDeniedCoord is the election client but for the ISR
// proposals adding a follower once armed: the first commits in Consul and
// answers as a timeout would (its outcome unknown to the leader), the
// retry waits for release and is refused before writing, as it is once
// the agent's ACL token has been revoked.
type unknownThenDeniedCoord struct {
	*election.Client
	added    string
	armed    atomic.Bool
	tries    atomic.Int32
	retrying chan struct{} // closed when the retry arrives
	release  chan struct{} // closed by the test to answer the retry
	once     sync.Once
}

func (c *unknownThenDeniedCoord) ProposeISR(ctx context.Context, topic string, partition int, epoch int32, isr []string, elr []election.EligibleReplica) error {
	if !c.armed.Load() || !slices.Contains(isr, c.added) {
		return c.Client.ProposeISR(ctx, topic, partition, epoch, isr, elr)
	}
	if c.tries.Add(1) == 1 {
		if err := c.Client.ProposeISR(ctx, topic, partition, epoch, isr, elr); err != nil {
			return err
		}
		return fmt.Errorf("isr change of %s/%d: answer lost: %w", topic, partition, context.DeadlineExceeded)
	}
	c.once.Do(func() { close(c.retrying) })
	select {
	case <-c.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return fmt.Errorf("write the state of %s/%d: %w", topic, partition, election.ErrPermissionDenied)
}

// offsetClock is the wall clock moved on by hand: a test skips a
// follower's lag_time_max without waiting for it.
type offsetClock struct{ offset atomic.Int64 }

func (c *offsetClock) now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

func (c *offsetClock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// TestRefusedRetryAfterUnknownISROutcomeStepsDown: a leader proposes adding
// a follower back to the ISR; the transaction commits in Consul, but its
// answer is lost (a timeout), so the leader retries the same proposal with
// it still in flight, the follower counted for the HW. The retry is refused
// before writing (permission denied). The leader took the refusal as "not
// committed", ended the proposal and let the HW move on without the
// follower, acknowledging an acks=all write the follower lacks while
// Consul's ISR, which elections pick from, holds it. It must step down
// instead: the write fails as not leader.
func TestRefusedRetryAfterUnknownISROutcomeStepsDown(t *testing.T) {
	srv := consultest.Start(t)
	startElectionOnly(t, srv, "n2")
	startElectionOnly(t, srv, "n3")
	clock := &offsetClock{}
	coord := &unknownThenDeniedCoord{added: "n3", retrying: make(chan struct{}), release: make(chan struct{})}
	m, client := startManagerCoord(t, srv, "n1", "", clock.now, segstore.OSFS{}, func(c *election.Client) Coordinator {
		coord.Client = c
		return coord
	})
	defer func() {
		select {
		case <-coord.release:
		default:
			close(coord.release)
		}
	}()
	const topic = "isrunk"
	createTopic(t, client, topic, [][]string{{"n1", "n2", "n3"}}, 2)
	r := waitLeading(t, m, topic)
	epoch := r.CurrentView().Epoch
	follow(t, r, "n2", 0, epoch)
	follow(t, r, "n3", 0, epoch)

	// n3 falls behind by a record for longer than lag_time_max and leaves
	// the ISR.
	if out := r.Produce(testBatch(t, []string{"a"}), replicate.AcksLeader, AnyEpoch, clock.now().Add(5*time.Second), 6*time.Second); out.Err != nil {
		t.Fatalf("first write: %v", out.Err)
	}
	follow(t, r, "n2", 1, epoch)
	clock.advance(r.deps.Config.Replication.LagTimeMax + time.Second)
	follow(t, r, "n2", 1, epoch)
	waitFor(t, func() bool { return slices.Equal(r.CurrentView().ISR, []string{"n1", "n2"}) }, "n3 to leave the ISR")
	waitFor(t, func() bool { return r.CurrentLog().HighWatermark() == 1 }, "the HW to pass the first write without n3")

	// n3 catches up: its addition commits, the answer is lost, the retry
	// waits.
	coord.armed.Store(true)
	follow(t, r, "n3", 1, epoch)
	select {
	case <-coord.retrying:
	case <-time.After(10 * time.Second):
		t.Fatal("the leader did not retry the addition of n3")
	}
	pair, _, err := srv.Client().KV().Get("logagent/topics/"+topic+"/0/state", nil)
	if err != nil || pair == nil {
		t.Fatalf("read the state: %v, %v", pair, err)
	}
	var st election.PartitionState
	if err := json.Unmarshal(pair.Value, &st); err != nil {
		t.Fatal(err)
	}
	if st.Epoch != epoch || !slices.Contains(st.ISR, "n3") {
		t.Fatalf("Consul's state %+v; want n3 in the ISR at epoch %d", st, epoch)
	}

	// An acks=all write that n2 fetches and n3 does not: the HW waits for
	// n3 while its addition is in flight.
	acked := make(chan ProduceOutcome, 1)
	go func() {
		acked <- r.Produce(testBatch(t, []string{"b"}), replicate.AcksAll, AnyEpoch, clock.now().Add(5*time.Second), 6*time.Second)
	}()
	waitFor(t, func() bool { return r.CurrentLog().LogEndOffset() == 2 }, "the write appended")
	follow(t, r, "n2", 2, epoch)

	close(coord.release)
	out := <-acked
	if !errors.Is(out.Err, replicate.ErrNotLeader) {
		t.Fatalf("acks=all write answered %v (HW %d) while Consul's ISR %v holds n3, at log end 1; want not leader: a refusal after an unknown outcome must not end the addition as uncommitted",
			out.Err, r.CurrentLog().HighWatermark(), st.ISR)
	}
	waitFor(t, func() bool {
		v := r.CurrentView()
		return v.Role != RoleLeader || v.Epoch != epoch
	}, "n1 to stop leading at the epoch whose ISR it cannot know")
}
