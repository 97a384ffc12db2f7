package peer

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/replicate"
)

// fakeLeader is the leader side of one session at a time, driven by the
// test: it checks the opening request and hands the test the frames.
type fakeLeader struct {
	t     *testing.T
	ln    net.Listener
	conns chan *leaderConn
	done  chan struct{}
}

type leaderConn struct {
	net.Conn
	br  *bufio.Reader
	req *http.Request
}

func startFakeLeader(t *testing.T, heartbeatMs int) *fakeLeader {
	t.Helper()
	return startFakeLeaderWith(t, heartbeatMs, "")
}

// startFakeLeaderWith is startFakeLeader whose session answers carry
// extraHeader ("Name: value\r\n", or empty) too.
func startFakeLeaderWith(t *testing.T, heartbeatMs int, extraHeader string) *fakeLeader {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &fakeLeader{t: t, ln: ln, conns: make(chan *leaderConn, 4), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(conn)
			req, err := http.ReadRequest(br)
			if err != nil {
				conn.Close()
				continue
			}
			fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\n%s: %d\r\n%sContent-Length: 0\r\n\r\n", HeaderSession, heartbeatMs, extraHeader)
			l.conns <- &leaderConn{Conn: conn, br: br, req: req}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-l.done
		close(l.conns)
		for c := range l.conns {
			c.Close()
		}
	})
	return l
}

func (l *fakeLeader) accept() *leaderConn {
	l.t.Helper()
	select {
	case c := <-l.conns:
		l.t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(5 * time.Second):
		l.t.Fatal("no session opened")
		return nil
	}
}

func (c *leaderConn) next(t *testing.T) SessionRequest {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	req, _, err := ReadSessionRequest(c.br, nil, c.req.URL.Query().Get("replica_id"))
	if err != nil {
		t.Fatalf("read a follower frame: %v", err)
	}
	return req
}

type delivery struct {
	answer FetchAnswer
	err    error
}

func collector() (Deliver, chan delivery) {
	ch := make(chan delivery, 16)
	return func(a FetchAnswer, err error) { ch <- delivery{a, err} }, ch
}

func waitDelivery(t *testing.T, ch chan delivery) delivery {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(5 * time.Second):
		t.Fatal("nothing delivered")
		return delivery{}
	}
}

func testFetch(partition int, offset int64) Fetch {
	return Fetch{Topic: "t", Partition: partition, FetchRequest: replicate.FetchRequest{ReplicaID: "n2", FetchOffset: offset, CurrentLeaderEpoch: 3, LastFetchedEpoch: 3},
		MaxBytes: 1 << 20, MaxWait: 500 * time.Millisecond}
}

// TestSessionCarriesFetches: the follower opens one session with its token
// and replica id, its fetches and forgets travel as frames, each answer
// reaches the fetch it answers, an answer to a fetch replaced since is
// dropped, and an idle session pings.
func TestSessionCarriesFetches(t *testing.T) {
	leader := startFakeLeader(t, 50)
	clients := NewClients("secret", 1<<20, false, nil)
	s := NewSessions(clients, "n2", 50*time.Millisecond, nil)
	defer s.Close()
	addr := leader.ln.Addr().String()

	d0, got0 := collector()
	d1, got1 := collector()
	s.Fetch(addr, testFetch(0, 10), d0)
	s.Fetch(addr, testFetch(1, 20), d1)
	c := leader.accept()
	if c.req.URL.Path != SessionPath || c.req.Header.Get("Authorization") != "Bearer secret" || c.req.URL.Query().Get("replica_id") != "n2" {
		t.Fatalf("session request %s %v", c.req.URL, c.req.Header)
	}
	ids := map[int]uint32{}
	for range 2 {
		req := c.next(t)
		if req.Kind != SessionFetch || req.Fetch.Topic != "t" {
			t.Fatalf("frame %+v", req)
		}
		want := testFetch(req.Fetch.Partition, 10*int64(req.Fetch.Partition+1))
		want.MaxWait = 0
		if req.Fetch != want {
			t.Fatalf("fetch %+v, want %+v", req.Fetch, want)
		}
		ids[req.Fetch.Partition] = req.ID
	}

	// Partition 1 fetches again before its first fetch is answered.
	d1b, got1b := collector()
	s.Fetch(addr, testFetch(1, 21), d1b)
	req := c.next(t)
	if req.Kind != SessionFetch || req.Fetch.FetchOffset != 21 {
		t.Fatalf("replacing fetch %+v", req)
	}
	pos := FetchPositions{LeaderEpoch: 3, HighWatermark: 20, LogEndOffset: 30}
	var frames []byte
	frames = append(AppendAnswerHeader(frames, ids[1], pos, 3), "old"...)
	frames = append(AppendAnswerHeader(frames, req.ID, pos, 3), "new"...)
	frames = AppendRefusalFrame(frames, ids[0], &Error{Status: 409, Code: "not_leader", Message: "moved"})
	if _, err := c.Write(frames); err != nil {
		t.Fatal(err)
	}
	if d := waitDelivery(t, got1b); d.err != nil || string(d.answer.Batches) != "new" || d.answer.Positions.LogEndOffset != 30 {
		t.Fatalf("answer %+v %v", d.answer, d.err)
	}
	var pe *Error
	if d := waitDelivery(t, got0); !errors.As(d.err, &pe) || pe.Code != "not_leader" || pe.Status != 409 {
		t.Fatalf("refusal delivered as %v", d.err)
	}
	select {
	case d := <-got1:
		t.Fatalf("the replaced fetch got %+v", d)
	default:
	}

	// A forget reaches the leader; then the idle session pings.
	s.Fetch(addr, testFetch(2, 5), func(FetchAnswer, error) {})
	if req := c.next(t); req.Kind != SessionFetch {
		t.Fatalf("frame %+v", req)
	}
	s.Forget(addr, "t", 2)
	if req := c.next(t); req.Kind != SessionForget || req.Fetch.Partition != 2 {
		t.Fatalf("forget frame %+v", req)
	}
	if req := c.next(t); req.Kind != SessionPing {
		t.Fatalf("idle frame %+v", req)
	}
}

