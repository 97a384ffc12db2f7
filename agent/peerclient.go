package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/replicate"

	"github.com/logagent/logagent/wire"
)

// peerError is a refusal from another agent's peer API: its status, JSON
// error code and, for offset_out_of_range, the leader's log bounds.
type peerError struct {
	Status         int
	Code           string
	Message        string
	LogStartOffset int64
	LogEndOffset   int64
}

func (e *peerError) Error() string {
	return fmt.Sprintf("agent: peer answered %d %s: %s", e.Status, e.Code, e.Message)
}

// errPeerUnreachable wraps transport failures (refused connection, timeout).
var errPeerUnreachable = errors.New("agent: peer unreachable")

// peerClients keeps one pooled keep-alive HostClient per peer address.
// Fetches are plain requests with bounded bodies, not streamed: a streamed
// body keeps its read deadline for the whole body and ignores
// MaxResponseBodySize (docs/design.md §8, fasthttp facts).
type peerClients struct {
	token       string
	maxBodySize int
	// stream makes response bodies readers (proxied fetches) rather than
	// buffers; maxBodySize is then enforced by the caller.
	stream bool

	mu      sync.Mutex
	clients map[string]*fasthttp.HostClient
}

const (
	// peerCallTimeout bounds a peer request that is not held by a long
	// poll.
	peerCallTimeout = 5 * time.Second
	// maxPeerConns bounds the connections to one peer: one per partition
	// followed there, plus epoch requests.
	maxPeerConns = 4096
)

func newPeerClients(token string, maxBodySize int) *peerClients {
	return &peerClients{token: token, maxBodySize: maxBodySize, clients: map[string]*fasthttp.HostClient{}}
}

func (p *peerClients) client(addr string) *fasthttp.HostClient {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.clients[addr]
	if c == nil {
		c = &fasthttp.HostClient{
			Addr: addr,
			Name: "logagent",
			// Every partition this agent follows on the peer holds one
			// connection in its long poll.
			MaxConns:            maxPeerConns,
			MaxConnWaitTimeout:  time.Second,
			MaxIdleConnDuration: time.Minute,
			ReadTimeout:         maxPeerWait + peerCallTimeout,
			WriteTimeout:        peerCallTimeout,
			MaxResponseBodySize: p.maxBodySize,
			StreamResponseBody:  p.stream,
			// A refused or reset connection is retried once by fasthttp for
			// these GETs; anything else surfaces to the replica loop.
			MaxIdemponentCallAttempts: 2,
		}
		p.clients[addr] = c
	}
	return c
}

func (p *peerClients) newRequest(addr, path string) *fasthttp.Request {
	req := fasthttp.AcquireRequest()
	req.Header.SetMethod(fasthttp.MethodGet)
	req.SetRequestURI("http://" + addr + path)
	if p.token != "" {
		req.Header.Set(fasthttp.HeaderAuthorization, "Bearer "+p.token)
	}
	return req
}

// peerFetchAnswer is a leader's answer to a fetch: its positions and the
// batches, copied out of fasthttp's buffers.
type peerFetchAnswer struct {
	Positions fetchPositions
	Batches   []byte
}

// fetch sends a follower fetch to the leader at addr.
func (p *peerClients) fetch(addr string, f peerFetch) (peerFetchAnswer, error) {
	req := p.newRequest(addr, peerFetchPath)
	defer fasthttp.ReleaseRequest(req)
	f.writeArgs(req.URI().QueryArgs())
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	// A held fetch gets peerCallTimeout beyond its wait for the answer.
	if err := p.client(addr).DoTimeout(req, resp, f.MaxWait+peerCallTimeout); err != nil {
		return peerFetchAnswer{}, fmt.Errorf("%w: fetch from %s: %v", errPeerUnreachable, addr, err)
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return peerFetchAnswer{}, decodePeerError(resp)
	}
	pos, err := parseFetchPositions(&resp.Header)
	if err != nil {
		return peerFetchAnswer{}, fmt.Errorf("agent: fetch from %s: %w", addr, err)
	}
	var batches []byte
	if body := resp.Body(); len(body) > 0 {
		batches = append(make([]byte, 0, len(body)), body...)
	}
	return peerFetchAnswer{Positions: pos, Batches: batches}, nil
}

// epochEndOffset asks the leader at addr where an epoch ends in its log.
func (p *peerClients) epochEndOffset(addr string, q peerEpochQuery) (replicate.EpochEndOffset, error) {
	req := p.newRequest(addr, peerEpochEndOffsetPath)
	defer fasthttp.ReleaseRequest(req)
	q.writeArgs(req.URI().QueryArgs())
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if err := p.client(addr).DoTimeout(req, resp, peerCallTimeout); err != nil {
		return replicate.EpochEndOffset{}, fmt.Errorf("%w: epoch end offset from %s: %v", errPeerUnreachable, addr, err)
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return replicate.EpochEndOffset{}, decodePeerError(resp)
	}
	var answer epochEndOffsetJSON
	if err := json.Unmarshal(resp.Body(), &answer); err != nil {
		return replicate.EpochEndOffset{}, fmt.Errorf("agent: epoch end offset from %s: %w", addr, err)
	}
	return replicate.EpochEndOffset{Epoch: answer.Epoch, EndOffset: answer.EndOffset}, nil
}

func decodePeerError(resp *fasthttp.Response) error {
	var body struct {
		Error apiError `json:"error"`
	}
	e := &peerError{Status: resp.StatusCode()}
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
	return e
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
