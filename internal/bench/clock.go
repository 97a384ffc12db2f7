package bench

import (
	"context"
	"time"
)

// Clock is where a run reads the time, waits for the next scheduled request
// and arms its hard cap. SystemClock is the real one; tests give a clock
// they control.
type Clock interface {
	Now() time.Time
	// SleepUntil returns nil once t has come, or ctx's error if ctx ends
	// first.
	SleepUntil(ctx context.Context, t time.Time) error
	// AfterFunc calls f in its own goroutine once d has passed, unless the
	// returned stop is called first; stop reports whether it prevented the
	// call.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// SystemClock is the operating system's clock. Times it returns carry the
// monotonic reading, so differences between them ignore wall-clock steps.
type SystemClock struct{}

// orSystemClock is clock, or SystemClock when clock is nil.
func orSystemClock(clock Clock) Clock {
	if clock == nil {
		return SystemClock{}
	}
	return clock
}

// Now implements Clock.
func (SystemClock) Now() time.Time { return time.Now() }

// SleepUntil implements Clock.
func (SystemClock) SleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// AfterFunc implements Clock.
func (SystemClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}
