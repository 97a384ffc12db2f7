package freeport

import (
	"sync"
	"testing"
)

func TestPortsAreDistinctAcrossGoroutines(t *testing.T) {
	t.Parallel()
	const workers, each = 8, 16
	var mu sync.Mutex
	seen := map[int]bool{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			ports, err := Take(each)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, p := range ports {
				if seen[p] {
					t.Errorf("port %d handed out twice", p)
				}
				seen[p] = true
			}
		})
	}
	wg.Wait()
	if len(seen) != workers*each {
		t.Fatalf("got %d distinct ports, want %d", len(seen), workers*each)
	}
}

// TestPortsAreBelowTheEphemeralRange: every port comes from this process's
// slice of the range below the kernel's ephemeral ports.
func TestPortsAreBelowTheEphemeralRange(t *testing.T) {
	ports, err := Take(32)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		if p < portRangeStart || p >= portRangeEnd {
			t.Errorf("port %d outside [%d, %d)", p, portRangeStart, portRangeEnd)
		}
	}
}
