package groupcoord

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/logagent/logagent/group"
)

// TestCommitWaitsForATrailingHighWatermark: a commit above the high
// watermark the partition's leader reports waits for it to catch up
// before it is refused. A new leader's high watermark trails its
// predecessor's for a moment (docs/design.md §7), so a member that read up
// to the old leader's got 400 offset_beyond_high_watermark, not retriable,
// for an offset it had legitimately reached: the Go client's revocation
// then gave the partition up uncommitted, and its periodic commit failed
// Poll. An offset the high watermark does not reach in time is still
// refused (TestCommitSurvivesFailover).
func TestCommitWaitsForATrailingHighWatermark(t *testing.T) {
	ctx := context.Background()
	fh, st, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	tp := group.TopicPartition{Topic: "t", Partition: 1}
	fh.hw[tp] = 40
	h := &hookHost{fakeHost: fh}
	asked := 0
	h.hook(func() {
		// The new leader's followers fetch: its high watermark reaches
		// its predecessor's after the first look.
		asked++
		if asked == 2 {
			fh.mu.Lock()
			fh.hw[tp] = 50
			fh.mu.Unlock()
		}
	}, nil)
	c := newTestCoordinatorWith(t, h, st, clock, func(cfg *Config) { cfg.HighWatermarkWait = time.Minute })
	j, err := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Commit(ctx, "g", CommitRequest{MemberID: "a", MemberEpoch: j.MemberEpoch,
		Offsets: []OffsetCommit{{Topic: "t", Partition: 1, Offset: 50}}})
	if err != nil {
		t.Fatalf("commit at the predecessor's high watermark: %v (ErrOffsetBeyondHighWatermark: %v), want it committed once the HW caught up",
			err, errors.Is(err, group.ErrOffsetBeyondHighWatermark))
	}
	o, err := c.Offsets(ctx, "g", "t")
	if err != nil || len(o.Offsets) != 1 || o.Offsets[0].Offset != 50 {
		t.Fatalf("offsets = %+v, %v; want t/1 at 50", o, err)
	}
}
