package peer

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// Deliver receives the answer to a session fetch. It is called from a
// session's goroutine and must not block.
type Deliver func(FetchAnswer, error)

// Sessions keeps this agent's fetch sessions, one per leader agent it
// follows partitions on (docs/design.md §7.9). A replica hands it its fetch
// and gets the answer through its Deliver; the fetch goes out on the
// leader's session, or, to a leader that answers the session request 404
// (an agent of an earlier version), as a GET /v1/replica/fetch of its own.
// Every goroutine it starts ends before Close returns.
type Sessions struct {
	clients   *Clients
	self      string
	heartbeat time.Duration
	onLeading func(Leading)
	// deadAfter is SessionDeadAfter but in tests, which take a leader for
	// gone sooner.
	deadAfter func(heartbeat time.Duration) time.Duration

	mu     sync.Mutex
	byAddr map[string]*session
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup
}

const (
	// legacyRetry is how long a leader that has no sessions is fetched
	// from with one request per partition before the session is tried
	// again (it may have been upgraded since).
	legacyRetry = time.Minute
	// sessionIdleClose closes a session that has had no fetch for this
	// long: the agent leads nothing this one follows any more.
	sessionIdleClose = time.Minute
	// maxOpenAnswer bounds the leader's answer to a session request.
	maxOpenAnswer = 64 << 10
	// minHeartbeat bounds how often a session pings.
	minHeartbeat = 10 * time.Millisecond
)

// ErrSessionsClosed fails the fetches pending when Sessions closes.
var ErrSessionsClosed = errors.New("agent: fetch sessions closed")

// errNoSessions says the leader answered the session request 404.
var errNoSessions = errors.New("agent: peer has no fetch sessions")

// SessionDeadAfter is how long a session side waits for a byte before it
// takes the other side for gone, for a heartbeat: three missed heartbeats
// and a second for a loaded host. It bounds silence, not a frame: an
// answer that keeps arriving is read however long it takes (ProgressConn).
func SessionDeadAfter(heartbeat time.Duration) time.Duration { return 3*heartbeat + time.Second }

// NewSessions returns the sessions of the follower agent self, which ping
// a leader every heartbeat when they have sent nothing else (and ask the
// leader to do the same). clients give the token, the TLS and the
// per-partition fetch of the fallback. onLeading, when not nil, gets the
// leaders' leading frames (the sessions ask for them); it is called from a
// session's goroutine and must not block. Its deadlines and timers are the
// connections', on the system's clock, not the replicas'.
func NewSessions(clients *Clients, self string, heartbeat time.Duration, onLeading func(Leading)) *Sessions {
	return &Sessions{clients: clients, self: self, heartbeat: max(heartbeat, minHeartbeat), onLeading: onLeading,
		deadAfter: SessionDeadAfter, byAddr: map[string]*session{}, done: make(chan struct{})}
}

type partKey struct {
	topic     string
	partition int
}

type pendingFetch struct {
	id      uint32
	key     partKey
	f       Fetch
	deliver Deliver
	// sent says the fetch went out: on the session's connection, or as a
	// GET of its own when legacy is set too.
	sent, legacy bool
}

// session is the fetch session to one leader agent. Its run goroutine
// dials, writes, and is the only one that ends the connection; its reader
// goroutine reads the leader's frames.
type session struct {
	s    *Sessions
	addr string
	// signal wakes run: a frame to write, a fetch to serve, Close.
	signal chan struct{}

	// Guarded by s.mu.
	running     bool
	streaming   bool
	legacyUntil time.Time
	// topicIDs says the session's leader takes topic ids in fetch frames.
	topicIDs bool
	nextID   uint32
	pending  map[partKey]*pendingFetch
	byID     map[uint32]*pendingFetch
	out      []byte
}

