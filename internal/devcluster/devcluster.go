package devcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/logagent/logagent/config"
)

// Ports of the dev cluster (docs/design.md §11). Consul's are offset from its
// defaults (8500, 8300-8302) so that a Consul the user already runs is left
// alone.
const (
	firstClientPort  = 7070
	firstPeerPort    = 7171
	firstKafkaPort   = 9092
	consulHTTPPort   = 18500
	consulServerPort = 18300
	consulSerfLAN    = 18301
	consulSerfWAN    = 18302
	// DefaultAgents is how many agents a dev cluster runs unless told.
	DefaultAgents = 3
	// MaxAgents is the most agents whose ports stay apart: agent i's client
	// port is 7070+i and agent 0's peer port 7171, so a 102nd agent's client
	// API would take the first peer port.
	MaxAgents = firstPeerPort - firstClientPort
)

// ErrBadAgents refuses an agent count or port offset whose ports would
// collide or leave the valid range.
var ErrBadAgents = errors.New("devcluster: bad agent count or port offset")

// Options configure a dev cluster.
type Options struct {
	// Dir holds the cluster's state and logs.
	Dir string
	// Logagent is the logagent executable to run the agents with.
	Logagent string
	// ConsulBin is the Consul binary; ignored when ConsulAddr is set.
	ConsulBin string
	// ConsulAddr, when set, is a running Consul to use instead of starting one.
	ConsulAddr string
	// ExtraConfig lists more configuration files or directories for every
	// agent, merged after the dev settings and before each agent's own file.
	ExtraConfig []string
	// PortOffset shifts every port of the cluster, so two clusters (or a
	// test and a developer's cluster) can run side by side.
	PortOffset int
	// Agents is how many agents to run, DefaultAgents when 0.
	Agents int
	// StartTimeout bounds how long the cluster may take to come up.
	StartTimeout time.Duration
	// Out receives the banner and progress.
	Out io.Writer
}

type agentSpec struct {
	nodeID     string
	clientAddr string
	peerAddr   string
	kafkaAddr  string
	dir        string
}

// Run starts the cluster, prints a banner, and keeps it up until ctx is
// cancelled; then it stops the agents and Consul, in that order, by PID.
// kill, when it fires, turns the graceful stop into an immediate kill.
func Run(ctx context.Context, kill <-chan struct{}, o Options) error {
	if o.StartTimeout == 0 {
		o.StartTimeout = 60 * time.Second
	}
	var children []*child
	defer func() { stopAll(children, kill, o.Out) }()

	consulAddr := o.ConsulAddr
	if o.Agents == 0 {
		o.Agents = DefaultAgents
	}
	wantPorts, err := Ports(o.Agents, o.PortOffset, consulAddr == "")
	if err != nil {
		return err
	}
	specs := make([]agentSpec, o.Agents)
	for i := range specs {
		specs[i] = agentSpec{
			nodeID:     fmt.Sprintf("n%d", i+1),
			clientAddr: fmt.Sprintf("127.0.0.1:%d", firstClientPort+o.PortOffset+i),
			peerAddr:   fmt.Sprintf("127.0.0.1:%d", firstPeerPort+o.PortOffset+i),
			kafkaAddr:  fmt.Sprintf("127.0.0.1:%d", firstKafkaPort+o.PortOffset+i),
			dir:        filepath.Join(o.Dir, fmt.Sprintf("n%d", i+1)),
		}
	}
	if err := checkPortsFree(wantPorts); err != nil {
		return err
	}
	if err := prepareDir(o, specs); err != nil {
		return err
	}

	if consulAddr == "" {
		consulAddr = fmt.Sprintf("127.0.0.1:%d", consulHTTPPort+o.PortOffset)
		c, err := startChild("consul", filepath.Join(o.Dir, "consul.log"), o.ConsulBin, consulArgs(o.PortOffset)...)
		if err != nil {
			return err
		}
		children = append(children, c)
		fmt.Fprintf(o.Out, "started consul (pid %d), waiting for its leader\n", c.pid())
		if err := waitFor(ctx, o.StartTimeout, c, &http.Client{Timeout: time.Second}, "http://"+consulAddr+"/v1/status/leader", func(body string) bool {
			return strings.Trim(strings.TrimSpace(body), `"`) != ""
		}); err != nil {
			return fmt.Errorf("devcluster: consul did not come up (see %s): %w", filepath.Join(o.Dir, "consul.log"), err)
		}
	}

	for _, s := range specs {
		if err := writeAgentConfig(s, consulAddr); err != nil {
			return err
		}
		logPath := filepath.Join(o.Dir, s.nodeID+".log")
		args := []string{"agent"}
		for _, path := range agentConfigPaths(o, s) {
			args = append(args, "-config", path)
		}
		c, err := startChild(s.nodeID, logPath, o.Logagent, args...)
		if err != nil {
			return err
		}
		children = append(children, c)
		fmt.Fprintf(o.Out, "started agent %s (pid %d)\n", s.nodeID, c.pid())
	}
	probe, scheme, err := healthProbe(agentConfigPaths(o, specs[0]))
	if err != nil {
		return err
	}
	for i, s := range specs {
		c := children[len(children)-len(specs)+i]
		if err := waitFor(ctx, o.StartTimeout, c, probe, scheme+"://"+s.clientAddr+"/v1/health", nil); err != nil {
			return fmt.Errorf("devcluster: agent %s did not become healthy (see %s): %w", s.nodeID, filepath.Join(o.Dir, s.nodeID+".log"), err)
		}
	}
	printBanner(o, specs, consulAddr, scheme)

	exited := make(chan *child, len(children))
	for _, c := range children {
		go func(c *child) {
			<-c.done
			exited <- c
		}(c)
	}
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(o.Out, "\nstopping the dev cluster")
			return nil
		case c := <-exited:
			fmt.Fprintf(o.Out, "%s (pid %d) exited: %v; the rest keeps running (Ctrl-C stops all)\n", c.name, c.pid(), c.err)
			if c.name == "consul" {
				return fmt.Errorf("devcluster: consul exited: %v (see %s)", c.err, filepath.Join(o.Dir, "consul.log"))
			}
		}
	}
}

