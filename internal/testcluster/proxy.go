package testcluster

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Direction is one way of a proxied link: Forward carries what the dialing
// side sends (requests), Backward what the listening side answers.
type Direction int

// Directions of a link.
const (
	Forward Direction = iota
	Backward
)

func (d Direction) String() string {
	if d == Forward {
		return "forward"
	}
	return "backward"
}

// Proxy is a TCP proxy on loopback that the harness controls: it forwards
// every connection it accepts to one target, and can stall either
// direction, both, or delay them.
//
// A cut stalls bytes rather than dropping or resetting connections: a
// real partition loses packets and TCP retransmits them until the link
// heals or a side gives up, so the agents must notice through their own
// timeouts, as they would on a real network. Bytes are never dropped from
// the middle of a stream, which would corrupt it in a way no network can.
type Proxy struct {
	// Addr is where the proxy listens.
	Addr   string
	target string
	ln     net.Listener

	// identify names the dialing side of an accepted connection, for
	// cuts of one source only; nil names none.
	identify func(local, remote net.Addr) string

	mu      sync.Mutex
	changed chan struct{} // closed and replaced when cut or delay changes
	cut     [2]bool
	cutFrom map[string][2]bool // by source name
	delay   time.Duration
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(target string) (*Proxy, error) { return newProxy(target, nil) }

// newProxy is NewProxy with a way to name the dialing side of each
// connection, for CutFrom.
func newProxy(target string, identify func(local, remote net.Addr) string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, identify: identify, changed: make(chan struct{}), conns: map[net.Conn]struct{}{},
		cutFrom: map[string][2]bool{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Cut stalls one direction of the link, for connections open and to come.
func (p *Proxy) Cut(d Direction) { p.set(func() { p.cut[d] = true }) }

// CutFrom stalls direction d of the connections that source dialed only
// (an agent's node id), leaving the others' alone. Only a cluster's
// proxies know their sources; elsewhere it stalls nothing.
func (p *Proxy) CutFrom(source string, d Direction) {
	p.set(func() {
		c := p.cutFrom[source]
		c[d] = true
		p.cutFrom[source] = c
	})
}

// CutBoth stalls both directions.
func (p *Proxy) CutBoth() { p.set(func() { p.cut = [2]bool{true, true} }) }

// Delay holds every chunk of bytes for d before passing it on; zero
// removes the delay.
func (p *Proxy) Delay(d time.Duration) { p.set(func() { p.delay = d }) }

// Heal lets bytes flow again both ways, without delay.
func (p *Proxy) Heal() {
	p.set(func() { p.cut, p.cutFrom, p.delay = [2]bool{}, map[string][2]bool{}, 0 })
}

func (p *Proxy) set(change func()) {
	p.mu.Lock()
	change()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// Close stops listening, closes every connection and waits for the
// forwarding goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(in)
	}
}

func (p *Proxy) serve(in net.Conn) {
	defer p.wg.Done()
	if !p.track(in) {
		in.Close()
		return
	}
	defer p.untrack(in)
	source := ""
	if p.identify != nil {
		source = p.identify(in.LocalAddr(), in.RemoteAddr())
	}
	out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(out) {
		out.Close()
		return
	}
	defer p.untrack(out)
	done := make(chan struct{}, 2)
	go func() { p.pump(out, in, source, Forward); done <- struct{}{} }()
	go func() { p.pump(in, out, source, Backward); done <- struct{}{} }()
	<-done
	// One side finished: close both so the other pump ends too.
	in.Close()
	out.Close()
	<-done
}

// pump copies src to dst, waiting while direction d is cut for source.
func (p *Proxy) pump(dst, src net.Conn, source string, d Direction) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass(source, d) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if tcp, ok := dst.(*net.TCPConn); ok {
					tcp.CloseWrite()
				}
			}
			return
		}
	}
}

// pass blocks while direction d is cut, for everyone or for source, and
// sleeps any delay; it returns false once the proxy is closed.
func (p *Proxy) pass(source string, d Direction) bool {
	for {
		p.mu.Lock()
		closed, cut, delay, changed := p.closed, p.cut[d] || p.cutFrom[source][d], p.delay, p.changed
		p.mu.Unlock()
		if closed {
			return false
		}
		if !cut {
			if delay > 0 {
				time.Sleep(delay)
			}
			return true
		}
		<-changed
	}
}
