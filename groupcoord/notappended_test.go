package groupcoord

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/logagent/logagent/group"
)

// readCountingHost counts the reads of the offsets partitions: rebuilds.
type readCountingHost struct {
	*fakeHost
	reads atomic.Int32
}

func (h *readCountingHost) ReadOffsets(p int, offset int64, maxBytes int) ([]byte, error) {
	h.reads.Add(1)
	return h.fakeHost.ReadOffsets(p, offset, maxBytes)
}

// TestCommitRefusedBeforeAppendKeepsTheShard: an append the offsets
// partition's leader refused before appending (too few in-sync replicas)
// leaves the log as it was, so the shard stays: the commit is refused,
// retriable, and the next request is served without a rebuild. The shard
// was dropped as for an append of unknown outcome, so while the partition
// lacked in-sync replicas every commit (retried by the sidecars every
// 100 ms) rebuilt the shard from the log, holding the lock every shard's
// requests take, heartbeats of every group of the agent included.
func TestCommitRefusedBeforeAppendKeepsTheShard(t *testing.T) {
	ctx := context.Background()
	fh, st, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	tp := group.TopicPartition{Topic: "t", Partition: 1}
	fh.hw[tp] = 100
	h := &readCountingHost{fakeHost: fh}
	c := newTestCoordinator(t, h, st, clock)
	j, err := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	commit := func(offset int64) error {
		_, err := c.Commit(ctx, "g", CommitRequest{MemberID: "a", MemberEpoch: j.MemberEpoch,
			Offsets: []OffsetCommit{{Topic: "t", Partition: 1, Offset: offset}}})
		return err
	}
	if err := commit(10); err != nil {
		t.Fatal(err)
	}
	loads := h.reads.Load()

	fh.mu.Lock()
	fh.failAppend = fmt.Errorf("%w: ISR [a1] is below min insync replicas 2", ErrNotAppended)
	fh.mu.Unlock()
	if err := commit(20); !IsRetriable(err) {
		t.Fatalf("commit refused before its append: %v, want a retriable refusal", err)
	}
	fh.mu.Lock()
	fh.failAppend = nil
	fh.mu.Unlock()
	if err := commit(30); err != nil {
		t.Fatal(err)
	}
	if n := h.reads.Load() - loads; n != 0 {
		t.Errorf("the shard was rebuilt (%d reads of the offsets partition) after an append refused before it appended", n)
	}
	f, err := c.CheckFetch(ctx, "g", FetchRequest{MemberID: "a", MemberEpoch: j.MemberEpoch, Topic: "t", Partition: 1})
	if err != nil || f.Committed != 30 {
		t.Fatalf("committed = %+v, %v; want 30", f, err)
	}
}
