package election

import (
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// seedEnv overrides the seed of randomized tests.
const seedEnv = "LOGAGENT_TEST_SEED"

// testRand returns a seeded generator and reports the seed if the test
// fails, so a failure can be replayed with LOGAGENT_TEST_SEED.
func testRand(t testing.TB) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(seedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", seedEnv, s, err)
		}
		seed = v
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("random seed %d (replay with %s=%d)", seed, seedEnv, seed)
		}
	})
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

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
