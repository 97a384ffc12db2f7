package testcluster

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestNodeDrain (issue 18, acceptance 2): `logagent node drain n1` of a
// live agent, the preferred leader of some partitions, while acks=all
// writes go to every partition of a 6-partition RF 3 topic through the
// other agents: every replica and leadership leaves n1, nothing
// acknowledged is lost, the longest stretch without an acknowledged write
// to any one partition stays under 1 s, and n1's directories of those
// partitions are deleted. The drain's time and that stretch are logged.
func TestNodeDrain(t *testing.T) {
	const topic, partitions = "drain", 6
	c := Start(t, Options{Agents: 4})
	if err := c.Agents[0].CreateTopic(TopicSpec{Name: topic, Partitions: partitions, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	drained := agentsNamed(c, []string{"n1"})[0]
	var holding, leading []int
	for p := range partitions {
		leader, _ := c.WaitLeader(topic, p, 30*time.Second)
		pm, err := c.Agents[1].DescribePartition(topic, p)
		if err != nil {
			t.Fatal(err)
		}
		c.WaitISR(topic, p, pm.Replicas, 30*time.Second)
		if slices.Contains(pm.Replicas, drained.NodeID) {
			holding = append(holding, p)
		}
		if leader == drained {
			leading = append(leading, p)
		}
	}
	if len(leading) == 0 {
		t.Fatalf("n1 leads none of %s's partitions: the drain would move no leadership", topic)
	}
	via := agentsNamed(c, []string{"n2", "n3", "n4"})
	load, stopLoad := runTopicLoad(t, via, topic, partitions)
	time.Sleep(time.Second)
	from := time.Now()
	out := runCLI(t, "", "node", "drain", drained.NodeID, "-addr", "http://"+via[0].ClientAddr, "-interval", "200ms", "-timeout", "25s")
	took := time.Since(from)
	t.Logf("logagent node drain n1 (%s):\n%s", took.Round(time.Millisecond), out)
	if !strings.Contains(out, "done: n1 holds no replica and leads nothing") {
		t.Fatalf("the drain did not say it was done:\n%s", out)
	}
	time.Sleep(500 * time.Millisecond)
	stopLoad()
	for p := range partitions {
		pm, err := via[0].DescribePartition(topic, p)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(pm.Replicas, drained.NodeID) || slices.Contains(pm.ISR, drained.NodeID) || pm.Leader == drained.NodeID || len(pm.Replicas) != 3 {
			t.Errorf("%s/%d after the drain: replicas %v, ISR %v, leader %s", topic, p, pm.Replicas, pm.ISR, pm.Leader)
		}
	}
	n := load.checkAcked(t, c, topic)
	gap := time.Duration(0)
	for p := range partitions {
		gap = max(gap, load.gap([]int{p}, from, from.Add(took)))
	}
	t.Logf("n1 held %v and led %v; %d writes acknowledged, %d not; longest stretch without an acknowledged write to a partition %s",
		holding, leading, n, load.fails, gap.Round(time.Millisecond))
	if gap >= time.Second {
		t.Errorf("a partition went %s without an acknowledged write during the drain, want under 1 s", gap)
	}
	for _, p := range holding {
		dir := drained.PartitionDir(topic, p)
		c.WaitFor(30*time.Second, "n1's data of the drained partition deleted", func() bool {
			_, err := os.Stat(dir)
			return errors.Is(err, os.ErrNotExist)
		})
	}
}
