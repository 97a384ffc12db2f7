package kafka

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DefaultMaxRequestBytes is the frame limit when Config.MaxRequestBytes is
// zero: Kafka's socket.request.max.bytes default, 100 MiB.
const DefaultMaxRequestBytes = 100 << 20

// DefaultIdleTimeout is how long a connection may wait for its next
// request when Config.IdleTimeout is zero: Kafka's connections.max.idle.ms
// default, 10 minutes. Clients reconnect when they need the broker again;
// a client that vanished without closing (a killed VM, a dropped route)
// then holds no descriptor beyond it.
const DefaultIdleTimeout = 10 * time.Minute

// connBufferSize is the size of each connection's read and write buffers.
const connBufferSize = 64 << 10

// Config is a Server's configuration.
type Config struct {
	Broker Broker
	// Groups serves the group APIs; nil leaves them unadvertised.
	Groups Groups
	Logger hclog.Logger
	// MaxRequestBytes bounds a request frame: a larger size (or one <= 0)
	// closes the connection before anything of the frame is read. Zero
	// means DefaultMaxRequestBytes. It is Produce's limit; every other
	// API key has a smaller one of its own (limits.go), capped by it.
	MaxRequestBytes int32
	// IdleTimeout closes a connection that sends no request for this
	// long (from its last answer, or from its accept); zero means
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// NodeID is the broker id the listener presents.
	NodeID int32
	// Host and Port are the address Metadata and FindCoordinator answer
	// with: the listener's own, as clients reach it.
	Host      string
	Port      int32
	ClusterID string
}

// Server is the Kafka listener: it serves the Kafka wire protocol on the
// listeners given to Serve until Close (docs/design.md §15).
type Server struct {
	cfg  Config
	log  hclog.Logger
	apis map[int16]api
	// versions is the ApiVersions table, sorted by key.
	versions []kmsg.ApiVersionsResponseApiKey

	// ctx ends at Close: every Broker call runs under it.
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	wg        sync.WaitGroup // one per connection goroutine
}

// NewServer returns a Server that is not serving yet.
func NewServer(cfg Config) *Server {
	if cfg.MaxRequestBytes == 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:       cfg,
		log:       log.Named("kafka"),
		ctx:       ctx,
		cancel:    cancel,
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[net.Conn]struct{}),
	}
	s.apis, s.versions = apiTable(cfg.Groups != nil)
	return s
}

// Serve accepts connections on ln until Close, each served by a goroutine
// the Server owns. It returns nil after Close, or the error of an Accept
// (the caller retries resource exhaustion in its listener, as the agent's
// HTTP listeners do).
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			return fmt.Errorf("kafka: accept: %w", err)
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return nil
		}
		s.conns[nc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(nc)
	}
}