// Ports lists every port a dev cluster of n agents at offset off listens
// on (Consul's only when withConsul): agent i (from 0) has client 7070+i,
// peer 7171+i and Kafka 9092+i, Consul HTTP 18500 and server and serf
// 18300-18302, each plus off. An n or off that would give two of them the
// same port, or one outside 1-65535, is ErrBadAgents.
func Ports(n, off int, withConsul bool) ([]int, error) {
	if n < 1 || n > MaxAgents {
		return nil, fmt.Errorf("%w: %d agents: between 1 and %d (agent %d's client port would be agent n1's peer port)", ErrBadAgents, n, MaxAgents, MaxAgents+1)
	}
	var ports []int
	if withConsul {
		ports = append(ports, consulHTTPPort+off, consulServerPort+off, consulSerfLAN+off, consulSerfWAN+off)
	}
	for i := range n {
		ports = append(ports, firstClientPort+off+i, firstPeerPort+off+i, firstKafkaPort+off+i)
	}
	seen := make(map[int]bool, len(ports))
	for _, p := range ports {
		switch {
		case p < 1 || p > 65535:
			return nil, fmt.Errorf("%w: %d agents at port offset %d need port %d, outside 1-65535", ErrBadAgents, n, off, p)
		case seen[p]:
			return nil, fmt.Errorf("%w: %d agents at port offset %d use port %d twice", ErrBadAgents, n, off, p)
		}
		seen[p] = true
	}
	return ports, nil
}

func consulArgs(off int) []string {
	return []string{"agent", "-dev", "-node", "logagent-dev",
		"-bind", "127.0.0.1", "-client", "127.0.0.1",
		"-http-port", fmt.Sprint(consulHTTPPort + off), "-dns-port", "-1", "-grpc-port", "-1",
		"-server-port", fmt.Sprint(consulServerPort + off),
		"-serf-lan-port", fmt.Sprint(consulSerfLAN + off), "-serf-wan-port", fmt.Sprint(consulSerfWAN + off),
		"-hcl", "ports { grpc_tls = -1 }",
		"-hcl", `session_ttl_min = "1s"`,
	}
}

// prepareDir lays out the state directory. A dev Consul keeps its data in
// memory, so metadata does not survive a restart; partitions left from an
// earlier run would belong to topics Consul no longer knows. Each run
// therefore starts the agents with empty data directories; with an external
// Consul (ConsulAddr) the agents' state is kept.
func prepareDir(o Options, specs []agentSpec) error {
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return fmt.Errorf("devcluster: %w", err)
	}
	for _, s := range specs {
		if o.ConsulAddr == "" {
			if err := os.RemoveAll(s.dir); err != nil {
				return fmt.Errorf("devcluster: clear %s: %w", s.dir, err)
			}
		}
		if err := os.MkdirAll(s.dir, 0o755); err != nil {
			return fmt.Errorf("devcluster: %w", err)
		}
	}
	// The shared settings come from the binary (config/dev), so they match it.
	return fs.WalkDir(config.DevFiles, "dev", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := config.DevFiles.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(o.Dir, filepath.Base(path)), b, 0o644)
	})
}

func writeAgentConfig(s agentSpec, consulAddr string) error {
	body := fmt.Sprintf(`# Written by logagent dev for agent %[1]s.
node_id  = %[1]q
data_dir = %[2]q

client {
  address = %[3]q
}

peer {
  address = %[4]q
}

kafka {
  address = %[6]q
}

consul {
  address = %[5]q
}
`, s.nodeID, filepath.Join(s.dir, "data"), s.clientAddr, s.peerAddr, consulAddr, s.kafkaAddr)
	return os.WriteFile(filepath.Join(s.dir, "agent.hcl"), []byte(body), 0o644)
}

