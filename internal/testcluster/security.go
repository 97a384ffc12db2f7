package testcluster

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"path/filepath"
	"syscall"
	"time"

	"github.com/logagent/logagent/internal/pki"
)

// Security turns on the agents' TLS and tokens. With either TLS, the
// cluster has a CA (Cluster.CA) and each agent a certificate it signed,
// for 127.0.0.1 and localhost, that serves both listeners and is the
// agent's client certificate to its peers.
type Security struct {
	// PeerTLS is mutual TLS between agents (peer.tls).
	PeerTLS bool
	// ClientTLS serves the client API over TLS (client.tls); the
	// harness's own requests trust the CA.
	ClientTLS bool
	// ClientCerts, with ClientTLS, makes the client API require client
	// certificates of the CA (client.tls.ca_file); the harness presents
	// ClientCert.
	ClientCerts bool
	// PeerToken and ClientToken, when set, are written to the agents'
	// peer.token_file and client.token_file; the harness's own requests
	// carry the client token.
	PeerToken   string
	ClientToken string
}

func (s Security) anyTLS() bool { return s.PeerTLS || s.ClientTLS }

// setUpSecurity makes the CA and the token files, and the harness's HTTP
// client that speaks to the agents as the options require.
func (c *Cluster) setUpSecurity(s Security) {
	t := c.t
	t.Helper()
	c.security = s
	dir := t.TempDir()
	if s.anyTLS() {
		ca, err := pki.NewCA("testcluster CA", time.Now())
		if err != nil {
			t.Fatalf("testcluster: %v", err)
		}
		if c.CAFile, err = ca.WriteCA(dir, "ca"); err != nil {
			t.Fatalf("testcluster: %v", err)
		}
		c.CA = ca
		if s.ClientCerts {
			if c.ClientCert, err = ca.Issue("testcluster harness", time.Now()); err != nil {
				t.Fatalf("testcluster: %v", err)
			}
			if c.ClientCertFile, c.ClientKeyFile, err = c.ClientCert.Write(dir, "harness"); err != nil {
				t.Fatalf("testcluster: %v", err)
			}
		}
	}
	for name, token := range map[string]string{"peer-token": s.PeerToken, "client-token": s.ClientToken} {
		if token == "" {
			continue
		}
		path := writeFile(t, filepath.Join(dir, name), token+"\n")
		if name == "peer-token" {
			c.peerTokenFile = path
		} else {
			c.clientTokenFile = path
		}
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = c.ClientTLSConfig()
	c.http = &http.Client{Timeout: 60 * time.Second, Transport: &tokenTransport{token: s.ClientToken, next: transport}}
}

// ClientTLSConfig trusts the cluster's CA (nil without one) and presents
// ClientCert (with Security.ClientCerts), for a client of the agents'
// https client API.
func (c *Cluster) ClientTLSConfig() *tls.Config {
	if c.CA == nil {
		return nil
	}
	roots := x509.NewCertPool()
	roots.AddCert(c.CA.Cert)
	cfg := &tls.Config{RootCAs: roots}
	if c.ClientCert != nil {
		pair, err := tls.X509KeyPair(c.ClientCert.CertPEM, c.ClientCert.KeyPEM)
		if err != nil {
			c.t.Fatalf("testcluster: %v", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// Scheme is how the agents' client API is reached: "https" with
// Security.ClientTLS, else "http".
func (c *Cluster) Scheme() string {
	if c.security.ClientTLS {
		return "https"
	}
	return "http"
}

// tokenTransport adds the client token to requests that carry no
// Authorization header of their own.
type tokenTransport struct {
	token string
	next  http.RoundTripper
}

func (t *tokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.token == "" || req.Header.Get("Authorization") != "" {
		return t.next.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+t.token)
	return t.next.RoundTrip(req)
}

// IssueCert signs a new certificate for the agent and writes it over its
// certificate and key files (each replaced whole), as a renewal does; it
// takes effect at the agent's next start or Reload.
func (a *Agent) IssueCert() *pki.Leaf {
	t := a.c.t
	t.Helper()
	leaf, err := a.c.CA.Issue(a.NodeID, time.Now(), "127.0.0.1", "localhost", a.NodeID)
	if err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	if a.CertFile, a.KeyFile, err = leaf.Write(a.tlsDir, "agent"); err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	return leaf
}

// securityHCL is the agent's TLS and token settings, the lines of its
// peer and client blocks.
func (a *Agent) securityHCL() (peer, client string) {
	s, c := a.c.security, a.c
	if s.PeerTLS {
		peer += fmt.Sprintf("  tls {\n    cert_file = %q\n    key_file  = %q\n    ca_file   = %q\n  }\n", a.CertFile, a.KeyFile, c.CAFile)
	}
	if c.peerTokenFile != "" {
		peer += fmt.Sprintf("  token_file = %q\n", c.peerTokenFile)
	}
	if s.ClientTLS {
		ca := ""
		if s.ClientCerts {
			ca = fmt.Sprintf("    ca_file   = %q\n", c.CAFile)
		}
		client += fmt.Sprintf("  tls {\n    cert_file = %q\n    key_file  = %q\n%s  }\n", a.CertFile, a.KeyFile, ca)
	}
	if c.clientTokenFile != "" {
		client += fmt.Sprintf("  token_file = %q\n", c.clientTokenFile)
	}
	return peer, client
}

// Reload sends SIGHUP: the agent re-reads its configuration, its log level
// and TLS files.
func (a *Agent) Reload() { a.current().signal(syscall.SIGHUP) }
