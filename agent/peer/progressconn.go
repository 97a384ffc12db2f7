package peer

import (
	"io"
	"net"
	"time"
)

// ProgressConn is a connection whose deadlines bound silence, not
// transfers: a Read fails once ReadIdle has passed since it started with
// no byte arrived, and a write goes out in pieces of at most progressChunk
// bytes, sendfile(2) too, each of which fails once the kernel has not taken
// it within WriteIdle. A zero duration leaves that direction's deadline to
// the caller.
//
// Replication answers carry up to the peer client's body bound (8 MiB by
// default). A deadline set once for a whole answer frame, 2.5 s on a fetch
// session, read every answer slower than about 27 Mbit/s as a dead leader:
// the session and every partition on it were torn down and opened again
// over and over while bytes flowed, and the followers never caught up. A
// connection that keeps delivering is alive however long a frame takes;
// one that goes silent still dies after the same time.
//
// A peer that keeps a frame trickling in is not cut here. Kafka's brokers
// also close a connection only once it has been idle
// (connections.max.idle.ms); its followers give a whole fetch
// replica.socket.timeout.ms (30 s), which is this defect at a lower rate,
// and a new connection over the same slow link does no better. The frame
// bounds cap what a trickle costs in memory, and replication's own rule
// what it costs in availability: a follower that does not catch up within
// lag_time_max leaves the ISR, whatever keeps it behind.
type ProgressConn struct {
	net.Conn
	ReadIdle, WriteIdle time.Duration
}

// progressChunk is the most a write hands the kernel under one deadline: a
// peer that takes less than this per WriteIdle (210 KB/s at CallTimeout,
// under 2 Mbit/s) is taken for gone. Sending an 8 MiB file region over
// loopback in pieces of 64 KiB, 256 KiB or 1 MiB ran at the speed of one
// sendfile loop (about 1 GB/s each, the receiver's copy the bound); the
// largest takes the fewest system calls (testcluster's
// TestReplicaFetchUsesSendfile allows one per 256 KiB).
const progressChunk = 1 << 20

// Read reads from the connection, waiting at most ReadIdle for bytes.
func (c *ProgressConn) Read(p []byte) (int, error) {
	if c.ReadIdle > 0 {
		if err := c.Conn.SetReadDeadline(time.Now().Add(c.ReadIdle)); err != nil {
			return 0, err
		}
	}
	return c.Conn.Read(p)
}

// Write writes p in pieces, each given WriteIdle to be taken.
func (c *ProgressConn) Write(p []byte) (int, error) {
	if c.WriteIdle <= 0 {
		return c.Conn.Write(p)
	}
	var n int
	for len(p) > 0 {
		if err := c.Conn.SetWriteDeadline(time.Now().Add(c.WriteIdle)); err != nil {
			return n, err
		}
		m, err := c.Conn.Write(p[:min(len(p), progressChunk)])
		n += m
		if err != nil {
			return n, err
		}
		p = p[m:]
	}
	return n, nil
}

// ReadFrom sends r. A file region (an *io.LimitedReader of a file, as
// segstore.Region.WriteTo hands it) goes to a connection that takes
// sendfile(2) in pieces, each given WriteIdle; anything else through
// Write.
func (c *ProgressConn) ReadFrom(r io.Reader) (int64, error) {
	rf, sendfile := c.Conn.(io.ReaderFrom)
	lr, region := r.(*io.LimitedReader)
	switch {
	case sendfile && c.WriteIdle <= 0:
		return rf.ReadFrom(r)
	case !sendfile || !region:
		// Hides ReadFrom, which io.Copy would call back.
		return io.Copy(struct{ io.Writer }{c}, r)
	}
	var n int64
	for lr.N > 0 {
		if err := c.Conn.SetWriteDeadline(time.Now().Add(c.WriteIdle)); err != nil {
			return n, err
		}
		piece := min(lr.N, progressChunk)
		m, err := rf.ReadFrom(&io.LimitedReader{R: lr.R, N: piece})
		n += m
		lr.N -= m
		if err != nil || m < piece {
			// Short without an error: the file ended.
			return n, err
		}
	}
	return n, nil
}
