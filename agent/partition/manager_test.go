package partition

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestOpenRetryDelay(t *testing.T) {
	cases := []struct {
		attempts int
		want     time.Duration
	}{
		{1, 250 * time.Millisecond},
		{2, 500 * time.Millisecond},
		{3, time.Second},
		{7, 16 * time.Second},
		{8, 30 * time.Second},
		{9, 30 * time.Second},
		{1000, 30 * time.Second},
	}
	for _, c := range cases {
		if got := openRetryDelay(c.attempts); got != c.want {
			t.Errorf("openRetryDelay(%d) = %s, want %s", c.attempts, got, c.want)
		}
	}
}

func TestRootCause(t *testing.T) {
	emfile := &os.PathError{Op: "open", Path: "/data/t-0/00000000000000000000.index", Err: syscall.EMFILE}
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"plain", errors.New("x"), "x"},
		{"wrapped twice", fmt.Errorf("agent: open partition log: %w", fmt.Errorf("segstore: open segment: %w", emfile)), syscall.EMFILE.Error()},
	}
	for _, c := range cases {
		if got := rootCause(c.err).Error(); got != c.want {
			t.Errorf("%s: rootCause = %q, want %q", c.name, got, c.want)
		}
	}
}
