package checker

import (
	"fmt"
	"sort"
	"strings"
)

// Outcome is what a client learned about one write.
type Outcome string

const (
	// OK: acknowledged (acks=all): the write must survive.
	OK Outcome = "ok"
	// Fail: refused before anything was written (not_enough_replicas,
	// validation): a value whose every attempt failed must not appear.
	Fail Outcome = "fail"
	// Unknown: the client cannot tell (timeout, connection lost, written
	// but under-replicated): the value may or may not appear.
	Unknown Outcome = "unknown"
)

// Write is one produce attempt of a unique value.
type Write struct {
	Value     string  `json:"value"`
	Partition int     `json:"partition"`
	Outcome   Outcome `json:"outcome"`
	// Offset is where an OK write was acknowledged.
	Offset int64 `json:"offset"`
	// Attempt counts tries of the same value, from 1.
	Attempt int `json:"attempt"`
}

// Entry is one record read at an offset.
type Entry struct {
	Offset int64  `json:"offset"`
	Value  string `json:"value"`
}

// ConsumerRead is what one consumer saw of one partition, in the order it
// saw it. A consumer that restarts from an earlier offset starts a new
// ConsumerRead.
type ConsumerRead struct {
	Consumer  string  `json:"consumer"`
	Partition int     `json:"partition"`
	Entries   []Entry `json:"entries"`
}

// ReplicaLog is one replica's final committed log of one partition: every
// record from its log start to its high watermark.
type ReplicaLog struct {
	Node          string  `json:"node"`
	Partition     int     `json:"partition"`
	HighWatermark int64   `json:"high_watermark"`
	Entries       []Entry `json:"entries"`
}

// History is everything a run recorded.
type History struct {
	Writes    []Write        `json:"writes"`
	Consumers []ConsumerRead `json:"consumers"`
	Replicas  []ReplicaLog   `json:"replicas"`
}

// Anomaly is one finding, with enough detail to look it up in the logs.
type Anomaly struct {
	Kind      string `json:"kind"`
	Partition int    `json:"partition"`
	Offset    int64  `json:"offset,omitempty"`
	Value     string `json:"value,omitempty"`
	Detail    string `json:"detail"`
}

// Anomaly kinds.
const (
	KindLost                = "lost"
	KindDuplicate           = "duplicate"
	KindDuplicateAfterRetry = "duplicate_after_unknown"
	KindInconsistentOffset  = "inconsistent_offset"
	KindNonMonotonic        = "non_monotonic"
	KindDivergence          = "divergence"
	KindUnexpected          = "unexpected_value"

	maxExamplesPerKind = 20
)

// Report is the result of Check. Duplicates is how many values the final
// log holds at two offsets or more, whatever their kind (duplicate or
// duplicate_after_unknown): the figure a run whose producers retry
// reports, 0 when idempotence holds.
type Report struct {
	Writes        int            `json:"writes"`
	Acknowledged  int            `json:"acknowledged"`
	Failed        int            `json:"failed"`
	Unknown       int            `json:"unknown"`
	ConsumerReads int            `json:"consumer_reads"`
	Unseen        int            `json:"unseen"`
	Duplicates    int            `json:"duplicates"`
	Counts        map[string]int `json:"counts"`
	Examples      []Anomaly      `json:"examples"`
}

// Valid reports whether the run had no anomaly. Unseen writes and
// duplicates of writes whose outcome was unknown are allowed.
func (r *Report) Valid() bool {
	for kind, n := range r.Counts {
		if n > 0 && kind != KindDuplicateAfterRetry {
			return false
		}
	}
	return true
}

func (r *Report) add(a Anomaly) {
	if r.Counts[a.Kind] < maxExamplesPerKind {
		r.Examples = append(r.Examples, a)
	}
	r.Counts[a.Kind]++
}

// Summary is a readable account of the report.
func (r *Report) Summary() string {
	var b strings.Builder
	verdict := "VALID"
	if !r.Valid() {
		verdict = "INVALID"
	}
	fmt.Fprintf(&b, "%s: %d writes (%d acknowledged, %d failed, %d unknown), %d consumer reads, %d acknowledged but unseen by consumers, %d duplicates\n",
		verdict, r.Writes, r.Acknowledged, r.Failed, r.Unknown, r.ConsumerReads, r.Unseen, r.Duplicates)
	kinds := make([]string, 0, len(r.Counts))
	for k := range r.Counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(&b, "  %-24s %d\n", k, r.Counts[k])
	}
	for _, a := range r.Examples {
		fmt.Fprintf(&b, "  - %s p%d offset %d value %q: %s\n", a.Kind, a.Partition, a.Offset, a.Value, a.Detail)
	}
	return b.String()
}

type location struct {
	partition int
	offset    int64
}

