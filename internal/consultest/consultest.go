package consultest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

const (
	// modulePath identifies the repository root when looking for bin/consul.
	modulePath = "github.com/logagent/logagent"
	// binEnv overrides where the consul binary is.
	binEnv = "LOGAGENT_CONSUL_BIN"

	// readyTimeout is generous because a persistent server on a loaded
	// 2-core CI machine can take several seconds to elect itself.
	readyTimeout = 60 * time.Second
	readyPoll    = 25 * time.Millisecond
	probeTimeout = 2 * time.Second
	// stopGrace is how long Consul gets to exit on SIGTERM before SIGKILL.
	stopGrace = 10 * time.Second
	// startAttempts covers the race between probing a free port and Consul
	// binding it: another process may take the port in between.
	startAttempts = 3
	// logTailBytes bounds what a failed test prints of Consul's log.
	logTailBytes = 64 << 10
)

// errPortTaken means Consul could not bind one of its ports; Start retries
// with fresh ports.
var errPortTaken = errors.New("consultest: port already in use")

// nodeSeq makes node names unique among the servers of one test process.
var nodeSeq atomic.Int64

// Option changes how Start runs Consul.
type Option func(*settings)

type settings struct {
	persistent bool
	acl        bool
	hcl        []string
}

// Persistent runs a single bootstrapped server with its data in a directory
// under t.TempDir() instead of -dev mode (which keeps everything in memory),
// so KV, sessions and registrations survive Restart.
func Persistent() Option {
	return func(s *settings) { s.persistent = true }
}

// WithACL enforces ACLs with default_policy "deny". The generated management
// token is in ManagementToken and is what Config and Client use; the Consul
// agent itself also uses it, so its own node registration is never blocked.
func WithACL() Option {
	return func(s *settings) { s.acl = true }
}

// WithHCL appends a Consul configuration fragment (passed as -hcl).
func WithHCL(fragment string) Option {
	return func(s *settings) { s.hcl = append(s.hcl, fragment) }
}

// Server is one running (or stopped) Consul process owned by a test.
type Server struct {
	t        testing.TB
	bin      string
	settings settings
	nodeName string
	dataDir  string
	logPath  string
	token    string
	ports    serverPorts
	client   *api.Client

	mu   sync.Mutex
	proc *process
}

type serverPorts struct {
	http, serfLAN, serfWAN, server int
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start runs Consul on free loopback ports, waits until it has elected a
// leader and registered its own node (serfHealth passing), and stops it when
// the test ends. A missing binary fails the test: it is never skipped.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	bin, err := BinaryPath()
	if err != nil {
		t.Fatalf("consultest: %v: run `make consul`", err)
	}
	s := &Server{
		t:        t,
		bin:      bin,
		nodeName: fmt.Sprintf("consultest-%d-%d", os.Getpid(), nodeSeq.Add(1)),
	}
	for _, opt := range opts {
		opt(&s.settings)
	}
	dir := t.TempDir()
	s.logPath = filepath.Join(dir, "consul.log")
	if s.settings.persistent {
		s.dataDir = filepath.Join(dir, "data")
	}
	if s.settings.acl {
		s.token = newUUID(t)
	}
	// Registered after TempDir, so it runs first: the log still exists when
	// it is dumped.
	t.Cleanup(s.cleanup)

	for attempt := 1; ; attempt++ {
		p := FreePorts(t, 4)
		s.ports = serverPorts{http: p[0], serfLAN: p[1], serfWAN: p[2], server: p[3]}
		err := s.launch(fmt.Sprintf("start attempt %d", attempt))
		if err == nil {
			break
		}
		if errors.Is(err, errPortTaken) && attempt < startAttempts {
			t.Logf("consultest: %v; retrying with other ports", err)
			continue
		}
		t.Fatalf("consultest: %v", err)
	}
	client, err := api.NewClient(s.Config())
	if err != nil {
		t.Fatalf("consultest: api client: %v", err)
	}
	s.client = client
	return s
}

// HTTPAddr is "127.0.0.1:port" of the HTTP API.
func (s *Server) HTTPAddr() string {
	return "127.0.0.1:" + strconv.Itoa(s.ports.http)
}

// NodeName is the Consul node name of this server's agent.
func (s *Server) NodeName() string { return s.nodeName }

// ManagementToken is the ACL management token, empty without WithACL.
func (s *Server) ManagementToken() string { return s.token }

// LogPath is the file holding Consul's output.
func (s *Server) LogPath() string { return s.logPath }

// Config returns a fresh API configuration for this server, carrying the
// management token in ACL mode. It ignores CONSUL_* environment variables.
func (s *Server) Config() *api.Config {
	return &api.Config{Address: s.HTTPAddr(), Scheme: "http", Token: s.token}
}

// Client is an API client for this server with the management token.
func (s *Server) Client() *api.Client { return s.client }

// PID is the running Consul's process id, 0 when stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Stop terminates Consul (SIGTERM to its process group, SIGKILL after a
// grace period) and waits for it to exit. Stopping a stopped server is a
// no-op.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

// Restart stops Consul and starts it again on the same ports, waiting for a
// leader. Only a Persistent server keeps its state across a restart. Call it
// from the test's goroutine: it fails the test on error.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.StartAgain()
}

// StartAgain starts a stopped Consul on the same ports, waiting for a
// leader, as Restart does; a running one is left as it is. Call it from
// the test's goroutine: it fails the test on error.
func (s *Server) StartAgain() {
	s.t.Helper()
	if s.PID() != 0 {
		return
	}
	if err := s.launch("start again"); err != nil {
		s.t.Fatalf("consultest: start again: %v", err)
	}
}

