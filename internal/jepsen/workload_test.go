package jepsen

import (
	"slices"
	"strings"
	"testing"

	"github.com/logagent/logagent/internal/checker"
	"github.com/logagent/logagent/record"
)

// batchAt is a batch of one record per value, the first at offset base.
func batchAt(t *testing.T, base int64, values ...string) []byte {
	t.Helper()
	var b record.Builder
	for _, v := range values {
		if err := b.Add(1, nil, []byte(v), nil); err != nil {
			t.Fatal(err)
		}
	}
	batch, err := b.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	record.SetBaseOffset(batch, base)
	return batch
}

// TestDecodeKeepsWhatTheCheckerMustSee: a consumer's fetch answer is
// recorded from the offset it asked for; an answer that goes backwards
// reaches the checker as such, and one that skips records is an error.
// decode used to leave out every record below the offset asked for, so a
// server that answered old records, or skipped some, passed.
func TestDecodeKeepsWhatTheCheckerMustSee(t *testing.T) {
	for _, tc := range []struct {
		name     string
		next     int64
		answer   [][]byte
		offsets  []int64 // recorded
		nextEnd  int64
		skipping bool
	}{
		{"the batch holding next starts before it", 1, [][]byte{batchAt(t, 0, "a", "b", "c"), batchAt(t, 3, "d")}, []int64{1, 2, 3}, 4, false},
		{"a batch wholly below next", 5, [][]byte{batchAt(t, 0, "a", "b")}, []int64{0, 1}, 5, false},
		{"records skipped", 1, [][]byte{batchAt(t, 3, "d", "e")}, nil, 1, true},
		{"a gap between batches", 0, [][]byte{batchAt(t, 0, "a"), batchAt(t, 2, "c")}, []int64{0}, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w Workload
			var read checker.ConsumerRead
			next := tc.next
			err := w.decode(record.NewDecoder(record.Limits{}), slices.Concat(tc.answer...), &read, &next)
			var got []int64
			for _, e := range read.Entries {
				got = append(got, e.Offset)
			}
			if skipped := err != nil && strings.Contains(err.Error(), "skipped"); skipped != tc.skipping || (err != nil && !skipped) {
				t.Fatalf("decode: %v, want an error of records skipped: %v", err, tc.skipping)
			}
			if !slices.Equal(got, tc.offsets) || next != tc.nextEnd {
				t.Fatalf("recorded offsets %v, next %d; want %v, next %d", got, next, tc.offsets, tc.nextEnd)
			}
		})
	}
}
