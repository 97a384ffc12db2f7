package agent

import (
	"bytes"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// scriptedListener fails Accept with its errors, in order, then hands out
// conn; once closed it answers net.ErrClosed.
type scriptedListener struct {
	mu     sync.Mutex
	errs   []error
	conn   net.Conn
	calls  int
	closed bool
}

func (l *scriptedListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if l.closed {
		return nil, net.ErrClosed
	}
	if len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		return nil, err
	}
	return l.conn, nil
}

func (l *scriptedListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	return nil
}

func (l *scriptedListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// acceptErr is what net.TCPListener.Accept returns for errno.
func acceptErr(errno syscall.Errno) error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", errno)}
}

func TestRetryListenerAccept(t *testing.T) {
	permanent := acceptErr(syscall.EINVAL)
	cases := []struct {
		name      string
		errs      []error
		wantErr   error
		wantCalls int
		wantLogs  int
	}{
		{name: "no error", wantCalls: 1},
		{name: "EMFILE retried until a connection comes", errs: []error{acceptErr(syscall.EMFILE), acceptErr(syscall.EMFILE), acceptErr(syscall.EMFILE)}, wantCalls: 4, wantLogs: 1},
		{name: "ENFILE, ENOBUFS, ENOMEM retried", errs: []error{acceptErr(syscall.ENFILE), acceptErr(syscall.ENOBUFS), acceptErr(syscall.ENOMEM)}, wantCalls: 4, wantLogs: 1},
		{name: "other errors returned at once", errs: []error{permanent}, wantErr: permanent, wantCalls: 1},
		{name: "after a retry, other errors returned", errs: []error{acceptErr(syscall.EMFILE), permanent}, wantErr: permanent, wantCalls: 2, wantLogs: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn, peer := net.Pipe()
			defer conn.Close()
			defer peer.Close()
			inner := &scriptedListener{errs: c.errs, conn: conn}
			var logs bytes.Buffer
			now := time.Unix(1000, 0) // a still clock: every failure after the first falls in one log period
			ln := newRetryListener(inner, "client", hclog.New(&hclog.LoggerOptions{Output: &logs}), func() time.Time { return now })
			got, err := ln.Accept()
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("Accept error = %v, want %v", err, c.wantErr)
			}
			if c.wantErr == nil && got != conn {
				t.Fatalf("Accept returned %T %p, want the listener's own connection %p", got, got, conn)
			}
			if inner.calls != c.wantCalls {
				t.Errorf("inner Accept called %d times, want %d", inner.calls, c.wantCalls)
			}
			if n := strings.Count(logs.String(), "cannot accept connections"); n != c.wantLogs {
				t.Errorf("logged %d accept failures, want %d:\n%s", n, c.wantLogs, logs.String())
			}
		})
	}
}

// TestRetryListenerLogsAgainAfterPeriod: a failure that lasts is logged
// once per acceptLogEvery with the count of those in between.
func TestRetryListenerLogsAgainAfterPeriod(t *testing.T) {
	conn, peer := net.Pipe()
	defer conn.Close()
	defer peer.Close()
	errs := []error{acceptErr(syscall.EMFILE), acceptErr(syscall.EMFILE), acceptErr(syscall.EMFILE)}
	inner := &scriptedListener{errs: errs, conn: conn}
	var logs bytes.Buffer
	now := time.Unix(1000, 0)
	// Each look at the clock is acceptLogEvery/2 later.
	clock := func() time.Time { now = now.Add(acceptLogEvery / 2); return now }
	ln := newRetryListener(inner, "peer", hclog.New(&hclog.LoggerOptions{Output: &logs}), clock)
	if _, err := ln.Accept(); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if n := strings.Count(out, "cannot accept connections"); n != 2 {
		t.Fatalf("logged %d times, want 2 (failures 1 and 3):\n%s", n, out)
	}
	if !strings.Contains(out, "failures_not_logged=1") {
		t.Errorf("the second line does not count the failure it skipped:\n%s", out)
	}
}

// TestRetryListenerCloseEndsBackoff: a stop does not wait for the backoff.
func TestRetryListenerCloseEndsBackoff(t *testing.T) {
	errs := make([]error, 100) // 100 failures would back off for over a minute
	for i := range errs {
		errs[i] = acceptErr(syscall.EMFILE)
	}
	inner := &scriptedListener{errs: errs}
	ln := newRetryListener(inner, "client", hclog.NewNullLogger(), time.Now)
	done := make(chan error, 1)
	go func() {
		_, err := ln.Accept()
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // into the backoff
	start := time.Now()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close = %v, want net.ErrClosed", err)
		}
		if d := time.Since(start); d > 200*time.Millisecond {
			t.Errorf("Accept returned %s after Close", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept still backing off 5s after Close")
	}
}

// TestRetryListenerKeepsTCPConn: the connection fasthttp gets is the plain
// *net.TCPConn its sendfile path needs.
func TestRetryListenerKeepsTCPConn(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := newRetryListener(tcp, "client", hclog.NewNullLogger(), time.Now)
	defer ln.Close()
	dialed := make(chan error, 1)
	go func() {
		c, err := net.Dial("tcp", tcp.Addr().String())
		if err == nil {
			c.Close()
		}
		dialed <- err
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*net.TCPConn); !ok {
		t.Fatalf("Accept returned %T, want *net.TCPConn", c)
	}
	if err := <-dialed; err != nil {
		t.Fatal(err)
	}
}
