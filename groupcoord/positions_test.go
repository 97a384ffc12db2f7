package groupcoord

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/group"
)

// remoteHost is a fakeHost whose partitions are led elsewhere: each
// Positions is a round trip of delay. It notes the most calls in flight.
type remoteHost struct {
	*fakeHost
	delay time.Duration

	mu                    sync.Mutex
	inFlight, peak, calls int
	// afterCall, if set, runs after each call is counted.
	afterCall func(calls int)
	// noLeader, if set, is the partition whose positions cannot be had.
	noLeader *int32
}

func (h *remoteHost) Positions(ctx context.Context, tp group.TopicPartition) (int64, int64, error) {
	h.mu.Lock()
	h.inFlight++
	h.calls++
	h.peak = max(h.peak, h.inFlight)
	calls, after := h.calls, h.afterCall
	h.mu.Unlock()
	if after != nil {
		after(calls)
	}
	time.Sleep(h.delay)
	h.mu.Lock()
	h.inFlight--
	h.mu.Unlock()
	if h.noLeader != nil && tp.Partition == *h.noLeader {
		return 0, 0, fmt.Errorf("%v has no leader", tp)
	}
	_, hw, err := h.fakeHost.Positions(ctx, tp)
	return int64(tp.Partition), hw, err
}

// newRemoteHost has topic "big" of n partitions, partition p's log from p
// to its high watermark 10p + 5.
func newRemoteHost(n int, delay time.Duration) *remoteHost {
	h := &remoteHost{fakeHost: newFakeHost(), delay: delay}
	h.topics["big"] = int32(n)
	for p := range int32(n) {
		h.hw[group.TopicPartition{Topic: "big", Partition: p}] = int64(10*p + 5)
	}
	return h
}

// TestPositionsAskedConcurrently: a describe and a reset ask the leaders
// of a group's partitions for their positions several at a time, never
// more than positionsConcurrency, each answer in its partition's place.
// One after another, a group of 10,000 partitions led by other agents
// took 10 s at a millisecond a round trip, the CLI's whole -timeout.
func TestPositionsAskedConcurrently(t *testing.T) {
	const n = 200
	ctx := context.Background()
	h := newRemoteHost(n, 2*time.Millisecond)
	c := newTestCoordinator(t, h, newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)})
	r, err := c.Reset(ctx, "g", ResetRequest{Topic: "big", To: "7"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Offsets) != n {
		t.Fatalf("reset committed %d offsets, want %d", len(r.Offsets), n)
	}
	for _, o := range r.Offsets {
		// 7 clamped into [p, 10p+5].
		if want := min(max(7, int64(o.Partition)), int64(10*o.Partition+5)); o.Offset != want {
			t.Fatalf("reset big/%d to %d, want %d", o.Partition, o.Offset, want)
		}
	}
	d, err := c.Describe(ctx, "g", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Partitions) != n {
		t.Fatalf("describe lists %d partitions, want %d", len(d.Partitions), n)
	}
	for i, pd := range d.Partitions {
		if pd.Partition != int32(i) || pd.HighWatermark != int64(10*i+5) || pd.Lag != pd.HighWatermark-pd.Committed {
			t.Fatalf("partition %d described as %+v", i, pd)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.peak < 2 || h.peak > positionsConcurrency {
		t.Errorf("at most %d positions asked at once, want 2 to %d", h.peak, positionsConcurrency)
	}
}

// TestPositionsNotAskedOnceTheCallerGaveUp: a reset whose caller gives up
// part way asks no more leaders (their client calls do not watch the
// context, so each would run to its own timeout), and fails.
func TestPositionsNotAskedOnceTheCallerGaveUp(t *testing.T) {
	const n, giveUpAfter = 2000, 10
	h := newRemoteHost(n, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.afterCall = func(calls int) {
		if calls == giveUpAfter {
			cancel()
		}
	}
	c := newTestCoordinator(t, h, newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)})
	if _, err := c.Reset(ctx, "g", ResetRequest{Topic: "big", To: "earliest"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("reset given up on = %v, want ErrUnavailable", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.calls > giveUpAfter+positionsConcurrency {
		t.Errorf("%d leaders asked after the caller gave up at the %dth, want at most %d in flight then", h.calls, giveUpAfter, positionsConcurrency)
	}
}

// TestResetStopsAskingAtTheFirstFailure: a reset fails on a partition
// whose positions cannot be had, as it did when it asked one after
// another, without asking the leaders of the rest first (each could take
// a leader's call timeout), and names that partition, not one it did not
// ask.
func TestResetStopsAskingAtTheFirstFailure(t *testing.T) {
	const n = 2000
	h := newRemoteHost(n, time.Millisecond)
	failing := int32(40)
	h.noLeader = &failing
	c := newTestCoordinator(t, h, newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)})
	_, err := c.Reset(context.Background(), "g", ResetRequest{Topic: "big", To: "earliest"})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "big/40 has no leader") {
		t.Fatalf("reset with big/40 leaderless = %v, want ErrUnavailable naming big/40", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	// Each worker may have taken one more partition, and another after
	// it, while the failing call returned.
	if bound := int(failing) + 1 + 2*positionsConcurrency; h.calls > bound {
		t.Errorf("%d leaders asked, want at most %d: those in flight at the failure, no more", h.calls, bound)
	}
}

// BenchmarkDescribeRemotePartitions: the describe of a group over 1,000
// partitions whose leaders are a 1 ms round trip away.
func BenchmarkDescribeRemotePartitions(b *testing.B) {
	for _, n := range []int{1000} {
		b.Run(fmt.Sprintf("partitions=%d", n), func(b *testing.B) {
			h := newRemoteHost(n, time.Millisecond)
			c := newTestCoordinator(b, h, newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)})
			ctx := context.Background()
			if _, err := c.Reset(ctx, "g", ResetRequest{Topic: "big", To: "earliest"}); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := c.Describe(ctx, "g", "n1"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
