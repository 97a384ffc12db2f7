package main

import (
	"strings"
	"testing"
)

// TestMedianPair: the idempotence rows show the pair whose ratio is the
// median, so that one run lifted or dropped by the host moves one pair and
// not the figure; every pair's ratio and every run's note are kept.
func TestMedianPair(t *testing.T) {
	pair := func(plain, idempotent float64) runPair {
		return runPair{plain: sample{RecordsPerSec: plain}, idempotent: sample{RecordsPerSec: idempotent}}
	}
	tests := []struct {
		name                string
		pairs               []runPair
		wantPlain, wantIdem float64
		wantInNote          []string
	}{
		{
			name:      "the last run jumps",
			pairs:     []runPair{pair(104570, 100800), pair(101753, 164281), pair(100000, 98000)},
			wantPlain: 100000, wantIdem: 98000,
			wantInNote: []string{"0.96x, 1.61x, 0.98x", "in 3 pairs"},
		},
		{
			name:      "already in order",
			pairs:     []runPair{pair(100, 90), pair(100, 100), pair(100, 110)},
			wantPlain: 100, wantIdem: 100,
		},
		{
			name: "a failed run sorts first and its note stays",
			pairs: []runPair{
				pair(100, 101),
				{plain: sample{Note: "run failed: boom"}, idempotent: sample{RecordsPerSec: 99}},
				pair(100, 97),
			},
			wantPlain: 100, wantIdem: 97,
			wantInNote: []string{"pair 2: run failed: boom", "1.01x, 0.00x, 0.97x"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plain, idem := medianPair(tc.pairs)
			if plain.RecordsPerSec != tc.wantPlain || idem.RecordsPerSec != tc.wantIdem {
				t.Fatalf("got plain %v, idempotent %v; want %v, %v", plain.RecordsPerSec, idem.RecordsPerSec, tc.wantPlain, tc.wantIdem)
			}
			if plain.Note != "" {
				t.Fatalf("plain side's note %q: the notes belong to the idempotent side's", plain.Note)
			}
			for _, want := range tc.wantInNote {
				if !strings.Contains(idem.Note, want) {
					t.Fatalf("note %q does not say %q", idem.Note, want)
				}
			}
		})
	}
}
