package testcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/consultest"
)

// moveState is GET .../reassignment (docs/api.md, "Moving a partition's
// replicas").
type moveState struct {
	Replicas      []string `json:"replicas"`
	ISR           []string `json:"isr"`
	Leader        string   `json:"leader"`
	LeaderAddress string   `json:"leader_address"`
	Move          *struct {
		Target   []string `json:"target"`
		Adding   []string `json:"adding"`
		Removing []string `json:"removing"`
		Progress []struct {
			Node         string `json:"node"`
			LogEndOffset int64  `json:"log_end_offset"`
			InSync       bool   `json:"in_sync"`
			CatchUpBytes int64  `json:"catch_up_bytes"`
		} `json:"progress"`
	} `json:"reassignment"`
}

func reassignPath(topic string, partition int) string {
	return fmt.Sprintf("/v1/topics/%s/partitions/%d/reassignment", topic, partition)
}

// startMove asks a to move the partition to target.
func startMove(a *Agent, topic string, partition int, target []string) error {
	body, _ := json.Marshal(map[string][]string{"replicas": target})
	return a.do(http.MethodPost, a.url(reassignPath(topic, partition), nil), "application/json", body, nil)
}

// moveOf is the partition's move as a sees it.
func moveOf(a *Agent, topic string, partition int) (moveState, error) {
	var m moveState
	err := a.do(http.MethodGet, a.url(reassignPath(topic, partition), nil), "", nil, &m)
	return m, err
}

// catchUpOf is what the partition's leader (asked through any running
// agent of c) has sent node while it catches up, and whether node is in
// the ISR; ok false when no leader answers with the move's progress.
func catchUpOf(c *Cluster, topic string, partition int, node string) (sent int64, inSync, ok bool) {
	for _, a := range c.Agents {
		if !a.Running() {
			continue
		}
		m, err := moveOf(a, topic, partition)
		if err != nil || m.Move == nil {
			continue
		}
		for _, p := range m.Move.Progress {
			if p.Node == node {
				return p.CatchUpBytes, p.InSync, true
			}
		}
	}
	return 0, false, false
}

// waitMoveDone waits until every running agent's metadata shows the
// partition at target with no move, and the leader's ISR is target.
func waitMoveDone(t *testing.T, c *Cluster, topic string, partition int, target []string, timeout time.Duration) {
	t.Helper()
	c.WaitFor(timeout, fmt.Sprintf("%s/%d moved to %v", topic, partition, target), func() bool {
		for _, a := range c.Agents {
			if !a.Running() {
				continue
			}
			m, err := moveOf(a, topic, partition)
			if err != nil || m.Move != nil || !slices.Equal(m.Replicas, target) {
				return false
			}
		}
		return true
	})
	c.WaitISR(topic, partition, target, timeout)
}

// waitTargetsAt waits until every agent of target has the partition with
// its high watermark and log end at the leader's log end, and returns it.
func waitTargetsAt(t *testing.T, c *Cluster, topic string, partition int, target []*Agent, timeout time.Duration) int64 {
	t.Helper()
	var at int64
	c.WaitFor(timeout, fmt.Sprintf("every target replica of %s/%d caught up", topic, partition), func() bool {
		var ends []int64
		for _, a := range target {
			p, err := a.DescribePartition(topic, partition)
			if err != nil || p.HighWatermark == nil || *p.HighWatermark != *p.LogEndOffset {
				return false
			}
			ends = append(ends, *p.LogEndOffset)
		}
		at = ends[0]
		return slices.Min(ends) == slices.Max(ends)
	})
	return at
}

// preload writes about n bytes to the partition (acks=all) in batches of
// 64 records of 4 KiB.
func preload(t *testing.T, a *Agent, topic string, n int) {
	t.Helper()
	value := make([]byte, 4<<10)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	values := make([][]byte, 64)
	for i := range values {
		values[i] = value
	}
	for sent := 0; sent < n; sent += 64 * len(value) {
		if _, err := a.Produce(topic, 0, ContentTypeBatch, buildBatch(t, values), "all", 10*time.Second); err != nil {
			t.Fatalf("preload %s: %v", topic, err)
		}
	}
}

func agentsNamed(c *Cluster, nodes []string) []*Agent {
	var out []*Agent
	for _, a := range c.Agents {
		if slices.Contains(nodes, a.NodeID) {
			out = append(out, a)
		}
	}
	return out
}

