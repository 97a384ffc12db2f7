package election

import (
	"math/rand/v2"
	"time"
)

// backoff is a capped exponential delay with ±20% jitter, so agents that
// failed together do not retry together.
type backoff struct {
	min, max time.Duration
	next     time.Duration
}

func newBackoff(minDelay, maxDelay time.Duration) *backoff {
	return &backoff{min: minDelay, max: maxDelay, next: minDelay}
}

// delay returns the next delay and doubles the one after, up to max.
func (b *backoff) delay() time.Duration {
	d := b.next
	b.next = min(b.next*2, b.max)
	jitter := time.Duration(rand.Int64N(int64(d)/5+1)) * 2
	return d - d/5 + jitter
}

func (b *backoff) reset() { b.next = b.min }
