package agent

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/valyala/fasthttp"
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