// Check verifies h. The final state of a partition is taken from its
// replicas: they must agree below their high watermarks, and the union of
// their committed entries is what "present" means.
func Check(h History) *Report {
	r := &Report{Counts: map[string]int{
		KindLost: 0, KindDuplicate: 0, KindDuplicateAfterRetry: 0, KindInconsistentOffset: 0,
		KindNonMonotonic: 0, KindDivergence: 0, KindUnexpected: 0,
	}}

	// What was written, per value.
	type writeInfo struct {
		ok         *Write
		anyUnknown bool
	}
	writes := map[string]*writeInfo{}
	for i := range h.Writes {
		w := &h.Writes[i]
		r.Writes++
		info := writes[w.Value]
		if info == nil {
			info = &writeInfo{}
			writes[w.Value] = info
		}
		switch w.Outcome {
		case OK:
			r.Acknowledged++
			info.ok = w
		case Fail:
			r.Failed++
		case Unknown:
			r.Unknown++
			info.anyUnknown = true
		}
	}

	// Every (partition, offset) seen anywhere must hold one value.
	seenAt := map[location]string{}
	observe := func(p int, e Entry, who string) {
		loc := location{p, e.Offset}
		if prev, ok := seenAt[loc]; ok && prev != e.Value {
			r.add(Anomaly{Kind: KindInconsistentOffset, Partition: p, Offset: e.Offset, Value: e.Value,
				Detail: fmt.Sprintf("%s read %q where %q was read before", who, e.Value, prev)})
			return
		}
		seenAt[loc] = e.Value
	}

	// Replicas agree below the lower of two high watermarks.
	byPartition := map[int][]ReplicaLog{}
	final := map[int]map[int64]string{} // partition -> offset -> value, committed on some replica
	for _, rl := range h.Replicas {
		byPartition[rl.Partition] = append(byPartition[rl.Partition], rl)
		committed := final[rl.Partition]
		if committed == nil {
			committed = map[int64]string{}
			final[rl.Partition] = committed
		}
		for _, e := range rl.Entries {
			if e.Offset < rl.HighWatermark {
				observe(rl.Partition, e, "replica "+rl.Node)
				committed[e.Offset] = e.Value
			}
		}
	}
	for p, logs := range byPartition {
		for i := 0; i < len(logs); i++ {
			for j := i + 1; j < len(logs); j++ {
				checkDivergence(r, p, logs[i], logs[j])
			}
		}
	}

	// Consumers read each partition in increasing offset order.
	consumed := map[string]bool{}
	for _, cr := range h.Consumers {
		last := int64(-1)
		for _, e := range cr.Entries {
			r.ConsumerReads++
			consumed[e.Value] = true
			observe(cr.Partition, e, "consumer "+cr.Consumer)
			if e.Offset <= last {
				r.add(Anomaly{Kind: KindNonMonotonic, Partition: cr.Partition, Offset: e.Offset, Value: e.Value,
					Detail: fmt.Sprintf("consumer %s read offset %d after %d", cr.Consumer, e.Offset, last)})
			}
			last = e.Offset
		}
	}

	// Every value appears at most once, and only if it was written.
	where := map[string][]location{}
	for p, entries := range final {
		for off, v := range entries {
			where[v] = append(where[v], location{p, off})
		}
	}
	for v, locs := range where {
		info := writes[v]
		if info == nil || (info.ok == nil && !info.anyUnknown) {
			detail := "a value no client wrote"
			if info != nil {
				detail = "every attempt to write it was refused"
			}
			r.add(Anomaly{Kind: KindUnexpected, Partition: locs[0].partition, Offset: locs[0].offset, Value: v, Detail: detail})
			continue
		}
		if len(locs) > 1 {
			r.Duplicates++
			sort.Slice(locs, func(i, j int) bool { return locs[i].offset < locs[j].offset })
			kind := KindDuplicate
			if info.anyUnknown {
				kind = KindDuplicateAfterRetry
			}
			r.add(Anomaly{Kind: kind, Partition: locs[1].partition, Offset: locs[1].offset, Value: v,
				Detail: fmt.Sprintf("also at offset %d", locs[0].offset)})
		}
	}

	// Every acknowledged write is in the final state, at its offset.
	for v, info := range writes {
		if info.ok == nil {
			continue
		}
		w := info.ok
		got, ok := final[w.Partition][w.Offset]
		switch {
		case !ok:
			r.add(Anomaly{Kind: KindLost, Partition: w.Partition, Offset: w.Offset, Value: v,
				Detail: "acknowledged, absent from every replica's committed log"})
		case got != v:
			r.add(Anomaly{Kind: KindLost, Partition: w.Partition, Offset: w.Offset, Value: v,
				Detail: fmt.Sprintf("acknowledged at this offset, which holds %q", got)})
		}
		if !consumed[v] {
			r.Unseen++
		}
	}
	return r
}

// checkDivergence compares two replicas of a partition below the lower of
// their high watermarks, where both must hold the same records.
func checkDivergence(r *Report, p int, a, b ReplicaLog) {
	bound := a.HighWatermark
	if b.HighWatermark < bound {
		bound = b.HighWatermark
	}
	am, bm := entryMap(a.Entries, bound), entryMap(b.Entries, bound)
	offsets := make([]int64, 0, len(am))
	for off := range am {
		offsets = append(offsets, off)
	}
	for off := range bm {
		if _, ok := am[off]; !ok {
			offsets = append(offsets, off)
		}
	}
	sort.Slice(offsets, func(i, j int) bool { return offsets[i] < offsets[j] })
	// From offset 0: the histories come from topics without retention, so
	// a replica without its first records lost them. (Comparing from the
	// later of the two first offsets, for retention's sake, let a wiped
	// replica that never fetched its log's start back pass.)
	for _, off := range offsets {
		av, aok := am[off]
		bv, bok := bm[off]
		if aok != bok || av != bv {
			r.add(Anomaly{Kind: KindDivergence, Partition: p, Offset: off, Value: av,
				Detail: fmt.Sprintf("%s has %q (present %v), %s has %q (present %v), both below HW %d", a.Node, av, aok, b.Node, bv, bok, bound)})
			return // the first divergence is what matters
		}
	}
}

func entryMap(entries []Entry, below int64) map[int64]string {
	m := make(map[int64]string, len(entries))
	for _, e := range entries {
		if e.Offset < below {
			m[e.Offset] = e.Value
		}
	}
	return m
}
