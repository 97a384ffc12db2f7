package peer

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestFetchDeadlineBoundsSilence: a GET /v1/replica/fetch on ForFetches's
// pool (a leader without sessions) fails once the leader has sent nothing
// for the fetch's wait and CallTimeout, not once its answer has taken that
// long. The whole answer had 5.5 s: an 8 MiB one over a link below about
// 12 Mbit/s failed, was sent again and failed again.
func TestFetchDeadlineBoundsSilence(t *testing.T) {
	const (
		readIdle = 100 * time.Millisecond
		pieces   = 80
		every    = 5 * time.Millisecond // pieces*every = 4 readIdle
	)
	for _, tc := range []struct {
		name string
		// sent is how many of the answer's pieces the leader sends, every
		// few ms, before it falls silent.
		sent     int
		answered bool
	}{
		{name: "an answer that keeps arriving", sent: pieces, answered: true},
		{name: "silent in the middle of an answer", sent: pieces / 2},
		{name: "silent from the start", sent: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := make([]byte, pieces*100)
			for i := range body {
				body[i] = byte(i)
			}
			var h fasthttp.ResponseHeader
			FetchPositions{LeaderEpoch: 3, HighWatermark: 10, LogEndOffset: 90}.Write(&h)
			h.SetContentLength(len(body))
			answer := append(h.Header(), body...)

			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			lastByte := make(chan time.Time, 1)
			accepted := make(chan net.Conn, 1)
			var leader sync.WaitGroup
			defer func() {
				select {
				case conn := <-accepted:
					conn.Close()
				default:
				}
				leader.Wait()
			}()
			leader.Go(func() {
				// One connection: fasthttp sends a failed GET once more, to
				// a listener that then answers nothing.
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				accepted <- conn
				if _, err := http.ReadRequest(bufio.NewReader(conn)); err != nil {
					return
				}
				lastByte <- trickle(t, conn, answer, pieces, tc.sent, every)
			})

			clients := NewClients("", 1<<20, false, nil).ForFetches(4, 0)
			clients.readIdle = readIdle
			f := testFetch(0, 10)
			f.MaxWait = 0
			start := time.Now()
			got, err := clients.Fetch(ln.Addr().String(), f)
			took := time.Since(start).Round(time.Millisecond)
			if !tc.answered {
				if !errors.Is(err, errUnreachable) {
					t.Fatalf("a silent leader: %+v %v", got.Positions, err)
				}
				if since := time.Since(<-lastByte); since < readIdle {
					t.Fatalf("failed %s after the leader's last byte, before %s", since, readIdle)
				}
				return
			}
			if err != nil {
				t.Fatalf("an answer sent over %s, %s at most between bytes, with %s of silence allowed: %v", took, every, readIdle, err)
			}
			if !bytes.Equal(got.Batches, body) || got.Positions.LogEndOffset != 90 {
				t.Fatalf("answer %d bytes, LEO %d", len(got.Batches), got.Positions.LogEndOffset)
			}
		})
	}
}
