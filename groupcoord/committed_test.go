package groupcoord

import (
	"cmp"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/logagent/logagent/group"
)

// TestCommittedOffsetsOfServedGroups: CommittedOffsets lists what the
// groups of loaded shards committed, and nothing once the agent no longer
// leads their offsets partition.
func TestCommittedOffsetsOfServedGroups(t *testing.T) {
	ctx := context.Background()
	h, s, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	for p := range int32(4) {
		h.hw[group.TopicPartition{Topic: "t", Partition: p}] = 100
	}
	c := newTestCoordinator(t, h, s, clock)
	if got := c.CommittedOffsets(); len(got) != 0 {
		t.Fatalf("committed offsets before any group: %v", got)
	}
	for _, g := range []string{"g", "h"} {
		j, err := c.Join(ctx, g, JoinRequest{Topics: []string{"t"}, MemberID: "a"})
		if err != nil {
			t.Fatal(err)
		}
		offsets := []OffsetCommit{{Topic: "t", Partition: 0, Offset: 7}, {Topic: "t", Partition: 2, Offset: 30}}
		if g == "h" {
			offsets = offsets[:1]
			offsets[0].Offset = 99
		}
		if _, err := c.Commit(ctx, g, CommitRequest{MemberID: "a", MemberEpoch: j.MemberEpoch, Offsets: offsets}); err != nil {
			t.Fatal(err)
		}
	}
	got := c.CommittedOffsets()
	slices.SortFunc(got, func(x, y CommittedOffset) int {
		return cmp.Or(cmp.Compare(x.Group, y.Group), cmp.Compare(x.Partition, y.Partition))
	})
	want := []CommittedOffset{
		{Group: "g", TopicPartition: group.TopicPartition{Topic: "t", Partition: 0}, Offset: 7},
		{Group: "g", TopicPartition: group.TopicPartition{Topic: "t", Partition: 2}, Offset: 30},
		{Group: "h", TopicPartition: group.TopicPartition{Topic: "t", Partition: 0}, Offset: 99},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("committed offsets %v, want %v", got, want)
	}
	// Another agent leads the offsets partitions now (a newer epoch): this
	// one coordinates nothing, even before its tick drops the shards.
	h.mu.Lock()
	h.epoch++
	h.mu.Unlock()
	if got := c.CommittedOffsets(); len(got) != 0 {
		t.Fatalf("committed offsets after the lead moved: %v", got)
	}
}
