package testcluster

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/internal/consultest"
	"github.com/logagent/logagent/internal/pki"
)

// Options configure a cluster.
type Options struct {
	// Agents is the number of agents, n1 to nN; default 3.
	Agents int
	// HCL is every agent's last configuration file, merged after the
	// cluster's own settings, so it can override them (durability,
	// timeouts).
	HCL string
	// Consul are options for the Consul server.
	Consul []consultest.Option
	// Dir, when set, holds every agent's data directory and logs (under
	// Dir/<node id>/) instead of the test's temporary directories, which
	// are removed when the test ends: a harness that keeps a failing run's
	// files for inspection owns and removes Dir itself.
	Dir string
	// Proxies puts each agent behind fault-injecting proxies (see Agent's
	// ConsulProxy, PeerProxy and ClientProxy).
	Proxies bool
	// Timing is how fast agents detect failures; default TimingFast.
	Timing Timing
	// Security turns on TLS and tokens.
	Security Security
	// Kafka gives every agent a Kafka listener (Agent.KafkaAddr).
	Kafka bool
}

// Timing chooses the failure-detection settings (consul session_ttl,
// check_ttl and lock_delay, replication lag_time_max and fetch_max_wait)
// of a cluster's agents.
type Timing string

const (
	// TimingFast shortens them: failover in about two seconds, a lagging
	// follower out of the ISR in two, so that tests of what happens after
	// a failure do not wait for it.
	TimingFast Timing = "fast"
	// TimingShipped leaves them unset, so agents run with the built-in
	// defaults a user gets: figures measured with it are what users see.
	TimingShipped Timing = "shipped"
)

// ParseTiming reads a Timing by its name.
func ParseTiming(s string) (Timing, error) {
	switch t := Timing(s); t {
	case TimingFast, TimingShipped:
		return t, nil
	}
	return "", fmt.Errorf("%w: %q (want %q or %q)", ErrUnknownTiming, s, TimingFast, TimingShipped)
}

// ErrUnknownTiming is returned by ParseTiming for a name it does not know.
var ErrUnknownTiming = errors.New("testcluster: unknown timing")

// Settings every agent of a test cluster starts with.
const baseHCL = `
log_level = "debug"
storage {
  segment_bytes = "64MiB"
}
`

// fastHCL is TimingFast's settings, merged after baseHCL.
const fastHCL = `
consul {
  session_ttl = "5s"
  check_ttl   = "2s"
  lock_delay  = "100ms"
}
replication {
  lag_time_max   = "2s"
  fetch_max_wait = "250ms"
}
`

// Timings are the failure-detection settings agents run with, as their
// configuration files resolve them (after Options.HCL).
type Timings struct {
	Timing       Timing
	SessionTTL   time.Duration
	CheckTTL     time.Duration
	LockDelay    time.Duration
	LagTimeMax   time.Duration
	FetchMaxWait time.Duration
}

// String names the timing with its values, to label measured figures.
func (t Timings) String() string {
	return fmt.Sprintf("%s timing (check_ttl %s, session_ttl %s, lock_delay %s, lag_time_max %s, fetch_max_wait %s)",
		t.Timing, t.CheckTTL, t.SessionTTL, t.LockDelay, t.LagTimeMax, t.FetchMaxWait)
}

const (
	healthyTimeout = 30 * time.Second
	stopGrace      = 15 * time.Second
	logTailBytes   = 64 << 10
)

// Cluster is a Consul server and agents, all stopped when the test ends.
type Cluster struct {
	t      testing.TB
	Consul *consultest.Server
	Agents []*Agent
	http   *http.Client
	// Timings are what the agents run with (every agent has the same).
	Timings Timings
	// built closes once Agents is complete, before any agent starts:
	// proxies read Agents from their own goroutines.
	built chan struct{}
	// CA signs the agents' certificates, with Security's TLS; CAFile is
	// its certificate.
	CA     *pki.CA
	CAFile string
	// ClientCert, with Security.ClientCerts, is the harness's client
	// certificate of the CA, also in ClientCertFile and ClientKeyFile.
	ClientCert                    *pki.Leaf
	ClientCertFile, ClientKeyFile string

	security                       Security
	peerTokenFile, clientTokenFile string
}

