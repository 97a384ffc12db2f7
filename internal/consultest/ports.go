package consultest

import (
	"testing"

	"github.com/logagent/logagent/internal/freeport"
)

// FreePorts returns n distinct loopback ports that were free for both TCP and
// UDP (Serf uses both) when probed and that no other caller in this process
// has received (internal/freeport).
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := freeport.Take(n)
	if err != nil {
		t.Fatalf("consultest: %v", err)
	}
	return ports
}

// FreePort is FreePorts for a single port.
func FreePort(t testing.TB) int {
	t.Helper()
	return FreePorts(t, 1)[0]
}
