package partition

import "sync"

// broadcast wakes every goroutine waiting for a change of a replica's log
// (an append, a new high watermark, a change of role). A waiter takes the
// channel, re-checks its condition, and then blocks on the channel: a change
// between the check and the block closes the channel it already holds, so
// no wake-up is lost.
//
// Subscribers (subscribe) are called instead at every notify: a fetch
// session holding fetches of many partitions cannot wait on each one's
// channel.
type broadcast struct {
	mu      sync.Mutex
	ch      chan struct{}
	nextSub uint64
	subs    map[uint64]func()
}

func newBroadcast() *broadcast { return &broadcast{ch: make(chan struct{})} }

// subscribe calls fn, which must not block, at every notify until cancel.
func (b *broadcast) subscribe(fn func()) (cancel func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.subs == nil {
		b.subs = map[uint64]func(){}
	}
	b.nextSub++
	id := b.nextSub
	b.subs[id] = fn
	return func() {
		b.mu.Lock()
		delete(b.subs, id)
		b.mu.Unlock()
	}
}

// wait returns a channel closed by the next notify.
func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

// notify wakes every current waiter and calls every subscriber.
func (b *broadcast) notify() {
	b.mu.Lock()
	close(b.ch)
	b.ch = make(chan struct{})
	for _, fn := range b.subs {
		fn()
	}
	b.mu.Unlock()
}
