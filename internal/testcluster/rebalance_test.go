package testcluster

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRebalance (issue 18, acceptance 3): a 10-partition RF 3 topic
// created on four agents; a fifth joins, empty. `logagent rebalance`
// prints the plan and changes nothing; `rebalance -execute` moves
// partitions onto n5 and reorders preferred leaders, under acks=all load,
// until every agent's replica count and, once the leaderships have
// followed their preferred replicas, leader count are within one of each
// other; nothing acknowledged is lost.
func TestRebalance(t *testing.T) {
	const topic, partitions = "rebalance", 10
	c := Start(t, Options{Agents: 5, HCL: `
replication {
  leader_rebalance_delay = "1s"
}
`})
	n5 := agentsNamed(c, []string{"n5"})[0]
	n5.Terminate()
	four := agentsNamed(c, []string{"n1", "n2", "n3", "n4"})
	// A graceful stop deregisters it: topic creation places nothing on it.
	if err := four[0].CreateTopic(TopicSpec{Name: topic, Partitions: partitions, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	for p := range partitions {
		c.WaitLeader(topic, p, 30*time.Second)
		pm, err := four[0].DescribePartition(topic, p)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(pm.Replicas, "n5") {
			t.Fatalf("%s/%d was placed on n5, which was down: %v", topic, p, pm.Replicas)
		}
	}
	n5.Start()
	n5.WaitHealthy()
	load, stopLoad := runTopicLoad(t, four, topic, partitions)

	dry := runCLI(t, "", "rebalance", "-addr", "http://"+four[0].ClientAddr)
	t.Logf("logagent rebalance:\n%s", dry)
	if !strings.Contains(dry, "moves planned; logagent rebalance -execute starts them") {
		t.Fatalf("the dry run planned nothing:\n%s", dry)
	}
	if counts := replicaCounts(t, four[0], topic, partitions); counts["n5"] != 0 {
		t.Fatalf("the dry run moved something: %v", counts)
	}
	from := time.Now()
	out := runCLI(t, "", "rebalance", "-execute", "-addr", "http://"+four[0].ClientAddr, "-timeout", "25s")
	t.Logf("logagent rebalance -execute (%s):\n%s", time.Since(from).Round(time.Millisecond), out)
	replicas := replicaCounts(t, four[0], topic, partitions)
	if !spreadWithin1(replicas) {
		t.Fatalf("replica counts after the rebalance: %v", replicas)
	}
	var leaders map[string]int
	c.WaitFor(60*time.Second, "leader counts within one", func() bool {
		leaders = leaderCounts(t, four[0], topic, partitions)
		return spreadWithin1(leaders)
	})
	stopLoad()
	t.Logf("replicas per agent %v, leaders %v, %s after the rebalance started; %d writes acknowledged, %d not",
		replicas, leaders, time.Since(from).Round(time.Millisecond), load.checkAcked(t, c, topic), load.fails)
	again := runCLI(t, "", "rebalance", "-addr", "http://"+four[0].ClientAddr)
	if !strings.Contains(again, "balanced: nothing to move") {
		t.Errorf("a second rebalance still plans moves:\n%s", again)
	}
	// A reorder, the planner's move of a preferred leader, copies
	// nothing and completes.
	pm, err := four[0].DescribePartition(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	reordered := slices.Clone(pm.Replicas)
	slices.Reverse(reordered)
	if err := startMove(four[0], topic, 0, reordered); err != nil {
		t.Fatalf("reorder %v to %v: %v", pm.Replicas, reordered, err)
	}
	waitMoveDone(t, c, topic, 0, reordered, 30*time.Second)
}

func replicaCounts(t *testing.T, a *Agent, topic string, partitions int) map[string]int {
	t.Helper()
	tp, err := a.Describe(topic)
	if err != nil || len(tp.Partitions) != partitions {
		t.Fatalf("describe %s: %v", topic, err)
	}
	counts := map[string]int{"n1": 0, "n2": 0, "n3": 0, "n4": 0, "n5": 0}
	for _, pm := range tp.Partitions {
		for _, n := range pm.Replicas {
			counts[n]++
		}
	}
	return counts
}

func leaderCounts(t *testing.T, a *Agent, topic string, partitions int) map[string]int {
	t.Helper()
	tp, err := a.Describe(topic)
	if err != nil || len(tp.Partitions) != partitions {
		t.Fatalf("describe %s: %v", topic, err)
	}
	counts := map[string]int{"n1": 0, "n2": 0, "n3": 0, "n4": 0, "n5": 0}
	for _, pm := range tp.Partitions {
		counts[pm.Leader]++
	}
	return counts
}

func spreadWithin1(counts map[string]int) bool {
	var v []int
	for _, n := range counts {
		v = append(v, n)
	}
	return slices.Max(v)-slices.Min(v) <= 1
}
