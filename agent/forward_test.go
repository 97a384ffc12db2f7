package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/replicate"

	"github.com/logagent/logagent/wire"
)

// TestNeverSent: only failures before any byte could reach the leader make
// a forward safe to retry; everything after sending is an unknown outcome.
func TestNeverSent(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{"dial timeout", fasthttp.ErrDialTimeout, true},
		{"no free connection", fasthttp.ErrNoFreeConns, true},
		{"wrapped refused", fmt.Errorf("x: %w", syscall.ECONNREFUSED), true},
		{"read timeout", fasthttp.ErrTimeout, false},
		{"reset while reading", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, false},
		{"connection closed", fasthttp.ErrConnectionClosed, false},
		{"eof", io.ErrUnexpectedEOF, false},
		{"other", errors.New("boom"), false},
	}
	for _, tc := range tests {
		if got := neverSent(tc.err); got != tc.want {
			t.Errorf("%s: neverSent(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// plainAndIdempotentBatch returns a one-record batch without a producer id
// and the same batch with one.
func plainAndIdempotentBatch(t *testing.T) (plain, idempotent []byte) {
	t.Helper()
	var b record.Builder
	if err := b.Add(1, nil, []byte("v"), nil); err != nil {
		t.Fatal(err)
	}
	plain, err := b.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	idempotent = append([]byte(nil), plain...)
	record.StampProducer(idempotent, 42, 0, 7)
	return plain, idempotent
}

// TestForwardTarget: a forward goes to the leader the replica follows when
// that one announced an epoch the metadata has not reached, else to the
// metadata's leader, and nowhere while the metadata's key is free and
// nothing newer was announced.
func TestForwardTarget(t *testing.T) {
	meta := func(leader string, epoch int32, session string) election.PartitionMeta {
		return election.PartitionMeta{Topic: "t", State: election.PartitionState{Leader: leader, Epoch: epoch}, LeaderSession: session}
	}
	following := func(leader string, epoch int32) *partition.View {
		return &partition.View{Role: roleFollower, Leader: leader, Epoch: epoch}
	}
	for _, tc := range []struct {
		name       string
		pm         election.PartitionMeta
		view       *partition.View
		wantLeader string
		wantEpoch  int32
	}{
		{"no replica here", meta("n1", 3, "s1"), nil, "n1", 3},
		{"no replica here, key free", meta("n1", 3, ""), nil, "", 0},
		{"following the metadata's leader", meta("n1", 3, "s1"), following("n1", 3), "n1", 3},
		{"announced ahead of the metadata", meta("n1", 3, "s1"), following("n3", 4), "n3", 4},
		{"announced while the key is free", meta("n1", 3, ""), following("n3", 4), "n3", 4},
		{"key free, following the old leader", meta("n1", 3, ""), following("n1", 3), "", 0},
		{"metadata went past the followed epoch", meta("n1", 5, "s1"), following("n3", 4), "n1", 5},
		{"not following", meta("n1", 3, ""), &partition.View{Role: roleLeader, Epoch: 4}, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leader, epoch := forwardTargetOf(tc.pm, tc.view)
			if leader != tc.wantLeader || epoch != tc.wantEpoch {
				t.Fatalf("forwardTargetOf = %q at %d, want %q at %d", leader, epoch, tc.wantLeader, tc.wantEpoch)
			}
		})
	}
}

// TestIdempotentForward: only a forward whose batches carry a producer id
// may be sent again after its connection closed under it.
func TestIdempotentForward(t *testing.T) {
	plain, stamped := plainAndIdempotentBatch(t)
	for _, tc := range []struct {
		name string
		body []byte
		want bool
	}{
		{"plain batch", plain, false},
		{"batch with a producer id", stamped, true},
		{"group of idempotent batches", append(append([]byte(nil), stamped...), stamped...), true},
		{"shorter than a header", stamped[:10], false},
	} {
		req := fasthttp.AcquireRequest()
		req.SetBodyRaw(tc.body)
		if got := idempotentForward(req); got != tc.want {
			t.Errorf("%s: idempotentForward = %t, want %t", tc.name, got, tc.want)
		}
		fasthttp.ReleaseRequest(req)
	}
}

// fakeLeader is a peer that reads each request whole and then does what
// onRequest says: answer 200 and close the connection (an agent that
// restarted since, or closed its idle connections as it stopped, leaves
// its peers' pooled connections so), or die before answering: close the
// connection and its listener, so the resend's dial is refused.
type fakeLeader struct {
	ln       net.Listener
	dieAfter int32 // the request after which it dies, 0 for never
	requests atomic.Int32
	wg       sync.WaitGroup
}

func startFakeLeader(t *testing.T, dieAfter int32) *fakeLeader {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &fakeLeader{ln: ln, dieAfter: dieAfter}
	l.wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			l.wg.Go(func() {
				defer conn.Close()
				req, err := http.ReadRequest(bufio.NewReader(conn))
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				if l.requests.Add(1) == l.dieAfter {
					ln.Close()
					return
				}
				fmt.Fprint(conn, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		l.wg.Wait()
	})
	return l
}

// TestSendForward: a forward that finds its pooled connection closed by
// the leader is sent again on a new connection when its batches are
// idempotent, and fails as an unknown outcome when they are not; a
// forward the leader read before it died is an unknown outcome even when
// the resend's dial is refused (the jepsen dead-agent run with seed
// 1796303720586899991 had it as refused: the sidecar gave its producer
// sequence to the next batch, which the new leader answered as a
// duplicate, unwritten); only a forward no byte of which left is unsent.
func TestSendForward(t *testing.T) {
	plain, idempotent := plainAndIdempotentBatch(t)
	clients := newForwarder(nil, nil)
	send := func(addr string, body []byte) (bool, error) {
		req := clients.NewRequest(addr, peerProducePath)
		defer fasthttp.ReleaseRequest(req)
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetBodyRaw(body)
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseResponse(resp)
		unsent, err := sendForward(clients.Client(addr), req, resp, time.Now().Add(5*time.Second), time.Now)
		if err == nil && resp.StatusCode() != fasthttp.StatusOK {
			err = fmt.Errorf("status %d", resp.StatusCode())
		}
		return unsent, err
	}
	// waitClosed lets the leader's close of the connection it answered on
	// reach the client before the next request reuses it.
	waitClosed := func() { time.Sleep(50 * time.Millisecond) }

	restarted := startFakeLeader(t, 0)
	addr := restarted.ln.Addr().String()
	if _, err := send(addr, plain); err != nil {
		t.Fatal(err)
	}
	waitClosed()
	if _, err := send(addr, idempotent); err != nil {
		t.Fatalf("an idempotent forward on a connection the leader closed: %v, want it sent again and answered", err)
	}
	if n := restarted.requests.Load(); n != 2 {
		t.Fatalf("the leader carried out %d requests, want 2 (the resend, once)", n)
	}
	waitClosed()
	unsent, err := send(addr, plain)
	if !errors.Is(err, fasthttp.ErrConnectionClosed) || unsent {
		t.Fatalf("a plain forward on a connection the leader closed: unsent %t, %v; want an unknown outcome, ErrConnectionClosed (not sent again)", unsent, err)
	}
	if n := restarted.requests.Load(); n != 2 {
		t.Fatalf("the leader carried out %d requests, want still 2", n)
	}
	// The closed connection was dropped with the pool's idle ones: the
	// next forward dials afresh.
	if _, err := send(addr, plain); err != nil {
		t.Fatalf("the next forward after a closed connection: %v", err)
	}

	for _, tc := range []struct {
		name string
		body []byte
	}{{"idempotent", idempotent}, {"plain", plain}} {
		died := startFakeLeader(t, 1)
		unsent, err := send(died.ln.Addr().String(), tc.body)
		if err == nil || unsent {
			t.Errorf("%s forward the leader read before it died: unsent %t, %v; want an unknown outcome", tc.name, unsent, err)
		}
		if n := died.requests.Load(); n != 1 {
			t.Errorf("%s forward: the leader read %d requests, want 1", tc.name, n)
		}
	}

	gone := startFakeLeader(t, 0)
	gone.ln.Close()
	if unsent, err := send(gone.ln.Addr().String(), idempotent); err == nil || !unsent {
		t.Fatalf("a forward to a leader not listening: unsent %t, %v; want unsent", unsent, err)
	}
}

// TestForwardedProduceFencedInTheLoop: the epoch a forwarding sidecar aimed
// at is checked by the leader's loop when it appends, not only by the
// handler before the handoff (a leadership can end between the two). A
// write for another epoch appends nothing.
func TestForwardedProduceFencedInTheLoop(t *testing.T) {
	c := startTestCluster(t, 1, "")
	n1 := c.agents[0]
	c.createTopic(n1, "fenced", 1, 1, 1)
	_, pd := c.waitLeader("fenced", 0, 1)
	r := n1.agent.replicas.Get("fenced", 0)
	tests := []struct {
		name    string
		epoch   int32
		wantErr error
	}{
		{"older epoch", pd.Epoch - 1, replicate.ErrFencedLeaderEpoch},
		{"newer epoch", pd.Epoch + 1, replicate.ErrUnknownLeaderEpoch},
		{"the leader's epoch", pd.Epoch, nil},
		{"any epoch", anyEpoch, nil},
	}
	for _, tc := range tests {
		before := r.CurrentLog().LogEndOffset()
		out := r.Produce(testBatch(t, []string{tc.name}), replicate.AcksAll, tc.epoch, time.Now().Add(5*time.Second), 6*time.Second)
		after := r.CurrentLog().LogEndOffset()
		switch {
		case tc.wantErr == nil && (out.Err != nil || after != before+1):
			t.Errorf("%s: err %v, log end %d -> %d; want one record appended", tc.name, out.Err, before, after)
		case tc.wantErr != nil && (!errors.Is(out.Err, tc.wantErr) || out.Appended || after != before):
			t.Errorf("%s: err %v (appended %t), log end %d -> %d; want %v and nothing appended", tc.name, out.Err, out.Appended, before, after, tc.wantErr)
		}
	}
	// Through the peer API the refusals keep their codes, so the sidecar
	// refreshes its metadata and retries.
	for _, tc := range []struct {
		epoch  int32
		status int
		code   string
	}{{pd.Epoch - 1, 409, wire.CodeFencedLeaderEpoch}, {pd.Epoch + 1, 412, wire.CodeUnknownLeaderEpoch}} {
		path := fmt.Sprintf("%s?topic=fenced&partition=0&acks=all&leader_epoch=%d", peerProducePath, tc.epoch)
		status, body := c.callAddr(n1.peer, "POST", path, wire.ContentTypeBatch, testBatch(t, []string{"x"}), nil)
		if status != tc.status || errorCode(t, body).Code != tc.code {
			t.Errorf("peer produce at epoch %d: %d %s, want %d %s", tc.epoch, status, body, tc.status, tc.code)
		}
	}
	// Without an epoch nothing is fenced: it is refused (it was taken at
	// any epoch).
	before := r.CurrentLog().LogEndOffset()
	status, body := c.callAddr(n1.peer, "POST", peerProducePath+"?topic=fenced&partition=0&acks=all", wire.ContentTypeBatch, testBatch(t, []string{"x"}), nil)
	if after := r.CurrentLog().LogEndOffset(); status != 400 || errorCode(t, body).Code != wire.CodeInvalidRequest || after != before {
		t.Errorf("peer produce without leader_epoch: %d %s, log end %d -> %d; want 400 invalid_request and nothing appended", status, body, before, after)
	}
}
