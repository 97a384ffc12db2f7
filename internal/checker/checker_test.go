package checker

import (
	"encoding/json"
	"strings"
	"testing"
)

func entries(pairs ...any) []Entry {
	var out []Entry
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, Entry{Offset: int64(pairs[i].(int)), Value: pairs[i+1].(string)})
	}
	return out
}

// healthy is a run with nothing wrong: three acknowledged writes, one refused,
// one unknown that landed, replicas identical below the HW, a consumer that
// read everything in order.
func healthy() History {
	log := entries(0, "a", 1, "b", 2, "c", 3, "u")
	return History{
		Writes: []Write{
			{Value: "a", Outcome: OK, Offset: 0, Attempt: 1},
			{Value: "b", Outcome: OK, Offset: 1, Attempt: 1},
			{Value: "c", Outcome: OK, Offset: 2, Attempt: 1},
			{Value: "r", Outcome: Fail, Attempt: 1},
			{Value: "u", Outcome: Unknown, Attempt: 1},
		},
		Consumers: []ConsumerRead{{Consumer: "c1", Entries: entries(0, "a", 1, "b", 2, "c", 3, "u")}},
		Replicas: []ReplicaLog{
			{Node: "n1", HighWatermark: 4, Entries: log},
			{Node: "n2", HighWatermark: 4, Entries: log},
			{Node: "n3", HighWatermark: 3, Entries: log[:3]},
		},
	}
}

func TestCheck(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(h *History)
		kind   string // the anomaly expected; "" for a valid history
	}{
		{"healthy", func(h *History) {}, ""},
		{"lost acknowledged write", func(h *History) {
			for i := range h.Replicas {
				h.Replicas[i].Entries = h.Replicas[i].Entries[:2]
				h.Replicas[i].HighWatermark = 2
			}
			h.Consumers[0].Entries = h.Consumers[0].Entries[:2]
		}, KindLost},
		{"acknowledged offset holds another value", func(h *History) {
			h.Writes[2].Offset = 3
		}, KindLost},
		{"uncommitted tail does not count as present", func(h *History) {
			for i := range h.Replicas {
				h.Replicas[i].HighWatermark = 2
			}
			h.Consumers[0].Entries = h.Consumers[0].Entries[:2]
		}, KindLost},
		{"duplicate", func(h *History) {
			h.Writes = append(h.Writes, Write{Value: "d", Outcome: OK, Offset: 4, Attempt: 1})
			for i := range h.Replicas[:2] {
				h.Replicas[i].Entries = append(h.Replicas[i].Entries, Entry{4, "d"}, Entry{5, "d"})
				h.Replicas[i].HighWatermark = 6
			}
		}, KindDuplicate},
		{"refused write appears", func(h *History) {
			for i := range h.Replicas[:2] {
				h.Replicas[i].Entries = append(h.Replicas[i].Entries, Entry{4, "r"})
				h.Replicas[i].HighWatermark = 5
			}
		}, KindUnexpected},
		{"value nobody wrote", func(h *History) {
			for i := range h.Replicas[:2] {
				h.Replicas[i].Entries = append(h.Replicas[i].Entries, Entry{4, "ghost"})
				h.Replicas[i].HighWatermark = 5
			}
		}, KindUnexpected},
		{"consumer saw another value at an offset", func(h *History) {
			h.Consumers = append(h.Consumers, ConsumerRead{Consumer: "c2", Entries: entries(1, "x")})
		}, KindInconsistentOffset},
		{"consumer went backwards", func(h *History) {
			h.Consumers[0].Entries = entries(0, "a", 2, "c", 1, "b")
		}, KindNonMonotonic},
		{"consumer repeated an offset", func(h *History) {
			h.Consumers[0].Entries = entries(0, "a", 0, "a")
		}, KindNonMonotonic},
		{"replicas diverge below the HW", func(h *History) {
			h.Replicas[2].Entries = entries(0, "a", 1, "z", 2, "c")
		}, KindDivergence},
		{"replica missing a record below the HW", func(h *History) {
			h.Replicas[2].Entries = entries(0, "a", 2, "c")
		}, KindDivergence},
		{"replica missing its first records below the HW", func(h *History) {
			h.Replicas[2].Entries = entries(2, "c")
		}, KindDivergence},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := healthy()
			// Replicas share a slice in healthy(); copy before mutating.
			for i := range h.Replicas {
				h.Replicas[i].Entries = append([]Entry(nil), h.Replicas[i].Entries...)
			}
			c.mutate(&h)
			r := Check(h)
			if c.kind == "" {
				if !r.Valid() {
					t.Fatalf("valid history reported invalid:\n%s", r.Summary())
				}
				return
			}
			if r.Valid() || r.Counts[c.kind] == 0 {
				t.Fatalf("want a %s anomaly:\n%s", c.kind, r.Summary())
			}
		})
	}
}

