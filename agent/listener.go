package agent

import (
	"errors"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// The accept backoff is net/http's Server.Serve's: 5 ms doubling to 1 s,
// started again for each Accept call.
const (
	acceptRetryMin = 5 * time.Millisecond
	acceptRetryMax = time.Second
	// acceptLogEvery bounds how often a failing accept is logged: under
	// exhaustion it fails every second for as long as it lasts.
	acceptLogEvery = 10 * time.Second
)

// retryListener keeps a listener accepting through a shortage of
// descriptors or kernel memory. fasthttp's Server.Serve returns on any
// accept error that is not a timeout, which would end the agent; an agent
// out of descriptors should refuse nothing for good and accept again once
// descriptors are free, as net/http does. Accept returns the listener's own
// connection, never a wrapper: fasthttp sends a fetch with sendfile only
// on a plain *net.TCPConn.
type retryListener struct {
	net.Listener
	name string
	log  hclog.Logger
	now  func() time.Time

	closed    chan struct{}
	closeOnce sync.Once

	// Only Accept touches these, and fasthttp calls it from one goroutine.
	lastLog    time.Time
	suppressed int
}

func newRetryListener(ln net.Listener, name string, log hclog.Logger, now func() time.Time) *retryListener {
	return &retryListener{Listener: ln, name: name, log: log, now: now, closed: make(chan struct{})}
}

// Accept waits for the next connection, retrying resource errors with
// backoff; any other error, the closed listener's included, is returned.
func (l *retryListener) Accept() (net.Conn, error) {
	delay := acceptRetryMin
	for {
		c, err := l.Listener.Accept()
		if err == nil || !isResourceExhaustion(err) {
			return c, err
		}
		l.logFailure(err, delay)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-l.closed:
			// The next Accept returns the closed listener's error, which
			// fasthttp takes for a stop.
			t.Stop()
		}
		delay = min(2*delay, acceptRetryMax)
	}
}

// Close closes the listener and ends a backoff in progress. The listener
// is closed first, so that the Accept the ended backoff lets through gets
// the closed error, not another resource error: with the backoff already
// ended, Accept would spin through those until the close.
func (l *retryListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.closed) })
	return err
}

func (l *retryListener) logFailure(err error, delay time.Duration) {
	now := l.now()
	if !l.lastLog.IsZero() && now.Sub(l.lastLog) < acceptLogEvery {
		l.suppressed++
		return
	}
	l.log.Error("cannot accept connections; retrying (raise LimitNOFILE if descriptors ran out)",
		"listener", l.name, "error", err, "retry_in", delay, "failures_not_logged", l.suppressed)
	l.lastLog, l.suppressed = now, 0
}

// isResourceExhaustion reports an accept error that goes away once the
// process or the kernel frees descriptors or memory: the listener itself is
// fine.
func isResourceExhaustion(err error) bool {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}
