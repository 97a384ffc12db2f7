package testcluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// binEnv names the logagent binary to test, as `make test` sets it.
const binEnv = "LOGAGENT_BIN"

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// Binary returns the logagent executable: $LOGAGENT_BIN, or one built from
// this module once per test process.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(binEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("testcluster: %s=%s: %v (run `make build`)", binEnv, p, err)
		}
		return p
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "logagent-testcluster-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "logagent")
		out, err := exec.Command("go", "build", "-o", builtBin, "github.com/logagent/logagent/cmd/logagent").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("testcluster: %v", buildErr)
	}
	return builtBin
}
