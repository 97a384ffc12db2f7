package election

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/testenv"
)

// loopbackPair returns the two ends of a TCP connection on loopback, the
// first polled.
func loopbackPair(t *testing.T) (*polledConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer := <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}
	polled, ok := newPolledConn(conn).(*polledConn)
	if !ok {
		t.Fatal("a TCP connection was not wrapped")
	}
	t.Cleanup(func() { polled.Close(); peer.Close() })
	return polled, peer
}

// TestPolledConnReads: a polled read returns what arrives later, in
// order, reports the peer's close as io.EOF, honours a read deadline, and
// ends when the connection is closed under it.
func TestPolledConnReads(t *testing.T) {
	t.Run("data that arrives later", func(t *testing.T) {
		conn, peer := loopbackPair(t)
		go func() {
			time.Sleep(30 * time.Millisecond)
			peer.Write([]byte("pass"))
			time.Sleep(120 * time.Millisecond) // past pollMax: the pauses stop doubling
			peer.Write([]byte("ed"))
			peer.Close()
		}()
		got, err := io.ReadAll(conn)
		if err != nil || string(got) != "passed" {
			t.Fatalf("read %q, %v; want \"passed\" then EOF", got, err)
		}
	})
	t.Run("read deadline", func(t *testing.T) {
		conn, _ := loopbackPair(t)
		if err := conn.SetDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err := conn.Read(make([]byte, 8))
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read with nothing sent = %v, want the deadline", err)
		}
		if waited := time.Since(start); waited < 50*time.Millisecond || waited > 2*time.Second {
			t.Fatalf("the deadline ended the read after %v, want about 50ms", waited)
		}
	})
	t.Run("closed while reading", func(t *testing.T) {
		conn, _ := loopbackPair(t)
		done := make(chan error, 1)
		go func() {
			_, err := conn.Read(make([]byte, 8))
			done <- err
		}()
		time.Sleep(20 * time.Millisecond)
		conn.Close()
		select {
		case err := <-done:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("read on a closed connection = %v, want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("closing the connection did not end the read")
		}
	})
}

// TestLeaseRequestsTakePolledConnections: check passes and session
// renewals go through the polled transport's own connections, everything
// else through the limited one, and both get Consul's answers.
func TestLeaseRequestsTakePolledConnections(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path)
	}))
	defer srv.Close()
	for _, pollDial := range []bool{true, false} {
		t.Run(fmt.Sprintf("pollDial=%v", pollDial), func(t *testing.T) { testLeaseRequestsTakePolledConnections(t, srv, pollDial) })
	}
}

func testLeaseRequestsTakePolledConnections(t *testing.T, srv *httptest.Server, pollDial bool) {
	var polledDials, plainDials atomic.Int64
	base := http.DefaultTransport.(*http.Transport).Clone()
	dial := (&net.Dialer{}).DialContext
	base.DialContext = dial
	polled := polledTransport(base, pollDial).(*http.Transport)
	polledDial := polled.DialContext
	polled.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := polledDial(ctx, network, addr)
		if _, ok := conn.(*polledConn); ok {
			polledDials.Add(1)
		}
		return conn, err
	}
	base.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		plainDials.Add(1)
		return dial(ctx, network, addr)
	}
	hc := &http.Client{Transport: &leaseRouter{lease: polled, rest: base}}
	for _, tc := range []struct {
		path   string
		polled bool
	}{
		{"/v1/agent/check/update/logagent-n1:ab", true},
		{"/v1/session/renew/0b62", true},
		{"/v1/txn", false},
		{"/v1/kv/logagent/topics/", false},
	} {
		polledBefore, plainBefore := polledDials.Load(), plainDials.Load()
		base.CloseIdleConnections()
		polled.CloseIdleConnections()
		resp, err := hc.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.path, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(body) != tc.path {
			t.Fatalf("GET %s answered %q, %v", tc.path, body, err)
		}
		if gotPolled := polledDials.Load() > polledBefore; gotPolled != tc.polled || (plainDials.Load() > plainBefore) == tc.polled {
			t.Fatalf("GET %s went over a polled connection = %v, want %v", tc.path, gotPolled, tc.polled)
		}
	}
}

// TestDialPolled: a TCP connection opened by polling carries data both
// ways over IPv4 and IPv6, a refused or cancelled dial fails with the
// address in its error, and a host name is left to the transport's dial.
func TestDialPolled(t *testing.T) {
	echo := func(t *testing.T, network, addr string) string {
		ln, err := net.Listen(network, addr)
		if err != nil {
			testenv.SkipUnlessCI(t, "no %s listener on this machine: %v", network, err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { io.Copy(c, c); c.Close() }()
			}
		}()
		return ln.Addr().String()
	}
	for _, tc := range []struct{ network, listen string }{{"tcp4", "127.0.0.1:0"}, {"tcp6", "[::1]:0"}} {
		t.Run(tc.network, func(t *testing.T) {
			addr := echo(t, tc.network, tc.listen)
			conn, ok, err := dialPolled(context.Background(), "tcp", addr)
			if !ok || err != nil {
				t.Fatalf("dialPolled(%s) = %v, %v", addr, ok, err)
			}
			defer conn.Close()
			if _, isPolled := conn.(*polledConn); !isPolled {
				t.Fatalf("dialPolled gave a %T, want a *polledConn", conn)
			}
			if conn.RemoteAddr().String() != addr {
				t.Errorf("remote address %s, want %s", conn.RemoteAddr(), addr)
			}
			if _, err := io.WriteString(conn, "pass"); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4)
			if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "pass" {
				t.Fatalf("read back %q, %v", buf, err)
			}
		})
	}

	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	if _, ok, err := dialPolled(context.Background(), "tcp", closed); !ok || !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), closed) {
		t.Errorf("dial of a closed port = %v, %v; want ECONNREFUSED naming %s", ok, err, closed)
	}

	// A listener with a backlog of 0 that never accepts: once its queue is
	// full, the kernel drops the next connection's SYN and the dial waits,
	// until its context ends.
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	full := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	var waited error
	for range 8 {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		conn, _, err := dialPolled(ctx, "tcp", full)
		cancel()
		if err != nil {
			waited = err
			break
		}
		defer conn.Close()
	}
	if !errors.Is(waited, context.DeadlineExceeded) || !strings.Contains(waited.Error(), full) {
		t.Errorf("dial to a full backlog = %v; want it to wait until its context ends", waited)
	}

	if conn, ok, err := dialPolled(context.Background(), "tcp", "localhost:8500"); ok || conn != nil || err != nil {
		t.Errorf("dialPolled of a host name = %v, %v, %v; want it declined", conn, ok, err)
	}
}
