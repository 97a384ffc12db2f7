package agent

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/replicate"

	"github.com/logagent/logagent/wire"
)

// TestNeverSent: only failures before any byte could reach the leader make
// a forward safe to retry; everything after sending is an unknown outcome.
func TestNeverSent(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{"dial timeout", fasthttp.ErrDialTimeout, true},
		{"no free connection", fasthttp.ErrNoFreeConns, true},
		{"wrapped refused", fmt.Errorf("x: %w", syscall.ECONNREFUSED), true},
		{"read timeout", fasthttp.ErrTimeout, false},
		{"reset while reading", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, false},
		{"connection closed", fasthttp.ErrConnectionClosed, false},
		{"eof", io.ErrUnexpectedEOF, false},
		{"other", errors.New("boom"), false},
	}
	for _, tc := range tests {
		if got := neverSent(tc.err); got != tc.want {
			t.Errorf("%s: neverSent(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// TestIdempotentForward: only a forward whose batches carry a producer id
// may be sent again after its connection closed under it.
func TestIdempotentForward(t *testing.T) {
	var b record.Builder
	if err := b.Add(1, nil, []byte("v"), nil); err != nil {
		t.Fatal(err)
	}
	plain, err := b.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	stamped := append([]byte(nil), plain...)
	record.StampProducer(stamped, 42, 0, 7)
	for _, tc := range []struct {
		name string
		body []byte
		want bool
	}{
		{"plain batch", plain, false},
		{"batch with a producer id", stamped, true},
		{"group of idempotent batches", append(append([]byte(nil), stamped...), stamped...), true},
		{"shorter than a header", stamped[:10], false},
	} {
		req := fasthttp.AcquireRequest()
		req.SetBodyRaw(tc.body)
		if got := idempotentForward(req); got != tc.want {
			t.Errorf("%s: idempotentForward = %t, want %t", tc.name, got, tc.want)
		}
		fasthttp.ReleaseRequest(req)
	}
}

// TestForwardedProduceFencedInTheLoop: the epoch a forwarding sidecar aimed
// at is checked by the leader's loop when it appends, not only by the
// handler before the handoff (a leadership can end between the two). A
// write for another epoch appends nothing.
func TestForwardedProduceFencedInTheLoop(t *testing.T) {
	c := startTestCluster(t, 1, "")
	n1 := c.agents[0]
	c.createTopic(n1, "fenced", 1, 1, 1)
	_, pd := c.waitLeader("fenced", 0, 1)
	r := n1.agent.replicas.Get("fenced", 0)
	tests := []struct {
		name    string
		epoch   int32
		wantErr error
	}{
		{"older epoch", pd.Epoch - 1, replicate.ErrFencedLeaderEpoch},
		{"newer epoch", pd.Epoch + 1, replicate.ErrUnknownLeaderEpoch},
		{"the leader's epoch", pd.Epoch, nil},
		{"any epoch", anyEpoch, nil},
	}
	for _, tc := range tests {
		before := r.CurrentLog().LogEndOffset()
		out := r.Produce(testBatch(t, []string{tc.name}), replicate.AcksAll, tc.epoch, time.Now().Add(5*time.Second), 6*time.Second)
		after := r.CurrentLog().LogEndOffset()
		switch {
		case tc.wantErr == nil && (out.Err != nil || after != before+1):
			t.Errorf("%s: err %v, log end %d -> %d; want one record appended", tc.name, out.Err, before, after)
		case tc.wantErr != nil && (!errors.Is(out.Err, tc.wantErr) || out.Appended || after != before):
			t.Errorf("%s: err %v (appended %t), log end %d -> %d; want %v and nothing appended", tc.name, out.Err, out.Appended, before, after, tc.wantErr)
		}
	}
	// Through the peer API the refusals keep their codes, so the sidecar
	// refreshes its metadata and retries.
	for _, tc := range []struct {
		epoch  int32
		status int
		code   string
	}{{pd.Epoch - 1, 409, wire.CodeFencedLeaderEpoch}, {pd.Epoch + 1, 412, wire.CodeUnknownLeaderEpoch}} {
		path := fmt.Sprintf("%s?topic=fenced&partition=0&acks=all&leader_epoch=%d", peerProducePath, tc.epoch)
		status, body := c.callAddr(n1.peer, "POST", path, wire.ContentTypeBatch, testBatch(t, []string{"x"}), nil)
		if status != tc.status || errorCode(t, body).Code != tc.code {
			t.Errorf("peer produce at epoch %d: %d %s, want %d %s", tc.epoch, status, body, tc.status, tc.code)
		}
	}
}