// Start runs Consul and the agents and waits until every agent is healthy.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Agents == 0 {
		opts.Agents = 3
	}
	timingHCL := ""
	switch opts.Timing {
	case "", TimingFast:
		opts.Timing, timingHCL = TimingFast, fastHCL
	case TimingShipped:
	default:
		t.Fatalf("testcluster: %v", fmt.Errorf("%w: %q", ErrUnknownTiming, opts.Timing))
	}
	bin := Binary(t)
	c := &Cluster{
		t:      t,
		Consul: consultest.Start(t, opts.Consul...),
		http:   &http.Client{Timeout: 60 * time.Second},
		built:  make(chan struct{}),
	}
	// Also on a failure while building, so that no proxy waits for ever.
	markBuilt := sync.OnceFunc(func() { close(c.built) })
	defer markBuilt()
	if opts.Security != (Security{}) {
		c.setUpSecurity(opts.Security)
	}
	for i := range opts.Agents {
		ports := consultest.FreePorts(t, 3)
		nodeID := "n" + strconv.Itoa(i+1)
		var dataParent, logDir string
		if opts.Dir == "" {
			dataParent, logDir = t.TempDir(), t.TempDir()
		} else {
			dataParent, logDir = filepath.Join(opts.Dir, nodeID), filepath.Join(opts.Dir, nodeID, "logs")
			if err := os.MkdirAll(logDir, 0o755); err != nil {
				t.Fatalf("testcluster: %v", err)
			}
		}
		a := &Agent{
			c:          c,
			bin:        bin,
			NodeID:     nodeID,
			DataDir:    filepath.Join(dataParent, "data"),
			ClientAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]),
			PeerAddr:   fmt.Sprintf("127.0.0.1:%d", ports[1]),
			ConsulAddr: c.Consul.HTTPAddr(),
			logDir:     logDir,
		}
		a.PeerAdvertise = a.PeerAddr
		if opts.Kafka {
			a.KafkaAddr = fmt.Sprintf("127.0.0.1:%d", ports[2])
		}
		if c.CA != nil {
			a.tlsDir = filepath.Join(a.logDir, "tls")
			if err := os.MkdirAll(a.tlsDir, 0o755); err != nil {
				t.Fatalf("testcluster: %v", err)
			}
			a.IssueCert()
		}
		if opts.Proxies {
			a.ConsulProxy = startProxy(t, a.ConsulAddr, nil)
			a.PeerProxy = startProxy(t, a.PeerAddr, c.identifyAgent)
			a.ClientProxy = startProxy(t, a.ClientAddr, nil)
			a.ConsulAddr, a.PeerAdvertise = a.ConsulProxy.Addr, a.PeerProxy.Addr
		}
		a.ConfigPaths = []string{
			writeFile(t, filepath.Join(a.logDir, "10-cluster.hcl"), baseHCL+timingHCL),
			filepath.Join(a.logDir, "20-agent.hcl"),
			writeFile(t, filepath.Join(a.logDir, "30-test.hcl"), opts.HCL),
		}
		a.WriteConfig()
		c.Agents = append(c.Agents, a)
	}
	c.Timings = resolveTimings(t, opts.Timing, c.Agents[0].ConfigPaths)
	markBuilt()
	for _, a := range c.Agents {
		a.Start()
	}
	for _, a := range c.Agents {
		a.WaitHealthy()
	}
	return c
}

// resolveTimings loads an agent's configuration files as the agent does,
// over the same built-in defaults, so the figures a test labels with them
// are the values in force, not a copy that could drift.
func resolveTimings(t testing.TB, timing Timing, paths []string) Timings {
	t.Helper()
	cfg, err := config.Load(paths...)
	if err != nil {
		t.Fatalf("testcluster: load the agents' configuration: %v", err)
	}
	return Timings{Timing: timing, SessionTTL: cfg.Consul.SessionTTL, CheckTTL: cfg.Consul.CheckTTL, LockDelay: cfg.Consul.LockDelay,
		LagTimeMax: cfg.Replication.LagTimeMax, FetchMaxWait: cfg.Replication.FetchMaxWait}
}