// TestSessionLeadingFrames: sessions with an onLeading ask for leading
// frames and hand each to it; sessions without one do not ask, and take a
// leading frame for a broken session.
func TestSessionLeadingFrames(t *testing.T) {
	leader := startFakeLeader(t, 50)
	announced := make(chan Leading, 1)
	s := NewSessions(NewClients("", 1<<20, false, nil), "n2", 50*time.Millisecond, func(l Leading) { announced <- l })
	defer s.Close()
	addr := leader.ln.Addr().String()
	d, got := collector()
	s.Fetch(addr, testFetch(0, 1), d)
	c := leader.accept()
	if c.req.URL.Query().Get(LeadingParam) != "1" {
		t.Fatalf("session request %s does not ask for leading frames", c.req.URL)
	}
	c.next(t)
	want := Leading{Topic: "t", Partition: 4, Epoch: 9, Leader: "n3"}
	if _, err := c.Write(AppendLeadingFrame(nil, want)); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-announced:
		if l != want {
			t.Fatalf("announced %+v, want %+v", l, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the leading frame was not handed on")
	}
	select {
	case del := <-got:
		t.Fatalf("the fetch got %+v %v from a leading frame", del.answer, del.err)
	default:
	}

	plain := NewSessions(NewClients("", 1<<20, false, nil), "n2", 50*time.Millisecond, nil)
	defer plain.Close()
	plain.Fetch(addr, testFetch(0, 1), d)
	c = leader.accept()
	if c.req.URL.Query().Has(LeadingParam) {
		t.Fatalf("session request %s asks for leading frames without a receiver", c.req.URL)
	}
	c.next(t)
	if _, err := c.Write(AppendLeadingFrame(nil, want)); err != nil {
		t.Fatal(err)
	}
	if del := waitDelivery(t, got); !errors.Is(del.err, ErrBadFrame) {
		t.Fatalf("a leading frame not asked for: %v", del.err)
	}
}

// TestSessionFailureFailsPending: a session whose leader goes silent past
// SessionDeadAfter, or closes it, fails every fetch pending on it (the
// replicas back off and fetch again), and the next fetch opens a new one.
func TestSessionFailureFailsPending(t *testing.T) {
	leader := startFakeLeader(t, 20)
	s := NewSessions(NewClients("", 1<<20, false, nil), "n2", 20*time.Millisecond, nil)
	defer s.Close()
	addr := leader.ln.Addr().String()

	d, got := collector()
	start := time.Now()
	s.Fetch(addr, testFetch(0, 1), d)
	c := leader.accept()
	c.next(t)
	// The leader sends nothing, pings neither.
	if del := waitDelivery(t, got); !errors.Is(del.err, errUnreachable) {
		t.Fatalf("silent leader: %v", del.err)
	}
	if took, bound := time.Since(start), SessionDeadAfter(20*time.Millisecond); took < bound {
		t.Fatalf("failed after %s, before the bound %s", took, bound)
	}

	s.Fetch(addr, testFetch(0, 1), d)
	c = leader.accept()
	c.next(t)
	c.Close()
	if del := waitDelivery(t, got); !errors.Is(del.err, errUnreachable) {
		t.Fatalf("closed session: %v", del.err)
	}

	// Close fails what is pending.
	s.Fetch(addr, testFetch(0, 1), d)
	leader.accept().next(t)
	s.Close()
	if del := waitDelivery(t, got); !errors.Is(del.err, ErrSessionsClosed) {
		t.Fatalf("at close: %v", del.err)
	}
}

// TestSessionFallsBackTo404: a leader of an earlier version answers the
// session request 404; its follower then fetches each partition with a
// GET /v1/replica/fetch of its own.
func TestSessionFallsBackTo404(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) != FetchPath {
			ctx.SetStatusCode(fasthttp.StatusNotFound)
			return
		}
		f, err := ParseFetch(ctx.QueryArgs())
		if err != nil {
			ctx.SetStatusCode(fasthttp.StatusBadRequest)
			return
		}
		FetchPositions{LeaderEpoch: 3, LogEndOffset: f.FetchOffset + 1}.Write(&ctx.Response.Header)
		ctx.SetBodyString("p" + strconv.Itoa(f.Partition))
	}}
	go srv.Serve(ln)
	defer srv.Shutdown()

	s := NewSessions(NewClients("", 1<<20, false, nil), "n2", 50*time.Millisecond, nil)
	defer s.Close()
	for p := range 3 {
		d, got := collector()
		s.Fetch(ln.Addr().String(), testFetch(p, int64(p)), d)
		del := waitDelivery(t, got)
		if del.err != nil || string(del.answer.Batches) != "p"+strconv.Itoa(p) || del.answer.Positions.LogEndOffset != int64(p)+1 {
			t.Fatalf("partition %d through the fallback: %+v %v", p, del.answer, del.err)
		}
	}
}

