package client

import (
	"slices"
	"testing"
)

// TestGroupLatestStartKeptOnRevocation: with WithResetPolicy
// (OffsetLatest), a member resolves where a partition starts (the high
// watermark, 10 here) when it gets it, but records that position nowhere
// until its Poll takes a first answer. When the partition is revoked
// before that (the member's application is busy with the records of its
// other partitions, or the revocation comes during the first long poll),
// the revocation commits nothing, and the next owner resolves "latest"
// again, later: the records appended in between (10-14) are delivered to
// no member of the group. A Kafka consumer commits the position it reset
// to, so the next owner starts at 10.
func TestGroupLatestStartKeptOnRevocation(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 2)
	fill(t, f, 2, 0, 10) // high watermark 10 on both partitions
	latestRevocation(t, f, "member-1 resolved latest on both partitions", "reset", "latest")
}

// TestGroupLatestResetKeptOnRevocation: the same with a committed
// offset that retention left behind (2, the log starting at 5): the member
// resets to the high watermark (10) but keeps 2 as its position until Poll
// takes an answer, so a revocation before that commits nothing and the
// next owner resets again, past the records appended in between.
func TestGroupLatestResetKeptOnRevocation(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 2)
	fill(t, f, 2, 0, 10)
	f.mu.Lock()
	g := f.groupLocked("g", true)
	for p := range 2 {
		g.committed[TopicPartition{"t", p}] = 2
		f.topics["t"].partitions[p].logStartOffset = 5
	}
	f.mu.Unlock()
	latestRevocation(t, f, "member-1 reset both partitions", "offset", "10")
}

// latestRevocation runs the scenario of the two tests above on f (two
// partitions at high watermark 10): member 1 starts at 10 (it has sent
// two fetches whose query has param=value), records 10-14 arrive and are
// fetched but not polled, member 2 joins and gets one partition, records
// 15-19 arrive; member 2 must read that partition from 10.
func latestRevocation(t *testing.T, f *fakeAgent, started, param, value string) {
	t.Helper()
	c := f.newClient()
	gcA := mustGroupConsumer(t, c, WithAutoCommitInterval(0), WithResetPolicy(OffsetLatest))
	eventually(t, started, func() bool {
		n := 0
		for _, q := range f.fetchQueries() {
			if q.Get(param) == value {
				n++
			}
		}
		return n >= 2
	})
	// Appended after member-1 started at 10: the group must deliver them.
	fill(t, f, 2, 10, 15)
	eventually(t, "member-1 fetched the new records", func() bool {
		st := gcA.Status()
		return len(st) == 2 && st[0].HighWatermark == 15 && st[1].HighWatermark == 15
	})
	gcB := mustGroupConsumer(t, c, WithAutoCommitInterval(0), WithResetPolicy(OffsetLatest))
	colB := collect(t, gcB)
	eventually(t, "member-2 owns a partition", func() bool { return len(gcB.Assigned()) == 1 })
	moved := gcB.Assigned()[0]
	fill(t, f, 2, 15, 20)
	eventually(t, "member-2 read the records after 15", func() bool {
		return slices.Contains(colB.offsets(moved), 19)
	})
	if got := colB.offsets(moved); len(got) == 0 || got[0] != 10 {
		t.Errorf("%s: member-2 read %v, want 10-19: records 10-14, appended after the group started at 10, were delivered to no member", moved, got)
	}
}
