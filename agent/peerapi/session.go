package peerapi

import (
	"bufio"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/agent/reply"

	"github.com/logagent/logagent/wire"
)

// The leader side of the fetch sessions (docs/design.md §7.9, the wire
// format in agent/peer/sessionwire.go): a follower agent's session carries
// its fetches of every partition this agent leads. Each fetch goes through
// the partition's loop as a GET's does; one with nothing to answer is
// parked there (the follower counts as caught up) and here, subscribed to
// the replica's changes, until an append, a high watermark past the
// follower's, a new log start, a change of role or the replica's stop; the session's writer
// then answers it, sending the batches with sendfile(2). Nothing happens
// per parked partition while nothing changes. A partition this agent has
// just won is announced with a leading frame on the sessions of its other
// replicas' agents that asked for them (AnnounceLeadership).

const (
	// sendfileMinBytes is the region size from which an answer's batches
	// go out with sendfile(2): below it, pread and a copy into the
	// session's buffer cost less, and share one write with other frames.
	sendfileMinBytes = 64 << 10
	// sessionWriteBuffer batches small frames into one write(2).
	sessionWriteBuffer = 64 << 10
	// minSessionHeartbeat bounds how often a follower may ask the session
	// to ping.
	minSessionHeartbeat = 10 * time.Millisecond
	// sessionWorkers is how many of a session's partitions go to their
	// loops at once. A fetch waits for its partition's loop, behind the
	// produces queued there: one reader taking every fetch to its loop in
	// turn made a round of the session as long as the sum of those waits,
	// and under a burst of writes to 3,334 partitions led by one agent its
	// followers' rounds outlasted lag_time_max, so the ISRs shrank and
	// grew again over and over (docs/design.md §7.9). A partition's
	// requests all go to the same worker, in the order they came.
	sessionWorkers = 16
	// sessionWorkQueue bounds the requests waiting for each worker; the
	// reader waits when one is full.
	sessionWorkQueue = 256
)

// leaderSessions are the sessions this agent serves as a leader, so that
// the agent's stop (Server.Close) ends them and waits for them.
type leaderSessions struct {
	mu     sync.Mutex
	closed bool
	nextID uint64
	open   map[*leaderSession]struct{}
	wg     sync.WaitGroup
}

// add registers s and gives it its id; false once the agent stops.
func (ls *leaderSessions) add(s *leaderSession) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed {
		return false
	}
	if ls.open == nil {
		ls.open = map[*leaderSession]struct{}{}
	}
	ls.nextID++
	s.id = ls.nextID
	ls.open[s] = struct{}{}
	ls.wg.Add(1)
	return true
}

func (ls *leaderSessions) remove(s *leaderSession) {
	ls.mu.Lock()
	delete(ls.open, s)
	ls.mu.Unlock()
	ls.wg.Done()
}

// close ends every session and waits until each has let go of its parked
// fetches.
func (ls *leaderSessions) close() {
	ls.mu.Lock()
	ls.closed = true
	for s := range ls.open {
		_ = s.raw.Close()
	}
	ls.mu.Unlock()
	ls.wg.Wait()
}

// HandleReplicaSession opens a follower agent's fetch session: the token
// was checked by the route; the answer is 200 with the heartbeat the
// session keeps, then the connection is this agent's.
func (srv *Server) HandleReplicaSession(ctx *fasthttp.RequestCtx) {
	if !srv.cfg.Host.Serving(ctx) {
		return
	}
	replicaID := string(ctx.QueryArgs().Peek("replica_id"))
	leading := string(ctx.QueryArgs().Peek(peer.LeadingParam)) == "1"
	ms, err := strconv.ParseInt(string(ctx.QueryArgs().Peek("heartbeat_ms")), 10, 64)
	if replicaID == "" || err != nil || ms < 1 || ms > wire.MaxReplicaFetchWait.Milliseconds() {
		reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest,
			fmt.Sprintf("a session needs replica_id and heartbeat_ms in [1, %d]", wire.MaxReplicaFetchWait.Milliseconds()), false)
		return
	}
	// The session must be declared dead well within lag_time_max, so that
	// a follower whose host vanished leaves the ISR as if it had stopped
	// fetching when it was last heard of.
	lag := srv.cfg.LagTimeMax
	heartbeat := max(min(time.Duration(ms)*time.Millisecond, lag/8), minSessionHeartbeat)
	deadAfter := min(peer.SessionDeadAfter(heartbeat), lag/2)
	ctx.Response.Header.Set(peer.HeaderSession, strconv.FormatInt(heartbeat.Milliseconds(), 10))
	if string(ctx.QueryArgs().Peek(peer.TopicIDsParam)) == "1" {
		ctx.Response.Header.Set(peer.HeaderTopicIDs, "1")
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.Hijack(func(c net.Conn) { srv.serveSession(c, replicaID, leading, heartbeat, deadAfter) })
}

