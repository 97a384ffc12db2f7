package partition

import (
	"errors"
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
		{name: "within", budget: newFDBudget(100, 40), needs: []int{5, 5, 18}, wantRefused: []bool{false, false, false}, wantLeftOver: 0},
		{name: "over", budget: newFDBudget(100, 40), needs: []int{20, 5, 5, 3}, wantRefused: []bool{false, false, true, false}, wantLeftOver: 0},
		{name: "in use past the reserve", budget: newFDBudget(100, 90), needs: []int{1}, wantRefused: []bool{true}, wantLeftOver: -22},
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
	b := measureFDBudget()
	if !b.known || b.inUse < 3 || b.limit < b.inUse || b.reserved != descriptorReserve(b.limit) {
		t.Fatalf("measured %+v", b)
	}
}