// checkMoved checks what a finished move must leave: the target replicas
// hold the same log, every acknowledged write is in it, and the removed
// replicas' directories are gone.
func checkMoved(t *testing.T, c *Cluster, topic string, target []string, removed []*Agent, load *ackLoad) {
	t.Helper()
	targets := agentsNamed(c, target)
	hw := waitTargetsAt(t, c, topic, 0, targets, 60*time.Second)
	compareReplicas(t, targets, topic, 0, hw)
	leader, _ := c.WaitLeader(topic, 0, 30*time.Second)
	if !slices.Contains(target, leader.NodeID) {
		t.Fatalf("leader %s is not in the target %v", leader.NodeID, target)
	}
	load.checkAcked(t, leader, topic)
	for _, a := range removed {
		dir := a.PartitionDir(topic, 0)
		c.WaitFor(30*time.Second, "the removed replica's data deleted on "+a.NodeID, func() bool {
			_, err := os.Stat(dir)
			return errors.Is(err, os.ErrNotExist)
		})
	}
	t.Logf("moved to %v at high watermark %d; %d writes acknowledged, %d not", target, hw, len(load.acked), len(load.failed))
}

// TestReassignUnderLoad (issue 18): a partition of an RF 3, min ISR 2
// topic moves off its leader to a fourth agent while acks=all writes go on
// through the agents that stay: the new replica catches up and joins the
// ISR, the leadership is handed to a target replica, the old leader leaves
// the replicas and the ISR and deletes its data; nothing acknowledged is
// lost, and the target replicas hold the same bytes. The longest stretch
// without an acknowledged write is logged.
func TestReassignUnderLoad(t *testing.T) {
	const topic = "move"
	c := Start(t, Options{Agents: 4, Timing: TimingShipped})
	leader, _ := createReplicatedTopic(t, c, topic)
	preload(t, leader, topic, 2<<20)
	pm, err := leader.DescribePartition(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	var target []string
	for _, n := range append(slices.Clone(pm.Replicas), "n4") {
		if n != leader.NodeID && !slices.Contains(target, n) {
			target = append(target, n)
		}
	}
	via := agentsNamed(c, target[:2]) // staying replicas: their sidecars carry the load
	load, stopLoad := runAckLoad(t, via, topic, 4)
	time.Sleep(time.Second)
	from := time.Now()
	if err := startMove(via[0], topic, 0, target); err != nil {
		t.Fatalf("start the move to %v: %v", target, err)
	}
	var apiErr *APIError
	if err := startMove(via[1], topic, 0, []string{"n1", "n2", "n4"}); !errors.As(err, &apiErr) || apiErr.Code != "reassignment_in_progress" {
		t.Fatalf("a second move = %v, want 409 reassignment_in_progress", err)
	}
	waitMoveDone(t, c, topic, 0, target, 90*time.Second)
	took := time.Since(from)
	time.Sleep(time.Second)
	stopLoad()
	t.Logf("move of %s/0 from %v to %v took %s; longest stretch without an acknowledged write %s",
		topic, pm.Replicas, target, took.Round(time.Millisecond), load.longestGap(from, from.Add(took)).Round(time.Millisecond))
	checkMoved(t, c, topic, target, []*Agent{leader}, load)
}

// TestReassignRefusals: the endpoint refuses a target that names an agent
// that is not live, repeats one, or has fewer replicas than
// min_insync_replicas, and a move to the replicas the partition has is
// answered as done without writing anything.
func TestReassignRefusals(t *testing.T) {
	const topic = "norefuse"
	c := Start(t, Options{Agents: 3})
	leader, _ := createReplicatedTopic(t, c, topic)
	for _, target := range [][]string{{"n1", "n2", "n9"}, {"n1", "n1", "n2"}, {"n1"}, {}} {
		var apiErr *APIError
		if err := startMove(leader, topic, 0, target); !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || apiErr.Code != "invalid_request" {
			t.Errorf("move to %v = %v, want 400 invalid_request", target, err)
		}
	}
	var apiErr *APIError
	if err := startMove(leader, topic, 7, []string{"n1", "n2"}); !errors.As(err, &apiErr) || apiErr.Code != "unknown_partition" {
		t.Errorf("move of partition 7 = %v, want unknown_partition", err)
	}
	if err := startMove(leader, topic, 0, []string{"n1", "n2", "n3"}); err != nil {
		t.Fatalf("move to the same replicas: %v", err)
	}
	if m, err := moveOf(leader, topic, 0); err != nil || m.Move != nil || !slices.Equal(m.Replicas, []string{"n1", "n2", "n3"}) {
		t.Fatalf("after a move to the same replicas: %+v, %v", m, err)
	}
}

// TestReassignResumes (issue 18, acceptance 4): a move whose catch-up is
// throttled so that it is still adding is interrupted by kill -9 of the
// partition's leader (one the move removes, and one it keeps: then a
// replica the move removes may win the next epoch and must hand over),
// kill -9 of the replica being added, or a restart of Consul with its
// data; the killed agent is started again after 2 s. In each case the move
// resumes from what Consul holds and completes, nothing acknowledged is
// lost, the target replicas hold the same log, and the removed replica's
// data is deleted (by the restarted agent itself when it was the one
// killed).
func TestReassignResumes(t *testing.T) {
	killAndRestart := func(node string) func(*Cluster) {
		return func(c *Cluster) {
			a := agentsNamed(c, []string{node})[0]
			a.Kill()
			time.Sleep(2 * time.Second)
			a.Restart()
		}
	}
	cases := []struct {
		name      string
		target    []string
		removed   string
		interrupt func(c *Cluster)
	}{
		{"kill -9 of the leader, removed", []string{"n2", "n3", "n4"}, "n1", killAndRestart("n1")},
		{"kill -9 of the leader, kept", []string{"n1", "n2", "n4"}, "n3", killAndRestart("n1")},
		{"kill -9 of the new replica", []string{"n2", "n3", "n4"}, "n1", killAndRestart("n4")},
		{"Consul restart", []string{"n2", "n3", "n4"}, "n1", func(c *Cluster) { c.Consul.Restart() }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const topic = "resume"
			c := Start(t, Options{Agents: 4, Consul: []consultest.Option{consultest.Persistent()}, HCL: `
replication {
  reassign_max_bytes_per_second = "512KiB"
}
`})
			leader, _ := createReplicatedTopic(t, c, topic)
			if leader.NodeID != "n1" {
				t.Fatalf("leader %s, want the preferred replica n1", leader.NodeID)
			}
			preload(t, leader, topic, 3<<20)
			via := agentsNamed(c, []string{"n2"}) // never killed
			load, stopLoad := runAckLoad(t, via, topic, 2)
			if err := startMove(via[0], topic, 0, tc.target); err != nil {
				t.Fatalf("start the move: %v", err)
			}
			c.WaitFor(30*time.Second, "the catch-up under way", func() bool {
				sent, inSync, ok := catchUpOf(c, topic, 0, "n4")
				return ok && sent >= 256<<10 && !inSync
			})
			sent, _, _ := catchUpOf(c, topic, 0, "n4")
			// logagent status shows the move in flight.
			if st := runCLI(t, "", "status", "-addr", "http://"+via[0].ClientAddr); !strings.Contains(st, "moving") || !strings.Contains(st, "1 being moved") {
				t.Errorf("logagent status does not show the move:\n%s", st)
			}
			t.Logf("interrupting with %d bytes sent to n4", sent)
			interrupted := time.Now()
			tc.interrupt(c)
			waitMoveDone(t, c, topic, 0, tc.target, 120*time.Second)
			t.Logf("done %s after the interruption began", time.Since(interrupted).Round(time.Millisecond))
			stopLoad()
			checkMoved(t, c, topic, tc.target, agentsNamed(c, []string{tc.removed}), load)
		})
	}
}

