package testcluster

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// runCLI runs the real logagent binary with args and stdin, to its end.
func runCLI(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(Binary(t), args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("logagent %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill() // this test's own child, by its PID
		<-done
		t.Fatalf("logagent %s (pid %d) still running after 30s\nstderr: %s", strings.Join(args, " "), cmd.Process.Pid, stderr.String())
	}
	return stdout.String()
}

// TestCLIAgainstAgents: the CLI's topic, produce, consume and status
// commands work against real agents, through a sidecar that leads nothing
// of the topic when there is one.
func TestCLIAgainstAgents(t *testing.T) {
	c := Start(t, Options{})
	addr := "http://" + c.Agents[1].ClientAddr
	runCLI(t, "", "topic", "create", "-addr", addr, "-partitions", "2", "-replication-factor", "3", "-min-insync-replicas", "2", "cli")
	for p := range 2 {
		c.WaitLeader("cli", p, 20*time.Second)
		c.WaitISR("cli", p, []string{"n1", "n2", "n3"}, 20*time.Second)
	}
	if out := runCLI(t, "", "topic", "list", "-addr", addr); !strings.Contains(out, "cli") {
		t.Fatalf("topic list: %q", out)
	}
	runCLI(t, "one\ntwo\nthree\n", "produce", "-addr", addr, "-topic", "cli", "-partition", "1")
	waitReplicasAt(t, c, "cli", 1, 3, 20*time.Second)
	if out := runCLI(t, "", "consume", "-addr", "http://"+c.Agents[2].ClientAddr, "-topic", "cli", "-partition", "1"); out != "one\ntwo\nthree\n" {
		t.Fatalf("consume: %q", out)
	}
	if out := runCLI(t, "", "status", "-addr", addr); !strings.Contains(out, "cli") || !strings.Contains(out, "node n2") {
		t.Fatalf("status: %q", out)
	}
	runCLI(t, "", "topic", "delete", "-addr", addr, "cli")
	if out := runCLI(t, "", "topic", "list", "-addr", addr); strings.Contains(out, "cli") {
		t.Fatalf("topic list after delete: %q", out)
	}
}
