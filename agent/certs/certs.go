// Package certs holds an agent's TLS material (a certificate, its key and
// a CA, loaded from the files a tls block names) and makes the tls.Config
// of its listeners and clients from it. The material is swapped whole on
// Reload, and every handshake reads the material of the moment: a
// connection made after a reload uses the new certificate and CA, one made
// before keeps what it was made with.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/logagent/logagent/config"
)

// ErrNotLoaded is returned by handshakes of a Store that was never loaded.
var ErrNotLoaded = errors.New("certs: no TLS material loaded")

// ErrNoServerCertificate is returned by a client handshake with a server
// that presented no certificate.
var ErrNoServerCertificate = errors.New("certs: the server presented no certificate")

// Store is the TLS material of one tls block.
type Store struct {
	cur atomic.Pointer[config.Material]
	// mu makes reloads one at a time, so the last one to finish is the
	// last one started.
	mu sync.Mutex
}

// NewStore returns a store with nothing loaded yet: handshakes fail with
// ErrNotLoaded until the first Reload succeeds.
func NewStore() *Store { return &Store{} }

// Reload reads the files and, when they all load, makes them the material
// every later handshake uses. On an error the material in use stays.
func (s *Store) Reload(files config.TLS) (*x509.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := files.Load()
	if err != nil {
		return nil, err
	}
	s.cur.Store(&m)
	return m.Cert.Leaf, nil
}

// Certificate is the leaf certificate in use, nil before the first load.
func (s *Store) Certificate() *x509.Certificate {
	if m := s.cur.Load(); m != nil {
		return m.Cert.Leaf
	}
	return nil
}

// CA is the CA pool in use: nil before the first load or when the block
// names no ca_file.
func (s *Store) CA() *x509.CertPool {
	if m := s.cur.Load(); m != nil {
		return m.CA
	}
	return nil
}

// CACertificates are the certificates of the CA in use, none before the
// first load or when the block names no ca_file.
func (s *Store) CACertificates() []*x509.Certificate {
	if m := s.cur.Load(); m != nil {
		return m.CACerts
	}
	return nil
}

// ServerConfig is a listener's TLS: TLS 1.2 at least (Go negotiates 1.3
// with every client that has it), the certificate of the moment, and, when
// the material has a CA, a client certificate that CA signed required of
// every connection. Session tickets are off: a resumed session would skip
// the client certificate check against a CA reloaded since.
func (s *Store) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:             tls.VersionTLS12,
		SessionTicketsDisabled: true,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := s.cur.Load()
			if m == nil {
				return nil, ErrNotLoaded
			}
			c := &tls.Config{
				MinVersion:             tls.VersionTLS12,
				SessionTicketsDisabled: true,
				Certificates:           []tls.Certificate{m.Cert},
			}
			if m.CA != nil {
				c.ClientAuth, c.ClientCAs = tls.RequireAndVerifyClientCert, m.CA
			}
			return c, nil
		},
	}
}

// ClientCertificate presents the certificate of the moment to a server
// that asks for one (tls.Config.GetClientCertificate).
func (s *Store) ClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	m := s.cur.Load()
	if m == nil {
		return nil, ErrNotLoaded
	}
	return &m.Cert, nil
}

// ClientConfig is the TLS of a connection to serverName (a host name or an
// IP address, checked against the server certificate's names): TLS 1.2 at
// least, the server's certificate verified against the pools roots gives
// at the time of the handshake, and cert, when not nil, as the client
// certificate.
func ClientConfig(serverName string, roots func() (*x509.CertPool, error), cert func(*tls.CertificateRequestInfo) (*tls.Certificate, error)) *tls.Config {
	return &tls.Config{
		MinVersion:           tls.VersionTLS12,
		ServerName:           serverName,
		GetClientCertificate: cert,
		// crypto/tls's own verification would use a RootCAs fixed here;
		// VerifyConnection does the same verification (chain to a root,
		// server name, server use) against the roots of the moment, so a
		// reloaded CA applies to the next connection. It runs on every
		// handshake, resumed ones included.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			pool, err := roots()
			if err != nil {
				return err
			}
			return verifyServer(cs, serverName, pool)
		},
	}
}

func verifyServer(cs tls.ConnectionState, serverName string, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return ErrNoServerCertificate
	}
	opts := x509.VerifyOptions{
		Roots:         roots,
		DNSName:       serverName,
		Intermediates: x509.NewCertPool(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return fmt.Errorf("certs: server certificate of %s: %w", serverName, err)
	}
	return nil
}

// Pool is a roots function for ClientConfig that gives the store's CA.
func (s *Store) Pool() (*x509.CertPool, error) {
	if pool := s.CA(); pool != nil {
		return pool, nil
	}
	return nil, ErrNotLoaded
}
