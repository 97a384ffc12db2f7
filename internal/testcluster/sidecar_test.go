package testcluster

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestSidecarForwardsAndProxies: every agent's sidecar accepts produces for
// every partition, forwarding those it does not lead, and serves fetches
// for every partition, proxying those it holds no in-sync replica of. Each
// partition ends with every record once, in the order the produces were
// acknowledged, whichever agent took them.
func TestSidecarForwardsAndProxies(t *testing.T) {
	const topic, partitions, perRequest = "sidecar", 3, 3
	c := Start(t, Options{})
	if err := c.Agents[0].CreateTopic(TopicSpec{Name: topic, Partitions: partitions, ReplicationFactor: 2, MinInsyncReplicas: 1}); err != nil {
		t.Fatal(err)
	}
	for p := range partitions {
		leader, _ := c.WaitLeader(topic, p, 20*time.Second)
		desc, err := leader.DescribePartition(topic, p)
		if err != nil {
			t.Fatal(err)
		}
		c.WaitISR(topic, p, desc.Replicas, 20*time.Second)
	}

	want := make([][][]byte, partitions)
	for round := range 2 {
		for _, a := range c.Agents {
			for p := range partitions {
				values := make([][]byte, perRequest)
				for i := range values {
					values[i] = fmt.Appendf(nil, "%s-r%d-p%d-%d", a.NodeID, round, p, i)
				}
				got, err := a.Produce(topic, p, ContentTypeNDJSON, append(bytes.Join(values, []byte("\n")), '\n'), "all", 5*time.Second)
				if err != nil {
					t.Fatalf("produce to %s/%d through %s: %v", topic, p, a.NodeID, err)
				}
				next := int64(len(want[p]))
				if got.BaseOffset == nil || *got.BaseOffset != next || *got.LastOffset != next+perRequest-1 || got.Count != perRequest {
					t.Fatalf("produce to %s/%d through %s: %+v, want base %d", topic, p, a.NodeID, got, next)
				}
				want[p] = append(want[p], values...)
			}
		}
	}

	for _, a := range c.Agents {
		for p := range partitions {
			records, _ := fetchAll(t, a, topic, p, int64(len(want[p])))
			for off, v := range want[p] {
				if !slices.Equal(records[int64(off)], v) {
					t.Fatalf("%s/%d through %s: offset %d is %q, want %q", topic, p, a.NodeID, off, records[int64(off)], v)
				}
			}
			if len(records) != len(want[p]) {
				t.Fatalf("%s/%d through %s: %d records, want %d", topic, p, a.NodeID, len(records), len(want[p]))
			}
		}
	}

	// A long poll through an agent without a replica is held by the
	// leader and streams back once a record arrives.
	for p := range partitions {
		desc, err := c.Agents[0].DescribePartition(topic, p)
		if err != nil {
			t.Fatal(err)
		}
		var outsider *Agent
		for _, a := range c.Agents {
			if !slices.Contains(desc.Replicas, a.NodeID) {
				outsider = a
			}
		}
		end := int64(len(want[p]))
		got := make(chan Fetched, 1)
		start := time.Now()
		go func() {
			f, err := outsider.Fetch(topic, p, end, 1<<20, 10*time.Second)
			if err != nil {
				t.Errorf("held fetch through %s: %v", outsider.NodeID, err)
			}
			got <- f
		}()
		time.Sleep(300 * time.Millisecond)
		if _, err := c.Agents[0].Produce(topic, p, ContentTypeNDJSON, []byte("late"), "all", 5*time.Second); err != nil {
			t.Fatal(err)
		}
		f := <-got
		if v := decodeRecords(t, f.Batches)[end]; string(v) != "late" || time.Since(start) > 5*time.Second {
			t.Fatalf("held fetch of %s/%d through %s (no replica): offset %d is %q after %s", topic, p, outsider.NodeID, end, v, time.Since(start))
		}
	}
}

// TestSidecarRetriesAcrossFailover: a produce sent through a sidecar right
// after the partition's leader was killed finds the leader's port refused
// (nothing sent, so safe to retry), retries until the new leader answers,
// and succeeds within its timeout at the offset after the records
// acknowledged before. A sidecar that had a pooled connection to the old
// leader cannot know whether its request was read before the connection
// died: it either succeeds or answers 504 ack_timeout, never retrying.
func TestSidecarRetriesAcrossFailover(t *testing.T) {
	const topic = "failover"
	c := Start(t, Options{})
	leader, fresh := startOneLeaderTopic(t, c, topic)
	var pooled *Agent
	for _, a := range c.Agents {
		if a != leader && a != fresh {
			pooled = a
		}
	}
	// Only pooled forwards before the kill; fresh's forwarder never
	// connected to the leader.
	before, err := pooled.Produce(topic, 0, ContentTypeNDJSON, []byte("a\nb\n"), "all", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	leader.Kill()
	start := time.Now()
	got, err := fresh.Produce(topic, 0, ContentTypeNDJSON, []byte("c\n"), "all", 20*time.Second)
	if err != nil {
		t.Fatalf("produce through %s after killing leader %s: %v", fresh.NodeID, leader.NodeID, err)
	}
	t.Logf("answered after %s, across the failover", time.Since(start).Round(time.Millisecond))
	if *got.BaseOffset != *before.LastOffset+1 || *got.Epoch <= *before.Epoch {
		t.Fatalf("after failover: %+v, before: %+v", got, before)
	}

	_, err = pooled.Produce(topic, 0, ContentTypeNDJSON, []byte("d\n"), "all", 20*time.Second)
	var apiErr *APIError
	switch {
	case err == nil:
		t.Logf("%s's pooled connection to the old leader was not used or was seen closed", pooled.NodeID)
	case asAPIError(err, &apiErr) && apiErr.Status == 504 && apiErr.Code == "ack_timeout":
		t.Logf("%s answered %v", pooled.NodeID, err)
	default:
		t.Fatalf("produce through %s with a connection pooled to the dead leader: %v, want success or 504 ack_timeout", pooled.NodeID, err)
	}
}
