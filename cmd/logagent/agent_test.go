package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"golang.org/x/sys/unix"

	"github.com/logagent/logagent/internal/consultest"
)

type agentSetup struct {
	nodeID     string
	dataDir    string
	clientAddr string
	peerAddr   string
	consulAddr string
	extra      string // more HCL
}

func newAgentSetup(t *testing.T, nodeID, consulAddr string) agentSetup {
	ports := consultest.FreePorts(t, 2)
	return agentSetup{
		nodeID:     nodeID,
		dataDir:    filepath.Join(t.TempDir(), "data"),
		clientAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		peerAddr:   fmt.Sprintf("127.0.0.1:%d", ports[1]),
		consulAddr: consulAddr,
	}
}

func (s agentSetup) write(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "agent.hcl")
	body := fmt.Sprintf(`node_id = %q
data_dir = %q
client { address = %q }
peer { address = %q }
consul { address = %q }
%s
`, s.nodeID, s.dataDir, s.clientAddr, s.peerAddr, s.consulAddr, s.extra)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func (s agentSetup) start(t *testing.T, env ...string) (*proc, string) {
	cfg := s.write(t)
	return startProc(t, env, "agent", "-config", cfg), cfg
}

func (s agentSetup) waitHealthy(t *testing.T, p *proc) {
	t.Helper()
	waitUntil(t, 30*time.Second, s.nodeID+" healthy", func() bool {
		if !p.running() {
			t.Fatalf("agent exited: %s", p.output())
		}
		code, _ := httpGet("http://" + s.clientAddr + "/v1/health")
		return code == 200
	})
}

func serviceEntries(t *testing.T, c *api.Client, passingOnly bool) map[string]*api.ServiceEntry {
	t.Helper()
	entries, _, err := c.Health().Service("logagent", "", passingOnly, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatalf("consul health: %v", err)
	}
	out := map[string]*api.ServiceEntry{}
	for _, e := range entries {
		out[e.Service.ID] = e
	}
	return out
}

