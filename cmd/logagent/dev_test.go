package main

import (
	"fmt"
	"math/rand"
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

// TestDevClusterUpAndDown runs `logagent dev` as a user would (on shifted
// ports, so it does not clash with a developer's own `make dev`), checks the
// three agents and Consul, then stops it with SIGINT and checks that no
// process it started is left.
func TestDevClusterUpAndDown(t *testing.T) {
	consulBin := os.Getenv("LOGAGENT_CONSUL_BIN")
	if consulBin == "" {
		consulBin = filepath.Join("..", "..", "bin", "consul")
	}
	if _, err := os.Stat(consulBin); err != nil {
		t.Fatalf("%s: %v: run `make consul`", consulBin, err)
	}
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	var p *proc
	var dir string
	var offset int
	// The shifted ports share their range with the ports that tests of
	// other packages, running at the same time, take from freeport: when
	// dev finds one of its ports taken (it checks them all before it
	// starts anything), another offset is tried.
	for attempt := 1; ; attempt++ {
		offset = 1000 + rng.Intn(90)*100 // ports stay below the ephemeral range
		t.Logf("port offset %d (seed %d)", offset, seed)
		dir = filepath.Join(t.TempDir(), "dev")
		p = startProc(t, nil, "dev", "-dir", dir, "-port-offset", strconv.Itoa(offset), "-consul-bin", consulBin)
		var portsTaken bool
		waitUntil(t, 90*time.Second, "the banner", func() bool {
			if !p.running() {
				if portsTaken = strings.Contains(p.output(), "are in use"); portsTaken {
					return true
				}
				t.Fatalf("logagent dev exited:\n%s", p.output())
			}
			return strings.Contains(p.output(), "logagent dev cluster is up")
		})
		if !portsTaken {
			break
		}
		if attempt == 5 {
			t.Fatalf("logagent dev found its ports taken at 5 offsets:\n%s", p.output())
		}
		t.Logf("ports taken, trying another offset: %s", strings.TrimSpace(p.output()))
	}

	for i := 0; i < 3; i++ {
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
	waitUntil(t, 15*time.Second, "three passing logagent services", func() bool {
		entries, _, err := consul.Health().Service("logagent", "", true, nil)
		return err == nil && len(entries) == 3
	})

	pids := childPIDs(t, p.output())
	if len(pids) != 4 {
		t.Fatalf("banner names %d child pids, want 4 (consul + 3 agents):\n%s", len(pids), p.output())
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
	for i := 1; i <= 3; i++ {
		log, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("n%d.log", i)))
		if !strings.Contains(string(log), "stopped") {
			t.Errorf("agent n%d did not stop gracefully:\n%s", i, log)
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
