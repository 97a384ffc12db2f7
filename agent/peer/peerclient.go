package peer

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/replicate"

	"github.com/logagent/logagent/wire"
)

// Error is a refusal from another agent's peer API: its status, JSON
// error code and, for offset_out_of_range, the leader's log bounds.
type Error struct {
	Status         int
	Code           string
	Message        string
	LogStartOffset int64
	LogEndOffset   int64
}

func (e *Error) Error() string {
	return fmt.Sprintf("agent: peer answered %d %s: %s", e.Status, e.Code, e.Message)
}

// errUnreachable wraps transport failures (refused connection, timeout).
var errUnreachable = errors.New("agent: peer unreachable")

// Clients keeps one pooled keep-alive HostClient per peer address.
// Fetches are plain requests with bounded bodies, not streamed: a streamed
// body keeps its read deadline for the whole body and ignores
// MaxResponseBodySize (docs/design.md §8, fasthttp facts).
type Clients struct {
	token       string
	maxBodySize int
	// stream makes response bodies readers (proxied fetches) rather than
	// buffers; maxBodySize is then enforced by the caller.
	stream bool
	// tlsFor, when not nil, makes every connection TLS, configured for the
	// address it dials.
	tlsFor TLSConfig
	// maxConns bounds the connections to one peer, and connWait how long
	// a request waits for one of them.
	maxConns int
	connWait time.Duration
	// readIdle, when set, bounds the silence of a connection's reads
	// rather than the time an answer takes (ProgressConn), and CallTimeout
	// each piece of its writes.
	readIdle time.Duration

	mu      sync.Mutex
	clients map[string]*fasthttp.HostClient
}

const (
	// CallTimeout bounds a peer request that is not held by a long
	// poll.
	CallTimeout = 5 * time.Second
	// MaxConns bounds the connections to one peer by default: a
	// follower of a leader without fetch sessions holds one per partition
	// it follows there.
	MaxConns = 4096
)

// TLSWriteBufferSize is the write buffer of a TLS connection, server or
// client: each flush is one TLS record and one write(2), and a record
// holds at most 16 KiB (fasthttp's default buffer, 4 KiB, cut request and
// answer bodies into 4 KiB records).
const TLSWriteBufferSize = 16 << 10

// TLSConfig gives the TLS configuration of the connections to addr
// (host:port).
type TLSConfig func(addr string) *tls.Config

// NewClients returns clients that send token (none if empty) and accept
// answers of at most maxBodySize bytes; with stream, response bodies are
// readers and the caller enforces maxBodySize (see MaxBodySize). With
// tlsFor, requests go over TLS (https); without, over plain TCP (http).
func NewClients(token string, maxBodySize int, stream bool, tlsFor TLSConfig) *Clients {
	return &Clients{token: token, maxBodySize: maxBodySize, stream: stream, tlsFor: tlsFor, maxConns: MaxConns, connWait: time.Second, clients: map[string]*fasthttp.HostClient{}}
}

// ForFetches returns clients with the same settings and a pool of their
// own for follower fetches held up to wait, holding at most n connections
// to one peer: requests beyond them wait for one, up to CallTimeout. A
// fetch answer carries up to the body bound (8 MiB by default), so its
// reads are bound by silence, not by the answer's time: wait and
// CallTimeout without a byte. (The whole answer had that, 5.5 s by
// default, which a link below about 12 Mbit/s never met: the fetch
// failed, was sent again and failed again while its bytes kept coming.)
func (p *Clients) ForFetches(n int, wait time.Duration) *Clients {
	c := NewClients(p.token, p.maxBodySize, p.stream, p.tlsFor)
	c.maxConns, c.connWait, c.readIdle = n, CallTimeout, wait+CallTimeout
	return c
}

// MaxBodySize is the bound on an answer's body.
func (p *Clients) MaxBodySize() int { return p.maxBodySize }

// Client is the pooled client of the peer at addr.
func (p *Clients) Client(addr string) *fasthttp.HostClient {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.clients[addr]
	if c == nil {
		c = &fasthttp.HostClient{
			Addr:                addr,
			Name:                "logagent",
			MaxConns:            p.maxConns,
			MaxConnWaitTimeout:  p.connWait,
			MaxIdleConnDuration: time.Minute,
			ReadTimeout:         maxWait + CallTimeout,
			WriteTimeout:        CallTimeout,
			MaxResponseBodySize: p.maxBodySize,
			StreamResponseBody:  p.stream,
			// A refused or reset connection is retried once by fasthttp for
			// these GETs; anything else surfaces to the replica loop.
			MaxIdemponentCallAttempts: 2,
		}
		if p.tlsFor != nil {
			c.IsTLS, c.TLSConfig = true, p.tlsFor(addr)
			c.WriteBufferSize = TLSWriteBufferSize
		}
		if p.readIdle > 0 {
			// fasthttp would set one deadline for the whole answer; TLS
			// goes over the ProgressConn.
			c.ReadTimeout = 0
			readIdle := p.readIdle
			c.Dial = func(addr string) (net.Conn, error) {
				conn, err := fasthttp.DialTimeout(addr, CallTimeout)
				if err != nil {
					return nil, err
				}
				return &ProgressConn{Conn: conn, ReadIdle: readIdle, WriteIdle: CallTimeout}, nil
			}
		}
		p.clients[addr] = c
	}
	return c
}

