package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	threeMistakes := filepath.Join(dir, "bad.hcl")
	if err := os.WriteFile(threeMistakes, []byte(`node_id = "n1"
storage {
  segment_bytes = "lots"
  durability = "eventually"
}
replication {
  lag_time_max = "ten seconds"
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	peerTLS := filepath.Join(dir, "tls.hcl")
	if err := os.WriteFile(peerTLS, []byte(`node_id = "n1"
peer {
  tls {
    cert_file = "/etc/logagent.d/tls/agent.pem"
    key_file  = "/etc/logagent.d/tls/agent-key.pem"
  }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	openClient := filepath.Join(dir, "open.hcl")
	if err := os.WriteFile(openClient, []byte(`node_id = "n1"
client {
  address = "0.0.0.0:7070"
}
peer {
  address = "127.0.0.1:7171"
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		args      []string
		code      int
		stdout    []string
		stderrHas []string
		lines     int // diagnostics lines on stderr, when >0
	}{
		// The example is the defaults: the peer API on every interface,
		// without a token.
		{"shipped example", []string{"validate", "-config", "../../config/agent.hcl"}, 0, []string{"configuration valid: node", "durability fsync"}, []string{
			"warning: peer.address 0.0.0.0:7171 is not a loopback address and neither peer.token_file nor peer.tls is set"}, 0},
		{"three mistakes", []string{"validate", "-config", threeMistakes}, 1, nil, []string{
			threeMistakes + ":3:", threeMistakes + ":4:", threeMistakes + ":7:", "3 problem(s)"}, 3},
		{"peer tls incomplete", []string{"validate", "-config", peerTLS}, 1, nil, []string{
			peerTLS + ":3:3: Invalid peer.tls: cert_file, key_file and ca_file are all required; missing: ca_file", "1 problem(s)"}, 0},
		{"client API open", []string{"validate", "-config", openClient}, 0, []string{"configuration valid: node n1"}, []string{
			"warning: client.address 0.0.0.0:7070 is not a loopback address and client.token_file is not set"}, 0},
		{"no config", []string{"validate"}, 2, nil, []string{"-config is required"}, 0},
		{"positional", []string{"validate", "-config", threeMistakes, "extra"}, 2, nil, []string{`unexpected argument "extra"`}, 0},
		{"unknown command", []string{"frobnicate"}, 2, nil, []string{`unknown command "frobnicate"`}, 0},
		{"no command", nil, 2, nil, []string{"Usage: logagent"}, 0},
		{"version", []string{"version"}, 0, []string{"logagent " + version}, nil, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(c.args, &out, &errb)
			if code != c.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, c.code, out.String(), errb.String())
			}
			for _, s := range c.stdout {
				if !strings.Contains(out.String(), s) {
					t.Errorf("stdout lacks %q: %s", s, out.String())
				}
			}
			for _, s := range c.stderrHas {
				if !strings.Contains(errb.String(), s) {
					t.Errorf("stderr lacks %q: %s", s, errb.String())
				}
			}
			if c.lines > 0 {
				n := strings.Count(errb.String(), threeMistakes+":")
				if n != c.lines {
					t.Errorf("%d diagnostics, want %d:\n%s", n, c.lines, errb.String())
				}
			}
		})
	}
}

// TestAgentFlagsRefused: token and TLS flags that cannot be used are bad
// usage (exit 2), before any request.
func TestAgentFlagsRefused(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"cert without key", []string{"status", "-cert-file", missing}, "-cert-file and -key-file go together"},
		{"key without cert", []string{"topic", "list", "-key-file", missing}, "-cert-file and -key-file go together"},
		{"token file missing", []string{"status", "-token-file", missing}, "-token-file: config: token file " + missing},
		{"token file empty", []string{"status", "-token-file", empty}, "the file is empty"},
		{"ca file missing", []string{"consume", "-topic", "t", "-ca-file", missing}, "-ca-file: config: CA file " + missing},
		{"ca file not PEM", []string{"produce", "-topic", "t", "-ca-file", empty}, "no PEM certificate"},
		{"key pair unreadable", []string{"status", "-cert-file", missing, "-key-file", missing}, "-cert-file, -key-file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(c.args, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), c.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errb.String(), c.want)
			}
		})
	}
}

// TestConfigFlagRequired: agent, like validate, needs -config: without it
// the agent ran on the built-in defaults alone (node_id the host name,
// peer on 0.0.0.0:7171, data_dir /var/lib/logagent) and joined the cluster.
func TestConfigFlagRequired(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		want    []string
		wantErr string
	}{
		{"none", nil, nil, "usage: -config is required"},
		{"one", []string{"-config", "/etc/logagent.d/"}, []string{"/etc/logagent.d/"}, ""},
		{"two", []string{"-config", "a.hcl", "-config=b"}, []string{"a.hcl", "b"}, ""},
		{"positional", []string{"/etc/logagent.d/"}, nil, `usage: unexpected argument "/etc/logagent.d/"`},
	}
	for _, command := range []string{"agent", "validate"} {
		for _, c := range cases {
			t.Run(command+" "+c.name, func(t *testing.T) {
				var errb bytes.Buffer
				got, err := parseConfigFlags(command, c.args, &errb)
				if c.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), c.wantErr) {
						t.Fatalf("got %v, %v; want an error containing %q", got, err, c.wantErr)
					}
					return
				}
				if err != nil || !slices.Equal(got, c.want) {
					t.Fatalf("got %q, %v; want %q", got, err, c.want)
				}
			})
		}
	}
}
