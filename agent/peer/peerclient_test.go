package peer

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// closingServer answers each connection's first request with a kept-alive
// 200 and then closes the connection, as an agent that restarted since
// (or shut its idle connections) leaves the connections its peers pooled.
type closingServer struct {
	ln       net.Listener
	requests atomic.Int32
	wg       sync.WaitGroup
}

func startClosingServer(t *testing.T) *closingServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &closingServer{ln: ln}
	s.wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Go(func() {
				defer conn.Close()
				req, err := http.ReadRequest(bufio.NewReader(conn))
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				s.requests.Add(1)
				fmt.Fprint(conn, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.wg.Wait()
	})
	return s
}

// TestResendClosed: a POST that finds its pooled connection closed by the
// peer is sent again on a new connection when the predicate allows it, and
// fails as before (the caller cannot know its outcome) when it does not;
// either way the peer's other idle connections are dropped.
func TestResendClosed(t *testing.T) {
	s := startClosingServer(t)
	addr := s.ln.Addr().String()
	c := NewClients("", 1<<20, false, nil)
	c.ResendClosed(func(req *fasthttp.Request) bool { return string(req.Header.Peek("X-Test-Idempotent")) == "1" })
	post := func(idempotent bool) error {
		req := c.NewRequest(addr, "/v1/replica/produce")
		defer fasthttp.ReleaseRequest(req)
		req.Header.SetMethod(fasthttp.MethodPost)
		if idempotent {
			req.Header.Set("X-Test-Idempotent", "1")
		}
		req.SetBodyString("batch")
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseResponse(resp)
		if err := c.Client(addr).DoTimeout(req, resp, 5*time.Second); err != nil {
			return err
		}
		if resp.StatusCode() != fasthttp.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode())
		}
		return nil
	}
	// waitClosed lets the server's close of the connection it answered on
	// reach the client before the next request reuses it.
	waitClosed := func() { time.Sleep(50 * time.Millisecond) }

	if err := post(false); err != nil {
		t.Fatal(err)
	}
	waitClosed()
	if err := post(true); err != nil {
		t.Fatalf("an idempotent request on a connection the peer closed: %v, want it sent again and answered", err)
	}
	if n := s.requests.Load(); n != 2 {
		t.Fatalf("the peer carried out %d requests, want 2 (the resend, once)", n)
	}
	waitClosed()
	err := post(false)
	if !errors.Is(err, fasthttp.ErrConnectionClosed) {
		t.Fatalf("a plain request on a connection the peer closed: %v, want ErrConnectionClosed (not sent again)", err)
	}
	if n := s.requests.Load(); n != 2 {
		t.Fatalf("the peer carried out %d requests, want still 2", n)
	}
	// The closed connection was dropped with the pool's idle ones: the
	// next request dials afresh.
	if err := post(false); err != nil {
		t.Fatalf("the next request after a closed connection: %v", err)
	}
}
