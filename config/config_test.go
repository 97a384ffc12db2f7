package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// testEnv is a host named "testhost" with one reachable address.
func testEnv() Environment {
	return Environment{
		Hostname: func() (string, error) { return "testhost.example", nil },
		InterfaceAddrs: func() ([]net.Addr, error) {
			return []net.Addr{
				&net.IPNet{IP: net.IPv4(127, 0, 0, 1), Mask: net.CIDRMask(8, 32)},
				&net.IPNet{IP: net.IPv4(10, 1, 2, 3), Mask: net.CIDRMask(24, 32)},
			}, nil
		},
	}
}

// requireErrorContaining stops the test unless err says want.
func requireErrorContaining(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want an error containing %q", err, want)
	}
}

// requireDiagnostics stops the test unless err carries diagnostics.
func requireDiagnostics(t *testing.T, err error) *DiagnosticsError {
	t.Helper()
	var de *DiagnosticsError
	if !errors.As(err, &de) {
		t.Fatalf("got %v, want diagnostics", err)
	}
	return de
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaults(t *testing.T) {
	cfg, err := LoadWith(testEnv())
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"node_id from host name", cfg.NodeID, "testhost"},
		{"client", cfg.Client.Address, "127.0.0.1:7070"},
		{"pprof off", cfg.Client.Pprof, false},
		{"kafka off", cfg.Kafka, Kafka{}},
		{"peer", cfg.Peer.Address, "0.0.0.0:7171"},
		{"advertise", cfg.Peer.AdvertiseAddress, "10.1.2.3:7171"},
		{"durability", cfg.Storage.Durability, DurabilityFsync},
		{"segment_bytes", cfg.Storage.SegmentBytes, int64(1 << 30)},
		{"index_interval_bytes", cfg.Storage.IndexIntervalBytes, int64(4096)},
		{"retention", cfg.Storage.Retention, 168 * time.Hour},
		{"lag_time_max", cfg.Replication.LagTimeMax, 10 * time.Second},
		{"fetch_max_wait", cfg.Replication.FetchMaxWait, 500 * time.Millisecond},
		{"auto_leader_rebalance", cfg.Replication.AutoLeaderRebalance, true},
		{"leader_rebalance_delay", cfg.Replication.LeaderRebalanceDelay, 10 * time.Second},
		{"reassign_max_bytes_per_second", cfg.Replication.ReassignMaxBytesPerSecond, int64(50 << 20)},
		{"max_record_bytes", cfg.Limits.MaxRecordBytes, int64(1 << 20)},
		{"max_request_bytes", cfg.Limits.MaxRequestBytes, int64(16 << 20)},
		{"session_ttl", cfg.Consul.SessionTTL, 10 * time.Second},
		{"check_ttl", cfg.Consul.CheckTTL, 3 * time.Second},
		{"lock_delay", cfg.Consul.LockDelay, 250 * time.Millisecond},
		{"prefix", cfg.Consul.Prefix, "logagent/"},
		{"partitions", cfg.TopicDefaults.Partitions, 3},
		{"replication_factor", cfg.TopicDefaults.ReplicationFactor, 3},
		{"min_insync_replicas", cfg.TopicDefaults.MinInsyncReplicas, 2},
		{"unclean", cfg.TopicDefaults.UncleanLeaderElection, false},
		{"offsets_retention", cfg.Groups.OffsetsRetention, 168 * time.Hour},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
}

// The shipped example promises to list every option at its default: if a
// default changes, the example must change with it.
func TestShippedExampleEqualsDefaults(t *testing.T) {
	def, err := LoadWith(testEnv())
	if err != nil {
		t.Fatal(err)
	}
	ex, err := LoadWith(testEnv(), "agent.hcl")
	if err != nil {
		t.Fatal(err)
	}
	// The Consul client config holds functions; compare what it says.
	if def.Consul.API.Address != ex.Consul.API.Address || def.Consul.API.Scheme != ex.Consul.API.Scheme {
		t.Errorf("consul address differs: %q vs %q", def.Consul.API.Address, ex.Consul.API.Address)
	}
	def.Consul.API, ex.Consul.API = nil, nil
	def.Sources, ex.Sources = nil, nil
	if !reflect.DeepEqual(def, ex) {
		t.Errorf("agent.hcl differs from the defaults:\n defaults %+v\n agent.hcl %+v", def, ex)
	}
	// And every key of the file schema appears in the example, set or
	// commented out.
	src, err := os.ReadFile("agent.hcl")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range schemaKeys(reflect.TypeOf(fileRoot{})) {
		if !strings.Contains(string(src), key+" ") && !strings.Contains(string(src), key+"\n") {
			t.Errorf("agent.hcl does not mention %q", key)
		}
	}
}