// Close stops accepting, closes every connection, ends every Broker call
// in progress (their context) and waits for every connection goroutine.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	s.cancel()
	var errs []error
	for ln := range s.listeners {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	for nc := range s.conns {
		nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return errors.Join(errs...)
}

// conn is one client connection, served by one goroutine.
type conn struct {
	nc     net.Conn
	r      *bufio.Reader
	w      *bufio.Writer
	remote string
	in     []byte // the frame buffer, reused while small
	out    []byte // the response buffer, reused while small
}

// reuseLimit is the largest buffer a connection keeps between requests: a
// rare large request's buffer goes to the garbage collector instead of
// staying with an idle connection.
const reuseLimit = 1 << 20

// serveConn reads requests, handles each and writes its answer before
// reading the next: Kafka answers a connection's requests in order, and a
// client's pipelined produce requests must be appended in the order sent.
func (s *Server) serveConn(nc net.Conn) {
	defer s.wg.Done()
	c := &conn{
		nc:     nc,
		r:      bufio.NewReaderSize(nc, connBufferSize),
		w:      bufio.NewWriterSize(nc, connBufferSize),
		remote: nc.RemoteAddr().String(),
	}
	s.log.Debug("connection open", "remote", c.remote)
	defer func() {
		nc.Close()
		s.mu.Lock()
		delete(s.conns, nc)
		s.mu.Unlock()
		s.log.Debug("connection closed", "remote", c.remote)
	}()
	for {
		if err := s.serveOne(c); err != nil {
			if !errors.Is(err, errConnDone) {
				s.log.Debug("closing connection", "remote", c.remote, "error", err)
			}
			return
		}
	}
}

// errConnDone ends a connection without a log line of its own: the peer
// went away, the server is closing, or the reason was logged already.
var errConnDone = errors.New("kafka: connection done")

// serveOne reads, handles and answers one request. An error closes the
// connection.
func (s *Server) serveOne(c *conn) error {
	// The deadline covers the wait for the next request and its reading;
	// a request being handled (a long poll) is not reading, so it is not
	// cut. The net package's deadlines are wall-clock by nature.
	if err := c.nc.SetReadDeadline(time.Now().Add(s.cfg.IdleTimeout)); err != nil {
		return errConnDone
	}
	frame, err := readFrame(c.r, s.cfg.MaxRequestBytes, s.frameLimit, c.in)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			s.log.Debug("closing idle connection", "remote", c.remote, "idle_timeout", s.cfg.IdleTimeout)
			return errConnDone
		}
		if errors.Is(err, ErrFrameSize) {
			s.log.Warn("refused request frame", "remote", c.remote, "error", err)
		}
		return errConnDone
	}
	if cap(frame) <= reuseLimit {
		c.in = frame[:0]
	} else {
		c.in = nil
	}
	h, req, a, err := s.decodeRequest(frame)
	switch {
	case errors.Is(err, errUnsupported) && h.key == apiVersionsKey:
		// Kafka answers an ApiVersions it cannot read with its table at
		// version 0, so that the client can pick a version it has.
		return s.writeReply(c, h.correlationID, s.unsupportedApiVersions())
	case errors.Is(err, errBody):
		s.log.Debug("request does not decode", "remote", c.remote, "api_key", h.key, "api_version", h.version, "error", err)
		return errConnDone
	case err != nil:
		s.log.Warn("refused request", "remote", c.remote, "api_key", h.key, "api_version", h.version, "error", err)
		return errConnDone
	}
	rep, err := a.handle(s, s.ctx, req)
	if err != nil {
		return err
	}
	if rep == nil {
		return nil // acks=0 produce: nothing is answered
	}
	return s.writeReply(c, h.correlationID, rep)
}

// errUnsupported is a request of a key or version the listener does not
// implement; errBody one whose body does not decode.
var (
	errUnsupported = errors.New("kafka: unsupported API key or version")
	errBody        = errors.New("kafka: malformed request body")
)

// decodeRequest parses a frame's header and decodes its body, for a key
// and version of the handler table only.
func (s *Server) decodeRequest(frame []byte) (requestHeader, kmsg.Request, api, error) {
	h, err := parseHeader(frame)
	if err != nil {
		return h, nil, api{}, err
	}
	a, ok := s.apis[h.key]
	if !ok || h.version < a.min || h.version > a.max {
		return h, nil, api{}, errUnsupported
	}
	req := kmsg.RequestForKey(h.key)
	req.SetVersion(h.version)
	if err := req.ReadFrom(h.body); err != nil {
		return h, nil, api{}, fmt.Errorf("%w: %w", errBody, err)
	}
	if err := checkItems(req); err != nil {
		return h, nil, api{}, err
	}
	return h, req, a, nil
}

func (s *Server) writeReply(c *conn, correlationID int32, rep reply) error {
	// A client that stops reading (a hung process: its kernel keeps the
	// connection open with a zero window) held the connection and a
	// fetch's open records for ever; Kafka closes a connection that makes
	// no progress for connections.max.idle.ms.
	if err := c.nc.SetWriteDeadline(time.Now().Add(s.cfg.IdleTimeout)); err != nil {
		return errConnDone
	}
	if err := rep.writeTo(c, correlationID); err != nil {
		return fmt.Errorf("kafka: write response: %w", err)
	}
	return nil
}
