package peer

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestProgressConnWritesBoundSilence: a write to a peer that keeps reading
// goes through however long it takes, sendfile(2) of a file region too; a
// peer that stops reading fails it after WriteIdle. The leader's session
// writer set one deadline, peer.CallTimeout, for a whole answer (up to
// 8 MiB, sent with sendfile): a follower slower than about 13 Mbit/s had
// every such answer cut and its session ended over and over.
func TestProgressConnWritesBoundSilence(t *testing.T) {
	const (
		idle    = 400 * time.Millisecond
		size    = 8 << 20
		readBuf = 64 << 10
		// A piece of progressChunk is read within a quarter of idle (room
		// for sleeps that overrun on a loaded host); the whole payload
		// takes size/readBuf*every, 2 idle at least.
		every = idle / 4 * readBuf / progressChunk
	)
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	file := filepath.Join(t.TempDir(), "region")
	if err := os.WriteFile(file, payload, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		// sendfile sends the payload as a file region rather than a slice.
		sendfile bool
		// readUpTo is how much the peer reads, a piece every few ms,
		// before it stops reading.
		readUpTo int
	}{
		{name: "write to a peer that keeps reading", readUpTo: size},
		{name: "sendfile to a peer that keeps reading", sendfile: true, readUpTo: size},
		{name: "write to a peer that stops reading", readUpTo: 4 << 20},
		{name: "sendfile to a peer that stops reading", sendfile: true, readUpTo: 4 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writer, reader := tcpPair(t)
			// Small socket buffers: the write waits for the reader.
			_ = writer.SetWriteBuffer(readBuf)
			_ = reader.SetReadBuffer(readBuf)
			received := make(chan []byte, 1)
			go func() {
				var got []byte
				buf := make([]byte, readBuf)
				for len(got) < tc.readUpTo {
					time.Sleep(every)
					n, err := reader.Read(buf[:min(len(buf), tc.readUpTo-len(got))])
					got = append(got, buf[:n]...)
					if err != nil {
						break
					}
				}
				received <- got
			}()

			pc := &ProgressConn{Conn: writer, WriteIdle: idle}
			start := time.Now()
			var n int64
			var err error
			if tc.sendfile {
				f, ferr := os.Open(file)
				if ferr != nil {
					t.Fatal(ferr)
				}
				defer f.Close()
				n, err = pc.ReadFrom(&io.LimitedReader{R: f, N: size})
			} else {
				var m int
				m, err = pc.Write(payload)
				n = int64(m)
			}
			took := time.Since(start).Round(time.Millisecond)
			if tc.readUpTo < size {
				if !errors.Is(err, os.ErrDeadlineExceeded) || n >= size {
					t.Fatalf("to a peer that stopped reading: %d bytes written in %s, %v", n, took, err)
				}
				return
			}
			if err != nil || n != size {
				t.Fatalf("to a peer reading %d bytes every %s: %d of %d bytes written in %s with WriteIdle %s: %v",
					readBuf, every, n, size, took, idle, err)
			}
			if got := <-received; !bytes.Equal(got, payload) {
				t.Fatalf("the peer received %d bytes, not the payload", len(got))
			}
		})
	}
}

// tcpPair is a loopback TCP connection's two ends, closed at the test's
// end.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialed, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	accepted, err := ln.Accept()
	if err != nil {
		dialed.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dialed.Close()
		accepted.Close()
	})
	return dialed.(*net.TCPConn), accepted.(*net.TCPConn)
}
