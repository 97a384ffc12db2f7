package reassign

import (
	"sync"
	"time"
)

// budgetWindow is the most one answer takes of the budget, and the most
// the bucket saves up while idle: a quarter second's worth, so the rate
// holds over any stretch of a few seconds.
const budgetWindow = 250 * time.Millisecond

// Throttle is a token bucket of bytes per second shared by the catch-up
// answers of one agent (replication.reassign_max_bytes_per_second). An
// answer asks Delay, waits that long, caps itself at MaxBytes and reports
// what it sent with Spend; the bucket may go into debt by one answer, which
// the next ones wait off. A nil *Throttle is unlimited. Safe for concurrent
// use; time is the caller's.
type Throttle struct {
	rate float64 // bytes per second

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// NewThrottle returns a bucket of bytesPerSecond, full at now; nil (no
// limit) for 0 or less.
func NewThrottle(bytesPerSecond int64, now time.Time) *Throttle {
	if bytesPerSecond <= 0 {
		return nil
	}
	t := &Throttle{rate: float64(bytesPerSecond), last: now}
	t.tokens = t.capacity()
	return t
}

func (t *Throttle) capacity() float64 { return t.rate * budgetWindow.Seconds() }

// refill adds what the time since the last call earned, up to the
// capacity. Time that went backwards earns nothing.
func (t *Throttle) refill(now time.Time) {
	if d := now.Sub(t.last); d > 0 {
		t.tokens = min(t.tokens+d.Seconds()*t.rate, t.capacity())
		t.last = now
	}
}

// Delay is how long an answer must wait before it may be sent: 0 unless
// the bucket is in debt.
func (t *Throttle) Delay(now time.Time) time.Duration {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refill(now)
	if t.tokens >= 0 {
		return 0
	}
	return time.Duration(-t.tokens / t.rate * float64(time.Second))
}

// MaxBytes caps one answer of at most limit bytes: a quarter second of the
// budget, at least 1 (an answer holds at least one whole batch anyway).
func (t *Throttle) MaxBytes(limit int64) int64 {
	if t == nil {
		return limit
	}
	return max(1, min(limit, int64(t.capacity())))
}

// Spend takes n bytes sent at now from the bucket.
func (t *Throttle) Spend(now time.Time, n int) {
	if t == nil || n <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refill(now)
	t.tokens -= float64(n)
}