func schemaKeys(t reflect.Type) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		tag := strings.Split(t.Field(i).Tag.Get("hcl"), ",")
		keys = append(keys, tag[0])
		ft := t.Field(i).Type
		if ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct {
			keys = append(keys, schemaKeys(ft.Elem())...)
		}
	}
	return keys
}

func TestDevFilesAreValid(t *testing.T) {
	dir := t.TempDir()
	entries, err := DevFiles.ReadDir("dev")
	if err != nil || len(entries) == 0 {
		t.Fatalf("no embedded dev files: %v", err)
	}
	for _, e := range entries {
		b, err := DevFiles.ReadFile("dev/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, dir, e.Name(), string(b))
	}
	cfg, err := LoadWith(testEnv(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Consul.CheckTTL >= 3*time.Second {
		t.Errorf("dev check_ttl %s: expected the quicker dev setting", cfg.Consul.CheckTTL)
	}
}

func TestMergeOrder(t *testing.T) {
	dir := t.TempDir()
	confd := filepath.Join(dir, "conf.d")
	if err := os.Mkdir(confd, 0o755); err != nil {
		t.Fatal(err)
	}
	// Directory files apply in name order; a later file overrides only the
	// keys it sets; a file named after the directory overrides it again.
	writeFile(t, confd, "20-storage.hcl", `storage { durability = "replicated" }`)
	writeFile(t, confd, "10-base.hcl", "node_id = \"a\"\nstorage {\n  segment_bytes = \"1MiB\"\n  durability = \"fsync\"\n}\n")
	writeFile(t, confd, "ignored.json", `{"node_id": "json"}`)
	override := writeFile(t, dir, "override.hcl", `node_id = "b"`)

	cfg, err := LoadWith(testEnv(), confd, override)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeID != "b" {
		t.Errorf("node_id %q, want b (last source wins)", cfg.NodeID)
	}
	if cfg.Storage.SegmentBytes != 1<<20 {
		t.Errorf("segment_bytes %d, want 1MiB kept from 10-base.hcl", cfg.Storage.SegmentBytes)
	}
	if cfg.Storage.Durability != DurabilityReplicated {
		t.Errorf("durability %q, want replicated from 20-storage.hcl", cfg.Storage.Durability)
	}
	want := []string{filepath.Join(confd, "10-base.hcl"), filepath.Join(confd, "20-storage.hcl"), override}
	if !reflect.DeepEqual(cfg.Sources, want) {
		t.Errorf("sources %v, want %v", cfg.Sources, want)
	}
}

func TestInvalid(t *testing.T) {
	cases := []struct {
		name string
		hcl  string
		line int    // line of the diagnostic in the file
		want string // part of the message
	}{
		{"unknown key", "node_id = \"n1\"\nbogus = 1\n", 2, `argument named "bogus" is not expected`},
		{"unknown key in block", "storage {\n  segmnt_bytes = \"1GiB\"\n}\n", 2, `"segmnt_bytes" is not expected`},
		{"unknown block", "store {\n}\n", 1, `Unsupported block type`},
		{"bad duration", "replication {\n  lag_time_max = \"10 seconds\"\n}\n", 2, `"10 seconds" is not a duration`},
		{"negative duration", "producer {\n  linger = \"-1s\"\n}\n", 2, "outside the allowed range"},
		{"bad size", "storage {\n  segment_bytes = \"1 gigabyte\"\n}\n", 2, `"1 gigabyte" is not a size`},
		{"size too small", "storage {\n  segment_bytes = \"1KiB\"\n}\n", 2, "outside the allowed range 4KiB to 2GiB"},
		{"zero partitions", "topic_defaults {\n  partitions = 0\n}\n", 2, "0 is outside the allowed range 1 to"},
		{"negative partitions", "topic_defaults {\n  partitions = -3\n}\n", 2, "-3 is outside the allowed range"},
		{"min_insync above rf", "topic_defaults {\n  replication_factor = 2\n  min_insync_replicas = 3\n}\n", 3, "3 is above topic_defaults.replication_factor (2)"},
		{"zero rf", "topic_defaults {\n  replication_factor = 0\n}\n", 2, "must be at least 1"},
		{"no producers kept", "producer {\n  max_per_partition = 0\n}\n", 2, "producer.max_per_partition: 0 must be at least 1"},
		{"bad listen address", "client {\n  address = \"localhost\"\n}\n", 2, `"localhost" is not host:port`},
		{"bad port", "client {\n  address = \"127.0.0.1:70000\"\n}\n", 2, "not a number from 1 to 65535"},
		{"bad host", "peer {\n  address = \"bad_host!:7171\"\n}\n", 2, "neither an IP address nor a host name"},
		{"unknown durability", "storage {\n  durability = \"sometimes\"\n}\n", 2, `"sometimes" is neither "fsync" nor "replicated"`},
		{"bad log level", "log_level = \"loud\"\n", 1, `"loud" is not one of`},
		{"bad node id", "node_id = \"../n1\"\n", 1, "must be 1 to 64 letters"},
		{"empty node id", "node_id = \"\"\n", 1, `"" must be 1 to 64 letters`},
		{"lock delay zero", "consul {\n  lock_delay = \"0s\"\n}\n", 2, "outside the allowed range 1ms to 1m0s"},
		{"check ttl too short", "consul {\n  check_ttl = \"1s\"\n}\n", 2, "outside the allowed range 2s to 24h0m0s"},
		{"prefix without slash", "consul {\n  prefix = \"logagent\"\n}\n", 2, "ending in '/'"},
		{"wrong type", "topic_defaults {\n  partitions = \"many\"\n}\n", 2, "Unsuitable value type"},
		{"fetch wait above lag", "replication {\n  lag_time_max = \"1s\"\n  fetch_max_wait = \"2s\"\n}\n", 3, "must be below replication.lag_time_max"},
		{"offsets retention below a minute", "groups {\n  offsets_retention = \"30s\"\n}\n", 2, `30s is below the minimum 1m0s ("0s" keeps groups until they are deleted)`},
		{"offsets retention negative", "groups {\n  offsets_retention = \"-1h\"\n}\n", 2, "-1h0m0s is below the minimum 0s"},
		{"offsets retention not a duration", "groups {\n  offsets_retention = \"7 days\"\n}\n", 2, `"7 days" is not a duration`},
		{"rebalance delay too short", "replication {\n  leader_rebalance_delay = \"100ms\"\n}\n", 2, "outside the allowed range 1s to 24h0m0s"},
		{"reassign throttle below 1KiB", "replication {\n  reassign_max_bytes_per_second = \"100\"\n}\n", 2, "below the minimum 1KiB (0 turns the bound off)"},
		{"reassign throttle not a size", "replication {\n  reassign_max_bytes_per_second = \"fast\"\n}\n", 2, `"fast" is not a size`},
		{"rebalance switch not a bool", "replication {\n  auto_leader_rebalance = \"sometimes\"\n}\n", 2, "Unsuitable value type"},
		{"record above request", "limits {\n  max_record_bytes = \"32MiB\"\n}\n", 2, "above limits.max_request_bytes"},
		{"advertise unspecified", "peer {\n  advertise_address = \"0.0.0.0:7171\"\n}\n", 2, "must name a host"},
		{"syntax error", "storage {\n  durability = \n}\n", 2, "Invalid expression"},
		{"kafka on every interface", "kafka {\n  address = \"0.0.0.0:9092\"\n}\n", 2, "so set kafka.advertise_address"},
		{"kafka advertise unspecified", "kafka {\n  address = \"0.0.0.0:9092\"\n  advertise_address = \"[::]:9092\"\n}\n", 3, "must name a host Kafka clients can dial"},
		{"kafka advertise without address", "kafka {\n  advertise_address = \"10.0.0.1:9092\"\n}\n", 2, "the Kafka listener is off"},
		{"kafka bad port", "kafka {\n  address = \"127.0.0.1:0\"\n}\n", 2, "not a number from 1 to 65535"},
		{"kafka unknown key", "kafka {\n  port = 9092\n}\n", 2, "Unsupported argument"},
		{"listeners share an address", "kafka {\n  address = \"127.0.0.1:7070\"\n}\n", 2, "takes the port of client.address"},
		{"a listener on every interface takes the port", "kafka {\n  address = \"0.0.0.0:7070\"\n  advertise_address = \"10.0.0.1:7070\"\n}\n", 2, "takes the port of client.address"},
		{"fetch wait above what leaders take", "replication {\n  lag_time_max = \"60s\"\n  fetch_max_wait = \"31s\"\n}\n", 3, "outside the allowed range 1ms to 30s"},
		{"listeners on localhost and 127.0.0.1", "kafka {\n  address = \"localhost:7070\"\n}\n", 2, "takes the port of client.address"},
		{"listeners on one IPv6 address written twice", "client {\n  address = \"[::1]:7070\"\n}\nkafka {\n  address = \"[0:0:0:0:0:0:0:1]:7070\"\n}\n", 5, "takes the port of client.address"},
		{"peer advertised at the client address", "peer {\n  advertise_address = \"127.0.0.1:7070\"\n}\n", 2, `"127.0.0.1:7070" is where client.address ("127.0.0.1:7070") listens, not peer.address: other agents would dial the wrong listener`},
		{"peer advertised at localhost on the client port", "peer {\n  advertise_address = \"localhost:7070\"\n}\n", 2, "is where client.address"},
		{"peer advertised at this host, client on every interface", "client {\n  address = \"0.0.0.0:7070\"\n}\npeer {\n  advertise_address = \"10.1.2.3:7070\"\n}\n", 5, `is where client.address ("0.0.0.0:7070") listens`},
		{"peer advertised at the kafka listener", "kafka {\n  address = \"127.0.0.1:9092\"\n}\npeer {\n  advertise_address = \"127.0.0.1:9092\"\n}\n", 5, "is where kafka.address"},
		{"kafka advertised at the peer listener", "kafka {\n  address = \"0.0.0.0:9092\"\n  advertise_address = \"10.1.2.3:7171\"\n}\n", 3, `is where peer.address ("0.0.0.0:7171") listens, not kafka.address: Kafka clients would dial the wrong listener`},
		{"kafka advertised at the client address", "kafka {\n  address = \"127.0.0.1:9092\"\n  advertise_address = \"127.0.0.1:7070\"\n}\n", 3, "is where client.address"},
		{"peer and kafka advertised at one address", "kafka {\n  address = \"0.0.0.0:9092\"\n  advertise_address = \"203.0.113.9:7000\"\n}\npeer {\n  advertise_address = \"203.0.113.9:7000\"\n}\n", 3, `"203.0.113.9:7000" is peer.advertise_address too: one address cannot reach both peer.address and kafka.address`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "agent.hcl", c.hcl)
			_, err := LoadWith(testEnv(), p)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want an ErrInvalid", err)
			}
			var de *DiagnosticsError
			if !errors.As(err, &de) {
				t.Fatalf("got %T, want *DiagnosticsError", err)
			}
			for _, d := range de.Diags {
				msg := FormatDiagnostic(d)
				if strings.Contains(msg, c.want) {
					if d.Subject == nil || d.Subject.Filename != p || d.Subject.Start.Line != c.line {
						t.Errorf("diagnostic %q: want it at %s:%d", msg, p, c.line)
					}
					return
				}
			}
			t.Errorf("no diagnostic contains %q; got:\n%v", c.want, err)
		})
	}
}

