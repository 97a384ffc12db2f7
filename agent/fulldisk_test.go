package agent

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/segstore"

	"github.com/logagent/logagent/wire"
)

// TestFullDiskLosesNothing runs three in-process agents whose partitions
// use a FaultFS. An fsync that fails with ENOSPC on the leader makes it
// step down and recover (cut to its last good fsync, refetch, back off);
// then every disk fills up: writes are refused with 507
// insufficient_storage, every acknowledged record stays readable on every
// replica, and no election happens; once space is back, writes resume
// without a restart. The agents run on the real clock (their tickers and
// timers are not injectable), so the test takes about half a minute.
// Leaderships do not move back to preferred replicas here: "no election"
// is what the full disk must not cause.
func TestFullDiskLosesNothing(t *testing.T) {
	c := newTestCluster(t, 3, "replication { auto_leader_rebalance = false }", nil)
	faults := map[*testAgent]*segstore.FaultFS{}
	for _, ta := range c.agents {
		faults[ta] = ta.useFaultFS()
	}
	for _, ta := range c.agents {
		ta.start()
	}
	const topic = "full"
	c.createTopic(c.agents[0], topic, 1, 3, 2)
	leader, pd := c.waitLeader(topic, 0, 3)
	firstEpoch := pd.Epoch

	acked := map[int64]string{}
	produce := func(via *testAgent, value string) (int, reply.APIError) {
		t.Helper()
		status, body := via.produce(topic, 0, "acks=all", wire.ContentTypeNDJSON, []byte(value))
		if status != 200 {
			return status, errorCode(t, body)
		}
		var r produceResponse
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		acked[*r.BaseOffset] = value
		return status, reply.APIError{}
	}
	n := 0
	for range 20 {
		if status, e := produce(leader, fmt.Sprintf("v%d", n)); status != 200 {
			t.Fatalf("produce before any fault: %d %+v", status, e)
		}
		n++
	}

	// The leader's next fsync fails with ENOSPC.
	faults[leader].Inject(segstore.Fault{Op: segstore.OpSync, Path: filepath.Join(topic+"-0", "00000000000000000000.log"), Err: syscall.ENOSPC})
	// The leader must not acknowledge it. Its sidecar resends it (with its
	// own producer id) to the next leader, which may acknowledge it once it
	// holds it durably (answering with the epoch of the copy it got from
	// the old leader, if it has one): then it counts as acknowledged like
	// any other.
	status, body := leader.produce(topic, 0, "acks=all", wire.ContentTypeNDJSON, []byte(fmt.Sprintf("v%d", n)))
	if status == 200 {
		var r produceResponse
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		if !c.logs.contains("resending an idempotent batch after an unknown outcome") {
			t.Fatalf("the leader whose fsync failed acknowledged the write (epoch %d) without a resend to another leader", *r.Epoch)
		}
		acked[*r.BaseOffset] = fmt.Sprintf("v%d", n)
		t.Logf("the write whose fsync failed: resent by the sidecar, acknowledged (appended at epoch %d, first epoch %d)", *r.Epoch, firstEpoch)
	} else {
		t.Logf("the write whose fsync failed: %d %s", status, errorCode(t, body).Code)
	}
	n++
	newLeader, _ := c.waitLeader(topic, 0, -1)
	if newLeader == leader {
		t.Fatalf("%s still leads after its fsync failed", leader.nodeID)
	}
	for range 5 {
		if status, e := produce(newLeader, fmt.Sprintf("v%d", n)); status != 200 {
			t.Fatalf("produce to the new leader: %d %+v", status, e)
		}
		n++
	}
	end := slices.Max(slices.Collect(maps.Keys(acked))) + 1
	// The old leader reopens its log (after reopenBackoff), refetches what
	// it cut and is back in the ISR.
	c.waitCaughtUp(topic, 0, end)
	checkAcked(t, c, topic, acked)

	// Every disk is full now.
	for _, fsys := range faults {
		fsys.Inject(segstore.Fault{Op: segstore.OpWrite, Err: syscall.ENOSPC, Partial: true, Sticky: true})
		fsys.Inject(segstore.Fault{Op: segstore.OpCreate, Err: syscall.ENOSPC, Sticky: true})
	}
	fullEpoch := newLeader.describe(topic).Partitions[0].Epoch
	fullSince := time.Now()
	for time.Since(fullSince) < 2*partition.CheckpointInterval {
		for _, via := range c.agents {
			status, e := produce(via, fmt.Sprintf("v%d", n))
			if status != 507 || e.Code != wire.CodeInsufficientStorage || !e.Retriable {
				t.Fatalf("produce through %s to a full disk: %d %+v, want a retriable 507 %s", via.nodeID, status, e, wire.CodeInsufficientStorage)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	checkAcked(t, c, topic, acked)
	d := newLeader.describe(topic).Partitions[0]
	if d.Epoch != fullEpoch || d.Leader != newLeader.nodeID || len(d.ISR) != 3 {
		t.Fatalf("while the disks were full: %+v, want %s leading epoch %d with all in sync", d, newLeader.nodeID, fullEpoch)
	}

	// Space comes back: writes resume without a restart.
	for _, fsys := range faults {
		fsys.Clear()
	}
	for range 5 {
		if status, e := produce(c.agents[n%3], fmt.Sprintf("v%d", n)); status != 200 {
			t.Fatalf("produce once space is back: %d %+v", status, e)
		}
		n++
	}
	end = slices.Max(slices.Collect(maps.Keys(acked))) + 1
	c.waitCaughtUp(topic, 0, end)
	checkAcked(t, c, topic, acked)
	if last := newLeader.describe(topic).Partitions[0].Epoch; last-firstEpoch > 2 {
		t.Fatalf("epoch went from %d to %d: more elections than the one failover", firstEpoch, last)
	}
}

// checkAcked checks that every agent serves every acknowledged record, both
// through the API and from its own log below its high watermark.
func checkAcked(t *testing.T, c *testCluster, topic string, acked map[int64]string) {
	t.Helper()
	for _, ta := range c.agents {
		got := ta.fetchValues(topic, 0, 0)
		for off, v := range acked {
			if got[off] != v {
				t.Fatalf("%s serves %q at %d, want the acknowledged %q", ta.nodeID, got[off], off, v)
			}
		}
		log := ta.agent.replicas.Get(topic, 0).CurrentLog()
		hw := log.HighWatermark()
		local := readValues(t, 0, func(offset int64) []byte {
			b, err := log.ReadBytes(offset, 64<<20, hw)
			if err != nil {
				t.Fatalf("%s: read its log at %d: %v", ta.nodeID, offset, err)
			}
			return b
		})
		for off, v := range acked {
			if local[off] != v {
				t.Fatalf("%s holds %q at %d below its high watermark %d, want the acknowledged %q", ta.nodeID, local[off], off, hw, v)
			}
		}
	}
}
