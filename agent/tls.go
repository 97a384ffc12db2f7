package agent

import (
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/certs"
	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/wire"
)

// readToken reads a token file; no file means no authentication.
func readToken(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	token, err := config.ReadToken(path)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return token, nil
}

// requireToken wraps a handler: a request must carry "Authorization:
// Bearer <token>" (compared in constant time), or it gets 401
// unauthorized. An empty token lets every request through.
func requireToken(token []byte, realm, message string) func(fasthttp.RequestHandler) fasthttp.RequestHandler {
	if len(token) == 0 {
		return func(h fasthttp.RequestHandler) fasthttp.RequestHandler { return h }
	}
	want := append([]byte("Bearer "), token...)
	challenge := `Bearer realm="` + realm + `"`
	return func(h fasthttp.RequestHandler) fasthttp.RequestHandler {
		return func(ctx *fasthttp.RequestCtx) {
			got := ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)
			if subtle.ConstantTimeCompare(got, want) != 1 {
				// After reply.WriteError, which resets the response.
				reply.WriteError(ctx, fasthttp.StatusUnauthorized, wire.CodeUnauthorized, message, false)
				ctx.Response.Header.Set(fasthttp.HeaderWWWAuthenticate, challenge)
				return
			}
			h(ctx)
		}
	}
}

// loadTLS loads the listeners' TLS files at start: a file that cannot be
// used stops the start.
func (a *Agent) loadTLS() error {
	for _, l := range a.tlsListeners(a.cfg) {
		if l.store == nil {
			continue
		}
		cert, err := l.store.Reload(*l.files)
		if err != nil {
			return fmt.Errorf("agent: %s API TLS: %w", l.name, err)
		}
		a.log.Info("TLS certificate loaded", certFields(l.name, cert)...)
	}
	return nil
}

// ReloadTLS loads the certificate, key and CA files that cfg names for
// the peer and client listeners (SIGHUP): connections made from then on
// use them, on both listeners and in the clients of other agents. Files
// that cannot be used are logged and leave the material in use as it was.
// Turning TLS on or off takes a restart.
func (a *Agent) ReloadTLS(cfg *config.Config) {
	for _, l := range a.tlsListeners(cfg) {
		switch {
		case l.store == nil && l.files == nil:
		case l.store == nil || l.files == nil:
			a.log.Warn("reload: turning TLS on or off takes a restart; the listener keeps what it started with",
				"listener", l.name, "tls", l.store != nil)
		default:
			cert, err := l.store.Reload(*l.files)
			if err != nil {
				a.log.Error("reload: cannot load the TLS files; keeping the certificate in use",
					append(certFields(l.name, l.store.Certificate()), "error", err)...)
				continue
			}
			a.log.Info("reload: TLS certificate loaded", certFields(l.name, cert)...)
		}
	}
}

type tlsListener struct {
	name  string
	store *certs.Store
	files *config.TLS
}

// tlsListeners pairs each listener's store (nil without TLS at start) with
// the files cfg names for it.
func (a *Agent) tlsListeners(cfg *config.Config) []tlsListener {
	return []tlsListener{{"peer", a.peerTLS, cfg.Peer.TLS}, {"client", a.clientTLS, cfg.Client.TLS}}
}

// certFields describe a certificate in a log line: never its key.
func certFields(listener string, c *x509.Certificate) []any {
	if c == nil {
		return []any{"listener", listener}
	}
	return []any{"listener", listener, "subject", c.Subject.String(), "serial", c.SerialNumber.Text(16), "not_after", c.NotAfter}
}

// withTLS serves ln over TLS when store is not nil. The accepted
// connections are then *tls.Conn: fasthttp writes file bodies through the
// TLS writer, without sendfile(2).
func withTLS(ln net.Listener, store *certs.Store) net.Listener {
	if store == nil {
		return ln
	}
	return tls.NewListener(ln, store.ServerConfig())
}

// peerTLSFor is the TLS of connections to other agents' peer APIs: the
// agent's peer certificate, the server verified against peer.tls.ca_file
// for the host it dials. Nil without peer.tls.
func (a *Agent) peerTLSFor() peer.TLSConfig {
	if a.peerTLS == nil {
		return nil
	}
	return func(addr string) *tls.Config {
		return certs.ClientConfig(hostOf(addr), a.peerTLS.Pool, a.peerTLS.ClientCertificate)
	}
}

// clientAPITLSFor is the TLS of connections to other agents' client APIs
// (the fetch proxy, group positions), used when this agent's client API
// has TLS, as every agent's then does. The server is verified against the
// system's roots and the CAs this agent knows (peer.tls.ca_file,
// client.tls.ca_file), since a client API certificate may come from any of
// them; the agent presents its peer certificate, if any, to a client API
// that requires one.
func (a *Agent) clientAPITLSFor() peer.TLSConfig {
	if a.clientTLS == nil {
		return nil
	}
	var cert func(*tls.CertificateRequestInfo) (*tls.Certificate, error)
	if a.peerTLS != nil {
		cert = a.peerTLS.ClientCertificate
	}
	return func(addr string) *tls.Config { return certs.ClientConfig(hostOf(addr), a.clientAPIRoots, cert) }
}

func (a *Agent) clientAPIRoots() (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	for _, s := range []*certs.Store{a.peerTLS, a.clientTLS} {
		if s == nil {
			continue
		}
		for _, c := range s.CACertificates() {
			pool.AddCert(c)
		}
	}
	return pool, nil
}

// hostOf is the host of host:port, the name a server certificate must
// carry.
func hostOf(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}
