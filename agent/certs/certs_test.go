package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/internal/pki"
)

// pkiDir is a CA and the files of one agent's certificate under it.
type pkiDir struct {
	t     *testing.T
	dir   string
	ca    *pki.CA
	files config.TLS
}

func newPKI(t *testing.T, name string) *pkiDir {
	t.Helper()
	ca, err := pki.NewCA(name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p := &pkiDir{t: t, dir: t.TempDir(), ca: ca}
	if p.files.CAFile, err = ca.WriteCA(p.dir, "ca"); err != nil {
		t.Fatal(err)
	}
	p.issue("agent")
	return p
}

// issue writes a new certificate for 127.0.0.1 over the agent's files and
// returns it.
func (p *pkiDir) issue(name string) *pki.Leaf {
	p.t.Helper()
	leaf, err := p.ca.Issue(name, time.Now(), "127.0.0.1", "localhost")
	if err != nil {
		p.t.Fatal(err)
	}
	if p.files.CertFile, p.files.KeyFile, err = leaf.Write(p.dir, "agent"); err != nil {
		p.t.Fatal(err)
	}
	return leaf
}

func (p *pkiDir) store() *Store {
	p.t.Helper()
	s := NewStore()
	if _, err := s.Reload(p.files); err != nil {
		p.t.Fatal(err)
	}
	return s
}

// server accepts TLS connections with cfg and records the client
// certificate each handshake saw (nil for none), until the test ends.
type server struct {
	addr string
	mu   sync.Mutex
	seen []*x509.Certificate
}

func serve(t *testing.T, cfg *tls.Config) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &server{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				tc := tls.Server(c, cfg)
				_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
				if err := tc.Handshake(); err != nil {
					return
				}
				var peer *x509.Certificate
				if pcs := tc.ConnectionState().PeerCertificates; len(pcs) > 0 {
					peer = pcs[0]
				}
				srv.mu.Lock()
				srv.seen = append(srv.seen, peer)
				srv.mu.Unlock()
				// One byte proves the handshake passed on both sides.
				_, _ = tc.Write([]byte{1})
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return srv
}

func (s *server) lastClientCert() *x509.Certificate {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.seen) == 0 {
		return nil
	}
	return s.seen[len(s.seen)-1]
}

// dial makes one connection with cfg and returns the server's certificate,
// or the error of the handshake or of the first read (where TLS 1.3
// reports a client certificate the server refused).
func dial(addr string, cfg *tls.Config) (*x509.Certificate, tls.ConnectionState, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, tls.ConnectionState{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != nil {
		return nil, tls.ConnectionState{}, err
	}
	cs := c.ConnectionState()
	return cs.PeerCertificates[0], cs, nil
}

func sameSerial(a, b *x509.Certificate) bool {
	return a != nil && b != nil && a.SerialNumber.Cmp(b.SerialNumber) == 0
}

// TestMutualTLS: a server of a store with a CA takes only clients whose
// certificate that CA signed, and a client of a store takes only servers
// the CA signed for the name it dials.
func TestMutualTLS(t *testing.T) {
	good, rogue := newPKI(t, "cluster CA"), newPKI(t, "rogue CA")
	server, client, rogueStore := good.store(), good.store(), rogue.store()
	srv := serve(t, server.ServerConfig())
	noCert := func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &tls.Certificate{}, nil }

	cases := []struct {
		name    string
		cfg     *tls.Config
		wantErr string
	}{
		{"certificate of the CA", ClientConfig("127.0.0.1", client.Pool, client.ClientCertificate), ""},
		{"by DNS name", ClientConfig("localhost", client.Pool, client.ClientCertificate), ""},
		{"no client certificate", ClientConfig("127.0.0.1", client.Pool, noCert), "certificate required"},
		{"client certificate of another CA", ClientConfig("127.0.0.1", client.Pool, rogueStore.ClientCertificate), "unknown certificate authority"},
		{"server of another CA", ClientConfig("127.0.0.1", rogueStore.Pool, client.ClientCertificate), "certificate signed by unknown authority"},
		{"name not in the certificate", ClientConfig("127.0.0.2", client.Pool, client.ClientCertificate), "not 127.0.0.2"},
		{"TLS 1.1", func() *tls.Config {
			c := ClientConfig("127.0.0.1", client.Pool, client.ClientCertificate)
			c.MinVersion, c.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
			return c
		}(), "protocol version"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, cs, err := dial(srv.addr, c.cfg)
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if cs.Version != tls.VersionTLS13 {
					t.Errorf("negotiated %s, want TLS 1.3", tls.VersionName(cs.Version))
				}
				if !sameSerial(srv.lastClientCert(), client.Certificate()) {
					t.Errorf("the server saw client certificate %v, want the store's", srv.lastClientCert())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("got %v, want an error saying %q", err, c.wantErr)
			}
		})
	}
}

// TestServerWithoutCA: a store without a CA (client.tls without ca_file)
// asks no client certificate.
func TestServerWithoutCA(t *testing.T) {
	p := newPKI(t, "CA")
	noCA := p.files
	noCA.CAFile = ""
	s := NewStore()
	if _, err := s.Reload(noCA); err != nil {
		t.Fatal(err)
	}
	srv := serve(t, s.ServerConfig())
	if _, _, err := dial(srv.addr, ClientConfig("127.0.0.1", p.store().Pool, nil)); err != nil {
		t.Fatalf("refused a client without certificate: %v", err)
	}
	if c := srv.lastClientCert(); c != nil {
		t.Errorf("the server saw a client certificate: %v", c.Subject)
	}
}