// leaderSession is one follower agent's session. Its reader (the hijacked
// connection's goroutine) takes fetches to the loops; its writer answers
// them.
type leaderSession struct {
	srv *Server
	id  uint64
	// raw is the connection itself (a *net.TCPConn, or a *tls.Conn with
	// peer TLS); writes go to it through out, which gives each piece of a
	// write peer.CallTimeout to be taken rather than a whole answer (a
	// follower whose link was slower than about 13 Mbit/s took longer
	// than that for an 8 MiB one, and the session ended over and over).
	// sendfile says raw is TCP: large regions go out with sendfile(2).
	raw       net.Conn
	out       *peer.ProgressConn
	sendfile  bool
	replicaID string
	// leading says the follower asked for leading frames.
	leading   bool
	heartbeat time.Duration
	wake      chan struct{}
	stop      chan struct{}
	stopOnce  sync.Once
	// work are the workers' queues of the follower's requests, a
	// partition's always on the same one (shard).
	work []chan sessionRequest

	mu       sync.Mutex
	parts    map[sessionKey]*sessionPart
	dirty    []*sessionPart
	lastSeen time.Time
	// announced are the leading frames waiting for the writer.
	announced []byte
}

type sessionKey struct {
	topic     string
	partition int
}

// sessionPart is a partition's fetch waiting in the session. Its fields
// from r on are set by the reader before the writer first sees it; those
// under "guarded" by s.mu.
type sessionPart struct {
	key      sessionKey
	id       uint32
	f        peer.Fetch
	r        *partition.Replica
	out      partition.LeaderFetchOutcome
	refusal  *reply.APIError
	holdTill time.Time

	// Guarded by the session's mu.
	parked bool
	cancel func()
	queued bool
	gone   bool
}

func (srv *Server) serveSession(c net.Conn, replicaID string, leading bool, heartbeat, deadAfter time.Duration) {
	raw := c
	if u, ok := c.(interface{ UnsafeConn() net.Conn }); ok {
		// fasthttp's wrapper reads through its buffer (bytes the follower
		// sent right behind its request); writes go to the connection
		// itself, which sendfile needs.
		raw = u.UnsafeConn()
	}
	s := &leaderSession{srv: srv, raw: raw, out: &peer.ProgressConn{Conn: raw, WriteIdle: peer.CallTimeout}, replicaID: replicaID,
		leading: leading, heartbeat: heartbeat,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), parts: map[sessionKey]*sessionPart{}, lastSeen: srv.cfg.Now()}
	_, s.sendfile = raw.(*net.TCPConn)
	if !srv.sessions.add(s) {
		return
	}
	defer srv.sessions.remove(s)
	srv.cfg.Logger.Debug("fetch session opened", "replica", replicaID, "heartbeat", heartbeat, "sendfile", s.sendfile)
	var writer sync.WaitGroup
	writer.Go(s.write)
	stopWorkers := s.startWorkers()
	// The follower is gone once it has sent nothing for deadAfter.
	err := s.read(bufio.NewReaderSize(&peer.ProgressConn{Conn: c, ReadIdle: deadAfter}, 16<<10))
	s.end()
	// Every fetch taken to a loop has its outcome in s.parts before the
	// release lets go of them.
	stopWorkers()
	writer.Wait()
	s.release()
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		srv.cfg.Logger.Debug("fetch session ended", "replica", replicaID, "error", err)
	}
}