// TestReassignThrottle (issue 18, acceptance 5): the catch-up of a replica
// a move adds runs at replication.reassign_max_bytes_per_second. The rate
// is measured from the leader's count of catch-up bytes over the middle of
// the catch-up (the first second, which the bucket's saved quarter second
// distorts, left out) and must be within 10 % of the setting.
func TestReassignThrottle(t *testing.T) {
	const topic, rate = "throttle", 1 << 20
	c := Start(t, Options{Agents: 4, HCL: fmt.Sprintf(`
replication {
  reassign_max_bytes_per_second = "%dB"
}
`, rate)})
	leader, _ := createReplicatedTopic(t, c, topic)
	preload(t, leader, topic, 8<<20)
	if err := startMove(leader, topic, 0, []string{"n1", "n2", "n3", "n4"}); err != nil {
		t.Fatal(err)
	}
	type sample struct {
		at   time.Time
		sent int64
	}
	var samples []sample
	c.WaitFor(60*time.Second, "the move done", func() bool {
		sent, inSync, ok := catchUpOf(c, topic, 0, "n4")
		if ok && !inSync {
			samples = append(samples, sample{time.Now(), sent})
		}
		time.Sleep(100 * time.Millisecond)
		m, err := moveOf(leader, topic, 0)
		return err == nil && m.Move == nil
	})
	waitMoveDone(t, c, topic, 0, []string{"n1", "n2", "n3", "n4"}, 30*time.Second)
	if len(samples) < 2 {
		t.Fatalf("too few samples of the catch-up: %+v", samples)
	}
	first := slices.IndexFunc(samples, func(s sample) bool { return s.at.Sub(samples[0].at) >= time.Second })
	last := samples[len(samples)-1]
	if first < 0 || last.at.Sub(samples[first].at) < 3*time.Second {
		t.Fatalf("the catch-up was too short to measure: %d samples over %s", len(samples), last.at.Sub(samples[0].at))
	}
	got := float64(last.sent-samples[first].sent) / last.at.Sub(samples[first].at).Seconds()
	t.Logf("catch-up at %.0f bytes/s (%.3f of the setting %d) over %s, %d bytes in all",
		got, got/rate, rate, last.at.Sub(samples[first].at).Round(time.Millisecond), last.sent)
	if got < 0.9*rate || got > 1.1*rate {
		t.Fatalf("catch-up at %.0f bytes/s, want %d within 10 %%", got, rate)
	}
}
