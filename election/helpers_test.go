package election

import (
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// testLogger routes a client's logs to t.Log until stop is called (a log
// line after the test ended would panic); LOGAGENT_TEST_LOG=debug shows
// more.
func testLogger(t testing.TB, name string) (logger hclog.Logger, stop func()) {
	level := hclog.Info
	if os.Getenv("LOGAGENT_TEST_LOG") == "debug" {
		level = hclog.Debug
	}
	writer := &testWriter{t: t}
	logger = hclog.New(&hclog.LoggerOptions{
		Name:   name,
		Level:  level,
		Output: writer,
	})
	return logger, writer.stop
}

// testWriter forwards whole lines to t.Log until the test ends (a log line
// after that would panic the test binary).
type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}
