package testcluster

import (
	"bufio"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer answers every line with the same line, on loopback, until the
// test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends a line and reports whether its echo came back within
// wait.
func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string, wait time.Duration) bool {
	t.Helper()
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		t.Fatalf("write: %v", err)
	}
	c.SetReadDeadline(time.Now().Add(wait))
	got, err := r.ReadString('\n')
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return false
		}
		t.Fatalf("read: %v", err)
	}
	if got != line+"\n" {
		t.Fatalf("echo %q, want %q", got, line)
	}
	return true
}

// TestProxyCutsAndHeals: a cut in either direction stalls the bytes (no
// echo within the wait) and delivers them, in order, once healed; a delay
// slows the round trip; new connections are stalled too.
func TestProxyCutsAndHeals(t *testing.T) {
	const stallWait, passWait = 300 * time.Millisecond, 10 * time.Second
	for _, tc := range []struct {
		name string
		cut  func(p *Proxy)
	}{
		{"forward", func(p *Proxy) { p.Cut(Forward) }},
		{"backward", func(p *Proxy) { p.Cut(Backward) }},
		{"both", func(p *Proxy) { p.CutBoth() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewProxy(echoServer(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			c, err := net.Dial("tcp", p.Addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			r := bufio.NewReader(c)
			if !roundTrip(t, c, r, "before", passWait) {
				t.Fatal("no echo through a healthy proxy")
			}
			tc.cut(p)
			if roundTrip(t, c, r, "during", stallWait) {
				t.Fatal("an echo came through the cut")
			}
			p.Heal()
			// The stalled line arrives first, then the next one.
			c.SetReadDeadline(time.Now().Add(passWait))
			if got, err := r.ReadString('\n'); err != nil || got != "during\n" {
				t.Fatalf("after heal: %q, %v; want the stalled line", got, err)
			}
			if !roundTrip(t, c, r, "after", passWait) {
				t.Fatal("no echo after heal")
			}
		})
	}

	t.Run("delay", func(t *testing.T) {
		const delay = 100 * time.Millisecond
		p, err := NewProxy(echoServer(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		p.Delay(delay)
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		start := time.Now()
		if !roundTrip(t, c, bufio.NewReader(c), "slow", passWait) {
			t.Fatal("no echo through a delaying proxy")
		}
		// Each direction waits at least once: a lower bound only, which
		// a loaded machine cannot break.
		if took := time.Since(start); took < 2*delay {
			t.Fatalf("round trip took %s, below two delays of %s", took, delay)
		}
	})
}

// TestProxyCutFromOneSource: a proxy that knows who dialed each connection
// (here by the socket's owner in /proc, as a cluster's peer proxies do)
// stalls only the named source's connections.
func TestProxyCutFromOneSource(t *testing.T) {
	const stallWait, passWait = 300 * time.Millisecond, 10 * time.Second
	identify := func(local, remote net.Addr) string {
		inode, err := socketInode(remote.(*net.TCPAddr).Port, local.(*net.TCPAddr).Port)
		if err != nil {
			t.Errorf("socket of %s: %v", remote, err)
			return ""
		}
		if ownsSocket(os.Getpid(), inode) {
			return "self"
		}
		return ""
	}
	p, err := newProxy(echoServer(t), identify)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := bufio.NewReader(c)
	if !roundTrip(t, c, r, "before", passWait) {
		t.Fatal("no echo through a healthy proxy")
	}
	p.CutFrom("elsewhere", Forward)
	if !roundTrip(t, c, r, "other-cut", passWait) {
		t.Fatal("a cut of another source stalled this one")
	}
	p.CutFrom("self", Backward)
	if roundTrip(t, c, r, "self-cut", stallWait) {
		t.Fatal("an echo came through the cut of this source")
	}
	p.Heal()
	c.SetReadDeadline(time.Now().Add(passWait))
	if got, err := r.ReadString('\n'); err != nil || got != "self-cut\n" {
		t.Fatalf("after heal: %q, %v; want the stalled line", got, err)
	}
}
