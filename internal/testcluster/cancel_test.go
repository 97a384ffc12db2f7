package testcluster

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// runCLIFailing runs the real logagent binary with args to its end and
// returns its exit code and stderr; it fails the test if the command
// succeeds or runs past 30 s.
func runCLIFailing(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(Binary(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("logagent %s = %v, want a failure\nstdout: %s", strings.Join(args, " "), err, stdout.String())
		}
		return exit.ExitCode(), stderr.String()
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill() // this test's own child, by its PID
		<-done
		t.Fatalf("logagent %s (pid %d) still running after 30s", strings.Join(args, " "), cmd.Process.Pid)
	}
	return 0, ""
}

// cancelMove asks a to cancel the partition's move.
func cancelMove(a *Agent, topic string, partition int) error {
	return a.do(http.MethodDelete, a.url(reassignPath(topic, partition), nil), "", nil, nil)
}

// TestReassignCancelUnderLoad (issue 18): a move of an RF 3 partition off
// its leader to a fourth agent, throttled so that its catch-up takes
// seconds, is cancelled midway with `logagent partition move -cancel`
// under acks=all load: the partition goes back to its replicas with a full
// ISR, the added replica deletes its directory, nothing acknowledged is
// lost, and the longest stretch without an acknowledged write (logged) is
// under 1 s. A cancel then, with nothing in flight, is refused (exit 2,
// "no_reassignment_in_progress"), and so is one after a move completed.
func TestReassignCancelUnderLoad(t *testing.T) {
	const topic = "cancel"
	c := Start(t, Options{Agents: 4, HCL: `
replication {
  reassign_max_bytes_per_second = "512KiB"
}
`})
	leader, _ := createReplicatedTopic(t, c, topic)
	if leader.NodeID != "n1" {
		t.Fatalf("leader %s, want the preferred replica n1", leader.NodeID)
	}
	original := []string{"n1", "n2", "n3"}
	preload(t, leader, topic, 3<<20)
	via := agentsNamed(c, []string{"n2", "n3"})
	load, stopLoad := runAckLoad(t, via, topic, 4)
	time.Sleep(time.Second)
	if err := startMove(via[0], topic, 0, []string{"n2", "n3", "n4"}); err != nil {
		t.Fatal(err)
	}
	c.WaitFor(30*time.Second, "the catch-up under way", func() bool {
		sent, inSync, ok := catchUpOf(c, topic, 0, "n4")
		return ok && sent >= 256<<10 && !inSync
	})
	n4 := agentsNamed(c, []string{"n4"})[0]
	n4Dir := n4.PartitionDir(topic, 0)
	if _, err := os.Stat(n4Dir); err != nil {
		t.Fatalf("the added replica's directory: %v", err)
	}
	sent, _, _ := catchUpOf(c, topic, 0, "n4")
	from := time.Now()
	out := runCLI(t, "", "partition", "move", "-addr", "http://"+via[1].ClientAddr, "-topic", topic, "-partition", "0", "-cancel", "-interval", "100ms")
	took := time.Since(from)
	if !strings.Contains(out, "cancelling the move of cancel/0: back to n1,n2,n3, removing n4") || !strings.Contains(out, "done: cancel/0 has replicas n1,n2,n3") {
		t.Errorf("partition move -cancel printed:\n%s", out)
	}
	if bytes.IndexByte([]byte(out), 0x1b) >= 0 {
		t.Errorf("escape bytes in the output to a pipe: %q", out)
	}
	waitMoveDone(t, c, topic, 0, original, 30*time.Second)
	c.WaitFor(30*time.Second, "the added replica's data deleted on n4", func() bool {
		_, err := os.Stat(n4Dir)
		return errors.Is(err, os.ErrNotExist)
	})
	time.Sleep(time.Second)
	stopLoad()
	before := load.longestGap(from.Add(-time.Second), from)
	gap := load.longestGap(from, from.Add(took+time.Second))
	t.Logf("cancelled with %d bytes sent to n4; the cancel took %s; longest stretch without an acknowledged write from the cancel to 1 s after it %s (in the 1 s before it %s); %d writes acknowledged, %d not",
		sent, took.Round(time.Millisecond), gap.Round(time.Millisecond), before.Round(time.Millisecond), len(load.acked), len(load.failed))
	if gap >= time.Second {
		t.Errorf("a stretch of %s without an acknowledged write around the cancel, want under 1 s", gap)
	}
	hw := waitTargetsAt(t, c, topic, 0, agentsNamed(c, original), 30*time.Second)
	compareReplicas(t, agentsNamed(c, original), topic, 0, hw)
	l, _ := c.WaitLeader(topic, 0, 30*time.Second)
	load.checkAcked(t, l, topic)

	// Nothing in flight: the API's code and the CLI's exit 2.
	var apiErr *APIError
	if err := cancelMove(leader, topic, 0); !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict || apiErr.Code != "no_reassignment_in_progress" {
		t.Fatalf("cancel with nothing in flight = %v, want 409 no_reassignment_in_progress", err)
	}
	code, stderr := runCLIFailing(t, "partition", "move", "-addr", "http://"+leader.ClientAddr, "-topic", topic, "-partition", "0", "-cancel")
	if code != 2 || !strings.Contains(stderr, "no_reassignment_in_progress") {
		t.Errorf("partition move -cancel with nothing in flight: exit %d, stderr %q; want 2 and no_reassignment_in_progress", code, stderr)
	}
	// A move that completed is past its cancel.
	if err := startMove(leader, topic, 0, []string{"n2", "n1", "n3"}); err != nil {
		t.Fatal(err)
	}
	waitMoveDone(t, c, topic, 0, []string{"n2", "n1", "n3"}, 30*time.Second)
	if err := cancelMove(leader, topic, 0); !errors.As(err, &apiErr) || apiErr.Code != "no_reassignment_in_progress" {
		t.Fatalf("cancel after the completion = %v, want no_reassignment_in_progress", err)
	}
}

