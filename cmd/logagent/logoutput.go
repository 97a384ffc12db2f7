package main

import (
	"io"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// maxPendingLog is how many bytes of log lines may wait for the writer
// goroutine; a line that finds more waiting is written by its caller, so a
// log that outruns its output slows the agent down rather than growing
// without bound or dropping lines.
const maxPendingLog = 1 << 20

// logOutput is the agent's log output. hclog formats a line and writes it
// out under one mutex, which every named sub-logger shares; written straight
// to stderr, each line's write(2) ran under that mutex, and under a burst of
// thousands of partitions changing state at once (a failover, a lost lease)
// the mutex became a convoy: a goroutine holding it lost its processor in
// the system call and waited behind a thousand runnable goroutines for
// another, while every partition loop that had a line to log waited for it
// (an execution trace of a 10,000-partition agent counted 250 such waits of
// 300 ms on average in 20 s; docs/design.md §11, "Log output"). Here a line at
// Warn or below is only appended to a buffer under a mutex of its own, and
// one goroutine writes the buffer out; an Error line first writes out
// everything before it and then itself before it returns, so the line that
// explains a crash is on its way to the log when the agent dies. Lines keep
// their order. A kill -9 or a crash loses the lines still waiting, at most
// maxPendingLog bytes and normally those of the last few milliseconds.
type logOutput struct {
	out io.Writer

	// writeMu orders the writes to out: whoever writes takes the pending
	// lines under it, so batches reach out in the order they were taken.
	writeMu sync.Mutex

	mu      sync.Mutex
	pending []byte
	closed  bool

	wake chan struct{} // buffered 1: lines are pending
	stop chan struct{}
	done chan struct{}
}

// newLogOutput starts the goroutine that writes to out; Close stops it.
func newLogOutput(out io.Writer) *logOutput {
	o := &logOutput{out: out, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go o.run()
	return o
}

func (o *logOutput) run() {
	defer close(o.done)
	for {
		select {
		case <-o.wake:
			o.flush(nil)
		case <-o.stop:
			o.flush(nil)
			return
		}
	}
}

// Write queues p as a line of no particular level.
func (o *logOutput) Write(p []byte) (int, error) { return o.LevelWrite(hclog.NoLevel, p) }

// LevelWrite is hclog.LevelWriter: it queues p, or writes it out with
// everything queued before it when p is an Error line, more than
// maxPendingLog bytes wait, or the output is closed.
func (o *logOutput) LevelWrite(level hclog.Level, p []byte) (int, error) {
	o.mu.Lock()
	if level < hclog.Error && !o.closed && len(o.pending) < maxPendingLog {
		o.pending = append(o.pending, p...)
		o.mu.Unlock()
		select {
		case o.wake <- struct{}{}:
		default:
		}
		return len(p), nil
	}
	o.mu.Unlock()
	if err := o.flush(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// flush writes out the pending lines and then last.
func (o *logOutput) flush(last []byte) error {
	o.writeMu.Lock()
	defer o.writeMu.Unlock()
	o.mu.Lock()
	batch := o.pending
	o.pending = nil
	o.mu.Unlock()
	batch = append(batch, last...)
	if len(batch) == 0 {
		return nil
	}
	_, err := o.out.Write(batch)
	return err
}

// Close writes out what is pending and stops the goroutine; later lines
// are written by their callers.
func (o *logOutput) Close() {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return
	}
	o.closed = true
	o.mu.Unlock()
	close(o.stop)
	<-o.done
}
