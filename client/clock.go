package client

import (
	"context"
	"math/rand/v2"
	"time"
)

// Clock is where producers and consumers get the time: record timestamps,
// linger timers, retry backoff and delivery deadlines. The default is the
// system clock; tests pass one they control (WithClock).
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed, unless the
	// returned Timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not started and reports whether it
	// did so.
	Stop() bool
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// sleep waits d on clock, or until ctx ends, and then returns ctx.Err().
func sleep(ctx context.Context, clock Clock, d time.Duration) error {
	woke := make(chan struct{})
	t := clock.AfterFunc(d, func() { close(woke) })
	select {
	case <-woke:
		return nil
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
}

// backoff computes capped exponential delays with "equal jitter": attempt n
// waits between half and all of min·2ⁿ (capped at max), so that clients
// retrying after the same failure spread out, and never less than the
// agent's Retry-After unless that is above max.
type backoff struct {
	min, max time.Duration
	// jitter returns a uniform value in [0, n); tests replace it.
	jitter func(n int64) int64
}

func newBackoff(min, max time.Duration) backoff {
	return backoff{min: min, max: max, jitter: rand.Int64N}
}

func (b backoff) delay(attempt int, retryAfter time.Duration) time.Duration {
	d := b.max
	if attempt < 62 && b.min<<attempt > 0 && b.min<<attempt < b.max {
		d = b.min << attempt
	}
	if half := int64(d / 2); half > 0 {
		d = time.Duration(half + b.jitter(half+1))
	}
	return min(max(d, retryAfter), b.max)
}