// TestReassignCancelStuck (issue 18): two moves whose added replica is
// killed for good (kill -9) while it catches up are stuck. They take none
// of the two self-healing slots while that agent is dead (docs/design.md
// §7.7, "What holds a slot"): a third partition whose replica on another
// killed agent is due for replacement is re-placed while they wait (before
// a2d8d2b it waited until an operator cancelled one). Cancelling one stuck
// move completes it although its added replica is dead (back to its
// replicas, full ISR), and the dead agent, started again, deletes the
// cancelled move's directory as a stray.
func TestReassignCancelStuck(t *testing.T) {
	c := startSlowHealing(t, 3*time.Second)
	// Three single-partition topics, placed by moves while they are empty
	// (nothing to copy, so they complete at once).
	placed := map[string][]string{"stuck0": {"n1", "n2", "n5"}, "stuck1": {"n1", "n2", "n5"}, "heal": {"n1", "n2", "n3"}}
	for _, topic := range []string{"stuck0", "stuck1", "heal"} {
		if err := c.Agents[0].CreateTopic(TopicSpec{Name: topic, Partitions: 1, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
			t.Fatal(err)
		}
		c.WaitLeader(topic, 0, 30*time.Second)
		if err := startMove(c.Agents[0], topic, 0, placed[topic]); err != nil {
			t.Fatalf("place %s on %v: %v", topic, placed[topic], err)
		}
		waitMoveDone(t, c, topic, 0, placed[topic], 30*time.Second)
	}
	for _, topic := range []string{"stuck0", "stuck1"} {
		l, _ := c.WaitLeader(topic, 0, 30*time.Second)
		preload(t, l, topic, 2<<20)
		if err := startMove(c.Agents[0], topic, 0, []string{"n1", "n2", "n4"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, topic := range []string{"stuck0", "stuck1"} {
		c.WaitFor(30*time.Second, topic+"'s catch-up to n4 under way", func() bool {
			sent, inSync, ok := catchUpOf(c, topic, 0, "n4")
			return ok && sent >= 64<<10 && !inSync
		})
	}
	n3, n4 := agentsNamed(c, []string{"n3"})[0], agentsNamed(c, []string{"n4"})[0]
	n4Dir := n4.PartitionDir("stuck0", 0)
	n4.Kill()
	n3.Kill()
	killed := time.Now()
	// Past replace_dead_after (and Consul's detection), heal's n3 is due,
	// and the two stuck moves, waiting for the dead n4, hold no slot: it
	// is re-placed on n5, the only live agent without a replica of it.
	waitMoveDone(t, c, "heal", 0, []string{"n1", "n2", "n5"}, 60*time.Second)
	t.Logf("heal re-placed %s after n3's death, with the two stuck moves in flight", time.Since(killed).Round(time.Millisecond))
	n1 := c.Agents[0]
	for _, topic := range []string{"stuck0", "stuck1"} {
		if m, err := moveOf(n1, topic, 0); err != nil || m.Move == nil {
			t.Fatalf("%s: %+v, %v; want its move still in flight (stuck)", topic, m, err)
		}
	}
	cancelled := time.Now()
	if err := cancelMove(n1, "stuck0", 0); err != nil {
		t.Fatalf("cancel the stuck move: %v", err)
	}
	waitMoveDone(t, c, "stuck0", 0, placed["stuck0"], 30*time.Second)
	t.Logf("the stuck move, cancelled, completed in %s", time.Since(cancelled).Round(time.Millisecond))
	if m, err := moveOf(n1, "stuck1", 0); err != nil || m.Move == nil {
		t.Errorf("stuck1: %+v, %v; want its move still in flight", m, err)
	}
	n4.Restart()
	c.WaitFor(30*time.Second, "n4 deleting the cancelled move's directory as a stray", func() bool {
		_, err := os.Stat(n4Dir)
		return errors.Is(err, os.ErrNotExist)
	})
}

// TestReassignCancelAddedLeader (issue 18): a move of [n1 n2 n3] to
// [n4 n5 n2] whose added n5 is killed for good stays in flight; n4 catches
// up, joins the ISR and, as the preferred replica (the target's first),
// takes the leadership over. The cancel then has n4 hand the leadership
// back to an original replica in the ISR before the way back completes:
// replicas [n1 n2 n3] with a full ISR and one of them leading, n4's
// directory deleted, nothing acknowledged lost under acks=all load.
func TestReassignCancelAddedLeader(t *testing.T) {
	const topic = "backlead"
	original := []string{"n1", "n2", "n3"}
	c := Start(t, Options{Agents: 5, HCL: `
replication {
  reassign_max_bytes_per_second = "512KiB"
  leader_rebalance_delay        = "1s"
}
`})
	leader, _ := createReplicatedTopic(t, c, topic)
	preload(t, leader, topic, 1<<20)
	via := agentsNamed(c, []string{"n2", "n3"})
	load, stopLoad := runAckLoad(t, via, topic, 2)
	if err := startMove(via[0], topic, 0, []string{"n4", "n5", "n2"}); err != nil {
		t.Fatal(err)
	}
	n4, n5 := agentsNamed(c, []string{"n4"})[0], agentsNamed(c, []string{"n5"})[0]
	n5.Kill()
	n4Dir := n4.PartitionDir(topic, 0)
	c.WaitFor(60*time.Second, "n4, the added preferred replica, leading while the move waits for the dead n5", func() bool {
		p, err := n4.DescribePartition(topic, 0)
		return err == nil && p.Role == "leader"
	})
	if m, err := moveOf(n4, topic, 0); err != nil || m.Move == nil {
		t.Fatalf("the move on n4: %+v, %v; want it in flight", m, err)
	}
	from := time.Now()
	if err := cancelMove(via[1], topic, 0); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	waitMoveDone(t, c, topic, 0, original, 60*time.Second)
	took := time.Since(from)
	back, _ := c.WaitLeader(topic, 0, 30*time.Second)
	if !slices.Contains(original, back.NodeID) {
		t.Fatalf("leader %s after the cancel, want one of %v", back.NodeID, original)
	}
	c.WaitFor(30*time.Second, "n4's data deleted", func() bool {
		_, err := os.Stat(n4Dir)
		return errors.Is(err, os.ErrNotExist)
	})
	time.Sleep(time.Second)
	stopLoad()
	t.Logf("cancelled with n4 leading: back to %v led by %s in %s; longest stretch without an acknowledged write %s; %d writes acknowledged, %d not",
		original, back.NodeID, took.Round(time.Millisecond), load.longestGap(from, from.Add(took)).Round(time.Millisecond), len(load.acked), len(load.failed))
	hw := waitTargetsAt(t, c, topic, 0, agentsNamed(c, original), 30*time.Second)
	compareReplicas(t, agentsNamed(c, original), topic, 0, hw)
	load.checkAcked(t, back, topic)
}
