package groupcoord

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/group"
)

// hookHost is a fakeHost that calls a test's hooks: positions inside
// Positions, appended after each AppendOffsets that appended (call counts
// them from 0; an error it returns fails the append, outcome unknown).
type hookHost struct {
	*fakeHost
	hmu       sync.Mutex
	positions func()
	appended  func(call int) error
	calls     int
}

func (h *hookHost) hook(positions func(), appended func(call int) error) {
	h.hmu.Lock()
	defer h.hmu.Unlock()
	h.positions, h.appended = positions, appended
}

func (h *hookHost) Positions(ctx context.Context, tp group.TopicPartition) (int64, int64, error) {
	h.hmu.Lock()
	hook := h.positions
	h.hmu.Unlock()
	if hook != nil {
		hook()
	}
	return h.fakeHost.Positions(ctx, tp)
}

func (h *hookHost) AppendOffsets(ctx context.Context, p int, epoch int32, batch []byte, count int) (int64, error) {
	base, err := h.fakeHost.AppendOffsets(ctx, p, epoch, batch, count)
	h.hmu.Lock()
	hook, call := h.appended, h.calls
	h.calls++
	h.hmu.Unlock()
	if err == nil && hook != nil {
		err = hook(call)
	}
	return base, err
}

// TestDroppedShardAnswersNotCoordinator: a shard that was dropped (its
// leadership lost, or an append failed) refuses a commit the same way
// wherever the commit finds it so: as it is queued, as the flusher takes
// it, and once its own append returned. The three are one condition and
// one error, ErrNotCoordinator (the last two were wrapped in
// ErrUnavailable with %v, which lost it).
func TestDroppedShardAnswersNotCoordinator(t *testing.T) {
	ctx := context.Background()
	tp := group.TopicPartition{Topic: "t", Partition: 0}
	simple := func(offset int64) ClassicCommitRequest {
		return ClassicCommitRequest{Generation: -1, Offsets: []OffsetCommit{{Topic: tp.Topic, Partition: tp.Partition, Offset: offset}}}
	}
	tests := []struct {
		name string
		// arm sets the hooks that drop the shard under the commit it
		// returns the error of.
		arm func(t *testing.T, h *hookHost, c *Coordinator, leadershipLost func()) error
	}{
		{"queued on a dropped shard", func(t *testing.T, h *hookHost, c *Coordinator, leadershipLost func()) error {
			// The commit asks the partition's high watermark without the
			// lock; leadership is lost meanwhile.
			h.hook(leadershipLost, nil)
			return c.ClassicCommit(ctx, "g", simple(5))
		}},
		{"flushed after an append failure dropped the shard", func(t *testing.T, h *hookHost, c *Coordinator, _ func()) error {
			behind := make(chan error, 1)
			h.hook(nil, func(call int) error {
				if call != 0 {
					return nil
				}
				// While the first commit's append is in flight, a second
				// queues behind it; then the first append fails.
				go func() { behind <- c.ClassicCommit(ctx, "g", simple(6)) }()
				p := PartitionFor("g", 3)
				for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
					c.mu.Lock()
					s := c.shards[p]
					c.mu.Unlock()
					s.mu.Lock()
					queued := len(s.pending)
					s.mu.Unlock()
					if queued == 1 {
						break
					}
					if time.Now().After(deadline) {
						t.Error("the second commit never queued")
						break
					}
				}
				return errors.New("ack timeout")
			})
			if err := c.ClassicCommit(ctx, "g", simple(5)); !IsRetriable(err) {
				t.Fatalf("the commit whose append failed: %v, want retriable", err)
			}
			return <-behind
		}},
		{"dropped during its append", func(t *testing.T, h *hookHost, c *Coordinator, leadershipLost func()) error {
			h.hook(nil, func(int) error {
				leadershipLost()
				return nil
			})
			return c.ClassicCommit(ctx, "g", simple(5))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fh, st, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
			fh.hw[tp] = 100
			h := &hookHost{fakeHost: fh}
			c := newTestCoordinator(t, h, st, clock)
			leadershipLost := func() {
				fh.mu.Lock()
				fh.epoch++
				fh.mu.Unlock()
				c.tick()
			}
			err := tt.arm(t, h, c, leadershipLost)
			if !errors.Is(err, ErrNotCoordinator) || !IsRetriable(err) || !strings.Contains(err.Error(), "changed hands") {
				t.Fatalf("commit refused by a dropped shard: %v, want ErrNotCoordinator (retriable)", err)
			}
		})
	}
}