func checkPortsFree(ports []int) error {
	var busy []string
	for _, p := range ports {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			busy = append(busy, fmt.Sprint(p))
			continue
		}
		ln.Close()
	}
	if len(busy) > 0 {
		return fmt.Errorf("devcluster: port(s) %s on 127.0.0.1 are in use (another logagent dev?)", strings.Join(busy, ", "))
	}
	return nil
}

// agentConfigPaths are an agent's -config files, in order: the dev
// settings, the extra files, the agent's own.
func agentConfigPaths(o Options, s agentSpec) []string {
	paths := append([]string{filepath.Join(o.Dir, "dev.hcl")}, o.ExtraConfig...)
	return append(paths, filepath.Join(s.dir, "agent.hcl"))
}

// healthProbe is how the agents' health is asked, as their configuration
// (the same for all but the addresses) says: over https when client.tls is
// set, verifying the agent against the system's roots and the CAs the
// configuration names, presenting the peer certificate (else the client
// one) to a client API that requires a client certificate.
func healthProbe(paths []string) (*http.Client, string, error) {
	cfg, err := config.Load(paths...)
	if err != nil {
		return nil, "", fmt.Errorf("devcluster: the agents' configuration: %w", err)
	}
	if cfg.Client.TLS == nil {
		return &http.Client{Timeout: time.Second}, "http", nil
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	var cert tls.Certificate
	// The peer block last: its certificate, an agent's client certificate
	// among agents, is the one presented when both are set.
	for _, files := range []*config.TLS{cfg.Client.TLS, cfg.Peer.TLS} {
		if files == nil {
			continue
		}
		m, err := files.Load()
		if err != nil {
			return nil, "", fmt.Errorf("devcluster: %w", err)
		}
		for _, ca := range m.CACerts {
			roots.AddCert(ca)
		}
		cert = m.Cert
	}
	tlsCfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cfg.Client.TLS.CAFile != "" {
		tlsCfg.Certificates = []tls.Certificate{cert}
	}
	return &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}, "https", nil
}

// waitFor polls url with client until it answers 200 (and ok accepts the
// body), the child exits, ctx ends or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, c *child, client *http.Client, url string, ok func(string) bool) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		resp, err := client.Get(url)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && (ok == nil || ok(string(b))) {
				return nil
			}
			last = fmt.Errorf("%s answered %d: %s", url, resp.StatusCode, strings.TrimSpace(string(b)))
		} else {
			last = err
		}
		if c.exited() {
			return fmt.Errorf("it exited: %v", c.err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s: %v", timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func printBanner(o Options, specs []agentSpec, consulAddr, scheme string) {
	w := o.Out
	fmt.Fprintln(w)
	fmt.Fprintln(w, "logagent dev cluster is up")
	fmt.Fprintf(w, "  consul       http://%s  (UI: http://%s/ui/)\n", consulAddr, consulAddr)
	for _, s := range specs {
		fmt.Fprintf(w, "  agent %s     client %s://%s  peer %s  kafka %s  log %s\n", s.nodeID, scheme, s.clientAddr, s.peerAddr, s.kafkaAddr, filepath.Join(o.Dir, s.nodeID+".log"))
	}
	fmt.Fprintf(w, "  state        %s\n", o.Dir)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Try:  curl -s %s://%s/v1/health\n", scheme, specs[0].clientAddr)
	fmt.Fprintf(w, "      curl -s 'http://%s/v1/health/service/logagent?passing'\n", consulAddr)
	fmt.Fprintf(w, "      kcat -b %s -L   (any Kafka client: bootstrap.servers=%s)\n", specs[0].kafkaAddr, specs[0].kafkaAddr)
	fmt.Fprintln(w, "Ctrl-C stops everything.")
}

// stopAll stops agents first, so they deregister and release leadership
// while Consul still runs, then Consul. A signal on kill turns it into an
// immediate kill of whatever is left.
func stopAll(children []*child, kill <-chan struct{}, out io.Writer) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := len(children) - 1; i >= 0; i-- {
			c := children[i]
			if err := c.stop(15 * time.Second); err != nil {
				fmt.Fprintln(out, err)
			}
		}
	}()
	select {
	case <-done:
	case <-kill:
		fmt.Fprintln(out, "killing every process of the dev cluster")
		for _, c := range children {
			c.kill()
		}
		<-done
	}
}

// FindConsul locates the Consul binary: LOGAGENT_CONSUL_BIN, bin/consul under
// the working directory, consul beside the logagent executable, then PATH.
func FindConsul(logagentExe string) (string, error) {
	candidates := []string{os.Getenv("LOGAGENT_CONSUL_BIN"), filepath.Join("bin", "consul"), filepath.Join(filepath.Dir(logagentExe), "consul")}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if info, err := os.Stat(c); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return filepath.Abs(c)
		}
	}
	if p, err := exec.LookPath("consul"); err == nil {
		return p, nil
	}
	return "", errors.New("devcluster: no consul binary: run `make consul` (it builds bin/consul), set LOGAGENT_CONSUL_BIN, or pass -consul ADDR to use a running Consul")
}
