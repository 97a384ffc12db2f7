package config

import (
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
