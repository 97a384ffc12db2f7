package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// TestDevClusterUpAndDown runs `logagent dev -agents 4` as a user would (on
// shifted ports, so it does not clash with a developer's own `make dev`),
// checks the four agents and Consul, then stops it with SIGINT and checks
// that no process it started is left.
func TestDevClusterUpAndDown(t *testing.T) {
	const agents = 4
	p, dir, offset := startDev(t, "-agents", strconv.Itoa(agents))

	for i := range agents {
		if !strings.Contains(p.output(), fmt.Sprintf("agent n%d ", i+1)) {
			t.Errorf("the banner does not name agent n%d:\n%s", i+1, p.output())
		}
		url := fmt.Sprintf("http://127.0.0.1:%d/v1/health", 7070+offset+i)
		if code, body := httpGet(url); code != 200 {
			t.Errorf("%s: %d %s", url, code, body)
		}
	}
	cfg := api.DefaultConfig()
	cfg.Address = fmt.Sprintf("127.0.0.1:%d", 18500+offset)
	consul, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 15*time.Second, "a passing logagent service per agent", func() bool {
		entries, _, err := consul.Health().Service("logagent", "", true, nil)
		return err == nil && len(entries) == agents
	})

	pids := childPIDs(t, p.output())
	if len(pids) != agents+1 {
		t.Fatalf("banner names %d child pids, want %d (consul + %d agents):\n%s", len(pids), agents+1, agents, p.output())
	}
	for _, pid := range pids {
		if !alive(pid) {
			t.Errorf("child pid %d is not running", pid)
		}
	}

	p.signal(syscall.SIGINT)
	if code := p.wait(60 * time.Second); code != 0 {
		t.Errorf("logagent dev exit code %d after Ctrl-C, want 0", code)
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d outlived logagent dev", pid)
		}
	}
	for i := 1; i <= agents; i++ {
		log, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("n%d.log", i)))
		if !strings.Contains(string(log), "stopped") {
			t.Errorf("agent n%d did not stop gracefully:\n%s", i, log)
		}
	}
}

// TestDevRefusesCollidingPorts: an agent count or offset whose ports would
// collide or leave the port range is bad usage, refused before anything
// starts.
func TestDevRefusesCollidingPorts(t *testing.T) {
	for _, args := range [][]string{
		{"-agents", "0"},
		{"-agents", "102"},
		{"-agents", "3", "-port-offset", "60000"},
	} {
		var stdout, stderr strings.Builder
		dir := filepath.Join(t.TempDir(), "dev")
		code := run(append([]string{"dev", "-dir", dir, "-consul-bin", "/nonexistent"}, args...), &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "bad agent count or port offset") {
			t.Errorf("dev %v: exit %d, stderr %q; want %d and the reason", args, code, stderr.String(), exitUsage)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("dev %v created %s (%v)", args, dir, err)
		}
	}
}

func childPIDs(t *testing.T, out string) []int {
	var pids []int
	for _, m := range regexp.MustCompile(`started \S+(?: \S+)? \(pid (\d+)\)`).FindAllStringSubmatch(out, -1) {
		n, err := strconv.Atoi(m[1])
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, n)
	}
	return pids
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}
