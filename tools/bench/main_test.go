package main

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// TestMeanSides: the idempotence rows compare each side's mean over runs
// in idempotenceOrder, so that a host whose speed drifts linearly or
// quadratically over the eight runs shows the same figure for both sides
// (the median of alternating pairs it replaced read a linear ramp in the
// idempotent side's favour); a failed run counts and its note stays.
func TestMeanSides(t *testing.T) {
	tests := []struct {
		name       string
		drift      func(position float64) float64 // records/s of a run at that position, either side
		idemFactor float64                        // the idempotent side's true cost
		failRun    int                            // position of a run that failed (-1: none)
		wantRatio  float64
		wantInNote []string
	}{
		{name: "steady host", drift: func(float64) float64 { return 100000 }, idemFactor: 0.97, failRun: -1, wantRatio: 0.97,
			wantInNote: []string{"the mean of 4 runs per side", "P I I P I P P I", "plain runs 100000, 100000, 100000, 100000", "idempotent runs 97000, 97000, 97000, 97000"}},
		{name: "linear ramp, a quarter over the runs", drift: func(p float64) float64 { return 100000 * (1 + 0.25*p/7) }, idemFactor: 1, failRun: -1, wantRatio: 1},
		{name: "quadratic drift", drift: func(p float64) float64 { return 80000 + 1000*p*p }, idemFactor: 0.95, failRun: -1, wantRatio: 0.95},
		{name: "a failed run counts as nothing and its note stays", drift: func(float64) float64 { return 100000 }, idemFactor: 1, failRun: 1, wantRatio: 0.75,
			wantInNote: []string{"idempotent run 1: run failed: boom", "idempotent runs 0, 100000, 100000, 100000"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var plain, idempotent []sample
			for i, idem := range idempotenceOrder {
				s := sample{RecordsPerSec: tc.drift(float64(i)), P50: time.Millisecond, Command: fmt.Sprintf("run %d", i)}
				if idem {
					s.RecordsPerSec *= tc.idemFactor
				}
				if i == tc.failRun {
					s = sample{Note: "run failed: boom"}
				}
				if idem {
					idempotent = append(idempotent, s)
				} else {
					plain = append(plain, s)
				}
			}
			p, id := meanSides(plain, idempotent)
			if got := id.RecordsPerSec / p.RecordsPerSec; math.Abs(got-tc.wantRatio) > 1e-9 {
				t.Fatalf("ratio %.6f, want %.6f (plain %v, idempotent %v)", got, tc.wantRatio, p.RecordsPerSec, id.RecordsPerSec)
			}
			if p.Note != "" {
				t.Fatalf("plain side's note %q: the notes belong to the idempotent side's", p.Note)
			}
			if p.Command != "run 0" {
				t.Fatalf("plain side's command %q, want the first plain run's", p.Command)
			}
			for _, want := range tc.wantInNote {
				if !strings.Contains(id.Note, want) {
					t.Fatalf("note %q does not say %q", id.Note, want)
				}
			}
		})
	}
}