// Agent is one logagent process and its files. Its process can be stopped
// and started again on the same data directory and ports.
type Agent struct {
	c   *Cluster
	bin string

	NodeID  string
	DataDir string
	// ClientAddr and PeerAddr are where the agent listens.
	ClientAddr string
	PeerAddr   string
	// PeerAdvertise is what other agents dial to reach this one.
	PeerAdvertise string
	// KafkaAddr is the agent's Kafka listener, "" without Options.Kafka.
	KafkaAddr string
	// ConsulAddr is the Consul address this agent uses.
	ConsulAddr string
	// ConsulProxy, with Options.Proxies, carries the agent's every
	// request to Consul: Forward is agent to Consul.
	ConsulProxy *Proxy
	// PeerProxy, with Options.Proxies, is the agent's advertised peer
	// address: every other agent reaches this one's peer listener through
	// it (followers fetching from a leader dial the leader's), so Forward
	// is the other agents to this one. It knows which agent dialed each
	// connection (by the socket's owner in /proc), for CutFrom and
	// Cluster.CutLink.
	PeerProxy *Proxy
	// ClientProxy, with Options.Proxies, is a way into the agent's client
	// API that can be cut: a client that dials its Addr (NewClient)
	// instead of ClientAddr, where the agent still listens and the
	// harness's own requests go, loses its link to the agent alone.
	// Forward is client to agent.
	ClientProxy *Proxy
	// ConfigPaths are the agent's -config files, merged in order: the
	// cluster's timings, the agent's identity and addresses (written by
	// WriteConfig), the test's Options.HCL.
	ConfigPaths []string
	// FileLimit, when not 0, is the RLIMIT_NOFILE (soft and hard) the
	// next Start runs the process under: /bin/sh sets it with ulimit and
	// then execs the binary, so the PID stays the agent's.
	FileLimit uint64
	// CertFile and KeyFile are the agent's certificate and key (with
	// Security's TLS), in tlsDir.
	CertFile, KeyFile string
	tlsDir            string
	logDir            string

	mu     sync.Mutex
	proc   *process
	starts int
}

type process struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error // set before done closes
}

// WriteConfig writes the agent's identity and addresses; call it after
// changing them, before the next Start.
func (a *Agent) WriteConfig() {
	a.c.t.Helper()
	peer, client := a.securityHCL()
	kafka := ""
	if a.KafkaAddr != "" {
		kafka = fmt.Sprintf("kafka { address = %q }\n", a.KafkaAddr)
	}
	writeFile(a.c.t, a.ConfigPaths[1], fmt.Sprintf(`node_id  = %q
data_dir = %q
client {
  address = %q
%s}
peer {
  address           = %q
  advertise_address = %q
%s}
consul { address = %q }
%s`, a.NodeID, a.DataDir, a.ClientAddr, client, a.PeerAddr, a.PeerAdvertise, peer, a.ConsulAddr, kafka))
}

// startProxy runs a proxy to target, closed when the test ends.
func startProxy(t testing.TB, target string, identify func(local, remote net.Addr) string) *Proxy {
	t.Helper()
	p, err := newProxy(target, identify)
	if err != nil {
		t.Fatalf("testcluster: proxy to %s: %v", target, err)
	}
	t.Cleanup(p.Close)
	return p
}

// CutLink stalls every byte that agent from sends to agent to over their
// peer connections, both those from dials (requests) and those to dials
// (answers), leaving the other direction and other agents alone. Heal the
// two agents' PeerProxy to undo it. It needs Options.Proxies.
func (c *Cluster) CutLink(from, to *Agent) {
	c.t.Helper()
	if from.PeerProxy == nil || to.PeerProxy == nil {
		c.t.Fatalf("testcluster: CutLink needs Options.Proxies")
	}
	to.PeerProxy.CutFrom(from.NodeID, Forward)
	from.PeerProxy.CutFrom(to.NodeID, Backward)
}

// LogDir is where the agent's process logs are written, one file per
// start.
func (a *Agent) LogDir() string { return a.logDir }

func writeFile(t testing.TB, path, body string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	return path
}

