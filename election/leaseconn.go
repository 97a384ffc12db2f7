package election

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The requests the lease rests on (check passes and session renewals) go
// over connections of their own whose reads never wait in Go's network
// poller (docs/design.md §6, "Registration"). A goroutine the poller wakes
// is queued behind every other one it wakes at the same time: under a
// burst of writes to thousands of partitions an agent had thousands
// runnable at once, and a check pass that Consul answered within a
// millisecond reached the lease 3-4 s later, after the deadline it would
// have moved. A goroutine a timer wakes runs next on its processor instead,
// so a read here tries the socket at once and, while nothing has arrived,
// again after a timer.
const (
	// pollFirst is the first pause of a read that found nothing: about a
	// pass's round trip to a local Consul agent.
	pollFirst = 500 * time.Microsecond
	// pollMax is the longest pause: what an answer may wait beyond its
	// arrival, and, on an idle connection (whose transport reads on to see
	// it close), about 20 reads a second.
	pollMax = 50 * time.Millisecond
)

// leaseRequest says whether req is one the lease rests on.
func leaseRequest(req *http.Request) bool {
	p := req.URL.Path
	return strings.HasPrefix(p, "/v1/session/renew/") || strings.HasPrefix(p, "/v1/agent/check/")
}

// leaseRouter sends the lease's requests through lease, the rest through
// rest.
type leaseRouter struct {
	lease, rest http.RoundTripper
}

func (t *leaseRouter) RoundTrip(req *http.Request) (*http.Response, error) {
	if leaseRequest(req) {
		return t.lease.RoundTrip(req)
	}
	return t.rest.RoundTrip(req)
}

// polledTransport returns a copy of next whose connections are polled, with
// a pool of their own, which the Client closes when it closes; a
// RoundTripper that is not an *http.Transport (a test's) is returned as it
// is. With pollDial its TCP connections are opened by polling too (a lease
// request that needed a new connection, its pass still in flight on the
// others, once waited on its dial in the poller); without it (Consul on a
// unix socket, whose dial next's DialContext does) they are dialed by next.
func polledTransport(next http.RoundTripper, pollDial bool) http.RoundTripper {
	t, ok := next.(*http.Transport)
	if !ok {
		return next
	}
	polled := t.Clone()
	dial := polled.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	polled.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if pollDial {
			if conn, ok, err := dialPolled(ctx, network, addr); ok {
				return conn, err
			}
		}
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return newPolledConn(conn), nil
	}
	return polled
}

// dialPolled connects to a TCP address without waiting in the poller: a
// non-blocking connect(2), then connect(2) again after each pause until it
// says the connection is made (EISCONN) or failed. It declines (ok false)
// an address that is not an IP and port, which the transport's own dial
// resolves.
func dialPolled(ctx context.Context, network, addr string) (conn net.Conn, ok bool, err error) {
	ap, perr := netip.ParseAddrPort(addr)
	if perr != nil || !strings.HasPrefix(network, "tcp") {
		return nil, false, nil
	}
	family, sa := syscall.AF_INET, syscall.Sockaddr(nil)
	if ip := ap.Addr().Unmap(); ip.Is4() {
		sa = &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ip.As4()}
	} else {
		family = syscall.AF_INET6
		sa = &syscall.SockaddrInet6{Port: int(ap.Port()), Addr: ip.As16()}
	}
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, true, os.NewSyscallError("socket", err)
	}
	pause := pollFirst
	for err = syscall.Connect(fd, sa); err == syscall.EINPROGRESS || err == syscall.EALREADY || err == syscall.EINTR; err = syscall.Connect(fd, sa) {
		if err == syscall.EINTR {
			continue
		}
		timer := time.NewTimer(pause)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			syscall.Close(fd)
			return nil, true, &net.OpError{Op: "dial", Net: network, Addr: net.TCPAddrFromAddrPort(ap), Err: ctx.Err()}
		}
		pause = min(2*pause, pollMax)
	}
	if err != nil && err != syscall.EISCONN {
		syscall.Close(fd)
		return nil, true, &net.OpError{Op: "dial", Net: network, Addr: net.TCPAddrFromAddrPort(ap), Err: os.NewSyscallError("connect", err)}
	}
	f := os.NewFile(uintptr(fd), "consul-lease")
	c, err := net.FileConn(f) // a duplicate of fd, in non-blocking mode
	f.Close()
	if err != nil {
		return nil, true, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		// As the transport's own dialer does: a peer that vanished is
		// noticed.
		tc.SetKeepAlive(true)
	}
	return newPolledConn(c), true, nil
}

// polledConn reads by polling (see above). Close ends a read in progress
// at once, a read deadline passing at its next try.
type polledConn struct {
	net.Conn
	raw syscall.RawConn
	// closed is closed by Close: a read's pause ends with it, so the
	// transport's reading goroutine ends with the connection, not up to
	// pollMax later.
	closed    chan struct{}
	closeOnce sync.Once

	mu           sync.Mutex
	readDeadline time.Time
}

// newPolledConn wraps conn, or returns it as it is when it has no file
// descriptor to read from.
func newPolledConn(conn net.Conn) net.Conn {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return conn
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return conn
	}
	return &polledConn{Conn: conn, raw: raw, closed: make(chan struct{})}
}

func (c *polledConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	pause := pollFirst
	for {
		n, err := c.tryRead(p)
		if !errors.Is(err, syscall.EAGAIN) {
			return n, err
		}
		c.mu.Lock()
		deadline := c.readDeadline
		c.mu.Unlock()
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			pause = min(pause, left)
		}
		timer := time.NewTimer(pause)
		select {
		case <-timer.C:
		case <-c.closed:
			timer.Stop()
		}
		pause = min(2*pause, pollMax)
	}
}

func (c *polledConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// tryRead makes one read(2) of the non-blocking socket: EAGAIN when
// nothing has arrived.
func (c *polledConn) tryRead(p []byte) (int, error) {
	var n int
	var readErr error
	err := c.raw.Read(func(fd uintptr) bool {
		for {
			n, readErr = syscall.Read(int(fd), p)
			if readErr != syscall.EINTR {
				return true // never wait in the poller
			}
		}
	})
	switch {
	case err != nil:
		return 0, err // closed
	case readErr != nil:
		if readErr == syscall.EAGAIN {
			return 0, readErr
		}
		return 0, os.NewSyscallError("read", readErr)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c *polledConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDeadline = t
	c.mu.Unlock()
	return nil
}

func (c *polledConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetWriteDeadline(t)
}

// closeLeaseConns closes the lease's idle connections, whose transport
// goroutines would otherwise keep polling them after the client closed.
func (c *Client) closeLeaseConns() {
	if t, ok := c.leaseTransport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
}
