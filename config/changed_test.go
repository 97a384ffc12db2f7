package config

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/pki"
)

// TestChanged: Changed names the settings whose values differ, as a file
// spells them, and nothing for the same values written differently.
func TestChanged(t *testing.T) {
	f := newTLSFixture(t)
	cert, err := os.ReadFile(f.cert)
	if err != nil {
		t.Fatal(err)
	}
	certCopy := writeFile(t, f.dir, "n1-copy.pem", string(cert))
	tlsBlock := func(block, cert string) string {
		return fmt.Sprintf("%s {\n  tls {\n    cert_file = %q\n    key_file = %q\n    ca_file = %q\n  }\n}\n", block, cert, f.key, f.ca)
	}
	cases := []struct {
		name     string
		from, to string
		want     []string
	}{
		{"nothing", "", "", nil},
		{"a default written out", "", "storage {\n  retention = \"168h\"\n}\nlog_level = \"info\"\n", nil},
		{"the same duration spelled otherwise", "storage {\n  retention = \"168h\"\n}\n", "storage {\n  retention = \"10080m\"\n}\n", nil},
		{"the same size spelled otherwise", "limits {\n  max_record_bytes = \"1MiB\"\n}\n", "limits {\n  max_record_bytes = 1048576\n}\n", nil},
		{"log level", "", "log_level = \"debug\"\n", []string{"log_level"}},
		{"settings of several blocks, in the schema's order",
			"", "topic_defaults {\n  partitions = 6\n}\nstorage {\n  retention = \"24h\"\n  durability = \"replicated\"\n}\nreplication {\n  reassign_max_bytes_per_second = \"10MiB\"\n}\n",
			[]string{"storage.durability", "storage.retention", "replication.reassign_max_bytes_per_second", "topic_defaults.partitions"}},
		{"the consul block's client settings", "",
			"consul {\n  address = \"10.0.0.5:8500\"\n  token = \"secret\"\n  datacenter = \"dc2\"\n  session_ttl = \"20s\"\n}\n",
			[]string{"consul.address", "consul.datacenter", "consul.token", "consul.session_ttl"}},
		{"kafka turned on (its advertised address follows)", "", "kafka {\n  address = \"127.0.0.1:9092\"\n}\n",
			[]string{"kafka.address", "kafka.advertise_address"}},
		{"a TLS block turned on", "", tlsBlock("client", f.cert), []string{"client.tls"}},
		{"a TLS file named", tlsBlock("peer", f.cert), tlsBlock("peer", certCopy), []string{"peer.tls.cert_file"}},
		{"a token file", "", fmt.Sprintf("peer {\n  token_file = %q\n}\n", f.token), []string{"peer.token_file"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			load := func(body string) *Config {
				t.Helper()
				cfg, err := LoadWith(testEnv(), writeFile(t, t.TempDir(), "agent.hcl", body))
				if err != nil {
					t.Fatal(err)
				}
				return cfg
			}
			from, to := load(c.from), load(c.to)
			if got := Changed(from, to); !slices.Equal(got, c.want) {
				t.Errorf("Changed: %q, want %q", got, c.want)
			}
			if got := Changed(to, from); !slices.Equal(got, c.want) {
				t.Errorf("Changed the other way: %q, want %q", got, c.want)
			}
		})
	}
}

// TestChangedKnowsEveryKey: every key of the file schema has a value in
// Config that Changed compares, so that a setting added to the schema is not
// left out of a reload's warning.
func TestChangedKnowsEveryKey(t *testing.T) {
	f := newTLSFixture(t)
	body := fmt.Sprintf("client {\n  tls {\n    cert_file = %q\n    key_file = %q\n  }\n}\npeer {\n  tls {\n    cert_file = %q\n    key_file = %q\n    ca_file = %q\n  }\n}\n",
		f.cert, f.key, f.cert, f.key, f.ca)
	cfg, err := LoadWith(testEnv(), writeFile(t, t.TempDir(), "agent.hcl", body))
	if err != nil {
		t.Fatal(err)
	}
	var walk func(block reflect.Type, v reflect.Value, prefix string)
	walk = func(block reflect.Type, v reflect.Value, prefix string) {
		for i := range block.NumField() {
			key := block.Field(i)
			name := prefix + strings.Split(key.Tag.Get("hcl"), ",")[0]
			fv, ok := settingValue(v, key.Name)
			if !ok {
				t.Errorf("%s: no value in Config", name)
				continue
			}
			if strings.Contains(key.Tag.Get("hcl"), ",block") {
				if fv.Kind() == reflect.Pointer {
					fv = fv.Elem()
				}
				walk(key.Type.Elem(), fv, name+".")
			}
		}
	}
	walk(reflect.TypeFor[fileRoot](), reflect.ValueOf(*cfg), "")
}

// TestChangedSeesFilesRewritten: a token file or a Consul TLS file
// rewritten in place under the same name is a change, since the agent reads
// it only at start; before, a reload after a token rotation named nothing,
// as if the new token were in use. The files a reload loads (peer.tls,
// client.tls) and white space around a token are no change.
func TestChangedSeesFilesRewritten(t *testing.T) {
	t.Setenv("CONSUL_HTTP_TOKEN", "")
	t.Setenv("CONSUL_HTTP_TOKEN_FILE", "")
	f := newTLSFixture(t)
	original, err := os.ReadFile(f.ca)
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := pki.NewCA("another CA", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	otherCAFile, err := otherCA.WriteCA(t.TempDir(), "ca")
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := os.ReadFile(otherCAFile)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		body string // %[1]q is the file rewritten, unless env is set
		env  string // a variable naming the file instead
		from string // the file's content at the first load
		to   string // and at the second
		want []string
	}{
		{"peer token", "peer {\n  token_file = %[1]q\n}\n", "", "old", "new", []string{"peer.token_file"}},
		{"client token", "client {\n  token_file = %[1]q\n}\n", "", "old", "new", []string{"client.token_file"}},
		{"client token, a newline added", "client {\n  token_file = %[1]q\n}\n", "", "old", "old\n", nil},
		{"consul token", "consul {\n  token_file = %[1]q\n}\n", "", "old", "new", []string{"consul.token_file"}},
		{"consul token from CONSUL_HTTP_TOKEN_FILE", "", "CONSUL_HTTP_TOKEN_FILE", "old", "new", []string{"consul.token_file"}},
		{"consul CA", "consul {\n  scheme = \"https\"\n  ca_file = %[1]q\n}\n", "",
			string(original), string(renewed), []string{"consul.ca_file"}},
		{"peer TLS CA, which a reload loads",
			fmt.Sprintf("peer {\n  tls {\n    cert_file = %q\n    key_file = %q\n    ca_file = %%[1]q\n  }\n}\n", f.cert, f.key), "",
			string(original), string(renewed), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			file := writeFile(t, dir, "file", c.from)
			body := c.body
			if c.env != "" {
				t.Setenv(c.env, file)
			} else {
				body = fmt.Sprintf(body, file)
			}
			config := writeFile(t, dir, "agent.hcl", body)
			started, err := LoadWith(testEnv(), config)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, dir, "file", c.to)
			reloaded, err := LoadWith(testEnv(), config)
			if err != nil {
				t.Fatal(err)
			}
			if got := Changed(started, reloaded); !slices.Equal(got, c.want) {
				t.Errorf("Changed: %q, want %q", got, c.want)
			}
		})
	}
}