// Fetch sends f to the leader at addr; deliver gets its answer or error
// once, unless a later Fetch of the same partition or Forget comes first.
func (s *Sessions) Fetch(addr string, f Fetch, deliver Deliver) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		deliver(FetchAnswer{}, ErrSessionsClosed)
		return
	}
	ss := s.byAddr[addr]
	if ss == nil {
		ss = &session{s: s, addr: addr, signal: make(chan struct{}, 1), pending: map[partKey]*pendingFetch{}, byID: map[uint32]*pendingFetch{}}
		s.byAddr[addr] = ss
	}
	key := partKey{f.Topic, f.Partition}
	if old := ss.pending[key]; old != nil {
		delete(ss.byID, old.id)
	}
	// An id still pending is skipped: an idle partition's fetch stays
	// parked at the leader for as long as the session lives, and after 2^32
	// fetches the counter came back to its id, so that the leader's answer
	// to it went to the other partition's fetch.
	for {
		ss.nextID++
		if ss.byID[ss.nextID] == nil {
			break
		}
	}
	pf := &pendingFetch{id: ss.nextID, key: key, f: f, deliver: deliver}
	ss.pending[key], ss.byID[pf.id] = pf, pf
	if ss.streaming {
		ss.out = ss.appendFetch(ss.out, pf)
		pf.sent = true
	}
	if !ss.running {
		ss.running = true
		s.wg.Go(ss.run)
	}
	s.mu.Unlock()
	ss.wake()
}

// Forget drops the fetch of a partition pending at addr: its answer is
// not delivered, and the leader stops holding it.
func (s *Sessions) Forget(addr, topic string, partition int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.byAddr[addr]
	if ss == nil {
		return
	}
	key := partKey{topic, partition}
	pf := ss.pending[key]
	if pf == nil {
		return
	}
	delete(ss.pending, key)
	delete(ss.byID, pf.id)
	if ss.streaming && pf.sent && !pf.legacy {
		ss.out = AppendForgetFrame(ss.out, topic, partition)
		ss.wake()
	}
}

// Close ends every session, fails the fetches pending with
// ErrSessionsClosed and waits for every goroutine.
func (s *Sessions) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (ss *session) wake() {
	select {
	case ss.signal <- struct{}{}:
	default:
	}
}

