package election

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"
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
	var polledDials, plainDials atomic.Int64
	base := http.DefaultTransport.(*http.Transport).Clone()
	dial := (&net.Dialer{}).DialContext
	base.DialContext = dial
	polled := polledTransport(base).(*http.Transport)
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
