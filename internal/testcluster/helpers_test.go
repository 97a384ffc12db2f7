package testcluster

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/logagent/logagent/record"
)

// envInt reads an integer knob of the long variants (make torture).
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// createReplicatedTopic creates a one-partition topic on every agent (RF
// 3, min ISR 2) and waits for its leader and a full ISR; it returns the
// leader and its epoch.
func createReplicatedTopic(t testing.TB, c *Cluster, topic string) (*Agent, int32) {
	t.Helper()
	if err := c.Agents[0].CreateTopic(TopicSpec{Name: topic, Partitions: 1, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	leader, epoch := c.WaitLeader(topic, 0, 20*time.Second)
	c.WaitISR(topic, 0, []string{"n1", "n2", "n3"}, 20*time.Second)
	return leader, epoch
}

// otherAgent is the first agent of c that is not a.
func otherAgent(t testing.TB, c *Cluster, a *Agent) *Agent {
	t.Helper()
	for _, o := range c.Agents {
		if o != a {
			return o
		}
	}
	t.Fatal("testcluster: one agent only")
	return nil
}

// buildBatch encodes values as one batch.
func buildBatch(t testing.TB, values [][]byte) []byte {
	t.Helper()
	var b record.Builder
	ts := time.Now().UnixMilli()
	for _, v := range values {
		if err := b.Add(ts, nil, v, nil); err != nil {
			t.Fatal(err)
		}
	}
	batch, err := b.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	return batch
}

// valuesOf builds n record values tagged with a producer and sequence, and
// padded to size with random bytes, so every record is distinct.
func valuesOf(rng *rand.Rand, producer, first, n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		v := fmt.Appendf(nil, "p%d-%08d-", producer, first+i)
		for len(v) < size {
			v = append(v, byte('a'+rng.IntN(26)))
		}
		out[i] = v
	}
	return out
}

// decodeRecords returns every record of whole batches as offset → value,
// failing on corruption or an offset seen twice.
func decodeRecords(t *testing.T, batches []byte) map[int64][]byte {
	t.Helper()
	split, err := Batches(batches)
	if err != nil {
		t.Fatalf("batches: %v", err)
	}
	d := record.NewDecoder(record.Limits{})
	out := map[int64][]byte{}
	for _, b := range split {
		it, err := d.Records(b)
		if err != nil {
			t.Fatal(err)
		}
		for it.Next() {
			r := it.Record()
			off := r.Offset
			if _, dup := out[off]; dup {
				t.Fatalf("offset %d twice", off)
			}
			out[off] = bytes.Clone(r.Value)
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// waitReplicasAt waits until every running agent's replica of the
// partition has the high watermark and log end offset hw (all caught up,
// all knowing it is committed).
func waitReplicasAt(t *testing.T, c *Cluster, topic string, partition int, hw int64, timeout time.Duration) {
	t.Helper()
	c.WaitFor(timeout, fmt.Sprintf("every replica of %s/%d at %d", topic, partition, hw), func() bool {
		for _, a := range c.Agents {
			if !a.Running() {
				continue
			}
			p, err := a.DescribePartition(topic, partition)
			if err != nil || p.HighWatermark == nil || *p.HighWatermark != hw || *p.LogEndOffset != hw {
				return false
			}
		}
		return true
	})
}

// compareReplicas checks that every agent's log of the partition is
// byte-identical below hw (batch headers, leader epochs included) and
// returns the bytes.
func compareReplicas(t *testing.T, agents []*Agent, topic string, partition int, hw int64) []byte {
	t.Helper()
	var want []byte
	for i, a := range agents {
		got, err := LogBytesBelow(a.PartitionDir(topic, partition), hw)
		if err != nil {
			t.Fatalf("%s: %v", a.NodeID, err)
		}
		if i == 0 {
			want = got
			continue
		}
		if !bytes.Equal(got, want) {
			at := 0
			for at < min(len(got), len(want)) && got[at] == want[at] {
				at++
			}
			t.Fatalf("%s's log differs from %s's below offset %d: %d and %d bytes, first difference at byte %d",
				a.NodeID, agents[0].NodeID, hw, len(got), len(want), at)
		}
	}
	return want
}

// epochOf is the leader epoch stamped in a batch.
func epochOf(batch []byte) int32 { return record.Header(batch).LeaderEpoch() }

func asAPIError(err error, target **APIError) bool { return errors.As(err, target) }