// AnnounceLeadership queues the leading frame of l, a partition this agent
// has just won, on the sessions that asked for them of the agents among
// replicas; each session's writer sends it ahead of its answers.
func (srv *Server) AnnounceLeadership(l peer.Leading, replicas []string) {
	ls := &srv.sessions
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for s := range ls.open {
		if !s.leading || s.replicaID == l.Leader || !slices.Contains(replicas, s.replicaID) {
			continue
		}
		s.mu.Lock()
		s.announced = peer.AppendLeadingFrame(s.announced, l)
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// end stops the writer and closes the connection, which ends the reader.
func (s *leaderSession) end() {
	s.stopOnce.Do(func() {
		close(s.stop)
		_ = s.raw.Close()
	})
}

func (s *leaderSession) read(br *bufio.Reader) error {
	var buf []byte
	for {
		var req peer.SessionRequest
		var err error
		req, buf, err = peer.ReadSessionRequest(br, buf, s.replicaID)
		if err != nil {
			return err
		}
		now := s.srv.cfg.Now()
		s.mu.Lock()
		s.lastSeen = now
		s.mu.Unlock()
		switch req.Kind {
		case peer.SessionFetch, peer.SessionForget:
			s.work[shard(req.Fetch.Topic, req.Fetch.Partition, len(s.work))] <- sessionRequest{req, now}
		}
	}
}

// startWorkers starts the session's workers; the returned stop closes
// their queues and waits until they have taken or dropped what is queued.
func (s *leaderSession) startWorkers() (stop func()) {
	var workers sync.WaitGroup
	s.work = make([]chan sessionRequest, sessionWorkers)
	for i := range s.work {
		queue := make(chan sessionRequest, sessionWorkQueue)
		s.work[i] = queue
		workers.Go(func() { s.serveRequests(queue) })
	}
	return func() {
		for _, queue := range s.work {
			close(queue)
		}
		workers.Wait()
	}
}

// sessionRequest is a follower's request and when it arrived.
type sessionRequest struct {
	peer.SessionRequest
	at time.Time
}

// shard is the worker of a partition's requests.
func shard(topic string, partition, n int) int {
	h := fnv.New32a()
	h.Write([]byte(topic))
	return int((h.Sum32() + uint32(partition)) % uint32(n))
}

// serveRequests takes the requests of its partitions to their loops, in
// order, until its queue closes; once the session ends it drops what is
// left (the release lets go of the partitions' fetches).
func (s *leaderSession) serveRequests(queue <-chan sessionRequest) {
	for req := range queue {
		select {
		case <-s.stop:
			continue
		default:
		}
		switch req.Kind {
		case peer.SessionFetch:
			s.onFetch(req.ID, req.Fetch)
		case peer.SessionForget:
			s.mu.Lock()
			p := s.parts[sessionKey{req.Fetch.Topic, req.Fetch.Partition}]
			s.mu.Unlock()
			if p != nil {
				s.unpark(p, true, req.at)
			}
		}
	}
}

// onFetch takes a fetch to its partition's loop, which answers it, refuses
// it or parks it; it replaces the partition's earlier fetch.
func (s *leaderSession) onFetch(id uint32, f peer.Fetch) {
	s.srv.cfg.FetchServed()
	key := sessionKey{f.Topic, f.Partition}
	p := &sessionPart{key: key, id: id, f: f}
	s.mu.Lock()
	old := s.parts[key]
	s.parts[key] = p
	s.mu.Unlock()
	if old != nil {
		// This fetch ends the old one's park in the loop.
		if cancel, _, _ := s.take(old, true); cancel != nil {
			cancel()
		}
	}
	p.r = s.srv.cfg.Host.Replica(f.Topic, f.Partition)
	if p.r == nil {
		p.refusal = reply.NewAPIError(fasthttp.StatusConflict, wire.CodeNotLeader, "this agent has no replica of "+reply.PartitionName(f.Topic, f.Partition), true)
		s.mark(p)
		return
	}
	if p.refusal = otherIncarnation(f, p.r); p.refusal != nil {
		s.mark(p)
		return
	}
	p.out = p.r.SessionFetch(f.FetchRequest, s.id, f.KnownHighWatermark)
	if p.out.Err != nil {
		p.refusal = peerAPIError(p.out.Err)
		s.mark(p)
		return
	}
	if !p.out.Parked {
		s.mark(p)
		return
	}
	s.mu.Lock()
	p.parked = true
	s.mu.Unlock()
	cancel := p.r.OnChange(func() { s.mark(p) })
	s.mu.Lock()
	keep := !p.gone && p.parked
	if keep {
		p.cancel = cancel
	}
	s.mu.Unlock()
	if !keep {
		cancel()
		return
	}
	// A change between the loop's answer and the subscription.
	s.mark(p)
}

// mark queues p for the writer.
func (s *leaderSession) mark(p *sessionPart) {
	s.mu.Lock()
	if !p.queued && !p.gone {
		p.queued = true
		s.dirty = append(s.dirty, p)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// take ends p's park (and with gone, p itself) and returns its
// subscription's cancel and whether it was parked; ok is false if p was
// gone already.
func (s *leaderSession) take(p *sessionPart, gone bool) (cancel func(), parked, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.gone {
		return nil, false, false
	}
	cancel, parked = p.cancel, p.parked
	p.cancel, p.parked = nil, false
	if gone {
		p.gone = true
		if s.parts[p.key] == p {
			delete(s.parts, p.key)
		}
	}
	return cancel, parked, true
}

// unpark ends p's park as of at, in the session and in the loop.
func (s *leaderSession) unpark(p *sessionPart, gone bool, at time.Time) {
	cancel, parked, _ := s.take(p, gone)
	if cancel != nil {
		cancel()
	}
	if parked {
		p.r.Unpark(s.replicaID, p.f.CurrentLeaderEpoch, s.id, at)
	}
}

// release lets go of every fetch of an ended session: the loops count the
// parked ones' followers as caught up as of the session's last frame.
func (s *leaderSession) release() {
	s.mu.Lock()
	parts := make([]*sessionPart, 0, len(s.parts))
	for _, p := range s.parts {
		parts = append(parts, p)
	}
	lastSeen := s.lastSeen
	s.mu.Unlock()
	for _, p := range parts {
		s.unpark(p, true, lastSeen)
	}
}

// write answers the fetches the reader and the replicas' changes queue,
// and pings when it has written nothing for a heartbeat.
func (s *leaderSession) write() {
	// Without out's ReadFrom, which would send the tail of a region that
	// overflows the buffer with sendfile: small regions are copied.
	bw := bufio.NewWriterSize(struct{ io.Writer }{s.out}, sessionWriteBuffer)
	ping := time.NewTimer(s.heartbeat)
	defer ping.Stop()
	later := time.NewTimer(time.Hour)
	later.Stop()
	defer later.Stop()
	var batch, waiting []*sessionPart
	var hdr, announced []byte
	for {
		select {
		case <-s.stop:
			return
		case <-s.wake:
		case <-later.C:
		case <-ping.C:
			hdr = peer.AppendPingFrame(hdr[:0])
			_, _ = bw.Write(hdr)
		}
		s.mu.Lock()
		batch = append(batch[:0], s.dirty...)
		clear(s.dirty)
		s.dirty = s.dirty[:0]
		for _, p := range batch {
			p.queued = false
		}
		announced, s.announced = s.announced, announced[:0]
		s.mu.Unlock()
		_, _ = bw.Write(announced)
		batch = append(batch, waiting...)
		waiting = waiting[:0]
		var retryAt time.Time
		for _, p := range batch {
			var again time.Time
			var err error
			hdr, again, err = s.answer(bw, p, hdr)
			if err != nil {
				s.srv.cfg.Logger.Debug("fetch session write failed", "replica", s.replicaID, "error", err)
				s.end()
				return
			}
			if !again.IsZero() {
				waiting = append(waiting, p)
				if retryAt.IsZero() || again.Before(retryAt) {
					retryAt = again
				}
			}
		}
		clear(batch)
		if bw.Buffered() > 0 {
			if err := bw.Flush(); err != nil {
				s.end()
				return
			}
			resetTimer(ping, s.heartbeat)
		}
		if !retryAt.IsZero() {
			resetTimer(later, max(retryAt.Sub(s.srv.cfg.Now()), time.Millisecond))
		}
	}
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	t.Reset(d)
}

// answer writes p's answer, if it has one, into bw; a throttled catch-up
// answer waiting for the budget returns when to look again instead.
func (s *leaderSession) answer(bw *bufio.Writer, p *sessionPart, hdr []byte) ([]byte, time.Time, error) {
	s.mu.Lock()
	gone, parked := p.gone, p.parked
	s.mu.Unlock()
	if gone {
		return hdr, time.Time{}, nil
	}
	if p.refusal != nil {
		s.take(p, true)
		return hdr, time.Time{}, s.writeRefusal(bw, p, p.refusal)
	}
	f, r := p.f, p.r
	now := s.srv.cfg.Now()
	log := r.CurrentLog()
	notLeader := func() bool {
		v := r.CurrentView()
		select {
		case <-r.Done():
			return true
		default:
		}
		return v.Role != partition.RoleLeader || v.Epoch != f.CurrentLeaderEpoch
	}
	if parked {
		// The follower also learns of a log start that moved (retention,
		// a restatement of the groups' offsets), whose segments it deletes.
		// And a park the loop no longer holds (another fetch of the
		// follower ended it) is answered, so that it fetches again here.
		if !notLeader() && log.LogEndOffset() <= f.FetchOffset && log.HighWatermark() <= f.KnownHighWatermark &&
			log.LogStartOffset() <= p.out.LogStartOffset && r.HoldsPark(s.replicaID, s.id) {
			return hdr, time.Time{}, nil
		}
		// Before the answer goes out, so before the follower's next fetch
		// reaches the loop.
		s.unpark(p, false, now)
		if notLeader() {
			s.take(p, true)
			return hdr, time.Time{}, s.writeRefusal(bw, p, reply.NewAPIError(fasthttp.StatusConflict, wire.CodeNotLeader, "leadership changed while the fetch waited", true))
		}
	}
	pos := peer.FetchPositions{
		LeaderEpoch:      p.out.Result.LeaderEpoch,
		EpochStartOffset: p.out.Result.EpochStartOffset,
		HighWatermark:    p.out.Result.HighWatermark,
		LogEndOffset:     p.out.Result.LogEndOffset,
		LogStartOffset:   p.out.LogStartOffset,
		Diverging:        p.out.Result.Diverging,
	}
	if pos.Diverging != nil {
		s.take(p, true)
		hdr = peer.AppendAnswerHeader(hdr[:0], p.id, pos, 0)
		_, err := bw.Write(hdr)
		return hdr, time.Time{}, err
	}
	maxBytes := f.MaxBytes
	if p.out.Throttled {
		// A replica a move adds: its answer waits for the catch-up budget
		// (docs/design.md §7.6), without holding back the session's
		// other partitions, and goes out empty after a heartbeat.
		if delay := s.srv.cfg.CatchUp.Delay(now); delay > 0 {
			if p.holdTill.IsZero() {
				p.holdTill = now.Add(s.heartbeat)
			}
			if now.Before(p.holdTill) {
				again := now.Add(delay)
				if p.holdTill.Before(again) {
					again = p.holdTill
				}
				return hdr, again, nil
			}
			s.take(p, true)
			hdr = peer.AppendAnswerHeader(hdr[:0], p.id, pos, 0)
			_, err := bw.Write(hdr)
			return hdr, time.Time{}, err
		}
		maxBytes = s.srv.cfg.CatchUp.MaxBytes(maxBytes)
	}
	if _, _, ok := s.take(p, true); !ok {
		return hdr, time.Time{}, nil
	}
	region, err := log.Read(f.FetchOffset, maxBytes, math.MaxInt64)
	if err != nil {
		return hdr, time.Time{}, s.writeRefusal(bw, p, reply.StorageError(err))
	}
	defer region.Close()
	// As in HandleReplicaFetch: a leader that stepped down during the
	// read may hold a newer leader's batches.
	if notLeader() {
		return hdr, time.Time{}, s.writeRefusal(bw, p, reply.NewAPIError(fasthttp.StatusConflict, wire.CodeNotLeader, "leadership changed while the fetch was read", true))
	}
	pos.HighWatermark = max(pos.HighWatermark, log.HighWatermark())
	pos.LogEndOffset = log.LogEndOffset()
	pos.LogStartOffset = log.LogStartOffset()
	if p.out.Throttled {
		s.srv.cfg.CatchUp.Spend(now, int(region.Len))
		r.AddCatchUpBytes(f.ReplicaID, int(region.Len))
	}
	hdr = peer.AppendAnswerHeader(hdr[:0], p.id, pos, region.Len)
	if _, err := bw.Write(hdr); err != nil {
		return hdr, time.Time{}, err
	}
	if region.Len >= sendfileMinBytes && s.sendfile {
		if err := bw.Flush(); err != nil {
			return hdr, time.Time{}, err
		}
		_, err = region.WriteTo(s.out)
	} else {
		_, err = region.WriteTo(bw)
	}
	return hdr, time.Time{}, err
}

func (s *leaderSession) writeRefusal(bw *bufio.Writer, p *sessionPart, e *reply.APIError) error {
	pe := &peer.Error{Status: e.Status, Code: e.Code, Message: e.Message}
	if e.LogStartOffset != nil {
		pe.LogStartOffset = *e.LogStartOffset
	}
	if e.LogEndOffset != nil {
		pe.LogEndOffset = *e.LogEndOffset
	}
	_, err := bw.Write(peer.AppendRefusalFrame(nil, p.id, pe))
	return err
}
