package agent

import (
	"slices"
	"testing"
	"time"
)

// TestLastReplicaStandingLeads: when the ISR shrank below
// min_insync_replicas the HW froze, so the follower removed by that shrink
// still holds every committed record. With the last ISR member gone it is
// elected (KIP-966's eligible leader replicas) instead of leaving the
// partition offline, and serves every acknowledged record.
func TestLastReplicaStandingLeads(t *testing.T) {
	c := startTestCluster(t, 3, "")
	c.createTopic(c.agents[0], "last", 1, 3, 2)
	leader, pd := c.waitLeader("last", 0, 3)
	leader.mustProduce("last", 0, "a", "b", "c")
	c.waitCaughtUp("last", 0, 3)
	var followers []*testAgent
	for _, ta := range c.agents {
		if ta != leader {
			followers = append(followers, ta)
		}
	}
	first, eligible := followers[0], followers[1]

	// The first follower goes: the ISR stays at min 2, it is not eligible.
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	c.waitFor(10*time.Second, "the ISR without "+first.nodeID, func() bool {
		d := leader.describe("last").Partitions[0]
		return len(d.ISR) == 2 && len(d.ELR) == 0
	})
	// The second goes: ISR [leader] is below min, it is eligible.
	if err := eligible.stop(); err != nil {
		t.Fatal(err)
	}
	c.waitFor(10*time.Second, eligible.nodeID+" in the ELR", func() bool {
		d := leader.describe("last").Partitions[0]
		return slices.Equal(d.ISR, []string{leader.nodeID}) && slices.Equal(d.ELR, []string{eligible.nodeID})
	})
	// The last ISR member goes too; the eligible replica comes back alone.
	if err := leader.stop(); err != nil {
		t.Fatal(err)
	}
	eligible.start()
	c.waitFor(15*time.Second, eligible.nodeID+" leading", func() bool {
		d, err := eligible.tryDescribe("last")
		return err == nil && d.Partitions[0].Role == "leader" && d.Partitions[0].Epoch > pd.Epoch
	})
	c.waitFor(5*time.Second, "ISR ["+eligible.nodeID+"] and no ELR", func() bool {
		d := eligible.describe("last").Partitions[0]
		return slices.Equal(d.ISR, []string{eligible.nodeID}) && len(d.ELR) == 0
	})
	got := eligible.fetchValues("last", 0, 0)
	for i, want := range []string{"a", "b", "c"} {
		if got[int64(i)] != want {
			t.Fatalf("offset %d = %q on the eligible leader, want %q (all: %v)", i, got[int64(i)], want, got)
		}
	}
	// The others rejoin by catching up; with the ISR back at min the ELR
	// stays empty and writes are acknowledged again.
	leader.start()
	first.start()
	c.waitCaughtUp("last", 0, 3)
	if r := eligible.mustProduce("last", 0, "d"); *r.BaseOffset != 3 {
		t.Fatalf("write after recovery at offset %d, want 3", *r.BaseOffset)
	}
}
