package client

import (
	"context"
	"sync"
	"testing"
	"time"
)

// fakeClock is a Clock that moves only when told to. In auto mode every
// AfterFunc fires at once and moves the time forward by its duration, so
// that backoff sleeps pass instantly while their durations are recorded.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	auto   bool
	timers []*fakeTimer
	asked  []time.Duration // every AfterFunc duration, in order
}

type fakeTimer struct {
	clock *fakeClock
	at    time.Time
	f     func()
	done  bool // fired or stopped
}

func newFakeClock(auto bool) *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), auto: auto}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked = append(c.asked, d)
	t := &fakeTimer{clock: c, at: c.now.Add(d), f: f}
	if c.auto {
		c.now = t.at
		t.done = true
		go f()
		return t
	}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	if t.done {
		return false
	}
	t.done = true
	return true
}

// Advance moves the time forward and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []func()
	kept := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.done:
		case !t.at.After(c.now):
			t.done = true
			due = append(due, t.f)
		default:
			kept = append(kept, t)
		}
	}
	c.timers = kept
	c.mu.Unlock()
	for _, f := range due {
		go f()
	}
}

// pendingTimers is the number of timers not fired or stopped.
func (c *fakeClock) pendingTimers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.done {
			n++
		}
	}
	return n
}

// durations is a copy of every duration AfterFunc was asked for.
func (c *fakeClock) durations() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.asked...)
}

// eventually polls cond until it holds or 10 seconds pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// testContext is a context that ends with the test or after 30 seconds.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
