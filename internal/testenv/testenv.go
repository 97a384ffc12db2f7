// Package testenv decides what a test does when this machine lacks what it
// needs (a tool, a privilege, a kernel file): skip it, loudly, on a
// developer's machine, and fail it under CI, where make test has installed
// every tool as root, so a skipped test is never counted as passing there.
package testenv

import (
	"os"
	"testing"
)

// CIEnv names the variable CI sets (.ci/run runs with CI=true).
const CIEnv = "CI"

// SkipUnlessCI skips t with the message, or fails it under CI.
func SkipUnlessCI(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv(CIEnv) != "" {
		t.Fatalf("CI: "+format, args...)
	}
	t.Skipf(format, args...)
}