func (s *Server) cleanup() {
	s.Stop()
	if s.t.Failed() {
		s.t.Logf("consultest: tail of %s:\n%s", s.logPath, tail(s.logPath, logTailBytes))
	}
}

func (s *Server) args() []string {
	args := []string{"agent"}
	if s.settings.persistent {
		args = append(args, "-server", "-bootstrap", "-data-dir", s.dataDir,
			"-hcl", "performance { raft_multiplier = 1 }")
	} else {
		args = append(args, "-dev")
	}
	args = append(args,
		"-node", s.nodeName,
		"-bind", "127.0.0.1",
		"-client", "127.0.0.1",
		"-http-port", strconv.Itoa(s.ports.http),
		"-dns-port", "-1",
		"-grpc-port", "-1",
		"-serf-lan-port", strconv.Itoa(s.ports.serfLAN),
		"-serf-wan-port", strconv.Itoa(s.ports.serfWAN),
		"-server-port", strconv.Itoa(s.ports.server),
		"-log-level", "debug",
		"-hcl", "ports { grpc_tls = -1 }",
		"-hcl", `session_ttl_min = "1s"`,
		"-hcl", "disable_update_check = true",
	)
	if s.settings.acl {
		args = append(args, "-hcl", fmt.Sprintf(
			`acl { enabled = true default_policy = "deny" tokens { initial_management = %q agent = %q } }`,
			s.token, s.token))
	}
	for _, fragment := range s.settings.hcl {
		args = append(args, "-hcl", fragment)
	}
	return args
}

// launch starts the process and waits until it is ready; on failure the
// process is stopped before returning.
func (s *Server) launch(reason string) error {
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	// The child holds its own descriptor; ours is only for the banner.
	defer logFile.Close()
	logStart, err := logFile.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("seek log: %w", err)
	}
	args := s.args()
	fmt.Fprintf(logFile, "=== consultest %s: %s %s\n", reason, s.bin, strings.Join(args, " "))

	cmd := exec.Command(s.bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	proc := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		proc.err = cmd.Wait()
		close(proc.done)
	}()
	s.mu.Lock()
	s.proc = proc
	s.mu.Unlock()

	if err := s.waitReady(proc, logStart); err != nil {
		s.Stop()
		return err
	}
	return nil
}

// waitReady polls until Consul is usable; logStart is where this run's output
// begins, so a failure is judged by this run's log only.
func (s *Server) waitReady(proc *process, logStart int64) error {
	client, err := api.NewClient(s.Config())
	if err != nil {
		return fmt.Errorf("api client: %w", err)
	}
	deadline := time.Now().Add(readyTimeout)
	var lastErr error
	for {
		select {
		case <-proc.done:
			if logContains(s.logPath, logStart, "address already in use") {
				return fmt.Errorf("%w: consul exited: %v", errPortTaken, proc.err)
			}
			return fmt.Errorf("consul exited before it was ready: %v (log %s)", proc.err, s.logPath)
		default:
		}
		if lastErr = s.probe(client); lastErr == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("consul not ready after %s: %w", readyTimeout, lastErr)
		}
		time.Sleep(readyPoll)
	}
}

// probe reports whether the server has a leader and its own node is in the
// catalog with serfHealth passing: sessions linked to serfHealth can only be
// created after that.
func (s *Server) probe(client *api.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	q := (&api.QueryOptions{}).WithContext(ctx)
	leader, err := client.Status().LeaderWithQueryOptions(q)
	if err != nil {
		return err
	}
	if leader == "" {
		return errors.New("no leader yet")
	}
	checks, _, err := client.Health().Node(s.nodeName, q)
	if err != nil {
		return err
	}
	for _, check := range checks {
		if check.CheckID == "serfHealth" && check.Status == api.HealthPassing {
			return nil
		}
	}
	return errors.New("node not registered yet")
}

func (s *Server) stopLocked() {
	proc := s.proc
	if proc == nil {
		return
	}
	s.proc = nil
	pgid := proc.cmd.Process.Pid
	// Signalling the group reaches anything Consul started; ESRCH only means
	// it is already gone.
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-proc.done:
		return
	case <-time.After(stopGrace):
	}
	s.t.Logf("consultest: consul pid %d ignored SIGTERM for %s; killing", pgid, stopGrace)
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-proc.done
}

// BinaryPath locates bin/consul: $LOGAGENT_CONSUL_BIN, else bin/consul in
// the root of the github.com/logagent/logagent module found by walking up
// from the working directory.
func BinaryPath() (string, error) {
	if path := os.Getenv(binEnv); path != "" {
		return executable(path)
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	return executable(filepath.Join(root, "bin", "consul"))
}

func executable(path string) (string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("consul binary: %w", err)
	}
	if info.IsDir() || info.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("consul binary %s is not an executable file", path)
	}
	return path, nil
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		if declaresModule(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module %s above the working directory (set %s)", modulePath, binEnv)
		}
		dir = parent
	}
}

func declaresModule(goMod string) bool {
	f, err := os.Open(goMod)
	if err != nil {
		return false
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) == 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == modulePath
		}
	}
	return false
}

func newUUID(t testing.TB) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("consultest: token: %v", err)
	}
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func logContains(path string, from int64, needle string) bool {
	data, err := os.ReadFile(path)
	return err == nil && from <= int64(len(data)) && bytes.Contains(data[from:], []byte(needle))
}

func tail(path string, limit int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot stat log: %v)", err)
	}
	offset := max(info.Size()-limit, 0)
	data, err := io.ReadAll(io.NewSectionReader(f, offset, info.Size()-offset))
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	return string(data)
}
