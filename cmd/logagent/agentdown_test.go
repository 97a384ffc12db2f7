package main

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestEveryCommandWithTheAgentDown runs each command that talks to an agent,
// as the real binary, against an address where nothing listens and one
// where something accepts connections but never answers: each exits 1
// within its timeout, with a line that names the address tried and says
// what to do.
func TestEveryCommandWithTheAgentDown(t *testing.T) {
	refused := closedPort(t)
	silent := silentListener(t)
	const timeout = "2s"
	cases := []struct {
		name string
		args []string
		// limit is how long the command may take against the silent
		// agent: its -timeout, or the 5 s of its first question
		// (reachTimeout) for bench, whose -timeout caps a whole run.
		limit time.Duration
	}{
		{"topic create", []string{"topic", "create", "x", "-timeout", timeout}, 2 * time.Second},
		{"topic list", []string{"topic", "list", "-timeout", timeout}, 2 * time.Second},
		{"topic describe", []string{"topic", "describe", "x", "-timeout", timeout}, 2 * time.Second},
		{"topic delete", []string{"topic", "delete", "x", "-timeout", timeout}, 2 * time.Second},
		{"topic alter", []string{"topic", "alter", "x", "-partitions", "4", "-timeout", timeout}, 2 * time.Second},
		{"status", []string{"status", "-timeout", timeout}, 2 * time.Second},
		{"group list", []string{"group", "list", "-timeout", timeout}, 2 * time.Second},
		{"group describe", []string{"group", "describe", "g", "-timeout", timeout}, 2 * time.Second},
		{"group reset-offsets", []string{"group", "reset-offsets", "g", "-topic", "t", "-to", "0", "-timeout", timeout}, 2 * time.Second},
		{"group delete", []string{"group", "delete", "g", "-timeout", timeout}, 2 * time.Second},
		{"produce", []string{"produce", "-topic", "t", "-timeout", timeout}, 2 * time.Second},
		{"produce to a partition", []string{"produce", "-topic", "t", "-partition", "0", "-timeout", timeout}, 2 * time.Second},
		{"consume", []string{"consume", "-topic", "t", "-timeout", timeout}, 2 * time.Second},
		{"consume a partition", []string{"consume", "-topic", "t", "-partition", "0", "-timeout", timeout}, 2 * time.Second},
		{"consume -follow", []string{"consume", "-topic", "t", "-follow", "-timeout", timeout}, 2 * time.Second},
		{"consume -group", []string{"consume", "-topic", "t", "-group", "g", "-timeout", timeout}, 2 * time.Second},
		{"partition move", []string{"partition", "move", "-topic", "t", "-partition", "0", "-replicas", "n1,n2", "-timeout", timeout}, 2 * time.Second},
		{"partition move -cancel", []string{"partition", "move", "-topic", "t", "-partition", "0", "-cancel", "-timeout", timeout}, 2 * time.Second},
		{"node drain", []string{"node", "drain", "n2", "-timeout", timeout}, 2 * time.Second},
		{"node drain -cancel", []string{"node", "drain", "n2", "-cancel", "-timeout", timeout}, 2 * time.Second},
		{"rebalance", []string{"rebalance", "-timeout", timeout}, 2 * time.Second},
		{"rebalance -execute", []string{"rebalance", "-execute", "-timeout", timeout}, 2 * time.Second},
		{"bench produce", []string{"bench", "produce", "-topic", "t", "-duration", "1s"}, reachTimeout},
		{"bench e2e", []string{"bench", "e2e", "-topic", "t", "-rate", "10", "-duration", "1s"}, reachTimeout},
		{"bench consume", []string{"bench", "consume", "-topic", "t", "-duration", "1s"}, reachTimeout},
		{"bench groups", []string{"bench", "groups", "-topic", "t"}, reachTimeout},
	}
	agents := []struct{ name, addr, says string }{
		{"refused", refused, "cannot reach the agent at http://" + refused + " ("},
		{"silent", silent, "no answer from the agent at http://" + silent + " within "},
	}
	for _, agent := range agents {
		for _, c := range cases {
			t.Run(agent.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				start := time.Now()
				p := startProc(t, nil, append(c.args, "-addr", agent.addr)...)
				// The margin is for starting the binary on a loaded
				// machine, not for the command's own waiting.
				code := p.wait(c.limit + 10*time.Second)
				took := time.Since(start)
				out := p.output()
				if code != exitFailure {
					t.Errorf("exit %d, want 1:\n%s", code, out)
				}
				if took > c.limit+3*time.Second {
					t.Errorf("took %s, want about %s at most:\n%s", took.Round(time.Millisecond), c.limit, out)
				}
				if !strings.Contains(out, agent.says) || !strings.Contains(out, reachHint) {
					t.Errorf("output lacks %q and %q:\n%s", agent.says, reachHint, out)
				}
				if n := strings.Count(strings.TrimSpace(out), "\n") + 1; n != 1 {
					t.Errorf("%d lines, want one:\n%s", n, out)
				}
			})
		}
	}
}

// closedPort is a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// silentListener is a loopback address that accepts connections and never
// answers, like an agent that hangs; it is closed when the test ends.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}
