package replicate

import (
	"slices"
	"testing"
	"time"
)

// The two failures that made Kafka replace high-watermark truncation with
// leader epochs (KIP-101), replayed through Leader and Follower. Each test
// first shows what truncating to the local HW would have done to the same
// log, then that the epoch protocol keeps the logs right.

// reconcile steps follower id until it sends a fetch the leader does not
// answer with a diverging epoch, and returns
// the offsets it truncated to.
func reconcile(t *testing.T, c *cluster, id string) []int64 {
	t.Helper()
	n := c.nodes[id]
	var truncations []int64
	for range 10 {
		rd := n.follower.Ready()
		switch {
		case rd.Fetch != nil:
			res, err := c.leader().leader.Fetch(*rd.Fetch, c.now)
			if err != nil {
				t.Fatal(err)
			}
			if res.Diverging == nil {
				if err := n.follower.FetchFailed(); err != nil { // hand it back to c.step
					t.Fatal(err)
				}
				return truncations
			}
			if err := n.follower.FetchResponded(res); err != nil {
				t.Fatal(err)
			}
		case rd.Truncate != nil:
			truncations = append(truncations, rd.Truncate.Offset)
			n.log.truncate(rd.Truncate.Offset)
			if err := n.follower.Truncated(n.log.logEnd()); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Fatalf("%s did not finish reconciling", id)
	return nil
}

// TestKIP101NoLossAfterHighWatermarkTruncation: follower B has an acked
// record but not yet the HW that covers it; B restarts, and would have cut
// the record by truncating to its HW; then leader A dies and B leads.
func TestKIP101NoLossAfterHighWatermarkTruncation(t *testing.T) {
	c := newCluster(t, DurabilityFsync, 2, "A", "B")
	a, b := c.nodes["A"], c.nodes["B"]
	c.elect("A")
	c.follow("B")

	m1, _ := c.produce(AcksAll, "m1")
	c.replicate(3, "B")
	if err := c.outcome(m1); err != nil {
		t.Fatalf("m1: %v", err)
	}

	m2, _ := c.produce(AcksAll, "m2")
	c.sync("A")
	c.step("B", true) // B copies and fsyncs m2; its HW stays 1
	// B's next fetch, at 2, moves A's HW to 2 and acknowledges m2; B
	// crashes before it reads the answer.
	rd := b.follower.Ready()
	if rd.Fetch == nil || rd.Fetch.FetchOffset != 2 {
		t.Fatalf("B's output %+v, want a fetch at 2", rd)
	}
	if _, err := a.leader.Fetch(*rd.Fetch, c.now); err != nil {
		t.Fatal(err)
	}
	c.drainLeader()
	if err := c.outcome(m2); err != nil {
		t.Fatalf("m2: %v, want acknowledged", err)
	}
	c.crash("B")
	if b.log.hw != 1 || b.log.logEnd() != 2 {
		t.Fatalf("B restarts with %v, want m2 below a stale HW of 1", b.log)
	}

	// Before KIP-101, B truncated to its HW on restart and lost m2; had it
	// then become leader, the acknowledged m2 would be gone for good.
	hwTruncated := logOf(b.log.records)
	hwTruncated.truncate(b.log.hw)
	if hwTruncated.logEnd() != 1 {
		t.Fatalf("HW truncation kept %v", hwTruncated)
	}

	// Here B's fetch names its latest epoch, 1, which ends in A's log
	// after m2: B truncates nothing and keeps m2.
	c.follow("B")
	if got := reconcile(t, c, "B"); len(got) != 0 {
		t.Fatalf("B truncated to %v, want no truncation", got)
	}
	c.replicate(2, "B")

	c.crash("A")
	c.elect("B")
	if got := b.log.records; len(got) < 2 || got[1] != (memRecord{1, "m2"}) {
		t.Fatalf("new leader B's log %v lacks the acknowledged m2 at offset 1", b.log)
	}

	// A comes back as a follower and keeps everything too.
	c.follow("A")
	if got := reconcile(t, c, "A"); len(got) != 0 {
		t.Fatalf("A truncated to %v, want no truncation", got)
	}
	m3, _ := c.produce(AcksAll, "m3")
	c.replicate(3, "A")
	if err := c.outcome(m3); err != nil {
		t.Fatalf("m3: %v", err)
	}
	want := []memRecord{{1, "m1"}, {1, "m2"}, {2, "m3"}}
	for _, n := range []*testNode{a, b} {
		if !slices.Equal(n.log.records, want) {
			t.Errorf("%s's log %v, want %v", n.id, n.log.records, want)
		}
	}
}

// TestKIP101ConvergenceAfterDoubleCrash: leader A and follower B lose power
// together; A kept m2 (fsynced), B lost its unsynced copy. B comes back
// first, leads, and writes m3 at the same offset. With HW truncation A would
// keep m2 under B's m3 for ever; here A cuts to where epoch 1 ends in B's log
// and refetches.
func TestKIP101ConvergenceAfterDoubleCrash(t *testing.T) {
	tests := []struct {
		durability Durability
		// m2Acked: replicated mode acknowledges m2 once B has it in memory,
		// a write a simultaneous power loss may take (docs/design.md §1); fsync
		// mode waits for B's fsync, which never happens.
		m2Acked bool
		// hwTruncationDiverges: A's HW covers m2, so truncating to it
		// keeps m2 under B's m3.
		hwTruncationDiverges bool
	}{
		{DurabilityReplicated, true, true},
		{DurabilityFsync, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.durability.String(), func(t *testing.T) {
			c := newCluster(t, tt.durability, 1, "A", "B")
			a, b := c.nodes["A"], c.nodes["B"]
			c.elect("A")
			c.follow("B")
			m1, _ := c.produce(AcksAll, "m1")
			c.replicate(3, "B")
			if err := c.outcome(m1); err != nil {
				t.Fatalf("m1: %v", err)
			}

			m2, _ := c.produce(AcksAll, "m2")
			c.sync("A")
			c.step("B", false) // B appends m2 without fsyncing it
			c.step("B", false) // replicated: B's next fetch moves the HW past m2
			if acked := c.outcome(m2) == nil; acked != tt.m2Acked {
				t.Fatalf("m2 acknowledged: %t, want %t (%v)", acked, tt.m2Acked, c.outcome(m2))
			}

			c.crash("A")
			c.crash("B")
			if b.log.logEnd() != 1 || a.log.logEnd() != 2 {
				t.Fatalf("after the power loss A has %v and B %v", a.log, b.log)
			}

			c.elect("B")
			m3, _ := c.produce(AcksAll, "m3")
			c.sync("B")
			c.now = c.now.Add(c.lagTimeMax + time.Millisecond)
			b.leader.Tick(c.now) // A is gone: B shrinks the ISR to itself
			c.drainLeader()
			if err := c.outcome(m3); err != nil {
				t.Fatalf("m3: %v", err)
			}

			hwTruncated := logOf(a.log.records)
			hwTruncated.truncate(a.log.hw)
			diverges := hwTruncated.logEnd() > 1 && hwTruncated.records[1] != b.log.records[1]
			if diverges != tt.hwTruncationDiverges {
				t.Fatalf("HW truncation of A (HW %d) diverges: %t, want %t", a.log.hw, diverges, tt.hwTruncationDiverges)
			}

			c.follow("A")
			if got := reconcile(t, c, "A"); !slices.Equal(got, []int64{1}) {
				t.Fatalf("A truncated to %v, want [1], where epoch 2 starts in B's log", got)
			}
			c.replicate(3, "A")
			want := []memRecord{{1, "m1"}, {2, "m3"}}
			for _, n := range []*testNode{a, b} {
				if !slices.Equal(n.log.records, want) {
					t.Errorf("%s's log %v, want %v", n.id, n.log.records, want)
				}
				if n.log.hw != 2 {
					t.Errorf("%s's HW %d, want 2", n.id, n.log.hw)
				}
			}
			if !slices.Equal(c.isr, []string{"A", "B"}) {
				t.Errorf("ISR %v after A caught up, want [A B]", c.isr)
			}
		})
	}
}
