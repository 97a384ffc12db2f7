package record

import (
	"math"
	"testing"
)

func TestAddSequence(t *testing.T) {
	tests := []struct {
		seq  int32
		n    int
		want int32
	}{
		{0, 0, 0},
		{0, 1, 1},
		{10, 5, 15},
		{math.MaxInt32, 1, 0},
		{math.MaxInt32 - 1, 3, 1},
		{math.MaxInt32, math.MaxInt32, math.MaxInt32 - 1},
	}
	for _, tc := range tests {
		if got := AddSequence(tc.seq, tc.n); got != tc.want {
			t.Errorf("AddSequence(%d, %d) = %d, want %d", tc.seq, tc.n, got, tc.want)
		}
	}
}