func TestEveryProblemReportedAtOnce(t *testing.T) {
	body := "node_id = \"n1\"\n" + // 1
		"storage {\n" + // 2
		"  segment_bytes = \"big\"\n" + // 3: bad size
		"  durability    = \"never\"\n" + // 4: unknown durability
		"  compaction    = true\n" + // 5: unknown key
		"}\n"
	p := writeFile(t, t.TempDir(), "three.hcl", body)
	_, err := LoadWith(testEnv(), p)
	de := requireDiagnostics(t, err)
	var lines []int
	for _, d := range de.Diags {
		if d.Subject == nil || d.Subject.Filename != p {
			t.Errorf("diagnostic without its place in %s: %s", p, FormatDiagnostic(d))
			continue
		}
		lines = append(lines, d.Subject.Start.Line)
	}
	if !reflect.DeepEqual(lines, []int{3, 4, 5}) {
		t.Errorf("diagnostic lines %v, want [3 4 5]:\n%v", lines, err)
	}
}

func TestMissingSource(t *testing.T) {
	_, err := LoadWith(testEnv(), filepath.Join(t.TempDir(), "absent.hcl"))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "absent.hcl") {
		t.Fatalf("got %v, want an error naming the missing file", err)
	}
}

func TestAdvertiseAddress(t *testing.T) {
	addrs := func(ips ...string) func() ([]net.Addr, error) {
		return func() ([]net.Addr, error) {
			var out []net.Addr
			for _, s := range ips {
				out = append(out, &net.IPNet{IP: net.ParseIP(s), Mask: net.CIDRMask(24, 32)})
			}
			return out, nil
		}
	}
	cases := []struct {
		name    string
		hcl     string
		ips     []string
		want    string
		wantErr string
	}{
		{"explicit host", `peer { address = "127.0.0.1:7171" }`, nil, "127.0.0.1:7171", ""},
		{"explicit advertise", `peer { advertise_address = "10.0.0.9:7171" }`, []string{"10.0.0.1", "10.0.0.2"}, "10.0.0.9:7171", ""},
		{"sole address", ``, []string{"127.0.0.1", "192.168.1.5"}, "192.168.1.5:7171", ""},
		{"several addresses", ``, []string{"192.168.1.5", "10.0.0.1"}, "", "will not guess"},
		{"no address", ``, []string{"127.0.0.1"}, "", "no global unicast"},
		// Another host's address on the client's port may be a NAT's,
		// forwarded to the peer port.
		{"NAT on the client's port", "client { address = \"0.0.0.0:7070\" }\npeer { advertise_address = \"203.0.113.9:7070\" }", []string{"10.0.0.1"}, "203.0.113.9:7070", ""},
		{"client's host, another port", "client { address = \"10.0.0.1:7070\" }\npeer { advertise_address = \"10.0.0.1:7171\" }", []string{"10.0.0.1"}, "10.0.0.1:7171", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := testEnv()
			env.InterfaceAddrs = addrs(c.ips...)
			cfg, err := LoadWith(env, writeFile(t, t.TempDir(), "a.hcl", c.hcl))
			if c.wantErr != "" {
				requireErrorContaining(t, err, c.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Peer.AdvertiseAddress != c.want {
				t.Errorf("advertise %q, want %q", cfg.Peer.AdvertiseAddress, c.want)
			}
		})
	}
}

func TestConsulEnvironment(t *testing.T) {
	t.Setenv("CONSUL_HTTP_ADDR", "127.0.0.9:8501")
	t.Setenv("CONSUL_HTTP_TOKEN", "from-env")

	cfg, err := LoadWith(testEnv())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Consul.API.Address != "127.0.0.9:8501" || cfg.Consul.API.Token != "from-env" {
		t.Errorf("CONSUL_* ignored: address %q token %q", cfg.Consul.API.Address, cfg.Consul.API.Token)
	}

	dir := t.TempDir()
	token := writeFile(t, dir, "token", "from-file\n")
	p := writeFile(t, dir, "c.hcl", fmt.Sprintf("consul {\n  address = \"127.0.0.1:18500\"\n  token_file = %q\n}\n", token))
	cfg, err = LoadWith(testEnv(), p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Consul.API.Address != "127.0.0.1:18500" {
		t.Errorf("file address did not override CONSUL_HTTP_ADDR: %q", cfg.Consul.API.Address)
	}
	if cfg.Consul.API.Token != "" || cfg.Consul.API.TokenFile != token {
		t.Errorf("token_file should replace the environment's token: token %q file %q", cfg.Consul.API.Token, cfg.Consul.API.TokenFile)
	}
}

func TestParseSize(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"4096", 4096, true},
		{"64KiB", 64 << 10, true},
		{"1GiB", 1 << 30, true},
		{"10MB", 10_000_000, true},
		{"2 TiB", 2 << 40, true},
		{"5B", 5, true},
		{"", 0, false},
		{"-1", 0, false},
		{"1.5GiB", 0, false},
		{"1gib", 0, false},
		{"9999999TiB", 0, false},
	}
	for _, c := range cases {
		got, err := ParseSize(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
	for _, n := range []int64{0, 1, 4096, 1 << 20, 3 << 30, 1000} {
		back, err := ParseSize(FormatSize(n))
		if err != nil || back != n {
			t.Errorf("FormatSize(%d) = %q does not parse back", n, FormatSize(n))
		}
	}
}

func TestFormatDiagnostic(t *testing.T) {
	d := &hcl.Diagnostic{Summary: "Invalid x.", Detail: "bad.", Subject: &hcl.Range{Filename: "f.hcl", Start: hcl.Pos{Line: 3, Column: 7}}}
	if got := FormatDiagnostic(d); got != "f.hcl:3:7: Invalid x: bad" {
		t.Errorf("got %q", got)
	}
}

func TestKafkaAddresses(t *testing.T) {
	cases := []struct {
		name string
		hcl  string
		want Kafka
	}{
		{"loopback", "kafka {\n  address = \"127.0.0.1:9092\"\n}\n", Kafka{Address: "127.0.0.1:9092", AdvertiseAddress: "127.0.0.1:9092"}},
		{"every interface, advertised", "kafka {\n  address = \"0.0.0.0:9092\"\n  advertise_address = \"10.1.2.3:9092\"\n}\n", Kafka{Address: "0.0.0.0:9092", AdvertiseAddress: "10.1.2.3:9092"}},
		{"explicitly off", "kafka {\n  address = \"\"\n}\n", Kafka{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := LoadWith(testEnv(), writeFile(t, t.TempDir(), "agent.hcl", c.hcl))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Kafka != c.want {
				t.Errorf("kafka %+v, want %+v", cfg.Kafka, c.want)
			}
		})
	}
}

func TestReassignThrottleOff(t *testing.T) {
	p := writeFile(t, t.TempDir(), "agent.hcl", "replication {\n  reassign_max_bytes_per_second = \"0\"\n}\n")
	cfg, err := LoadWith(testEnv(), p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Replication.ReassignMaxBytesPerSecond != 0 {
		t.Fatalf("reassign_max_bytes_per_second = %d, want 0 (no bound)", cfg.Replication.ReassignMaxBytesPerSecond)
	}
}

// TestEveryProblemReported: the max_batch_bytes within fetch_max_bytes
// cross-check was guarded by limits.max_record_bytes, so an invalid
// max_record_bytes hid it: all problems are reported at once.
func TestEveryProblemReported(t *testing.T) {
	p := writeFile(t, t.TempDir(), "agent.hcl",
		"limits {\n  max_record_bytes = \"0\"\n}\nproducer {\n  max_batch_bytes = \"16MiB\"\n}\n")
	_, err := LoadWith(testEnv(), p)
	requireDiagnostics(t, err)
	for _, want := range []string{"limits.max_record_bytes", "above replication.fetch_max_bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q is not reported:\n%v", want, err)
		}
	}
}

// TestNodeIDFromHostName: a node_id taken from an empty host name (or one
// whose first label is empty) is refused as an empty node_id is.
func TestNodeIDFromHostName(t *testing.T) {
	cases := []struct {
		host    string
		want    string
		wantErr string
	}{
		{"h1.example", "h1", ""},
		{"h1", "h1", ""},
		{"", "", `Invalid node_id: "" must be 1 to 64 letters`},
		{".example", "", `Invalid node_id: "" must be 1 to 64 letters`},
	}
	for _, c := range cases {
		t.Run(c.host, func(t *testing.T) {
			env := testEnv()
			env.Hostname = func() (string, error) { return c.host, nil }
			cfg, err := LoadWith(env)
			if c.wantErr != "" {
				requireErrorContaining(t, err, c.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.NodeID != c.want {
				t.Errorf("node_id %q, want %q", cfg.NodeID, c.want)
			}
		})
	}
}

// TestValueThatDoesNotDecodeReportedOnce: a value gohcl cannot decode is
// one problem, at its place; it was also merged as a zero value, which
// validation reported again as a value the file does not hold.
func TestValueThatDoesNotDecodeReportedOnce(t *testing.T) {
	cases := []struct {
		name string
		hcl  string
		want []string // every diagnostic, file:line:column stripped of the file
	}{
		{"number not whole", "topic_defaults {\n  partitions = 3.5\n}\n", []string{
			"2:16: Unsuitable value type: Unsuitable value: value must be a whole number, between -9223372036854775808 and 9223372036854775807"}},
		{"function call", "data_dir = upper(\"x\")\n", []string{
			"1:12: Function calls not allowed: Functions may not be called here",
			"1:12: Unsuitable value type: Unsuitable value: value must be known"}},
		{"variable", "storage {\n  durability = \"${env.D}\"\n}\n", []string{
			"2:16: Unsuitable value type: Unsuitable value: value must be known",
			"2:19: Variables not allowed: Variables may not be used here"}},
		{"beside a key that decodes", "groups {\n  offsets_partitions = 2.5\n  offsets_replication_factor = 0\n}\n", []string{
			"2:24: Unsuitable value type: Unsuitable value: value must be a whole number, between -9223372036854775808 and 9223372036854775807",
			"3:32: Invalid groups.offsets_replication_factor: 0 must be at least 1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "agent.hcl", c.hcl)
			_, err := LoadWith(testEnv(), p)
			de := requireDiagnostics(t, err)
			var got []string
			for _, d := range de.Diags {
				got = append(got, strings.TrimPrefix(FormatDiagnostic(d), p+":"))
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("diagnostics:\n %q\nwant\n %q", got, c.want)
			}
		})
	}
}

// TestConsulAddress: consul.address is checked as Consul's client reads
// it; a typo passed validate, and the agent waited for a Consul it could
// not reach.
func TestConsulAddress(t *testing.T) {
	cases := []struct {
		address string
		wantErr string // "" for valid
	}{
		{"127.0.0.1:8500", ""},
		{"consul.service.consul:8501", ""},
		{"localhost", ""},
		{"[::1]:8500", ""},
		{"[::1]", ""},
		{"http://127.0.0.1:8500", ""},
		{"https://consul.example:8501/prefix", ""},
		{"unix:///var/run/consul.sock", ""},
		{"127.0.0.1:85OO", `has port "85OO", not a number from 1 to 65535`},
		{"127.0.0.1:0", `has port "0"`},
		{"not an address", `has the host "not an address", neither an IP address nor a host name`},
		{"tcp://127.0.0.1:8500", `has the scheme "tcp"`},
		{"unix://", "names no socket path"},
		{"https://:8501", `has the host ""`},
		{"::1:8500", "is not host:port"},
	}
	for _, c := range cases {
		t.Run(c.address, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "agent.hcl", fmt.Sprintf("consul {\n  address = %q\n}\n", c.address))
			cfg, err := LoadWith(testEnv(), p)
			if c.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if cfg.Consul.API.Address != c.address {
					t.Errorf("address %q, want %q", cfg.Consul.API.Address, c.address)
				}
				return
			}
			want := fmt.Sprintf("%s:2:13: Invalid consul.address: %q %s", p, c.address, c.wantErr)
			requireErrorContaining(t, err, want)
		})
	}
	t.Run("from CONSUL_HTTP_ADDR", func(t *testing.T) {
		t.Setenv("CONSUL_HTTP_ADDR", "127.0.0.1:port")
		_, err := LoadWith(testEnv())
		want := `Invalid consul.address: "127.0.0.1:port" (from CONSUL_HTTP_ADDR) has port "port"`
		requireErrorContaining(t, err, want)
	})
}

