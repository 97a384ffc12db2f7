package partition

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/logagent/logagent/segstore"
)

func TestOpenRetryDelay(t *testing.T) {
	cases := []struct {
		attempts int
		want     time.Duration
	}{
		{1, 250 * time.Millisecond},
		{2, 500 * time.Millisecond},
		{3, time.Second},
		{7, 16 * time.Second},
		{8, 30 * time.Second},
		{9, 30 * time.Second},
		{1000, 30 * time.Second},
	}
	for _, c := range cases {
		if got := openRetryDelay(c.attempts); got != c.want {
			t.Errorf("openRetryDelay(%d) = %s, want %s", c.attempts, got, c.want)
		}
	}
}

func TestRootCause(t *testing.T) {
	emfile := &os.PathError{Op: "open", Path: "/data/t-0/00000000000000000000.index", Err: syscall.EMFILE}
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"plain", errors.New("x"), "x"},
		{"wrapped twice", fmt.Errorf("agent: open partition log: %w", fmt.Errorf("segstore: open segment: %w", emfile)), syscall.EMFILE.Error()},
	}
	for _, c := range cases {
		if got := rootCause(c.err).Error(); got != c.want {
			t.Errorf("%s: rootCause = %q, want %q", c.name, got, c.want)
		}
	}
}

// TestReplicaFileSizeBounded: replica.json (like meta.json, boot_id and the
// markers) is a few bytes; a damaged one whose size says 256 MiB (a sparse
// file here) is refused before it is read, where it was allocated and read
// whole (for every partition directory, by MarkAllDataLoss).
func TestReplicaFileSizeBounded(t *testing.T) {
	dir := t.TempDir()
	const size = 256 << 20
	if err := os.WriteFile(filepath.Join(dir, replicaFileName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, replicaFileName), size); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := readReplicaFile(segstore.OSFS{}, dir)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("a %d MiB replica.json: %v, want it refused as damaged", size>>20, err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("reading a %d MiB replica.json allocated %d MiB", size>>20, alloc>>20)
	}
}
