package segstore

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(rssChildEnv); dir != "" {
		os.Exit(rssChild(dir))
	}
	code := m.Run()
	closeBenchLogs()
	os.Exit(code)
}
