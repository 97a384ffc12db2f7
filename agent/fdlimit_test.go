package agent

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReplicaDescriptors(t *testing.T) {
	cases := []struct {
		segments, rf, want int
	}{
		{segments: 0, rf: 1, want: 3}, // not created yet: one segment
		{segments: 1, rf: 1, want: 3},
		{segments: 1, rf: 3, want: 5},
		{segments: 4, rf: 3, want: 11},
	}
	for _, c := range cases {
		if got := replicaDescriptors(c.segments, c.rf); got != c.want {
			t.Errorf("replicaDescriptors(%d, %d) = %d, want %d", c.segments, c.rf, got, c.want)
		}
	}
}

func TestCountSegments(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"00000000000000000000.log", "00000000000000000000.index",
		"00000000000000000042.log", "00000000000000000042.index", "replica.json", "hw-checkpoint"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := countSegments(dir); got != 2 {
		t.Errorf("countSegments = %d, want 2", got)
	}
	if got := countSegments(filepath.Join(dir, "missing")); got != 0 {
		t.Errorf("countSegments of a missing directory = %d, want 0", got)
	}
}
