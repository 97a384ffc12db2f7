package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/hcl/v2"

	"github.com/logagent/logagent/wire"
)

// Bounds that validation enforces. They are here, not scattered, so that
// docs and agent.hcl can be checked against one place.
const (
	minSegmentBytes = 4 << 10
	// maxSegmentBytes keeps every file position inside the index's u32.
	maxSegmentBytes = 2 << 30
	maxLockDelay    = 60 * time.Second
	minLockDelay    = time.Millisecond
	maxSessionTTL   = 24 * time.Hour
	// The agent's local lease ends a safety margin (0.5s) before what a
	// session renewal or a check pass proves; TTLs below these leave it no
	// room to renew in time.
	minSessionTTL = 2 * time.Second
	minCheckTTL   = 2 * time.Second
)

// MaxTopicPartitions bounds a topic's partition count, in topic_defaults
// and in a topic creation request alike.
const MaxTopicPartitions = 10000

var nodeIDPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$`)

var logLevels = []string{"trace", "debug", "info", "warn", "error"}

// validator converts the merged file values into a Config, collecting one
// diagnostic per problem with the place the value was written.
type validator struct {
	ranges rangeMap
	diags  hcl.Diagnostics
}

func (v *validator) errorf(key, format string, args ...any) {
	d := &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  fmt.Sprintf("Invalid %s", key),
		Detail:   fmt.Sprintf(format, args...),
	}
	if r, ok := v.ranges[key]; ok {
		r := r
		d.Subject = &r
	}
	v.diags = append(v.diags, d)
}

func (v *validator) duration(key string, s *string, min, max time.Duration) time.Duration {
	if s == nil {
		v.errorf(key, "a duration is required")
		return 0
	}
	d, err := time.ParseDuration(*s)
	if err != nil {
		v.errorf(key, "%q is not a duration such as \"500ms\", \"10s\" or \"168h\"", *s)
		return 0
	}
	if d < min || (max > 0 && d > max) {
		if max > 0 {
			v.errorf(key, "%s is outside the allowed range %s to %s", d, min, max)
		} else {
			v.errorf(key, "%s is below the minimum %s", d, min)
		}
		return 0
	}
	return d
}

func (v *validator) size(key string, s *string, min, max int64) int64 {
	if s == nil {
		v.errorf(key, "a size is required")
		return 0
	}
	n, err := ParseSize(*s)
	if err != nil {
		v.errorf(key, "%v", err)
		return 0
	}
	if n < min || (max > 0 && n > max) {
		if max > 0 {
			v.errorf(key, "%s is outside the allowed range %s to %s", FormatSize(n), FormatSize(min), FormatSize(max))
		} else {
			v.errorf(key, "%s is below the minimum %s", FormatSize(n), FormatSize(min))
		}
		return 0
	}
	return n
}

func (v *validator) address(key string, s *string) string {
	if s == nil || *s == "" {
		v.errorf(key, "an address such as \"127.0.0.1:7070\" is required")
		return ""
	}
	host, port, err := net.SplitHostPort(*s)
	if err != nil {
		v.errorf(key, "%q is not host:port: %v", *s, err)
		return ""
	}
	if !validPort(port) {
		v.errorf(key, "port %q is not a number from 1 to 65535", port)
		return ""
	}
	if host != "" && !validHost(host) {
		v.errorf(key, "host %q is neither an IP address nor a host name", host)
		return ""
	}
	return *s
}

func validPort(port string) bool {
	p, err := strconv.Atoi(port)
	return err == nil && p >= 1 && p <= 65535
}

// validHost reports whether h is an IP address or a host name.
func validHost(h string) bool {
	return net.ParseIP(h) != nil || validHostname(h)
}

func validHostname(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || strings.HasPrefix(label, "-") || strings.HasSuffix(label, "-") {
			return false
		}
		for _, c := range label {
			if !(c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
				return false
			}
		}
	}
	return true
}

// path reads a path-valued key relative to the directory of the file that
// set it, never to the working directory: that is / under systemd, where
// data_dir = "data" put the log at /data and token_file = "token" read
// /token. A file given as a relative -config argument is found from the
// working directory, as any command-line path is, and so is its directory.
func (v *validator) path(key string, s *string) string {
	p := str(s)
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	file := v.ranges[key].Filename
	dir, err := filepath.Abs(filepath.Dir(file))
	if err != nil {
		v.errorf(key, "%q is relative to the directory of %s, which cannot be made absolute: %v", p, file, err)
		return p
	}
	return filepath.Join(dir, p)
}

func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func validate(f *fileRoot, ranges rangeMap, env Environment) (*Config, hcl.Diagnostics) {
	v := &validator{ranges: ranges}
	// Defaults set every block; a file cannot unset one, so these are non-nil.
	c := &Config{}

	c.NodeID = str(f.NodeID)
	noHost := false
	if f.NodeID == nil {
		host, err := env.Hostname()
		if err != nil {
			v.errorf("node_id", "not set, and the host name is unavailable: %v", err)
			noHost = true
		}
		c.NodeID = strings.SplitN(host, ".", 2)[0]
	}
	// An empty one too (node_id = "", or an empty host name): it passed,
	// and the agent ran as node "".
	if !noHost && !nodeIDPattern.MatchString(c.NodeID) {
		v.errorf("node_id", "%q must be 1 to 64 letters, digits, '-' or '_', starting with a letter or digit (set node_id explicitly if the host name does not fit)", c.NodeID)
	}
	c.DataDir = v.path("data_dir", f.DataDir)
	if c.DataDir == "" {
		v.errorf("data_dir", "a directory is required")
	} else if info, err := os.Stat(c.DataDir); err == nil && !info.IsDir() {
		// The agent creates a data_dir that does not exist; one that
		// exists as something else failed only at its start.
		v.errorf("data_dir", "%s exists and is not a directory", c.DataDir)
	} else if errors.Is(err, syscall.ENOTDIR) {
		v.errorf("data_dir", "%s cannot be a directory: %v", c.DataDir, err)
	}
	c.LogLevel = strings.ToLower(str(f.LogLevel))
	if !slices.Contains(logLevels, c.LogLevel) {
		v.errorf("log_level", "%q is not one of %s", str(f.LogLevel), strings.Join(logLevels, ", "))
	}
	c.LogJSON = f.LogJSON != nil && *f.LogJSON

	c.Client.Address = v.address("client.address", f.Client.Address)
	c.Client.Pprof = f.Client.Pprof != nil && *f.Client.Pprof

	c.Kafka = v.kafka(f.Kafka)

	c.Peer.Address = v.address("peer.address", f.Peer.Address)
	c.Peer.TokenFile = v.tokenFile("peer.token_file", f.Peer.TokenFile)
	if f.Peer.AdvertiseAddress != nil {
		c.Peer.AdvertiseAddress = v.address("peer.advertise_address", f.Peer.AdvertiseAddress)
		if host, _, err := net.SplitHostPort(c.Peer.AdvertiseAddress); err == nil && isUnspecified(host) {
			v.errorf("peer.advertise_address", "%q must name a host other agents can reach", c.Peer.AdvertiseAddress)
		}
	} else if host, port, err := net.SplitHostPort(c.Peer.Address); err == nil {
		if !isUnspecified(host) {
			c.Peer.AdvertiseAddress = c.Peer.Address
		} else if ip, err := soleHostAddress(env); err != nil {
			v.errorf("peer.address", "%q listens on every interface, so set peer.advertise_address: %v", c.Peer.Address, err)
		} else {
			c.Peer.AdvertiseAddress = net.JoinHostPort(ip.String(), port)
		}
	}
	c.Peer.TLS = v.tlsBlock("peer.tls", f.Peer.TLS, true)
	c.Client.TLS = v.tlsBlock("client.tls", f.Client.TLS, false)
	c.Client.TokenFile = v.tokenFile("client.token_file", f.Client.TokenFile)
	listeners := []namedAddress{{"client.address", c.Client.Address}, {"peer.address", c.Peer.Address}, {"kafka.address", c.Kafka.Address}}
	v.distinctListeners(listeners)
	// A defaulted advertise address is its listener's own, or the host's
	// address on the peer port: distinctListeners covers those.
	var advertised []advertisedAddress
	if f.Peer.AdvertiseAddress != nil && c.Peer.AdvertiseAddress != "" {
		advertised = append(advertised, advertisedAddress{namedAddress{"peer.advertise_address", c.Peer.AdvertiseAddress}, "peer.address", "other agents"})
	}
	if f.Kafka.AdvertiseAddress != nil && c.Kafka.AdvertiseAddress != "" {
		advertised = append(advertised, advertisedAddress{namedAddress{"kafka.advertise_address", c.Kafka.AdvertiseAddress}, "kafka.address", "Kafka clients"})
	}
	v.advertisedReachTheirListener(advertised, listeners, localHost(env))

	c.Consul = v.consul(f.Consul)
	c.Storage = v.storage(f.Storage)

	c.Replication.LagTimeMax = v.duration("replication.lag_time_max", f.Replication.LagTimeMax, 100*time.Millisecond, 0)
	// Followers send it as their fetches' max_wait_ms and their sessions'
	// heartbeat_ms, which leaders take up to wire.MaxReplicaFetchWait: a
	// longer one had every follower fetch refused.
	c.Replication.FetchMaxWait = v.duration("replication.fetch_max_wait", f.Replication.FetchMaxWait, time.Millisecond, wire.MaxReplicaFetchWait)
	c.Replication.FetchMaxBytes = v.size("replication.fetch_max_bytes", f.Replication.FetchMaxBytes, 1<<10, 1<<30)
	c.Replication.AutoLeaderRebalance = f.Replication.AutoLeaderRebalance == nil || *f.Replication.AutoLeaderRebalance
	c.Replication.LeaderRebalanceDelay = v.duration("replication.leader_rebalance_delay", f.Replication.LeaderRebalanceDelay, time.Second, 24*time.Hour)
	c.Replication.ReassignMaxBytesPerSecond = v.size("replication.reassign_max_bytes_per_second", f.Replication.ReassignMaxBytesPerSecond, 0, 1<<40)
	if n := c.Replication.ReassignMaxBytesPerSecond; n > 0 && n < 1<<10 {
		v.errorf("replication.reassign_max_bytes_per_second", "%s is below the minimum 1KiB (0 turns the bound off)", FormatSize(n))
	}
	if c.Replication.LagTimeMax > 0 && c.Replication.FetchMaxWait >= c.Replication.LagTimeMax {
		v.errorf("replication.fetch_max_wait", "%s must be below replication.lag_time_max (%s), or a caught-up follower waiting in a long poll would be dropped from the ISR", c.Replication.FetchMaxWait, c.Replication.LagTimeMax)
	}

	c.Producer.Linger = v.duration("producer.linger", f.Producer.Linger, 0, time.Second)
	c.Producer.MaxBatchBytes = v.size("producer.max_batch_bytes", f.Producer.MaxBatchBytes, 1<<10, 1<<30)
	c.Producer.IDExpiration = v.duration("producer.id_expiration", f.Producer.IDExpiration, time.Minute, 0)
	if c.Producer.MaxPerPartition = intOr(f.Producer.MaxPerPartition); c.Producer.MaxPerPartition < 1 {
		v.errorf("producer.max_per_partition", "%d must be at least 1", c.Producer.MaxPerPartition)
	}
	c.Producer.SidecarIdempotence = f.Producer.SidecarIdempotence == nil || *f.Producer.SidecarIdempotence

	c.Limits.MaxRecordBytes = v.size("limits.max_record_bytes", f.Limits.MaxRecordBytes, 1, 1<<30)
	c.Limits.MaxRequestBytes = v.size("limits.max_request_bytes", f.Limits.MaxRequestBytes, 1<<10, 1<<30)
	if c.Limits.MaxRecordBytes > 0 && c.Limits.MaxRequestBytes > 0 && c.Limits.MaxRecordBytes > c.Limits.MaxRequestBytes {
		v.errorf("limits.max_record_bytes", "%s is above limits.max_request_bytes (%s): no such record could be sent", FormatSize(c.Limits.MaxRecordBytes), FormatSize(c.Limits.MaxRequestBytes))
	}
	if c.Producer.MaxBatchBytes > 0 && c.Replication.FetchMaxBytes > 0 && c.Producer.MaxBatchBytes > c.Replication.FetchMaxBytes {
		v.errorf("producer.max_batch_bytes", "%s is above replication.fetch_max_bytes (%s): followers fetch whole batches", FormatSize(c.Producer.MaxBatchBytes), FormatSize(c.Replication.FetchMaxBytes))
	}

	c.TopicDefaults = v.topicDefaults(f.TopicDefaults)
	c.Cluster.ReplaceDeadAfter = v.duration("cluster.replace_dead_after", f.Cluster.ReplaceDeadAfter, 0, 7*24*time.Hour)
	if d := c.Cluster.ReplaceDeadAfter; d > 0 && d < time.Second {
		v.errorf("cluster.replace_dead_after", "%s is below the minimum 1s (\"0s\" turns self-healing off)", d)
	}
	c.Groups = Groups{OffsetsPartitions: intOr(f.Groups.OffsetsPartitions), OffsetsReplicationFactor: intOr(f.Groups.OffsetsReplicationFactor)}
	if n := c.Groups.OffsetsPartitions; n < 1 || n > 1000 {
		v.errorf("groups.offsets_partitions", "%d is outside the allowed range 1 to 1000", n)
	}
	if n := c.Groups.OffsetsReplicationFactor; n < 1 {
		v.errorf("groups.offsets_replication_factor", "%d must be at least 1", n)
	}
	c.Groups.OffsetsRetention = v.duration("groups.offsets_retention", f.Groups.OffsetsRetention, 0, 0)
	if d := c.Groups.OffsetsRetention; d > 0 && d < time.Minute {
		v.errorf("groups.offsets_retention", "%s is below the minimum 1m0s (\"0s\" keeps groups until they are deleted)", d)
	}
	return c, v.diags
}

type namedAddress struct{ key, address string }

// distinctListeners reports two listeners on one port of one host, or of
// every interface (which takes the port on all of them): the second's bind
// failed when the agent started, after validate had passed it.
func (v *validator) distinctListeners(ls []namedAddress) {
	for j, b := range ls {
		hostB, portB, err := net.SplitHostPort(b.address)
		if err != nil {
			continue
		}
		for _, a := range ls[:j] {
			hostA, portA, err := net.SplitHostPort(a.address)
			if err != nil || portA != portB || (!sameHost(hostA, hostB) && !isUnspecified(hostA) && !isUnspecified(hostB)) {
				continue
			}
			v.errorf(b.key, "%q takes the port of %s (%q): each listener needs its own", b.address, a.key, a.address)
		}
	}
}

// advertisedAddress is an address set for others to dial one listener.
type advertisedAddress struct {
	namedAddress
	listener string // the key of the listener it must reach
	dialers  string
}

// advertisedReachTheirListener reports an advertised address that is
// another listener of this agent (its host and port, or its port when that
// listener takes every interface and the host is this one's), and two
// listeners advertised at one address. peer.advertise_address =
// client.address passed: other agents sent this agent's replication to its
// client API. An address of another host may be a NAT's, forwarded to the
// right port: it is left alone.
func (v *validator) advertisedReachTheirListener(advertised []advertisedAddress, listeners []namedAddress, local func(host string) bool) {
	for j, a := range advertised {
		hostA, portA, err := net.SplitHostPort(a.address)
		if err != nil {
			continue
		}
		for _, l := range listeners {
			hostL, portL, err := net.SplitHostPort(l.address)
			if err != nil || l.key == a.listener || portL != portA {
				continue
			}
			if sameHost(hostA, hostL) || isUnspecified(hostL) && local(hostA) {
				v.errorf(a.key, "%q is where %s (%q) listens, not %s: %s would dial the wrong listener", a.address, l.key, l.address, a.listener, a.dialers)
			}
		}
		for _, b := range advertised[:j] {
			hostB, portB, err := net.SplitHostPort(b.address)
			if err == nil && portB == portA && sameHost(hostA, hostB) {
				v.errorf(a.key, "%q is %s too: one address cannot reach both %s and %s", a.address, b.key, b.listener, a.listener)
			}
		}
	}
}

// sameHost reports whether two hosts of listen or advertise addresses are
// one, without resolving names: "localhost" is 127.0.0.1, the address Go
// listens on for it.
func sameHost(a, b string) bool {
	if strings.EqualFold(a, b) {
		return true
	}
	ipA, ipB := hostIP(a), hostIP(b)
	return ipA != nil && ipB != nil && ipA.Equal(ipB)
}

func hostIP(host string) net.IP {
	if strings.EqualFold(host, "localhost") {
		return net.IPv4(127, 0, 0, 1)
	}
	return net.ParseIP(host)
}

// localHost reports whether a host is one of this host's addresses: a
// loopback address or one of its interfaces'. A host name other than
// localhost is not resolved, and interfaces that cannot be listed make
// only loopback local: a check it feeds then misses a collision rather
// than refuse a good configuration.
func localHost(env Environment) func(host string) bool {
	var addrs []net.Addr
	listed := false
	return func(host string) bool {
		ip := hostIP(host)
		if ip == nil {
			return false
		}
		if ip.IsLoopback() {
			return true
		}
		if !listed {
			addrs, _ = env.InterfaceAddrs()
			listed = true
		}
		for _, a := range addrs {
			if ipnet, ok := a.(*net.IPNet); ok && ipnet.IP.Equal(ip) {
				return true
			}
		}
		return false
	}
}

// kafka validates the kafka block: off without an address; the address
// clients are told to dial must name a host, as a broker's advertised
// listener does.
func (v *validator) kafka(f *fileKafka) Kafka {
	var k Kafka
	if f.Address == nil || *f.Address == "" {
		if f.AdvertiseAddress != nil && *f.AdvertiseAddress != "" {
			v.errorf("kafka.advertise_address", "is set but kafka.address is not: the Kafka listener is off")
		}
		return k
	}
	k.Address = v.address("kafka.address", f.Address)
	if f.AdvertiseAddress != nil && *f.AdvertiseAddress != "" {
		k.AdvertiseAddress = v.address("kafka.advertise_address", f.AdvertiseAddress)
		if host, _, err := net.SplitHostPort(k.AdvertiseAddress); err == nil && isUnspecified(host) {
			v.errorf("kafka.advertise_address", "%q must name a host Kafka clients can dial", k.AdvertiseAddress)
		}
		return k
	}
	if host, _, err := net.SplitHostPort(k.Address); err == nil {
		if isUnspecified(host) {
			v.errorf("kafka.address", "%q listens on every interface, so set kafka.advertise_address: Kafka clients dial the address the listener advertises", k.Address)
		} else {
			k.AdvertiseAddress = k.Address
		}
	}
	return k
}

func (v *validator) consul(f *fileConsul) Consul {
	// Consul's own client defaults read CONSUL_HTTP_ADDR,
	// CONSUL_HTTP_TOKEN(_FILE), CONSUL_HTTP_SSL, CONSUL_CACERT and the other
	// CONSUL_* variables; keys set in the consul block override them.
	c := Consul{API: api.DefaultConfig()}
	if f.Address != nil {
		c.API.Address = *f.Address
		// A socket path is a path like any other the file names.
		if socket, ok := strings.CutPrefix(c.API.Address, "unix://"); ok && socket != "" {
			c.API.Address = "unix://" + v.path("consul.address", &socket)
		}
	}
	if c.API.Address == "" {
		v.errorf("consul.address", "an address is required")
	} else if err := checkConsulAddress(c.API.Address); err != nil {
		from := ""
		if f.Address == nil {
			from = " (from CONSUL_HTTP_ADDR)"
		}
		v.errorf("consul.address", "%q%s %v", c.API.Address, from, err)
	}
	if f.Scheme != nil {
		if *f.Scheme != "http" && *f.Scheme != "https" {
			v.errorf("consul.scheme", "%q is neither \"http\" nor \"https\"", *f.Scheme)
		}
		c.API.Scheme = *f.Scheme
	}
	if f.Datacenter != nil {
		c.API.Datacenter = *f.Datacenter
	}
	if f.Token != nil && f.TokenFile != nil {
		v.errorf("consul.token_file", "set consul.token or consul.token_file, not both")
	}
	if f.Token != nil {
		c.API.Token, c.API.TokenFile = *f.Token, ""
	}
	if f.TokenFile != nil {
		// Consul's client reads the file itself, and takes an empty one
		// for no token at all (the anonymous token): refuse that here.
		c.API.TokenFile, c.API.Token = v.tokenFile("consul.token_file", f.TokenFile), ""
	}
	if f.CAFile != nil {
		c.API.TLSConfig.CAFile = v.path("consul.ca_file", f.CAFile)
	}
	if f.CertFile != nil {
		c.API.TLSConfig.CertFile = v.path("consul.cert_file", f.CertFile)
	}
	if f.KeyFile != nil {
		c.API.TLSConfig.KeyFile = v.path("consul.key_file", f.KeyFile)
	}
	if f.CAFile != nil || f.CertFile != nil || f.KeyFile != nil {
		// Consul's client loads these but uses them only over https: with
		// scheme http they would be ignored, the token sent in the clear.
		if c.API.Scheme != "https" && !strings.HasPrefix(c.API.Address, "https://") {
			v.errorf("consul.scheme", "consul.ca_file, cert_file and key_file apply only to scheme = \"https\" (or an https:// address), not %q", c.API.Scheme)
		}
	}
	v.consulTLSFiles(c.API.TLSConfig)
	c.Prefix = str(f.Prefix)
	if c.Prefix == "" || strings.HasPrefix(c.Prefix, "/") || !strings.HasSuffix(c.Prefix, "/") {
		v.errorf("consul.prefix", "%q must be a non-empty KV path ending in '/' and not starting with one", c.Prefix)
	}
	c.SessionTTL = v.duration("consul.session_ttl", f.SessionTTL, minSessionTTL, maxSessionTTL)
	c.CheckTTL = v.duration("consul.check_ttl", f.CheckTTL, minCheckTTL, maxSessionTTL)
	c.LockDelay = v.duration("consul.lock_delay", f.LockDelay, minLockDelay, maxLockDelay)
	return c
}

// consulTLSFiles checks the TLS files Consul's client will load (from the
// consul block or CONSUL_CACERT, CONSUL_CLIENT_CERT and CONSUL_CLIENT_KEY)
// as a tls block's are checked: a certificate and its key together, every
// file readable and parsed, the key the certificate's. Consul's client
// refused a certificate without a key, or a file it could not load, only
// when the agent started.
func (v *validator) consulTLSFiles(t api.TLSConfig) {
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		v.errorf("consul.cert_file", "%s is set but consul.key_file (or CONSUL_CLIENT_KEY) is not: Consul's client needs both", t.CertFile)
		t.CertFile = ""
	case t.CertFile == "" && t.KeyFile != "":
		v.errorf("consul.key_file", "%s is set but consul.cert_file (or CONSUL_CLIENT_CERT) is not: Consul's client needs both", t.KeyFile)
		t.KeyFile = ""
	}
	var problems []tlsProblem
	if t.CertFile != "" {
		_, problems = TLS{CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.CAFile}.read()
	} else if t.CAFile != "" {
		if _, err := readCertificates(t.CAFile); err != nil {
			problems = append(problems, tlsProblem{"ca_file", t.CAFile, err})
		}
	}
	for _, p := range problems {
		v.errorf("consul."+p.key, "%s: %v", p.path, p.err)
	}
}

// checkConsulAddress checks an address as Consul's client reads it
// (api.NewClient): host[:port], an IP address or a host name, optionally
// after http:// or https:// (and followed by a path, a reverse proxy's
// prefix), or unix:// and a socket path. Anything else failed only when the
// agent started, or never: the agent waited for a Consul it could not reach.
func checkConsulAddress(addr string) error {
	hostPort := addr
	if scheme, rest, ok := strings.Cut(addr, "://"); ok {
		switch scheme {
		case "unix":
			if rest == "" {
				return fmt.Errorf("names no socket path")
			}
			return nil
		case "http", "https":
			hostPort, _, _ = strings.Cut(rest, "/")
		default:
			return fmt.Errorf("has the scheme %q; Consul's client takes http://, https:// or unix://", scheme)
		}
	}
	host := hostPort
	if strings.LastIndex(hostPort, ":") > strings.LastIndex(hostPort, "]") {
		h, port, err := net.SplitHostPort(hostPort)
		if err != nil {
			return fmt.Errorf("is not host:port: %v", err)
		}
		if !validPort(port) {
			return fmt.Errorf("has port %q, not a number from 1 to 65535", port)
		}
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if !validHost(host) {
		return fmt.Errorf("has the host %q, neither an IP address nor a host name", host)
	}
	return nil
}

func (v *validator) storage(f *fileStorage) Storage {
	s := Storage{}
	s.SegmentBytes = v.size("storage.segment_bytes", f.SegmentBytes, minSegmentBytes, maxSegmentBytes)
	s.SegmentAge = v.duration("storage.segment_age", f.SegmentAge, time.Second, 0)
	s.IndexIntervalBytes = v.size("storage.index_interval_bytes", f.IndexIntervalBytes, 1, 1<<20)
	s.Durability = Durability(str(f.Durability))
	if s.Durability != DurabilityFsync && s.Durability != DurabilityReplicated {
		v.errorf("storage.durability", "%q is neither %q nor %q", s.Durability, DurabilityFsync, DurabilityReplicated)
	}
	s.Retention = v.duration("storage.retention", f.Retention, 0, 0)
	s.RetentionBytes = v.size("storage.retention_bytes", f.RetentionBytes, 0, 0)
	return s
}

func (v *validator) topicDefaults(f *fileTopicDefaults) TopicDefaults {
	t := TopicDefaults{
		Partitions:            intOr(f.Partitions),
		ReplicationFactor:     intOr(f.ReplicationFactor),
		MinInsyncReplicas:     intOr(f.MinInsyncReplicas),
		UncleanLeaderElection: f.UncleanLeaderElection != nil && *f.UncleanLeaderElection,
	}
	if t.Partitions < 1 || t.Partitions > MaxTopicPartitions {
		v.errorf("topic_defaults.partitions", "%d is outside the allowed range 1 to %d", t.Partitions, MaxTopicPartitions)
	}
	if t.ReplicationFactor < 1 {
		v.errorf("topic_defaults.replication_factor", "%d must be at least 1", t.ReplicationFactor)
	}
	if t.MinInsyncReplicas < 1 {
		v.errorf("topic_defaults.min_insync_replicas", "%d must be at least 1", t.MinInsyncReplicas)
	} else if t.ReplicationFactor >= 1 && t.MinInsyncReplicas > t.ReplicationFactor {
		v.errorf("topic_defaults.min_insync_replicas", "%d is above topic_defaults.replication_factor (%d): no write could ever be acknowledged with acks=all", t.MinInsyncReplicas, t.ReplicationFactor)
	}
	return t
}

func intOr(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func isUnspecified(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// soleHostAddress finds the one address other hosts can reach this host at,
// as Consul does for its bind address: the only global unicast IPv4 address.
// Several or none is an error, since guessing would be worse.
func soleHostAddress(env Environment) (net.IP, error) {
	addrs, err := env.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("cannot list interface addresses: %w", err)
	}
	var found []net.IP
	for _, a := range addrs {
		ipnet, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip := ipnet.IP.To4(); ip != nil && ip.IsGlobalUnicast() {
			found = append(found, ip)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("this host has no global unicast IPv4 address")
	case 1:
		return found[0], nil
	default:
		return nil, fmt.Errorf("this host has %d IPv4 addresses (%v) and logagent will not guess", len(found), found)
	}
}
