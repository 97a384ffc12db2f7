package config

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// TLS names the PEM files of a listener's TLS: its certificate (a chain,
// leaf first), the certificate's private key, and the CA certificates that
// verify the other side. CAFile is empty where it is optional and unset.
type TLS struct {
	CertFile string
	KeyFile  string
	CAFile   string
}

// Material is what a TLS block's files hold, parsed.
type Material struct {
	Cert tls.Certificate
	// CA is nil when the block names no ca_file; CACerts are its
	// certificates, for a pool made of several.
	CA      *x509.CertPool
	CACerts []*x509.Certificate
}

// Load reads and parses the files, as validation does: the certificate
// with its key, which must match, and the CA. The agent calls it at start
// and on every reload; all problems are joined in the error, each naming
// its file (never its content).
func (t TLS) Load() (Material, error) {
	m, problems := t.read()
	errs := make([]error, 0, len(problems))
	for _, p := range problems {
		errs = append(errs, fmt.Errorf("%s %s: %w", p.key, p.path, p.err))
	}
	if err := errors.Join(errs...); err != nil {
		return Material{}, fmt.Errorf("config: TLS files: %w", err)
	}
	return m, nil
}

// tlsProblem is one file of a TLS block that cannot be used.
type tlsProblem struct {
	key  string // "cert_file", "key_file" or "ca_file"
	path string
	err  error
}

func (t TLS) read() (Material, []tlsProblem) {
	var m Material
	var problems []tlsProblem
	fail := func(key, path string, err error) { problems = append(problems, tlsProblem{key, path, err}) }

	certPEM, certErr := os.ReadFile(t.CertFile)
	if certErr == nil {
		_, certErr = parseCertificates(certPEM)
	}
	if certErr != nil {
		fail("cert_file", t.CertFile, certErr)
	}
	keyPEM, keyErr := os.ReadFile(t.KeyFile)
	if keyErr != nil {
		fail("key_file", t.KeyFile, keyErr)
	}
	if certErr == nil && keyErr == nil {
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			// The certificate parsed, so the key is what is wrong: not a
			// key, or not the certificate's.
			fail("key_file", t.KeyFile, err)
		}
		m.Cert = cert
	}
	if t.CAFile != "" {
		if cas, err := readCertificates(t.CAFile); err != nil {
			fail("ca_file", t.CAFile, err)
		} else {
			m.CA, m.CACerts = poolOf(cas), cas
		}
	}
	return m, problems
}

func readCertificates(path string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseCertificates(b)
}

func poolOf(certs []*x509.Certificate) *x509.CertPool {
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool
}

// LoadCA reads a file of PEM CA certificates into a pool (a client's
// -ca-file).
func LoadCA(path string) (*x509.CertPool, error) {
	certs, err := readCertificates(path)
	if err != nil {
		return nil, fmt.Errorf("config: CA file %s: %w", path, err)
	}
	return poolOf(certs), nil
}

// parseCertificates parses every PEM block of a certificate file; a file
// without one, a block of another type or one that does not parse is an
// error, so a key pasted into a certificate file is caught here rather than
// at the first handshake.
func parseCertificates(b []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for n := 1; ; n++ {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is a %q, not a CERTIFICATE", n, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d: %w", n, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM certificate in the file")
	}
	return certs, nil
}

// tlsBlock validates a tls block: certificate and key always, the CA when
// caRequired or named. Every problem is reported, at the key that names
// the file.
func (v *validator) tlsBlock(block string, f *fileTLS, caRequired bool) *TLS {
	if f == nil {
		return nil
	}
	t := &TLS{CertFile: v.path(block+".cert_file", f.CertFile), KeyFile: v.path(block+".key_file", f.KeyFile), CAFile: v.path(block+".ca_file", f.CAFile)}
	var missing []string
	for _, k := range []struct {
		name, value string
		required    bool
	}{{"cert_file", t.CertFile, true}, {"key_file", t.KeyFile, true}, {"ca_file", t.CAFile, caRequired}} {
		if k.required && k.value == "" {
			missing = append(missing, k.name)
		}
	}
	if len(missing) > 0 {
		all := "cert_file and key_file are required"
		if caRequired {
			all = "cert_file, key_file and ca_file are all required"
		}
		v.errorf(block, "%s; missing: %s", all, strings.Join(missing, ", "))
		return t
	}
	_, problems := t.read()
	for _, p := range problems {
		v.errorf(block+"."+p.key, "%s: %v", p.path, p.err)
	}
	return t
}

// Warnings are what a valid configuration still deserves a loud word
// about: the agent logs them at start, `logagent validate` prints them.
func (c *Config) Warnings() []string {
	var w []string
	switch {
	case isLoopback(c.Client.Address):
	case c.Client.TokenFile == "":
		w = append(w, fmt.Sprintf("client.address %s is not a loopback address and client.token_file is not set: anyone who can reach it can read, write and delete every topic; set client.token_file (and client.tls) or listen on 127.0.0.1", c.Client.Address))
	case c.Client.TLS == nil:
		w = append(w, fmt.Sprintf("client.address %s is not a loopback address and client.tls is not set: the client token and every record cross the network in the clear", c.Client.Address))
	}
	// The Kafka listener has neither TLS nor authentication (docs/kafka.md).
	switch {
	case c.Kafka.Address == "":
	case !isLoopback(c.Kafka.Address):
		w = append(w, fmt.Sprintf("kafka.address %s is not a loopback address and the Kafka listener has neither TLS nor authentication: anyone who can reach it can read, write and delete every topic; listen on 127.0.0.1", c.Kafka.Address))
	case c.Client.TokenFile != "":
		w = append(w, fmt.Sprintf("client.token_file is set but the Kafka listener (kafka.address %s) takes no token: every local user can read, write and delete topics through it", c.Kafka.Address))
	}
	// The peer API answers replica fetches and forwarded produces, and
	// takes a fetch's word for what its follower holds. Its default listens
	// on every interface, because other agents must reach it: only the
	// warning, not the default, can tell an open one.
	switch {
	case isLoopback(c.Peer.Address), c.Peer.TokenFile != "", c.Peer.TLS != nil:
	default:
		w = append(w, fmt.Sprintf("peer.address %s is not a loopback address and neither peer.token_file nor peer.tls is set: anyone who can reach it can read and write every partition, move replicas, and pose as a follower, which acknowledges writes no replica holds; set peer.token_file (and peer.tls), or keep the peer network private", c.Peer.Address))
	}
	return w
}

// isLoopback reports whether a listen address only accepts connections from
// this host. A host name other than localhost counts as reachable: it is
// not resolved here.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// readToken reads a token file: the whole file, surrounding white space
// trimmed. An empty token is an error, so that an empty file never turns
// authentication off.
func readToken(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	token := bytes.TrimSpace(b)
	if len(token) == 0 {
		return nil, errors.New("the file is empty")
	}
	return token, nil
}

// ReadToken reads a token file as the agent does (peer.token_file,
// client.token_file): trimmed, never empty. The error names the file, never
// its content.
func ReadToken(path string) ([]byte, error) {
	token, err := readToken(path)
	if err != nil {
		return nil, fmt.Errorf("config: token file %s: %w", path, err)
	}
	return token, nil
}

// tokenFile validates a token file key: readable, not empty.
func (v *validator) tokenFile(key string, path *string) string {
	p := v.path(key, path)
	if p == "" {
		return ""
	}
	if _, err := readToken(p); err != nil {
		v.errorf(key, "%s: %v", p, err)
	}
	return p
}