// TestSessionIDSkipsParkedFetch: a session's fetch ids are a uint32
// counter that lives as long as the session has a pending fetch, and an
// idle partition's fetch stays parked at the leader for as long as the
// partition gets no writes. After 2^32 fetches on the session (here: the
// counter set back), a new fetch of another partition got the parked
// fetch's id and replaced it: the leader's answer to the parked fetch (its
// batches, HW and log start) went to the other partition's replica, and
// the parked partition never got one.
func TestSessionIDSkipsParkedFetch(t *testing.T) {
	leader := startFakeLeader(t, 50)
	s := NewSessions(NewClients("", 1<<20, false, nil), "n2", 50*time.Millisecond, nil)
	defer s.Close()
	addr := leader.ln.Addr().String()

	dA, gotA := collector()
	s.Fetch(addr, testFetch(0, 10), dA) // partition 0: idle, parked at the leader
	c := leader.accept()
	parked := c.next(t)

	s.mu.Lock()
	s.byAddr[addr].nextID = parked.ID - 1 // 2^32 fetches later, mod 2^32
	s.mu.Unlock()
	dB, gotB := collector()
	s.Fetch(addr, testFetch(1, 500), dB) // partition 1: busy
	if req := c.next(t); req.ID == parked.ID {
		t.Errorf("partition 1's fetch got id %d, the id of partition 0's parked fetch", req.ID)
	}

	// Partition 0 gets a write: the leader answers its parked fetch.
	pos := FetchPositions{LeaderEpoch: 3, HighWatermark: 11, LogEndOffset: 11, LogStartOffset: 0}
	if _, err := c.Write(append(AppendAnswerHeader(nil, parked.ID, pos, 8), "p0-batch"...)); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-gotB:
		t.Fatalf("partition 0's answer (%q, HW %d) was delivered to partition 1's fetch", d.answer.Batches, d.answer.Positions.HighWatermark)
	case d := <-gotA:
		if string(d.answer.Batches) != "p0-batch" {
			t.Fatalf("partition 0 got %+v %v", d.answer, d.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("partition 0's answer was delivered to no one")
	}
}

// TestSessionTopicIDs: a fetch carries its replica's topic id only on a
// session whose leader said it takes them: a leader of an earlier version
// refuses a frame with a flag it does not know, and ends the session.
func TestSessionTopicIDs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header string
		want   string
	}{
		{name: "the leader takes them", header: HeaderTopicIDs + ": 1\r\n", want: "0123abcd"},
		{name: "an earlier leader", header: "", want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leader := startFakeLeaderWith(t, 50, tc.header)
			s := NewSessions(NewClients("", 1<<20, false, nil), "n2", 50*time.Millisecond, nil)
			defer s.Close()
			f := testFetch(0, 10)
			f.TopicID = "0123abcd"
			d, _ := collector()
			s.Fetch(leader.ln.Addr().String(), f, d)
			c := leader.accept()
			if got := c.req.URL.Query().Get(TopicIDsParam); got != "1" {
				t.Fatalf("the session request offers topic ids %q, want 1", got)
			}
			if req := c.next(t); req.Fetch.TopicID != tc.want {
				t.Fatalf("the fetch frame's topic id %q, want %q", req.Fetch.TopicID, tc.want)
			}
		})
	}
}