// TestConfigDirectoryWithoutHCLFiles: a -config directory must hold a
// *.hcl file; one without was no configuration, and the agent ran on the
// defaults alone.
func TestConfigDirectoryWithoutHCLFiles(t *testing.T) {
	cases := []struct {
		name  string
		files []string
	}{
		{"empty", nil},
		{"other names only", []string{"agent.conf", "agent.hcl.bak"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, n := range c.files {
				writeFile(t, dir, n, "node_id = \"n1\"\n")
			}
			_, err := LoadWith(testEnv(), dir)
			want := "Empty configuration directory: " + dir + " holds no *.hcl file"
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v, want an error containing %q", err, want)
			}
		})
	}
}

// TestDataDirNotADirectory: a data_dir that exists as a file, or below
// one, is refused at load; it passed logagent validate and failed the
// agent's start. One that does not exist yet is fine: the agent creates it.
func TestDataDirNotADirectory(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "file", "x")
	cases := []struct {
		name    string
		dataDir string
		wantErr string
	}{
		{"a directory", dir, ""},
		{"not there yet", filepath.Join(dir, "new", "data"), ""},
		{"a file", file, file + " exists and is not a directory"},
		{"below a file", filepath.Join(file, "data"), filepath.Join(file, "data") + " cannot be a directory: stat " + filepath.Join(file, "data") + ": not a directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "agent.hcl", fmt.Sprintf("node_id = \"n1\"\ndata_dir = %q\n", c.dataDir))
			cfg, err := LoadWith(testEnv(), p)
			if c.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if cfg.DataDir != c.dataDir {
					t.Errorf("data_dir %q, want %q", cfg.DataDir, c.dataDir)
				}
				return
			}
			want := p + ":2:12: Invalid data_dir: " + c.wantErr
			requireErrorContaining(t, err, want)
		})
	}
}