// NewRequest is a GET of path at addr carrying the token; the caller may
// change its method, and releases it.
func (p *Clients) NewRequest(addr, path string) *fasthttp.Request {
	req := fasthttp.AcquireRequest()
	req.Header.SetMethod(fasthttp.MethodGet)
	p.Address(req, addr, path)
	return req
}

// Address points req at requestURI (a path and query) on addr, with the
// scheme its Client speaks, and sets the token, if any, in place of the
// Authorization header req had.
func (p *Clients) Address(req *fasthttp.Request, addr, requestURI string) {
	scheme := "http://"
	if p.tlsFor != nil {
		scheme = "https://"
	}
	req.SetRequestURI(scheme + addr + requestURI)
	if p.token != "" {
		req.Header.Set(fasthttp.HeaderAuthorization, "Bearer "+p.token)
	}
}

// FetchAnswer is a leader's answer to a fetch: its positions and the
// batches, copied out of fasthttp's buffers.
type FetchAnswer struct {
	Positions FetchPositions
	Batches   []byte
}

// Fetch sends a follower fetch to the leader at addr.
func (p *Clients) Fetch(addr string, f Fetch) (FetchAnswer, error) {
	req := p.NewRequest(addr, FetchPath)
	defer fasthttp.ReleaseRequest(req)
	f.writeArgs(req.URI().QueryArgs())
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	// A held fetch gets CallTimeout beyond its wait for the answer: between
	// bytes on ForFetches's connections, for the whole answer on others.
	c := p.Client(addr)
	var err error
	if p.readIdle > 0 {
		err = c.Do(req, resp)
	} else {
		err = c.DoTimeout(req, resp, f.MaxWait+CallTimeout)
	}
	if err != nil {
		return FetchAnswer{}, fmt.Errorf("%w: fetch from %s: %v", errUnreachable, addr, err)
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return FetchAnswer{}, decodePeerError(resp)
	}
	pos, err := parseFetchPositions(&resp.Header)
	if err != nil {
		return FetchAnswer{}, fmt.Errorf("agent: fetch from %s: %w", addr, err)
	}
	var batches []byte
	if body := resp.Body(); len(body) > 0 {
		batches = append(make([]byte, 0, len(body)), body...)
	}
	return FetchAnswer{Positions: pos, Batches: batches}, nil
}

// EpochEndOffset asks the leader at addr where an epoch ends in its log.
func (p *Clients) EpochEndOffset(addr string, q EpochQuery) (replicate.EpochEndOffset, error) {
	req := p.NewRequest(addr, EpochEndOffsetPath)
	defer fasthttp.ReleaseRequest(req)
	q.writeArgs(req.URI().QueryArgs())
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if err := p.Client(addr).DoTimeout(req, resp, CallTimeout); err != nil {
		return replicate.EpochEndOffset{}, fmt.Errorf("%w: epoch end offset from %s: %v", errUnreachable, addr, err)
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return replicate.EpochEndOffset{}, decodePeerError(resp)
	}
	var answer EpochEndOffsetJSON
	if err := json.Unmarshal(resp.Body(), &answer); err != nil {
		return replicate.EpochEndOffset{}, fmt.Errorf("agent: epoch end offset from %s: %w", addr, err)
	}
	return replicate.EpochEndOffset{Epoch: answer.Epoch, EndOffset: answer.EndOffset}, nil
}

// errorBody is what a follower reads of the peer API's JSON error.
type errorBody struct {
	Error struct {
		Code           string `json:"code"`
		Message        string `json:"message"`
		LogStartOffset *int64 `json:"log_start_offset"`
		LogEndOffset   *int64 `json:"log_end_offset"`
	} `json:"error"`
}

func decodePeerError(resp *fasthttp.Response) error {
	var body errorBody
	e := &Error{Status: resp.StatusCode()}
	if err := json.Unmarshal(resp.Body(), &body); err != nil || body.Error.Code == "" {
		e.Code, e.Message = wire.CodeInternal, fmt.Sprintf("undecodable error body %q", truncate(resp.Body(), 200))
		return e
	}
	e.Code, e.Message = body.Error.Code, body.Error.Message
	if body.Error.LogStartOffset != nil {
		e.LogStartOffset = *body.Error.LogStartOffset
	}
	if body.Error.LogEndOffset != nil {
		e.LogEndOffset = *body.Error.LogEndOffset
	}
	if e.Code == wire.CodeOffsetOutOfRange && (body.Error.LogStartOffset == nil || body.Error.LogEndOffset == nil) {
		// Read as [0, 0), it would have the follower cut its log to 0.
		e.Code, e.Message = wire.CodeInternal, fmt.Sprintf("%s without the leader's log bounds: %s", wire.CodeOffsetOutOfRange, e.Message)
	}
	return e
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