// TestReload: after a reload, new connections present the new certificate
// on both sides; a reload that fails keeps the old material; a reloaded CA
// refuses what only the old CA signed.
func TestReload(t *testing.T) {
	p := newPKI(t, "CA")
	server, client := p.store(), NewStore()
	// The client has the same CA and a certificate of its own.
	clientFiles := p.files
	clientFiles.CertFile, clientFiles.KeyFile = filepath.Join(t.TempDir(), "c.pem"), filepath.Join(t.TempDir(), "c-key.pem")
	writeLeaf(t, p.ca, "client", clientFiles)
	if _, err := client.Reload(clientFiles); err != nil {
		t.Fatal(err)
	}
	srv := serve(t, server.ServerConfig())
	cfg := ClientConfig("127.0.0.1", client.Pool, client.ClientCertificate)

	first := server.Certificate()
	got, _, err := dial(srv.addr, cfg)
	if err != nil || !sameSerial(got, first) {
		t.Fatalf("before the reload: served %v, %v", got, err)
	}

	leaf := p.issue("agent, renewed")
	if loaded, err := server.Reload(p.files); err != nil || !sameSerial(loaded, leaf.Cert) {
		t.Fatalf("Reload = %v, %v", loaded, err)
	}
	if got, _, err = dial(srv.addr, cfg); err != nil || !sameSerial(got, leaf.Cert) {
		t.Fatalf("after the reload: served serial %v, want %v (%v)", serial(got), leaf.Cert.SerialNumber, err)
	}

	oldClient := client.Certificate()
	newClient := writeLeaf(t, p.ca, "client, renewed", clientFiles)
	if _, err := client.Reload(clientFiles); err != nil {
		t.Fatal(err)
	}
	if _, _, err := dial(srv.addr, cfg); err != nil || !sameSerial(srv.lastClientCert(), newClient.Cert) || sameSerial(srv.lastClientCert(), oldClient) {
		t.Fatalf("after the client's reload the server saw %v, want %v (%v)", serial(srv.lastClientCert()), newClient.Cert.SerialNumber, err)
	}

	// A broken certificate file: the reload fails, the renewed one stays.
	if err := os.WriteFile(p.files.CertFile, []byte("-----BEGIN CERTIFICATE-----\ngarbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := server.Reload(p.files); err == nil || !strings.Contains(err.Error(), "cert_file "+p.files.CertFile) {
		t.Fatalf("Reload of a broken certificate = %v, want an error naming the file", err)
	}
	if got, _, err = dial(srv.addr, cfg); err != nil || !sameSerial(got, leaf.Cert) {
		t.Fatalf("after a failed reload: served %v, want the renewed certificate (%v)", serial(got), err)
	}

	// A new CA: the server's certificate and CA move to it; the client,
	// still of the old CA, is refused, and refuses the server.
	next, err := pki.NewCA("next CA", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p.ca = next
	if p.files.CAFile, err = next.WriteCA(p.dir, "ca"); err != nil {
		t.Fatal(err)
	}
	p.issue("agent, new CA")
	if _, err := server.Reload(p.files); err != nil {
		t.Fatal(err)
	}
	if _, _, err := dial(srv.addr, cfg); err == nil {
		t.Fatal("a client of the old CA was accepted after the server moved to a new CA")
	}
	writeLeaf(t, next, "client, new CA", clientFiles)
	clientFiles.CAFile = p.files.CAFile
	if _, err := client.Reload(clientFiles); err != nil {
		t.Fatal(err)
	}
	if _, _, err := dial(srv.addr, cfg); err != nil {
		t.Fatalf("both on the new CA: %v", err)
	}
}

func writeLeaf(t *testing.T, ca *pki.CA, name string, files config.TLS) *pki.Leaf {
	t.Helper()
	leaf, err := ca.Issue(name, time.Now(), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	for path, b := range map[string][]byte{files.CertFile: leaf.CertPEM, files.KeyFile: leaf.KeyPEM} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return leaf
}

func serial(c *x509.Certificate) *big.Int {
	if c == nil {
		return nil
	}
	return c.SerialNumber
}

// TestNotLoaded: a store that never loaded fails handshakes instead of
// serving without a certificate.
func TestNotLoaded(t *testing.T) {
	s := NewStore()
	if _, err := s.ClientCertificate(nil); !errors.Is(err, ErrNotLoaded) {
		t.Errorf("ClientCertificate = %v, want ErrNotLoaded", err)
	}
	if _, err := s.Pool(); !errors.Is(err, ErrNotLoaded) {
		t.Errorf("Pool = %v, want ErrNotLoaded", err)
	}
	if _, err := s.ServerConfig().GetConfigForClient(&tls.ClientHelloInfo{}); !errors.Is(err, ErrNotLoaded) {
		t.Errorf("GetConfigForClient = %v, want ErrNotLoaded", err)
	}
}
