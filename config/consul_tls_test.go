package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestConsulTLSFilesNeedHTTPS: a consul block that names a CA, a client
// certificate and key asks for TLS to Consul, but with scheme left at its
// default "http" Consul's client loaded the files and spoke plain HTTP,
// ignoring them and sending the Consul token in the clear; the
// configuration was accepted without a word. It is refused now, and taken
// with scheme = "https" or an https:// address.
func TestConsulTLSFilesNeedHTTPS(t *testing.T) {
	t.Setenv("CONSUL_HTTP_SSL", "")
	t.Setenv("CONSUL_HTTP_ADDR", "")
	f := newTLSFixture(t)
	for _, tc := range []struct {
		name, address, scheme string
		refused               bool
	}{
		{"default scheme", "10.1.2.50:8501", "", true},
		{"scheme http", "10.1.2.50:8501", `scheme = "http"`, true},
		{"scheme https", "10.1.2.50:8501", `scheme = "https"`, false},
		{"https address", "https://10.1.2.50:8501", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "c.hcl", fmt.Sprintf(
				"consul {\n  address = %q\n  %s\n  ca_file = %q\n  cert_file = %q\n  key_file = %q\n  token_file = %q\n}\n",
				tc.address, tc.scheme, f.ca, f.cert, f.key, f.token))
			_, err := LoadWith(testEnv(), p)
			switch {
			case tc.refused && (err == nil || !strings.Contains(err.Error(), "consul.ca_file, cert_file and key_file apply only to")):
				t.Fatalf("TLS files with %s: %v; want refused, the files being ignored over plain HTTP", tc.name, err)
			case !tc.refused && err != nil:
				t.Fatalf("TLS files with %s: %v; want loaded", tc.name, err)
			}
		})
	}
}

// TestConsulTLSFilesChecked: the consul block's TLS files are checked at
// load as a tls block's are: a certificate without its key (or a key
// without its certificate), a file that does not read or parse, a key that
// is not the certificate's. Each passed logagent validate, and Consul's
// client refused it when the agent started.
func TestConsulTLSFilesChecked(t *testing.T) {
	t.Setenv("CONSUL_HTTP_SSL", "")
	t.Setenv("CONSUL_HTTP_ADDR", "")
	t.Setenv("CONSUL_CACERT", "")
	t.Setenv("CONSUL_CLIENT_CERT", "")
	t.Setenv("CONSUL_CLIENT_KEY", "")
	f := newTLSFixture(t)
	for _, tc := range []struct {
		name          string
		ca, cert, key string
		want          []string // "" for valid; else each problem, at line:col
	}{
		{"all three", f.ca, f.cert, f.key, nil},
		{"CA only", f.ca, "", "", nil},
		{"certificate and key", "", f.cert, f.key, nil},
		{"certificate without key", f.ca, f.cert, "", []string{":5:15: Invalid consul.cert_file: " + f.cert + " is set but consul.key_file (or CONSUL_CLIENT_KEY) is not"}},
		{"key without certificate", "", "", f.key, []string{":6:14: Invalid consul.key_file: " + f.key + " is set but consul.cert_file (or CONSUL_CLIENT_CERT) is not"}},
		{"missing CA", f.missing, "", "", []string{":4:13: Invalid consul.ca_file: " + f.missing + ": open "}},
		{"CA not PEM", f.garbage, f.cert, f.key, []string{":4:13: Invalid consul.ca_file: " + f.garbage + ": no PEM certificate"}},
		{"key of another certificate", f.ca, f.cert, f.otherKey, []string{":6:14: Invalid consul.key_file: " + f.otherKey + ": tls: private key does not match public key"}},
		{"every file wrong", f.garbage, f.keyAsCert, f.missing, []string{
			":4:13: Invalid consul.ca_file: " + f.garbage,
			":5:15: Invalid consul.cert_file: " + f.keyAsCert + `: PEM block 1 is a "PRIVATE KEY", not a CERTIFICATE`,
			":6:14: Invalid consul.key_file: " + f.missing + ": open "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			b.WriteString("consul {\n  address = \"10.1.2.50:8501\"\n  scheme = \"https\"\n") // lines 1-3
			for _, kv := range [][2]string{{"ca_file", tc.ca}, {"cert_file", tc.cert}, {"key_file", tc.key}} {
				if kv[1] != "" {
					fmt.Fprintf(&b, "  %s = %q\n", kv[0], kv[1])
				} else {
					b.WriteString("\n")
				}
			}
			b.WriteString("}\n")
			p := writeFile(t, t.TempDir(), "c.hcl", b.String())
			_, err := LoadWith(testEnv(), p)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var de *DiagnosticsError
			if !errors.As(err, &de) || len(de.Diags) != len(tc.want) {
				t.Fatalf("got %v; want %d problem(s): %q", err, len(tc.want), tc.want)
			}
			for i, d := range de.Diags {
				if got := FormatDiagnostic(d); !strings.HasPrefix(got, p+tc.want[i]) {
					t.Errorf("problem %d: %q, want it to start %q", i, got, p+tc.want[i])
				}
			}
		})
	}
}