// TestSessionDeadlineBoundsSilence: a session's leader is gone once it has
// sent nothing for deadAfter, not once one frame has taken longer than
// that to arrive. With one deadline per frame, an answer slower than
// deadAfter (2.5 s for 8 MiB: a link below about 27 Mbit/s) ended the
// session and failed every fetch on it, over and over, while its bytes
// kept coming.
func TestSessionDeadlineBoundsSilence(t *testing.T) {
	const (
		heartbeat = 20 * time.Millisecond
		deadAfter = 100 * time.Millisecond
		pieces    = 80
		every     = 5 * time.Millisecond // pieces*every = 4 deadAfter
	)
	for _, tc := range []struct {
		name string
		// sent is how many of the answer's pieces the leader sends, every
		// few ms, before it falls silent.
		sent      int
		delivered bool
	}{
		{name: "an answer that keeps arriving", sent: pieces, delivered: true},
		{name: "silent in the middle of an answer", sent: pieces / 2},
		{name: "silent from the start", sent: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leader := startFakeLeader(t, int(heartbeat.Milliseconds()))
			s := NewSessions(NewClients("", 1<<20, false, nil), "n2", heartbeat, nil)
			s.deadAfter = func(time.Duration) time.Duration { return deadAfter }
			defer s.Close()
			addr := leader.ln.Addr().String()
			d, got := collector()
			s.Fetch(addr, testFetch(0, 10), d)
			c := leader.accept()
			req := c.next(t)

			batches := make([]byte, pieces*100)
			for i := range batches {
				batches[i] = byte(i)
			}
			frame := append(AppendAnswerHeader(nil, req.ID, FetchPositions{LeaderEpoch: 3, HighWatermark: 10, LogEndOffset: 90}, int64(len(batches))), batches...)
			start := time.Now()
			last := trickle(t, c, frame, pieces, tc.sent, every)
			del := waitDelivery(t, got)
			if !tc.delivered {
				if !errors.Is(del.err, errUnreachable) {
					t.Fatalf("a silent leader: %v", del.err)
				}
				if took := time.Since(last); took < deadAfter {
					t.Fatalf("failed %s after the leader's last byte, before deadAfter %s", took, deadAfter)
				}
				return
			}
			if del.err != nil {
				t.Fatalf("an answer sent over %s, %s at most between bytes, with deadAfter %s: %v",
					last.Sub(start).Round(time.Millisecond), every, deadAfter, del.err)
			}
			if !bytes.Equal(del.answer.Batches, batches) || del.answer.Positions.LogEndOffset != 90 {
				t.Fatalf("answer %d bytes, LEO %d", len(del.answer.Batches), del.answer.Positions.LogEndOffset)
			}
			// The session lives on: the next fetch goes out on it, after the
			// pings of the wait.
			s.Fetch(addr, testFetch(0, 90), d)
			next := c.next(t)
			for next.Kind == SessionPing {
				next = c.next(t)
			}
			if next.Kind != SessionFetch || next.Fetch.FetchOffset != 90 {
				t.Fatalf("frame after the answer %+v", next)
			}
		})
	}
}

// trickle writes the first sent of data's pieces (of pieces) to w, one
// every few ms, and returns when it wrote the last. A write that fails
// (the other side closed: what it reports says why) ends it.
func trickle(t *testing.T, w io.Writer, data []byte, pieces, sent int, every time.Duration) time.Time {
	t.Helper()
	size := (len(data) + pieces - 1) / pieces
	start, last := time.Now(), time.Now()
	for i := range sent {
		time.Sleep(every)
		if _, err := w.Write(data[i*size : min((i+1)*size, len(data))]); err != nil {
			t.Logf("piece %d of %d after %s: %v", i, sent, time.Since(start).Round(time.Millisecond), err)
			break
		}
		last = time.Now()
	}
	return last
}