// run owns the session: it opens the stream when fetches wait, serves them
// over it or, for a leader without sessions, one request each, and ends
// once no fetch has waited for sessionIdleClose.
func (ss *session) run() {
	s := ss.s
	idle := time.NewTimer(sessionIdleClose)
	defer idle.Stop()
	for {
		s.mu.Lock()
		switch {
		case s.closed:
			failed := ss.takePending()
			ss.running = false
			s.mu.Unlock()
			fail(failed, ErrSessionsClosed)
			return
		case len(ss.pending) == 0:
			s.mu.Unlock()
			select {
			case <-ss.signal:
			case <-s.done:
			case <-idle.C:
				s.mu.Lock()
				if len(ss.pending) == 0 {
					ss.running = false
					delete(s.byAddr, ss.addr)
					s.mu.Unlock()
					return
				}
				s.mu.Unlock()
			}
			continue
		case time.Now().Before(ss.legacyUntil):
			ss.startLegacyFetches()
			until := time.Until(ss.legacyUntil)
			s.mu.Unlock()
			t := time.NewTimer(until)
			select {
			case <-ss.signal:
			case <-s.done:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		s.mu.Unlock()
		resetTimer(idle, sessionIdleClose)

		conn, br, heartbeat, err := ss.open()
		if errors.Is(err, errNoSessions) {
			s.mu.Lock()
			ss.legacyUntil = time.Now().Add(legacyRetry)
			s.mu.Unlock()
			continue
		}
		if err == nil {
			err = ss.stream(conn, br, heartbeat, s.deadAfter(heartbeat))
		}
		s.mu.Lock()
		ss.streaming = false
		ss.out = ss.out[:0]
		var failed []*pendingFetch
		if err != nil {
			failed = ss.takePending()
		} else {
			// Closed for idleness: a fetch queued since goes out on the
			// next connection.
			for _, pf := range ss.pending {
				pf.sent = pf.sent && pf.legacy
			}
		}
		s.mu.Unlock()
		fail(failed, err)
	}
}

// takePending removes the fetches waiting on the session, but for those
// sent as requests of their own, whose goroutines answer them.
func (ss *session) takePending() []*pendingFetch {
	var out []*pendingFetch
	for key, pf := range ss.pending {
		if pf.legacy && pf.sent {
			continue
		}
		out = append(out, pf)
		delete(ss.pending, key)
		delete(ss.byID, pf.id)
	}
	return out
}

func fail(fetches []*pendingFetch, err error) {
	for _, pf := range fetches {
		pf.deliver(FetchAnswer{}, err)
	}
}

// startLegacyFetches sends every fetch not yet sent as a GET of its own.
func (ss *session) startLegacyFetches() {
	for _, pf := range ss.pending {
		if pf.sent {
			continue
		}
		pf.sent, pf.legacy = true, true
		ss.s.wg.Go(func() {
			answer, err := ss.s.clients.Fetch(ss.addr, pf.f)
			ss.s.mu.Lock()
			current := ss.byID[pf.id] == pf
			if current {
				delete(ss.byID, pf.id)
				delete(ss.pending, pf.key)
			}
			ss.s.mu.Unlock()
			if current {
				pf.deliver(answer, err)
			}
		})
	}
}

// open dials the leader and asks for a session: the connection (without
// idle bounds yet), its reader, and the heartbeat the leader asks for;
// errNoSessions for a 404.
func (ss *session) open() (*ProgressConn, *bufio.Reader, time.Duration, error) {
	s := ss.s
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	d := net.Dialer{}
	conn, err := d.DialContext(ctx, "tcp", ss.addr)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("%w: session with %s: %v", errUnreachable, ss.addr, err)
	}
	if s.clients.tlsFor != nil {
		tc := tls.Client(conn, s.clients.tlsFor(ss.addr))
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return nil, nil, 0, fmt.Errorf("%w: session with %s: TLS: %v", errUnreachable, ss.addr, err)
		}
		conn = tc
	}
	// The reader reads through it, so that the session can bound its
	// reads by silence once open.
	pc := &ProgressConn{Conn: conn}
	_ = conn.SetDeadline(time.Now().Add(CallTimeout))
	query := "?replica_id=" + s.self + "&heartbeat_ms=" + strconv.FormatInt(s.heartbeat.Milliseconds(), 10)
	if s.onLeading != nil {
		query += "&" + LeadingParam + "=1"
	}
	query += "&" + TopicIDsParam + "=1"
	req := "GET " + SessionPath + query + " HTTP/1.1\r\nHost: " + ss.addr + "\r\nUser-Agent: logagent\r\n"
	if s.clients.token != "" {
		req += "Authorization: Bearer " + s.clients.token + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		_ = conn.Close()
		return nil, nil, 0, fmt.Errorf("%w: session with %s: %v", errUnreachable, ss.addr, err)
	}
	br := bufio.NewReaderSize(pc, 64<<10)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	resp.SkipBody = false
	if err := resp.ReadLimitBody(br, maxOpenAnswer); err != nil {
		_ = conn.Close()
		return nil, nil, 0, fmt.Errorf("%w: session with %s: %v", errUnreachable, ss.addr, err)
	}
	switch hb := resp.Header.Peek(HeaderSession); {
	case resp.StatusCode() == fasthttp.StatusNotFound:
		_ = conn.Close()
		return nil, nil, 0, errNoSessions
	case resp.StatusCode() != fasthttp.StatusOK:
		_ = conn.Close()
		return nil, nil, 0, decodePeerError(resp)
	case len(hb) == 0 || len(resp.Body()) > 0:
		_ = conn.Close()
		return nil, nil, 0, fmt.Errorf("%w: session with %s: a 200 that opens no session", errUnreachable, ss.addr)
	default:
		ms, err := strconv.ParseInt(string(hb), 10, 64)
		if err != nil || ms < 1 || ms > maxWait.Milliseconds() {
			_ = conn.Close()
			return nil, nil, 0, fmt.Errorf("%w: session with %s: heartbeat %q", errUnreachable, ss.addr, hb)
		}
		_ = conn.SetDeadline(time.Time{})
		s.mu.Lock()
		ss.topicIDs = string(resp.Header.Peek(HeaderTopicIDs)) == "1"
		s.mu.Unlock()
		return pc, br, time.Duration(ms) * time.Millisecond, nil
	}
}

// appendFetch appends pf's fetch frame, with its topic id only if the
// session's leader takes them. Caller holds s.mu.
func (ss *session) appendFetch(b []byte, pf *pendingFetch) []byte {
	f := pf.f
	if !ss.topicIDs {
		f.TopicID = ""
	}
	return AppendFetchFrame(b, pf.id, f)
}

