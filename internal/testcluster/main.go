package testcluster

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// Main is a cluster that a TestMain started, for what has no *testing.T:
// runnable examples (go test runs their Output checks with the package's
// tests, after TestMain started the cluster).
type Main struct {
	*Cluster
	tb *mainTB
}

// StartMain starts a cluster as Start does. Its failures are returned
// instead of failing a test; Stop ends every process it started and
// removes its directories, also after StartMain failed.
func StartMain(opts Options) (*Main, error) {
	m := &Main{tb: &mainTB{}}
	err := m.Run(func(*Cluster) error {
		m.Cluster = Start(m.tb, opts)
		return nil
	})
	if err != nil {
		return m, errors.Join(err, m.Stop())
	}
	return m, nil
}

// Run calls f with the cluster in a goroutine of its own, so that a
// helper's Fatalf ends f (as it ends a test), and returns f's error and
// what the helpers reported.
func (m *Main) Run(f func(c *Cluster) error) error {
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = f(m.Cluster)
	}()
	<-done
	return errors.Join(err, m.tb.err())
}

// Stop runs the cleanups (processes stopped by PID, directories removed),
// latest first, and returns every failure recorded since the start.
func (m *Main) Stop() error {
	m.tb.mu.Lock()
	cleanups := m.tb.cleanups
	m.tb.cleanups = nil
	m.tb.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		// In a goroutine, as Run's f: a cleanup's Fatalf ends only it.
		done := make(chan struct{})
		go func() {
			defer close(done)
			cleanups[i]()
		}()
		<-done
	}
	return m.tb.err()
}

// mainTB is the testing.TB of a Main: the methods the cluster's helpers
// call (Helper, Logf, Errorf, Fatalf, Failed, Cleanup, TempDir, Name).
// The embedded TB is nil, so a call of any other method panics instead of
// going unnoticed.
type mainTB struct {
	testing.TB

	mu       sync.Mutex
	failures []string
	logs     []string
	cleanups []func()
}

func (tb *mainTB) Helper()      {}
func (tb *mainTB) Name() string { return "TestMain" }

func (tb *mainTB) Logf(format string, args ...any) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.logs = append(tb.logs, fmt.Sprintf(format, args...))
}

func (tb *mainTB) Errorf(format string, args ...any) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.failures = append(tb.failures, fmt.Sprintf(format, args...))
}

// Fatalf ends the calling goroutine, as testing's does: Run's, or one a
// helper started, never TestMain's own.
func (tb *mainTB) Fatalf(format string, args ...any) {
	tb.Errorf(format, args...)
	runtime.Goexit()
}

func (tb *mainTB) Failed() bool {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return len(tb.failures) > 0
}

func (tb *mainTB) Cleanup(f func()) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.cleanups = append(tb.cleanups, f)
}

func (tb *mainTB) TempDir() string {
	dir, err := os.MkdirTemp("", "testcluster-main-")
	if err != nil {
		tb.Fatalf("testcluster: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// err is the failures recorded, with what was logged, or nil.
func (tb *mainTB) err() error {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if len(tb.failures) == 0 {
		return nil
	}
	return fmt.Errorf("testcluster: %s\n%s", strings.Join(tb.failures, "\n"), strings.Join(tb.logs, "\n"))
}
