package kafka

import (
	"context"
	"sync"
	"time"
)

// callTimeout bounds a Broker call whose request carries no timeout of its
// own: a client's default request timeout is 30 s, after which it stops
// waiting anyway.
const callTimeout = 30 * time.Second

// requestContext is ctx bounded by a request's timeout_ms, or by
// callTimeout when it gives none.
func requestContext(ctx context.Context, timeoutMillis int32) (context.Context, context.CancelFunc) {
	d := callTimeout
	if timeoutMillis > 0 {
		d = time.Duration(timeoutMillis) * time.Millisecond
	}
	return context.WithTimeout(ctx, d)
}

// maxConcurrentItems bounds the Broker calls one request runs at once:
// nothing but the frame size (100 MiB) bounds a request's items, and one
// ListOffsets of 5,000 partitions ran 2,177 calls (goroutines, forwards to
// other agents) at once.
const maxConcurrentItems = 16

// itemCalls runs the Broker calls of one request's items, at most
// maxConcurrentItems at a time (the Broker may forward each one to another
// agent); Go waits for a free slot.
type itemCalls struct {
	wg    sync.WaitGroup
	slots chan struct{}
}

func newItemCalls() *itemCalls {
	return &itemCalls{slots: make(chan struct{}, maxConcurrentItems)}
}

func (g *itemCalls) Go(f func()) {
	g.slots <- struct{}{}
	g.wg.Go(func() {
		defer func() { <-g.slots }()
		f()
	})
}

func (g *itemCalls) Wait() { g.wg.Wait() }

// each runs f for every index of a request's items (itemCalls) and waits
// for them all.
func each(n int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	calls := newItemCalls()
	for i := range n {
		calls.Go(func() { f(i) })
	}
	calls.Wait()
}
