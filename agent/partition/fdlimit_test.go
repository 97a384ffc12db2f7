package partition

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/logagent/logagent/segstore"
)

func TestReplicaFiles(t *testing.T) {
	for _, c := range []struct{ segments, want int }{{0, 2}, {1, 2}, {4, 8}} { // not created yet: one segment
		if got := replicaFiles(c.segments); got != c.want {
			t.Errorf("replicaFiles(%d) = %d, want %d", c.segments, got, c.want)
		}
	}
}

// TestEstimateDescriptors: replication connections are counted per peer
// agent (fetch sessions), not per replica: 1,000 partitions of RF 3 on
// three agents cost 2 peers' connections, not 2,000.
func TestEstimateDescriptors(t *testing.T) {
	many := func(n int, replicas ...string) []heldReplica {
		out := make([]heldReplica, n)
		for i := range out {
			out[i] = heldReplica{replicas: replicas, segments: 1}
		}
		return out
	}
	cases := []struct {
		name  string
		held  []heldReplica
		bound int
		want  int
	}{
		{"none", nil, 5000, fdsAgentBase},
		{"one RF 1", many(1, "n1"), 5000, fdsAgentBase + 1 + 2},
		{"1,000 RF 3 on 3 agents", many(1000, "n1", "n2", "n3"), 5000, fdsAgentBase + 1000 + 2*fdsPerPeer + 2000},
		{"files past the cache bound", many(1000, "n1", "n2", "n3"), 500, fdsAgentBase + 1000 + 2*fdsPerPeer + 500},
		{"peers counted once", append(many(10, "n1", "n2", "n3"), many(10, "n1", "n3", "n4")...), 5000, fdsAgentBase + 20 + 3*fdsPerPeer + 40},
	}
	for _, c := range cases {
		if got := estimateDescriptors("n1", c.held, c.bound); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

func TestFileCacheBound(t *testing.T) {
	cases := []struct {
		soft uint64
		want int
	}{
		{soft: 40, want: 16},
		{soft: 100, want: 25},
		{soft: 20000, want: 5000},
		{soft: 65535, want: 16383},
		{soft: 1 << 62, want: (1<<31 - 1) / 4},
	}
	for _, c := range cases {
		if got := FileCacheBound(c.soft); got != c.want {
			t.Errorf("FileCacheBound(%d) = %d, want %d", c.soft, got, c.want)
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
	if got := countSegments(segstore.OSFS{}, dir); got != 2 {
		t.Errorf("countSegments = %d, want 2", got)
	}
	if got := countSegments(segstore.OSFS{}, filepath.Join(dir, "missing")); got != 0 {
		t.Errorf("countSegments of a missing directory = %d, want 0", got)
	}
}

func TestDescriptorReserve(t *testing.T) {
	cases := []struct{ limit, want int }{
		{limit: 47, want: 32},
		{limit: 1000, want: 100},
		{limit: 20000, want: 1024},
		{limit: 1 << 20, want: 1024},
	}
	for _, c := range cases {
		if got := descriptorReserve(c.limit); got != c.want {
			t.Errorf("descriptorReserve(%d) = %d, want %d", c.limit, got, c.want)
		}
	}
}

func TestFDBudgetTake(t *testing.T) {
	cases := []struct {
		name         string
		budget       fdBudget
		needs        []int
		wantRefused  []bool
		wantLeftOver int
	}{
		// 100 - 40 in use - 32 reserved = 28 to give.
		{name: "within", budget: newFDBudget(100, 40, 0), needs: []int{5, 5, 18}, wantRefused: []bool{false, false, false}, wantLeftOver: 0},
		{name: "over", budget: newFDBudget(100, 40, 0), needs: []int{20, 5, 5, 3}, wantRefused: []bool{false, false, true, false}, wantLeftOver: 0},
		{name: "in use past the reserve", budget: newFDBudget(100, 90, 0), needs: []int{1}, wantRefused: []bool{true}, wantLeftOver: -22},
		// The file cache may still open 10: 18 to give.
		{name: "cache headroom held back", budget: newFDBudget(100, 40, 10), needs: []int{10, 9}, wantRefused: []bool{false, true}, wantLeftOver: 8},
		{name: "unknown limit", budget: fdBudget{}, needs: []int{1 << 20}, wantRefused: []bool{false}, wantLeftOver: 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := c.budget
			for i, need := range c.needs {
				err := b.take(need)
				if refused := errors.Is(err, errDescriptorReserve); refused != c.wantRefused[i] || (err != nil && !refused) {
					t.Errorf("take(%d) #%d = %v, want refused %v", need, i, err, c.wantRefused[i])
				}
			}
			if b.left != c.wantLeftOver {
				t.Errorf("left %d, want %d", b.left, c.wantLeftOver)
			}
		})
	}
}

// TestMeasureFDBudget: on Linux the budget is known.
func TestMeasureFDBudget(t *testing.T) {
	b := measureFDBudget(nil)
	if !b.known || b.inUse < 3 || b.limit < b.inUse || b.reserved != descriptorReserve(b.limit) {
		t.Fatalf("measured %+v", b)
	}
}
