package testcluster

import (
	"bytes"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/testseed"
)

// TestWipedReplicaDoesNotEraseCommittedData is the black-box case of a
// replica whose data directory was removed: every agent killed, one
// follower's data directory wiped, that agent started first and alone, the
// others later. The wiped replica is still in the ISR in Consul, but it
// cannot show it holds what the ISR held: it must not lead, every
// acknowledged record must survive, and it must leave the ISR and rejoin
// only once it has caught up.
func TestWipedReplicaDoesNotEraseCommittedData(t *testing.T) {
	c := Start(t, Options{HCL: "replication { fetch_max_bytes = \"64KiB\" }\nproducer { max_batch_bytes = \"64KiB\" }\n"})
	leader, epoch := createReplicatedTopic(t, c, "wipe")
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 13))
	var acked [][]byte
	for i := 0; i < 30; i++ {
		values := valuesOf(rng, 0, i*10, 10, 4<<10)
		if _, err := leader.Produce("wipe", 0, ContentTypeBatch, buildBatch(t, values), "all", 10*time.Second); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
		acked = append(acked, values...)
	}
	wiped := otherAgent(t, c, leader)
	for _, a := range c.Agents {
		a.Kill()
	}
	if err := os.RemoveAll(wiped.DataDir); err != nil {
		t.Fatal(err)
	}
	wiped.Restart()
	// Alone, with every other session gone (check_ttl), the wiped replica
	// would win the next epoch with an empty log if it were eligible.
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		if p, err := wiped.DescribePartition("wipe", 0); err == nil && p.Role == "leader" {
			t.Fatalf("the wiped replica leads at epoch %d with log end %d", p.Epoch, *p.LogEndOffset)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, a := range c.Agents {
		if a != wiped {
			a.Start()
		}
	}
	for _, a := range c.Agents {
		a.WaitHealthy()
	}
	// Until the wiped replica has caught up, a leader of a newer epoch may
	// list it in the ISR only as inherited from the old state, before it
	// took it out: once out, it may come back only caught up.
	want := int64(len(acked))
	sawOut := false
	c.WaitFor(60*time.Second, "the wiped replica back in the ISR, caught up", func() bool {
		for _, a := range c.Agents {
			p, err := a.DescribePartition("wipe", 0)
			if err != nil || p.Role != "leader" || p.Epoch <= epoch {
				continue
			}
			in := slices.Contains(p.ISR, wiped.NodeID)
			w, err := wiped.DescribePartition("wipe", 0)
			if err != nil || w.LogEndOffset == nil {
				return false
			}
			switch {
			case !in:
				sawOut = true
			case sawOut && *w.LogEndOffset < want:
				t.Fatalf("the wiped replica rejoined the ISR at log end %d of %d", *w.LogEndOffset, want)
			case sawOut:
				return len(p.ISR) == 3
			}
		}
		return false
	})
	// Each agent reads from its own replica once that replica leads or
	// follows with every acknowledged record under its high watermark:
	// the restarted agents may not yet have taken the new leader's epoch
	// when the wiped replica is back in the ISR (a read then answered 503
	// leader_not_available, 40 ms before the agent followed).
	c.WaitFor(30*time.Second, "every replica leading or following, acknowledged records committed", func() bool {
		for _, a := range c.Agents {
			p, err := a.DescribePartition("wipe", 0)
			if err != nil || (p.Role != "leader" && p.Role != "follower") || p.HighWatermark == nil || *p.HighWatermark < want {
				return false
			}
		}
		return true
	})
	for _, a := range c.Agents {
		got := readValues(t, a, "wipe", want)
		if len(got) != len(acked) {
			t.Fatalf("%s holds %d records, want the %d acknowledged", a.NodeID, len(got), len(acked))
		}
		for i := range acked {
			if !bytes.Equal(got[i], acked[i]) {
				t.Fatalf("%s: record %d differs from the acknowledged one", a.NodeID, i)
			}
		}
	}
}

// readValues reads a partition's record values from offset 0 to end on an
// agent's replica.
func readValues(t *testing.T, a *Agent, topic string, end int64) [][]byte {
	t.Helper()
	var out [][]byte
	for offset := int64(0); offset < end; {
		f, err := a.Fetch(topic, 0, offset, 1<<20, time.Second)
		if err != nil {
			t.Fatalf("%s: fetch at %d: %v", a.NodeID, offset, err)
		}
		values := decodeRecords(t, f.Batches)
		start := offset
		for ; offset < end; offset++ {
			v, ok := values[offset]
			if !ok {
				break
			}
			out = append(out, v)
		}
		if offset == start {
			t.Fatalf("%s: no record at %d (HW %d)", a.NodeID, offset, f.HighWatermark)
		}
	}
	return out
}
