package segstore

import (
	"io"
	"net"
	"testing"
)

// sendOverLoopback writes the region to a loopback TCP connection (so a
// *net.TCPConn's ReadFrom can use sendfile) and returns what arrived.
func sendOverLoopback(t *testing.T, region *Region) []byte {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	received := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			received <- nil
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		received <- b
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	n, err := region.WriteTo(c)
	c.Close()
	if err != nil || n != region.Len {
		t.Fatalf("WriteTo: %d of %d bytes, %v", n, region.Len, err)
	}
	return <-received
}
