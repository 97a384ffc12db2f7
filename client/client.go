package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// TLSWriteBufferSize is the write buffer of the Client's own transport
// for an https address.
const TLSWriteBufferSize = 16 << 10

// DefaultAddr is the agent's default client API address (docs/design.md §10).
const DefaultAddr = "http://127.0.0.1:7070"

// AddrEnv names the environment variable that New reads when given no
// address.
const AddrEnv = "LOGAGENT_ADDR"

// ErrInvalidAddr is returned by New for an address it cannot use.
var ErrInvalidAddr = errors.New("client: invalid agent address")

// maxJSONBodyBytes bounds a JSON answer (a topic list can be long).
const maxJSONBodyBytes = 16 << 20

// requestGrace is how much longer than the time the agent was given (an
// ack timeout, a long-poll wait) the client waits for its answer before it
// gives up on the request.
const requestGrace = 5 * time.Second

// Client talks to one agent's client API. It is safe for concurrent use;
// producers and consumers made from it share its connections.
type Client struct {
	base  string // scheme://host[:port], without a trailing slash
	http  *http.Client
	clock Clock
	// token, when set, goes with every request as a bearer token.
	token string
	// tls configures the Client's own transport for https.
	tls *tls.Config
	// transport is the Client's own, nil with WithHTTPClient: Close
	// closes its idle connections.
	transport *http.Transport
	stats     counters

	mu sync.Mutex
	// closing: Close was called, nothing new is made; closed: Close is
	// done, no request is sent.
	closing, closed bool
	open            map[closer]struct{} // producers and consumers not closed
	// closeDone is closed when the first Close returns: a later (or
	// concurrent) Close waits for it, so that none returns while the
	// first is still flushing producers.
	closeDone chan struct{}
}

// closer is a producer or consumer that Client.Close closes.
type closer interface {
	closeFor(ctx context.Context) error
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the Client send its requests with h. The Client never
// relies on h.Timeout: it bounds each request itself, long polls included.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithToken makes every request carry "Authorization: Bearer <token>", as
// an agent with client.token_file requires (GET /v1/health excepted).
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithTLSConfig is the TLS of the Client's own transport, for an https
// address: the CA that verifies the agent (RootCAs; the system's roots
// when nil), a client certificate for an agent whose client.tls names a
// ca_file. It cannot go with WithHTTPClient: configure that client's
// transport instead.
func WithTLSConfig(cfg *tls.Config) Option { return func(c *Client) { c.tls = cfg } }

// WithClock gives the Client, and the producers and consumers made from it,
// the time source they use for timestamps, linger, backoff and deadlines.
func WithClock(clock Clock) Option { return func(c *Client) { c.clock = clock } }

// New returns a Client of the agent at addr: "http://host:port",
// "https://host:port" or "host:port" (http); without a port it is the
// agent's default, 7070 (not HTTP's 80). An empty addr means
// $LOGAGENT_ADDR, or DefaultAddr when that is unset.
func New(addr string, opts ...Option) (*Client, error) {
	if addr == "" {
		addr = os.Getenv(AddrEnv)
	}
	if addr == "" {
		addr = DefaultAddr
	}
	base, err := parseAddr(addr)
	if err != nil {
		return nil, err
	}
	c := &Client{base: base, clock: systemClock{}, open: map[closer]struct{}{}, closeDone: make(chan struct{})}
	for _, o := range opts {
		o(c)
	}
	if c.http != nil && c.tls != nil {
		return nil, fmt.Errorf("%w: WithTLSConfig with WithHTTPClient: set the TLS config on the http.Client's transport", ErrInvalidOption)
	}
	if c.http == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// An idempotent producer may have up to five requests per
		// partition in flight, and each consumer holds one long poll.
		t.MaxIdleConnsPerHost = 64
		if c.tls != nil {
			t.TLSClientConfig = c.tls
		}
		if strings.HasPrefix(c.base, "https://") {
			// Each flush of the write buffer is one TLS record: 16 KiB,
			// a record's most, instead of net/http's 4 KiB.
			t.WriteBufferSize = TLSWriteBufferSize
		}
		c.http = &http.Client{Transport: t}
		c.transport = t
	}
	return c, nil
}