func TestDuplicateOfUnknownWriteIsAllowedButCounted(t *testing.T) {
	h := healthy()
	for i := range h.Replicas[:2] {
		h.Replicas[i].Entries = append(append([]Entry(nil), h.Replicas[i].Entries...), Entry{4, "u"})
		h.Replicas[i].HighWatermark = 5
	}
	r := Check(h)
	if !r.Valid() || r.Counts[KindDuplicateAfterRetry] != 1 {
		t.Fatalf("a retried unknown write may duplicate, and is counted apart:\n%s", r.Summary())
	}
}

// TestDuplicatesFigure counts the values the final log holds more than
// once, of either kind, once each however many copies: what a run with
// retrying producers reports as its duplicates.
func TestDuplicatesFigure(t *testing.T) {
	cases := []struct {
		name  string
		extra []Entry // appended to the two full replicas, from offset 4
		want  int
	}{
		{"none", nil, 0},
		{"an unknown write twice", entries(4, "u"), 1},
		{"an acknowledged write twice", entries(4, "a"), 1},
		{"three copies are one value", entries(4, "u", 5, "u"), 1},
		{"both kinds", entries(4, "u", 5, "b", 6, "c"), 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := healthy()
			for i := range h.Replicas[:2] {
				h.Replicas[i].Entries = append(append([]Entry(nil), h.Replicas[i].Entries...), c.extra...)
				h.Replicas[i].HighWatermark = 4 + int64(len(c.extra))
			}
			r := Check(h)
			if r.Duplicates != c.want {
				t.Fatalf("duplicates %d, want %d:\n%s", r.Duplicates, c.want, r.Summary())
			}
			if got := r.Counts[KindDuplicate] + r.Counts[KindDuplicateAfterRetry]; got != c.want {
				t.Fatalf("duplicate anomalies %d, want %d:\n%s", got, c.want, r.Summary())
			}
		})
	}
}

func TestReportCountsAndJSON(t *testing.T) {
	r := Check(healthy())
	if r.Writes != 5 || r.Acknowledged != 3 || r.Failed != 1 || r.Unknown != 1 || r.ConsumerReads != 4 || r.Unseen != 0 {
		t.Errorf("counts: %+v", r)
	}
	b, err := json.Marshal(r)
	if err != nil || !strings.Contains(string(b), `"acknowledged":3`) || !strings.Contains(string(b), `"duplicates":0`) {
		t.Errorf("json: %s %v", b, err)
	}
	if !strings.HasPrefix(r.Summary(), "VALID: 5 writes") {
		t.Errorf("summary: %s", r.Summary())
	}
}

func TestExamplesAreBounded(t *testing.T) {
	var h History
	for i := 0; i < 100; i++ {
		h.Writes = append(h.Writes, Write{Value: string(rune('A' + i)), Outcome: OK, Offset: int64(i), Attempt: 1})
	}
	r := Check(h)
	if r.Counts[KindLost] != 100 || len(r.Examples) != maxExamplesPerKind {
		t.Errorf("lost %d, examples %d", r.Counts[KindLost], len(r.Examples))
	}
}
