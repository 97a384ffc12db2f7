package main

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/internal/testseed"
)

// recordingWriter records what reaches it; gate, when set, holds every
// write until it is closed.
type recordingWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
	gate   chan struct{}
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	if w.gate != nil {
		<-w.gate
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	return w.buf.Write(p)
}

func (w *recordingWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestLogOutputKeepsOrder writes lines of random levels from one goroutine
// and from several at once: every line arrives once, whole, and a
// goroutine's lines in the order it wrote them, whichever path (queued or
// written by the caller) each took.
func TestLogOutputKeepsOrder(t *testing.T) {
	rng := testseed.Rand(t)
	levels := []hclog.Level{hclog.Debug, hclog.Info, hclog.Warn, hclog.Error, hclog.NoLevel}
	for _, writers := range []int{1, 4} {
		t.Run(fmt.Sprintf("%d writers", writers), func(t *testing.T) {
			w := &recordingWriter{}
			o := newLogOutput(w)
			const lines = 2000
			plan := make([][]hclog.Level, writers)
			for g := range plan {
				for range lines {
					plan[g] = append(plan[g], levels[rng.IntN(len(levels))])
				}
			}
			var wg sync.WaitGroup
			for g := range writers {
				wg.Go(func() {
					for i, level := range plan[g] {
						if _, err := o.LevelWrite(level, fmt.Appendf(nil, "g%d line %d\n", g, i)); err != nil {
							t.Errorf("LevelWrite: %v", err)
							return
						}
					}
				})
			}
			wg.Wait()
			o.Close()
			next := make([]int, writers)
			for _, line := range bytes.Split(bytes.TrimSuffix([]byte(w.String()), []byte("\n")), []byte("\n")) {
				var g, i int
				if _, err := fmt.Sscanf(string(line), "g%d line %d", &g, &i); err != nil || g < 0 || g >= writers {
					t.Fatalf("unexpected line %q", line)
				}
				if i != next[g] {
					t.Fatalf("goroutine %d: line %d arrived where line %d was due", g, i, next[g])
				}
				next[g]++
			}
			for g, n := range next {
				if n != lines {
					t.Errorf("goroutine %d: %d of %d lines arrived", g, n, lines)
				}
			}
		})
	}
}

// TestLogOutputWritesErrorsAtOnce: an Error line, and every line queued
// before it, has reached the output when LevelWrite returns, while the
// writer goroutine is held up; a queued Info line has not.
func TestLogOutputWritesErrorsAtOnce(t *testing.T) {
	w := &recordingWriter{}
	o := newLogOutput(w)
	defer o.Close()
	// Hold the writer goroutine: it takes writeMu to write.
	o.writeMu.Lock()
	if _, err := o.LevelWrite(hclog.Info, []byte("queued\n")); err != nil {
		t.Fatal(err)
	}
	if got := w.String(); got != "" {
		t.Fatalf("an Info line was written by its caller: %q", got)
	}
	o.writeMu.Unlock()
	if _, err := o.LevelWrite(hclog.Error, []byte("error\n")); err != nil {
		t.Fatal(err)
	}
	if got := w.String(); got != "queued\nerror\n" {
		t.Fatalf("after the Error line returned the output holds %q, want %q", got, "queued\nerror\n")
	}
}

// TestLogOutputBoundsWhatWaits: with the output stalled, lines queue up to
// maxPendingLog bytes; the next one is written by its caller, which waits
// for the output instead of queueing more.
func TestLogOutputBoundsWhatWaits(t *testing.T) {
	gate := make(chan struct{})
	w := &recordingWriter{gate: gate}
	o := newLogOutput(w)
	defer o.Close()
	line := bytes.Repeat([]byte("x"), 1023)
	line = append(line, '\n')
	// The writer goroutine takes the first line and stalls in the output;
	// what follows queues.
	for range maxPendingLog / len(line) {
		if _, err := o.LevelWrite(hclog.Info, line); err != nil {
			t.Fatal(err)
		}
	}
	// Whatever the goroutine has taken, at least maxPendingLog - one line
	// waits; fill it to the bound.
	for {
		o.mu.Lock()
		n := len(o.pending)
		o.mu.Unlock()
		if n >= maxPendingLog {
			break
		}
		if _, err := o.LevelWrite(hclog.Info, line); err != nil {
			t.Fatal(err)
		}
	}
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		if _, err := o.LevelWrite(hclog.Info, []byte("over the bound\n")); err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-returned:
		t.Fatal("a line over the bound was queued while the output was stalled")
	case <-time.After(50 * time.Millisecond):
	}
	close(gate)
	<-returned
	if !bytes.HasSuffix([]byte(w.String()), []byte("over the bound\n")) {
		t.Fatal("the line over the bound is not out, after everything queued before it, when its write returned")
	}
}

// TestLogOutputCloseWritesEverything: Close returns after every queued line
// is out and its goroutine has ended; a line written after Close goes out
// at once.
func TestLogOutputCloseWritesEverything(t *testing.T) {
	w := &recordingWriter{}
	o := newLogOutput(w)
	for i := range 100 {
		if _, err := o.LevelWrite(hclog.Info, fmt.Appendf(nil, "line %d\n", i)); err != nil {
			t.Fatal(err)
		}
	}
	o.Close()
	select {
	case <-o.done:
	default:
		t.Fatal("Close returned before its goroutine ended")
	}
	if got := bytes.Count([]byte(w.String()), []byte("\n")); got != 100 {
		t.Fatalf("%d of 100 lines written by Close", got)
	}
	if _, err := o.LevelWrite(hclog.Info, []byte("late\n")); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix([]byte(w.String()), []byte("late\n")) {
		t.Fatal("a line after Close was not written at once")
	}
	o.Close() // a second Close is harmless
}
