package partition

import "sync"

// broadcast wakes every goroutine waiting for a change of a replica's log
// (an append, a new high watermark, a change of role). A waiter takes the
// channel, re-checks its condition, and then blocks on the channel: a change
// between the check and the block closes the channel it already holds, so
// no wake-up is lost.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func newBroadcast() *broadcast { return &broadcast{ch: make(chan struct{})} }

// wait returns a channel closed by the next notify.
func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

// notify wakes every current waiter.
func (b *broadcast) notify() {
	b.mu.Lock()
	close(b.ch)
	b.ch = make(chan struct{})
	b.mu.Unlock()
}