// TestRelativePathsAreRelativeToTheirFile: a relative path a file names is
// read from that file's directory. It was read from the working directory,
// / under systemd: data_dir = "data" put the log at /data, and a token or
// TLS file next to the configuration was not found. Every case loads from
// an unrelated working directory.
func TestRelativePathsAreRelativeToTheirFile(t *testing.T) {
	for _, k := range []string{"CONSUL_HTTP_SSL", "CONSUL_HTTP_ADDR", "CONSUL_CACERT", "CONSUL_CLIENT_CERT", "CONSUL_CLIENT_KEY", "CONSUL_HTTP_TOKEN", "CONSUL_HTTP_TOKEN_FILE"} {
		t.Setenv(k, "")
	}
	f := newTLSFixture(t)
	base := filepath.Base
	other := t.TempDir()
	cases := []struct {
		name string
		// files are written in order, each into its directory (f.dir
		// unless dirs names another), and loaded by absolute path.
		files []string
		dirs  []string
		got   func(*Config) []string
		want  []string
	}{
		{"data_dir", []string{`data_dir = "data"`}, nil,
			func(c *Config) []string { return []string{c.DataDir} }, []string{filepath.Join(f.dir, "data")}},
		{"data_dir up a level", []string{`data_dir = "../lib/data"`}, nil,
			func(c *Config) []string { return []string{c.DataDir} }, []string{filepath.Join(filepath.Dir(f.dir), "lib", "data")}},
		{"token files", []string{fmt.Sprintf("client {\n  token_file = %q\n}\npeer {\n  token_file = %q\n}\n", base(f.token), base(f.token))}, nil,
			func(c *Config) []string { return []string{c.Client.TokenFile, c.Peer.TokenFile} }, []string{f.token, f.token}},
		{"client tls", []string{tlsHCL("client", base(f.cert), base(f.key), base(f.ca))}, nil,
			func(c *Config) []string {
				return []string{c.Client.TLS.CertFile, c.Client.TLS.KeyFile, c.Client.TLS.CAFile}
			}, []string{f.cert, f.key, f.ca}},
		{"peer tls", []string{tlsHCL("peer", base(f.cert), base(f.key), base(f.ca))}, nil,
			func(c *Config) []string { return []string{c.Peer.TLS.CertFile, c.Peer.TLS.KeyFile, c.Peer.TLS.CAFile} }, []string{f.cert, f.key, f.ca}},
		{"consul files", []string{fmt.Sprintf("consul {\n  scheme = \"https\"\n  token_file = %q\n  ca_file = %q\n  cert_file = %q\n  key_file = %q\n}\n", base(f.token), base(f.ca), base(f.cert), base(f.key))}, nil,
			func(c *Config) []string {
				tc := c.Consul.API.TLSConfig
				return []string{c.Consul.API.TokenFile, tc.CAFile, tc.CertFile, tc.KeyFile}
			}, []string{f.token, f.ca, f.cert, f.key}},
		{"consul socket", []string{"consul {\n  address = \"unix://consul.sock\"\n}\n"}, nil,
			func(c *Config) []string { return []string{c.Consul.API.Address} }, []string{"unix://" + filepath.Join(f.dir, "consul.sock")}},
		{"each file's own directory", []string{`data_dir = "data"`, fmt.Sprintf("client {\n  token_file = %q\n}\n", base(f.token))}, []string{other, f.dir},
			func(c *Config) []string { return []string{c.DataDir, c.Client.TokenFile} }, []string{filepath.Join(other, "data"), f.token}},
		{"absolute kept", []string{fmt.Sprintf("data_dir = %q\n", filepath.Join(other, "abs"))}, nil,
			func(c *Config) []string { return []string{c.DataDir} }, []string{filepath.Join(other, "abs")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var paths []string
			for i, body := range c.files {
				dir := f.dir
				if c.dirs != nil {
					dir = c.dirs[i]
				}
				paths = append(paths, writeFile(t, dir, fmt.Sprintf("relative-%d.hcl", i), body))
			}
			t.Chdir(t.TempDir())
			cfg, err := LoadWith(testEnv(), paths...)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.got(cfg); !reflect.DeepEqual(got, c.want) {
				t.Errorf("paths %q, want %q", got, c.want)
			}
		})
	}
	t.Run("relative -config argument", func(t *testing.T) {
		writeFile(t, f.dir, "relative-arg.hcl", `data_dir = "data"`)
		t.Chdir(filepath.Dir(f.dir))
		cfg, err := LoadWith(testEnv(), filepath.Join(base(f.dir), "relative-arg.hcl"))
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(f.dir, "data"); cfg.DataDir != want {
			t.Errorf("data_dir %q, want %q", cfg.DataDir, want)
		}
	})
	t.Run("a missing file is named as resolved", func(t *testing.T) {
		p := writeFile(t, f.dir, "relative-missing.hcl", "client {\n  token_file = \"absent-token\"\n}\n")
		t.Chdir(t.TempDir())
		_, err := LoadWith(testEnv(), p)
		want := p + ":2:16: Invalid client.token_file: " + filepath.Join(f.dir, "absent-token") + ": open "
		requireErrorContaining(t, err, want)
	})
}