// Close closes every Producer, GroupConsumer and MultiConsumer made from
// the Client and not closed yet (a Producer flushes what it holds, a
// GroupConsumer commits and leaves its group, as their own Close does;
// ctx bounds that), waits for their goroutines, and closes the idle
// connections of the Client's own transport. Afterwards every call of the
// Client, and of what was made from it, fails with an error that matches
// ErrClosed. It returns the errors of those Close calls. A Close after the
// first waits for it (or for ctx), and returns nil.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		select {
		case <-c.closeDone:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("client: close: waiting for another Close: %w", ctx.Err())
		}
	}
	c.closing = true
	defer close(c.closeDone)
	open := make([]closer, 0, len(c.open))
	for x := range c.open {
		open = append(open, x)
	}
	c.mu.Unlock()
	var errs []error
	for _, x := range open {
		errs = append(errs, x.closeFor(ctx))
	}
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	if c.transport != nil {
		c.transport.CloseIdleConnections()
	}
	return errors.Join(errs...)
}

// track registers x for Close; it fails once Close was called.
func (c *Client) track(x closer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return fmt.Errorf("%w: client", ErrClosed)
	}
	c.open[x] = struct{}{}
	return nil
}

// forget unregisters x, closed by its own Close.
func (c *Client) forget(x closer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.open, x)
}

// isClosed: Close is done.
func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func parseAddr(addr string) (string, error) {
	raw := addr
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%w %q: %v", ErrInvalidAddr, addr, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("%w %q: scheme must be http or https", ErrInvalidAddr, addr)
	case u.Host == "":
		return "", fmt.Errorf("%w %q: no host", ErrInvalidAddr, addr)
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return "", fmt.Errorf("%w %q: only scheme, host and port are allowed", ErrInvalidAddr, addr)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), defaultPort)
	}
	return u.Scheme + "://" + host, nil
}

// defaultPort is the client API's port when an address names none.
const defaultPort = "7070"

// Addr is the agent's base URL, as the Client uses it.
func (c *Client) Addr() string { return c.base }

// newRequest builds a request for path (already escaped) and query.
func (c *Client) newRequest(ctx context.Context, method, path string, query url.Values, body []byte) (*http.Request, error) {
	if c.isClosed() {
		return nil, fmt.Errorf("client: %s %s: %w", method, path, ErrClosed)
	}
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// doJSON sends a request with an optional JSON body and decodes a 2xx JSON
// answer into out (when out is not nil). A non-2xx answer is an *Error; no
// answer is a transport error.
func (c *Client) doJSON(ctx context.Context, method, path string, in, out any) error {
	return c.doJSONQuery(ctx, method, path, nil, in, out)
}

// doJSONQuery is doJSON with a query.
func (c *Client) doJSONQuery(ctx context.Context, method, path string, query url.Values, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("client: %s %s: %w", method, path, err)
		}
	}
	req, err := c.newRequest(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return &transportError{err: err, written: true}
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return decodeError(resp)
	}
	if out == nil {
		return nil
	}
	data, err := readLimited(resp.Body, maxJSONBodyBytes)
	if err != nil {
		return fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%w: %s %s: %v", ErrProtocol, method, path, err)
	}
	return nil
}

// readLimited reads all of r, failing when it holds more than limit bytes.
func readLimited(r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, &transportError{err: err, written: true}
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: answer over %d bytes", ErrProtocol, limit)
	}
	return data, nil
}

// readBody reads an answer's body, failing when it holds more than limit
// bytes. A declared length within the limit is read into scratch when it
// fits, else into one allocation of that size, instead of a buffer grown
// (and cleared) several times over.
func readBody(resp *http.Response, limit int64, scratch []byte) ([]byte, error) {
	n := resp.ContentLength
	if n < 0 || n > limit {
		return readLimited(resp.Body, limit)
	}
	data := scratch[:0]
	if int64(cap(data)) < n {
		data = make([]byte, n)
	}
	data = data[:n]
	if _, err := io.ReadFull(resp.Body, data); err != nil {
		return nil, &transportError{err: err, written: true}
	}
	return data, nil
}

// Health is the answer of GET /v1/health.
type Health struct {
	Status string `json:"status"`
	NodeID string `json:"node_id"`
}

// Health asks the agent whether it serves. An agent that is starting or
// stopping answers with an *Error whose code is service_unavailable.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	var h Health
	if err := c.doJSON(ctx, http.MethodGet, "/v1/health", nil, &h); err != nil {
		return nil, fmt.Errorf("health: %w", err)
	}
	return &h, nil
}