// Start runs the agent's process (again, on the same data, after a stop).
// It does not wait for it to be healthy: see WaitHealthy.
func (a *Agent) Start() {
	t := a.c.t
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.proc != nil && !a.proc.exited() {
		t.Fatalf("testcluster: %s is already running (pid %d)", a.NodeID, a.proc.pid())
	}
	a.starts++
	logPath := filepath.Join(a.logDir, fmt.Sprintf("%s.%d.log", a.NodeID, a.starts))
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	args := []string{"agent"}
	for _, p := range a.ConfigPaths {
		args = append(args, "-config", p)
	}
	cmd := exec.Command(a.bin, args...)
	if a.FileLimit > 0 {
		shArgs := append([]string{"-c", `ulimit -n "$0" && exec "$@"`, strconv.FormatUint(a.FileLimit, 10), a.bin}, args...)
		cmd = exec.Command("/bin/sh", shArgs...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so a stop reaches anything it started; and
	// the kernel kills it if the test binary dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("testcluster: start %s: %v", a.NodeID, err)
	}
	p := &process{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	a.proc = p
	t.Cleanup(func() {
		p.signal(syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("testcluster: tail of %s (pid %d):\n%s", logPath, p.pid(), tail(logPath, logTailBytes))
		}
	})
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process group; a process that is gone is not an
// error.
func (p *process) signal(sig syscall.Signal) {
	if p.exited() {
		return
	}
	if err := syscall.Kill(-p.pid(), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = p.cmd.Process.Signal(sig)
	}
}

func (a *Agent) current() *process {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.proc == nil {
		a.c.t.Fatalf("testcluster: %s was never started", a.NodeID)
	}
	return a.proc
}

// LogPath is the log file of the process's current (or last) start.
func (a *Agent) LogPath() string { return a.current().logPath }

// PID is the running process's id.
func (a *Agent) PID() int { return a.current().pid() }

// Running reports whether the process is alive.
func (a *Agent) Running() bool { return !a.current().exited() }

// Kill ends the process with SIGKILL, as a crash, and waits for it.
func (a *Agent) Kill() {
	p := a.current()
	p.signal(syscall.SIGCONT) // a paused process must die too
	p.signal(syscall.SIGKILL)
	<-p.done
}

// Terminate sends SIGTERM (the graceful stop) and waits for the exit; it
// returns the exit code, failing the test if the process does not exit
// within the grace period.
func (a *Agent) Terminate() int {
	t := a.c.t
	t.Helper()
	p := a.current()
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		t.Fatalf("testcluster: %s (pid %d) still running %s after SIGTERM", a.NodeID, p.pid(), stopGrace)
	}
	var exitErr *exec.ExitError
	if errors.As(p.err, &exitErr) {
		return exitErr.ExitCode()
	}
	return 0
}

// Pause stops the process with SIGSTOP; Resume continues it.
func (a *Agent) Pause() { a.current().signal(syscall.SIGSTOP) }

// Resume continues a paused process.
func (a *Agent) Resume() { a.current().signal(syscall.SIGCONT) }

// Restart starts the agent again on its data and waits until it is
// healthy. The previous process must have exited.
func (a *Agent) Restart() {
	a.c.t.Helper()
	a.Start()
	a.WaitHealthy()
}

// WaitHealthy waits until the agent's /v1/health answers 200.
func (a *Agent) WaitHealthy() {
	t := a.c.t
	t.Helper()
	p := a.current()
	deadline := time.Now().Add(healthyTimeout)
	for {
		if p.exited() {
			t.Fatalf("testcluster: %s exited while starting: %v\n%s", a.NodeID, p.err, tail(p.logPath, logTailBytes))
		}
		resp, err := a.c.http.Get(a.url("/v1/health", nil))
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("testcluster: %s not healthy after %s (last: %v)", a.NodeID, healthyTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PartitionDir is where the agent keeps a partition's log.
func (a *Agent) PartitionDir(topic string, partition int) string {
	return filepath.Join(a.DataDir, topic+"-"+strconv.Itoa(partition))
}

func tail(path string, limit int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	if int64(len(b)) > limit {
		b = b[int64(len(b))-limit:]
	}
	return strings.TrimRight(string(b), "\n")
}
