package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/pki"
)

// tlsFixture is a directory of PEM files, good and bad, for the tls blocks.
type tlsFixture struct {
	dir                 string
	ca, cert, key       string
	otherKey            string // a key of another certificate
	garbage, keyAsCert  string
	missing, emptyToken string
	token               string
}

func newTLSFixture(t *testing.T) tlsFixture {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	ca, err := pki.NewCA("test CA", now)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue("n1", now, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	other, err := ca.Issue("n2", now, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	f := tlsFixture{dir: dir, missing: filepath.Join(dir, "absent.pem")}
	if f.ca, err = ca.WriteCA(dir, "ca"); err != nil {
		t.Fatal(err)
	}
	if f.cert, f.key, err = leaf.Write(dir, "n1"); err != nil {
		t.Fatal(err)
	}
	if _, f.otherKey, err = other.Write(dir, "n2"); err != nil {
		t.Fatal(err)
	}
	f.garbage = writeFile(t, dir, "garbage.pem", "not PEM at all\n")
	f.keyAsCert = writeFile(t, dir, "key-as-cert.pem", string(leaf.KeyPEM))
	f.emptyToken = writeFile(t, dir, "empty-token", " \n")
	f.token = writeFile(t, dir, "token", "s3cret\n")
	return f
}

func tlsHCL(block, cert, key, ca string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s {\n  tls {\n", block) // lines 1, 2
	for _, kv := range [][2]string{{"cert_file", cert}, {"key_file", key}, {"ca_file", ca}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, "    %s = %q\n", kv[0], kv[1])
		}
	}
	b.WriteString("  }\n}\n")
	return b.String()
}

// TestTLSValid: complete blocks load, and their files parse as the agent
// will use them.
func TestTLSValid(t *testing.T) {
	f := newTLSFixture(t)
	dir := t.TempDir()
	cfg, err := LoadWith(testEnv(), writeFile(t, dir, "1.hcl", tlsHCL("peer", f.cert, f.key, f.ca)),
		writeFile(t, dir, "2.hcl", tlsHCL("client", f.cert, f.key, "")),
		writeFile(t, dir, "3.hcl", fmt.Sprintf("client {\n  token_file = %q\n}\n", f.token)))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Peer.TLS == nil || *cfg.Peer.TLS != (TLS{CertFile: f.cert, KeyFile: f.key, CAFile: f.ca}) {
		t.Errorf("peer.tls = %+v", cfg.Peer.TLS)
	}
	if cfg.Client.TLS == nil || *cfg.Client.TLS != (TLS{CertFile: f.cert, KeyFile: f.key}) {
		t.Errorf("client.tls = %+v", cfg.Client.TLS)
	}
	if cfg.Client.TokenFile != f.token {
		t.Errorf("client.token_file = %q", cfg.Client.TokenFile)
	}
	m, err := cfg.Peer.TLS.Load()
	if err != nil || m.CA == nil || m.Cert.Leaf == nil || m.Cert.Leaf.Subject.CommonName != "n1" {
		t.Fatalf("peer TLS material: %+v, %v", m, err)
	}
	if m, err := cfg.Client.TLS.Load(); err != nil || m.CA != nil {
		t.Fatalf("client TLS material without ca_file: CA %v, %v", m.CA, err)
	}
	token, err := ReadToken(f.token)
	if err != nil || string(token) != "s3cret" {
		t.Fatalf("ReadToken = %q, %v", token, err)
	}

	def, err := LoadWith(testEnv())
	if err != nil {
		t.Fatal(err)
	}
	if def.Peer.TLS != nil || def.Client.TLS != nil || def.Client.TokenFile != "" {
		t.Errorf("defaults have TLS or a client token: %+v %+v", def.Peer, def.Client)
	}
}

// TestTLSInvalid: every way a tls block or token file can be wrong is a
// diagnostic at the line that names the file (or at the block, for a
// missing key).
func TestTLSInvalid(t *testing.T) {
	f := newTLSFixture(t)
	cases := []struct {
		name string
		hcl  string
		line int
		want string
	}{
		{"peer: ca_file missing", tlsHCL("peer", f.cert, f.key, ""), 2, "cert_file, key_file and ca_file are all required; missing: ca_file"},
		{"peer: all missing", tlsHCL("peer", "", "", ""), 2, "missing: cert_file, key_file, ca_file"},
		{"client: key_file missing", tlsHCL("client", f.cert, "", ""), 2, "cert_file and key_file are required; missing: key_file"},
		{"peer: cert unreadable", tlsHCL("peer", f.missing, f.key, f.ca), 3, "Invalid peer.tls.cert_file: " + f.missing + ": open"},
		{"peer: cert not PEM", tlsHCL("peer", f.garbage, f.key, f.ca), 3, "no PEM certificate in the file"},
		{"peer: key in cert file", tlsHCL("peer", f.keyAsCert, f.key, f.ca), 3, `PEM block 1 is a "PRIVATE KEY", not a CERTIFICATE`},
		{"peer: key unreadable", tlsHCL("peer", f.cert, f.missing, f.ca), 4, "Invalid peer.tls.key_file: " + f.missing + ": open"},
		{"peer: key not PEM", tlsHCL("peer", f.cert, f.garbage, f.ca), 4, "Invalid peer.tls.key_file: " + f.garbage + ": tls: failed to find any PEM data in key input"},
		{"peer: key of another cert", tlsHCL("peer", f.cert, f.otherKey, f.ca), 4, "private key does not match public key"},
		{"peer: ca unreadable", tlsHCL("peer", f.cert, f.key, f.missing), 5, "Invalid peer.tls.ca_file: " + f.missing + ": open"},
		{"peer: ca not PEM", tlsHCL("peer", f.cert, f.key, f.garbage), 5, "Invalid peer.tls.ca_file: " + f.garbage + ": no PEM certificate"},
		{"client: cert unreadable", tlsHCL("client", f.missing, f.key, ""), 3, "Invalid client.tls.cert_file"},
		{"client: ca not PEM", tlsHCL("client", f.cert, f.key, f.garbage), 5, "Invalid client.tls.ca_file"},
		{"client token empty", fmt.Sprintf("client {\n  token_file = %q\n}\n", f.emptyToken), 2, "Invalid client.token_file: " + f.emptyToken + ": the file is empty"},
		{"client token unreadable", fmt.Sprintf("client {\n  token_file = %q\n}\n", f.missing), 2, "Invalid client.token_file: " + f.missing + ": open"},
		{"peer token empty", fmt.Sprintf("peer {\n  token_file = %q\n}\n", f.emptyToken), 2, "Invalid peer.token_file: " + f.emptyToken + ": the file is empty"},
		{"consul token empty", fmt.Sprintf("consul {\n  token_file = %q\n}\n", f.emptyToken), 2, "Invalid consul.token_file: " + f.emptyToken + ": the file is empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "agent.hcl", c.hcl)
			_, err := LoadWith(testEnv(), p)
			var de *DiagnosticsError
			if !errors.As(err, &de) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want diagnostics", err)
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

// TestTLSProblemsReportedAtOnce: one run names every bad file of both
// blocks, and no diagnostic quotes a key or a token.
func TestTLSProblemsReportedAtOnce(t *testing.T) {
	f := newTLSFixture(t)
	p := writeFile(t, t.TempDir(), "agent.hcl", tlsHCL("peer", f.garbage, f.otherKey, f.missing)+tlsHCL("client", f.cert, f.otherKey, f.garbage))
	_, err := LoadWith(testEnv(), p)
	de := requireDiagnostics(t, err)
	var got []string
	for _, d := range de.Diags {
		got = append(got, fmt.Sprintf("%d %s", d.Subject.Start.Line, d.Summary))
	}
	// The peer block's bad certificate hides nothing but the pair check
	// (a key cannot be matched against no certificate).
	want := []string{"3 Invalid peer.tls.cert_file", "5 Invalid peer.tls.ca_file",
		"11 Invalid client.tls.key_file", "12 Invalid client.tls.ca_file"}
	if !slices.Equal(got, want) {
		t.Errorf("diagnostics %q, want %q:\n%v", got, want, err)
	}
	key, err := os.ReadFile(f.otherKey)
	if err != nil {
		t.Fatal(err)
	}
	if msg := de.Error(); strings.Contains(msg, "PRIVATE KEY") || strings.Contains(msg, string(key[30:60])) {
		t.Errorf("a diagnostic quotes key material:\n%s", msg)
	}
}

// TestTLSLoadReportsEveryFile: Load, the agent's reload path, names each
// bad file in one error.
func TestTLSLoadReportsEveryFile(t *testing.T) {
	f := newTLSFixture(t)
	_, err := TLS{CertFile: f.cert, KeyFile: f.otherKey, CAFile: f.garbage}.Load()
	if err == nil {
		t.Fatal("Load accepted a key of another certificate and a CA file without certificates")
	}
	for _, want := range []string{"key_file " + f.otherKey + ": tls: private key does not match public key", "ca_file " + f.garbage + ": no PEM certificate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestWarnings(t *testing.T) {
	f := newTLSFixture(t)
	// The peer listener on loopback, under every case, so that each shows
	// the warnings of what it sets alone; the peer cases set its address.
	quietPeer := writeFile(t, t.TempDir(), "peer.hcl", "peer {\n  address = \"127.0.0.1:7171\"\n}\n")
	openPeer := "peer.address 0.0.0.0:7171 is not a loopback address and neither peer.token_file nor peer.tls is set: anyone who can reach it can read and write every partition"
	cases := []struct {
		name string
		hcl  string
		want string // "" for no warning
	}{
		{"client on loopback", "", ""},
		{"localhost", "client {\n  address = \"localhost:7070\"\n}\n", ""},
		{"ipv6 loopback", "client {\n  address = \"[::1]:7070\"\n}\n", ""},
		{"every interface, no token", "client {\n  address = \"0.0.0.0:7070\"\n}\n", "client.address 0.0.0.0:7070 is not a loopback address and client.token_file is not set"},
		{"host name, no token", "client {\n  address = \"host-1.example:7070\"\n}\n", "client.token_file is not set"},
		{"token without TLS", fmt.Sprintf("client {\n  address = \"10.1.2.3:7070\"\n  token_file = %q\n}\n", f.token), "client.tls is not set: the client token and every record cross the network in the clear"},
		{"kafka on loopback", "kafka {\n  address = \"127.0.0.1:9092\"\n}\n", ""},
		{"kafka beyond loopback", "kafka {\n  address = \"10.1.2.3:9092\"\n}\n", "the Kafka listener has neither TLS nor authentication"},
		{"kafka beside a client token", fmt.Sprintf("client {\n  token_file = %q\n}\nkafka {\n  address = \"127.0.0.1:9092\"\n}\n", f.token), "the Kafka listener (kafka.address 127.0.0.1:9092) takes no token"},
		{"token and TLS", fmt.Sprintf("client {\n  address = \"10.1.2.3:7070\"\n  token_file = %q\n  tls {\n    cert_file = %q\n    key_file = %q\n  }\n}\n", f.token, f.cert, f.key), ""},
		{"peer on every interface, no token (the default)", "peer {\n  address = \"0.0.0.0:7171\"\n}\n", openPeer},
		{"peer on a host address, no token", "peer {\n  address = \"10.1.2.3:7171\"\n}\n", "peer.address 10.1.2.3:7171 is not a loopback address and neither peer.token_file nor peer.tls is set"},
		{"peer on localhost", "peer {\n  address = \"localhost:7171\"\n}\n", ""},
		{"peer with a token", fmt.Sprintf("peer {\n  address = \"0.0.0.0:7171\"\n  token_file = %q\n}\n", f.token), ""},
		{"peer with mutual TLS", strings.Replace(tlsHCL("peer", f.cert, f.key, f.ca), "peer {\n", "peer {\n  address = \"0.0.0.0:7171\"\n", 1), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "agent.hcl", c.hcl)
			cfg, err := LoadWith(testEnv(), quietPeer, p)
			if err != nil {
				t.Fatal(err)
			}
			w := cfg.Warnings()
			switch {
			case c.want == "" && len(w) != 0:
				t.Errorf("warnings %q, want none", w)
			case c.want != "" && (len(w) != 1 || !strings.Contains(w[0], c.want)):
				t.Errorf("warnings %q, want one saying %q", w, c.want)
			}
		})
	}
	t.Run("built-in defaults", func(t *testing.T) {
		cfg, err := LoadWith(testEnv())
		if err != nil {
			t.Fatal(err)
		}
		if w := cfg.Warnings(); len(w) != 1 || !strings.Contains(w[0], openPeer) {
			t.Errorf("warnings %q, want one saying %q", w, openPeer)
		}
	})
}