func TestAgentRegistersServesAndStopsGracefully(t *testing.T) {
	consul := consultest.Start(t)
	s := newAgentSetup(t, "n1", consul.HTTPAddr())
	p, _ := s.start(t)
	s.waitHealthy(t, p)

	code, body := httpGet("http://" + s.peerAddr + "/v1/health")
	if code != 200 || !strings.Contains(body, `"node_id":"n1"`) {
		t.Errorf("peer health: %d %s", code, body)
	}
	code, body = httpGet("http://" + s.clientAddr + "/v1/nope")
	if code != 404 || !strings.Contains(body, `"code":"not_found"`) {
		t.Errorf("unknown path: %d %s, want a JSON 404", code, body)
	}

	var entry *api.ServiceEntry
	waitUntil(t, 10*time.Second, "a passing logagent-n1 service in Consul", func() bool {
		entry = serviceEntries(t, consul.Client(), true)["logagent-n1"]
		return entry != nil
	})
	meta := entry.Service.Meta
	if meta["node_id"] != "n1" || meta["peer_addr"] != s.peerAddr || meta["client_addr"] != s.clientAddr {
		t.Errorf("service meta %v", meta)
	}

	var m map[string]any
	b, err := os.ReadFile(filepath.Join(s.dataDir, "meta.json"))
	if err != nil || json.Unmarshal(b, &m) != nil || m["node_id"] != "n1" {
		t.Errorf("meta.json: %s %v", b, err)
	}

	p.signal(syscall.SIGTERM)
	if code := p.wait(20 * time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	if _, ok := serviceEntries(t, consul.Client(), false)["logagent-n1"]; ok {
		t.Error("service still registered after a graceful stop")
	}
	if _, err := os.Stat(filepath.Join(s.dataDir, "clean_shutdown")); err != nil {
		t.Errorf("no clean_shutdown marker: %v", err)
	}
	f, err := os.Open(filepath.Join(s.dataDir, ".lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Errorf("lock still held after stop: %v", err)
	}
	if !strings.Contains(p.output(), "stopped") {
		t.Errorf("no 'stopped' in the log")
	}
}

func TestSecondAgentOnSameDataDirExitsNamingTheLock(t *testing.T) {
	consul := consultest.Start(t)
	s := newAgentSetup(t, "n1", consul.HTTPAddr())
	first, _ := s.start(t)
	s.waitHealthy(t, first)

	second := newAgentSetup(t, "n1", consul.HTTPAddr())
	second.dataDir = s.dataDir
	p, _ := second.start(t)
	if code := p.wait(20 * time.Second); code != 1 {
		t.Fatalf("second agent exit code %d, want 1", code)
	}
	out := p.output()
	lock := filepath.Join(s.dataDir, ".lock")
	if !strings.Contains(out, lock) || !strings.Contains(out, fmt.Sprintf("pid %d", first.pid())) {
		t.Errorf("message does not name %s and the holder pid %d:\n%s", lock, first.pid(), out)
	}
	t.Logf("second agent said: %s", strings.TrimSpace(out))
	if !first.running() {
		t.Error("the first agent stopped")
	}
}

func TestDataDirOfAnotherNodeIsRefused(t *testing.T) {
	consul := consultest.Start(t)
	s := newAgentSetup(t, "n1", consul.HTTPAddr())
	if err := os.MkdirAll(s.dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.dataDir, "meta.json"), []byte(`{"node_id":"n9","format":2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	p, _ := s.start(t)
	if code := p.wait(20 * time.Second); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	if out := p.output(); !strings.Contains(out, `node "n9"`) {
		t.Errorf("message does not name the owner:\n%s", out)
	}
}

// A crashed agent's TTL check must turn critical within its TTL (the check is
// passed every TTL/3, so the last pass is at most that long before the kill).
func TestKilledAgentCheckTurnsCriticalWithinTTL(t *testing.T) {
	consul := consultest.Start(t)
	s := newAgentSetup(t, "n1", consul.HTTPAddr())
	p, _ := s.start(t) // shipped default check_ttl: 3s
	s.waitHealthy(t, p)
	waitUntil(t, 10*time.Second, "passing service", func() bool {
		return serviceEntries(t, consul.Client(), true)["logagent-n1"] != nil
	})

	const checkTTL = 3 * time.Second
	killed := time.Now()
	if err := syscall.Kill(p.pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(5 * time.Second)
	waitUntil(t, 3*checkTTL, "critical check", func() bool {
		e := serviceEntries(t, consul.Client(), false)["logagent-n1"]
		return e != nil && e.Checks.AggregatedStatus() == api.HealthCritical
	})
	elapsed := time.Since(killed)
	t.Logf("check critical %s after kill -9 (check_ttl %s)", elapsed.Round(time.Millisecond), checkTTL)
	// Consul's TTL timer fires at TTL after the last pass; allow polling and
	// scheduling slack on a loaded machine, but not a second TTL.
	if elapsed > checkTTL+time.Second {
		t.Errorf("critical after %s, want within the check TTL %s", elapsed, checkTTL)
	}
}

// blackhole accepts connections and never answers: a Consul that hangs.
func blackhole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

func TestWaitsForConsulSayingSo(t *testing.T) {
	s := newAgentSetup(t, "n1", blackhole(t))
	p, _ := s.start(t)
	waitUntil(t, 15*time.Second, "health saying it waits for Consul", func() bool {
		code, body := httpGet("http://" + s.clientAddr + "/v1/health")
		return code == 503 && strings.Contains(body, "waiting for Consul")
	})
	waitUntil(t, 15*time.Second, "the log saying what it waits for", func() bool {
		out := p.output()
		return strings.Contains(out, "waiting for Consul") && strings.Contains(out, "address="+s.consulAddr)
	})
	// Stopping while it waits is a normal stop, not a failure.
	p.signal(syscall.SIGTERM)
	if code := p.wait(20 * time.Second); code != 0 {
		t.Errorf("exit code %d when stopped while waiting for Consul, want 0", code)
	}
}

func TestSecondSignalExitsAtOnce(t *testing.T) {
	consul := consultest.Start(t)
	s := newAgentSetup(t, "n1", consul.HTTPAddr())
	p, _ := s.start(t)
	s.waitHealthy(t, p)

	// A frozen Consul makes the graceful stop's deregistration hang.
	if err := syscall.Kill(consul.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(consul.PID(), syscall.SIGCONT) })
	p.signal(syscall.SIGTERM)
	waitUntil(t, 10*time.Second, "graceful stop to begin", func() bool {
		return strings.Contains(p.output(), "logagent.agent: stopping")
	})
	time.Sleep(200 * time.Millisecond) // well inside the deregistration's 5s bound
	if !p.running() {
		t.Fatalf("the agent stopped although Consul was frozen:\n%s", p.output())
	}
	sent := time.Now()
	p.signal(syscall.SIGTERM)
	if code := p.wait(5 * time.Second); code != 1 {
		t.Errorf("exit code %d after a second signal, want 1", code)
	}
	t.Logf("exited %s after the second signal", time.Since(sent).Round(time.Millisecond))
}

// TestSIGHUPReloadsLogLevel: a SIGHUP applies a changed log_level, and
// names the changed settings it does not apply (a retention, the ISR's lag
// bound) instead of ignoring them silently; before, the agent logged only
// the log level's change, as if the rest had been applied too.
func TestSIGHUPReloadsLogLevel(t *testing.T) {
	consul := consultest.Start(t)
	s := newAgentSetup(t, "n1", consul.HTTPAddr())
	p, cfg := s.start(t)
	s.waitHealthy(t, p)

	rewrite := func(extra string) {
		t.Helper()
		s.extra = extra
		b, err := os.ReadFile(s.write(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cfg, b, 0o644); err != nil {
			t.Fatal(err)
		}
		p.signal(syscall.SIGHUP)
	}
	const ignored = "reload: settings changed since the start that take effect only after a restart"
	rewrite(`log_level = "debug"`)
	waitUntil(t, 10*time.Second, "reload message", func() bool {
		return strings.Contains(p.output(), "reload: log level changed: log_level=debug")
	})
	if strings.Contains(p.output(), ignored) {
		t.Errorf("a reload that changed only log_level warned of settings it ignored:\n%s", p.output())
	}

	rewrite("log_level = \"debug\"\nstorage {\n  retention = \"24h\"\n}\nreplication {\n  lag_time_max = \"20s\"\n}\n")
	want := ignored + "; the agent keeps running with the values it started with: settings=\"storage.retention, replication.lag_time_max\""
	waitUntil(t, 10*time.Second, "the settings the reload ignored", func() bool {
		return strings.Contains(p.output(), want)
	})
	if !p.running() {
		t.Fatal("SIGHUP stopped the agent")
	}
}

func TestNotifiesSystemd(t *testing.T) {
	consul := consultest.Start(t)
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s := newAgentSetup(t, "n1", consul.HTTPAddr())
	p, _ := s.start(t, "NOTIFY_SOCKET="+sock)

	read := func() string {
		t.Helper()
		buf := make([]byte, 256)
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		n, _, err := conn.ReadFromUnix(buf)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		return string(buf[:n])
	}
	if got := read(); got != "READY=1" {
		t.Errorf("first notification %q, want READY=1", got)
	}
	if code, _ := httpGet("http://" + s.clientAddr + "/v1/health"); code != 200 {
		t.Errorf("READY sent but health answers %d", code)
	}
	p.signal(syscall.SIGINT)
	if got := read(); got != "STOPPING=1" {
		t.Errorf("notification %q, want STOPPING=1", got)
	}
	if code := p.wait(20 * time.Second); code != 0 {
		t.Errorf("exit code %d", code)
	}
}