// stream runs an open session until the connection fails, Sessions closes
// (an error either way) or no fetch has waited for sessionIdleClose (nil):
// it writes the frames the fetches queue and a ping when it has written
// nothing for a heartbeat, while its reader delivers answers. The leader is
// gone once it has sent nothing for deadAfter, or taken none of a write
// for CallTimeout. It closes conn.
func (ss *session) stream(conn *ProgressConn, br *bufio.Reader, heartbeat, deadAfter time.Duration) error {
	s := ss.s
	s.mu.Lock()
	for _, pf := range ss.pending {
		if !pf.sent {
			ss.out = ss.appendFetch(ss.out, pf)
			pf.sent = true
		}
	}
	ss.streaming = true
	s.mu.Unlock()

	conn.ReadIdle, conn.WriteIdle = deadAfter, CallTimeout
	readErr := make(chan error, 1)
	var reader sync.WaitGroup
	reader.Go(func() { readErr <- ss.read(br) })
	// The reader ends once the connection is closed.
	defer reader.Wait()
	defer conn.Close()

	ping := time.NewTimer(heartbeat)
	defer ping.Stop()
	var spare []byte
	var idleSince time.Time
	for {
		s.mu.Lock()
		frames := ss.out
		ss.out = spare[:0]
		idle := len(ss.pending) == 0
		s.mu.Unlock()
		switch now := time.Now(); {
		case !idle:
			idleSince = time.Time{}
		case idleSince.IsZero():
			idleSince = now
		case now.Sub(idleSince) >= sessionIdleClose:
			return nil
		}
		if len(frames) > 0 {
			if _, err := conn.Write(frames); err != nil {
				return fmt.Errorf("%w: session with %s: %v", errUnreachable, ss.addr, err)
			}
			resetTimer(ping, heartbeat)
		}
		spare = frames
		select {
		case <-ss.signal:
		case err := <-readErr:
			return err
		case <-s.done:
			return ErrSessionsClosed
		case <-ping.C:
			s.mu.Lock()
			ss.out = AppendPingFrame(ss.out)
			s.mu.Unlock()
			ping.Reset(heartbeat)
		}
	}
}

// read delivers the leader's answers, and its leading frames to onLeading,
// until the connection fails or stays silent for its ReadIdle: br reads
// the session's ProgressConn, so an answer frame that keeps arriving is
// read whole however long it takes.
func (ss *session) read(br *bufio.Reader) error {
	s := ss.s
	maxLen := s.clients.maxBodySize + answerHeaderLen
	var buf []byte
	for {
		var typ byte
		var body []byte
		var err error
		typ, body, err = readFrame(br, maxLen, buf)
		buf = body
		if err != nil {
			return fmt.Errorf("%w: session with %s: %v", errUnreachable, ss.addr, err)
		}
		var id uint32
		var answer FetchAnswer
		var refusal *Error
		switch typ {
		case framePing:
			continue
		case frameLeading:
			if s.onLeading == nil {
				return fmt.Errorf("agent: session with %s: %w", ss.addr, badFrame("a leading frame the session did not ask for"))
			}
			l, err := parseLeadingFrame(body)
			if err != nil {
				return fmt.Errorf("agent: session with %s: %w", ss.addr, err)
			}
			s.onLeading(l)
			continue
		case frameAnswer:
			var batches []byte
			id, answer.Positions, batches, err = parseAnswerFrame(body)
			if len(batches) > 0 {
				answer.Batches = append(make([]byte, 0, len(batches)), batches...)
			}
		case frameRefusal:
			id, refusal, err = parseRefusalFrame(body)
		default:
			err = badFrame("frame type %d from a leader", typ)
		}
		if err != nil {
			return fmt.Errorf("agent: session with %s: %w", ss.addr, err)
		}
		s.mu.Lock()
		pf := ss.byID[id]
		if pf != nil {
			delete(ss.byID, id)
			delete(ss.pending, pf.key)
		}
		s.mu.Unlock()
		switch {
		case pf == nil:
			// Replaced or forgotten since it was sent.
		case refusal != nil:
			pf.deliver(FetchAnswer{}, refusal)
		default:
			pf.deliver(answer, nil)
		}
	}
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	t.Reset(d)
}
