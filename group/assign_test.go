package group

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/logagent/logagent/internal/testseed"
)

// byMember turns a target into member -> partitions, each list in order.
func byMember(target map[TopicPartition]string) map[string][]TopicPartition {
	out := map[string][]TopicPartition{}
	for _, tp := range slices.SortedFunc(maps.Keys(target), compareTP) {
		out[target[tp]] = append(out[target[tp]], tp)
	}
	return out
}

func tps(topic string, parts ...int32) []TopicPartition {
	var out []TopicPartition
	for _, p := range parts {
		out = append(out, TopicPartition{topic, p})
	}
	return out
}

func TestAssign(t *testing.T) {
	all := func(ids ...string) map[string][]string {
		m := map[string][]string{}
		for _, id := range ids {
			m[id] = []string{"t"}
		}
		return m
	}
	prev := func(owners map[string][]TopicPartition) map[TopicPartition]string {
		m := map[TopicPartition]string{}
		for id, ps := range owners {
			for _, tp := range ps {
				m[tp] = id
			}
		}
		return m
	}
	tests := []struct {
		name     string
		subs     map[string][]string
		counts   map[string]int32
		previous map[TopicPartition]string
		want     map[string][]TopicPartition
	}{
		{name: "one member takes all", subs: all("a"), counts: map[string]int32{"t": 3},
			want: map[string][]TopicPartition{"a": tps("t", 0, 1, 2)}},
		{name: "fresh spread, ties by member id", subs: all("b", "a", "c"), counts: map[string]int32{"t": 4},
			want: map[string][]TopicPartition{"a": tps("t", 0, 3), "b": tps("t", 1), "c": tps("t", 2)}},
		{name: "a joining member takes only from the loaded one", subs: all("a", "b", "c"), counts: map[string]int32{"t": 6},
			previous: prev(map[string][]TopicPartition{"a": tps("t", 0, 1, 2, 3), "b": tps("t", 4, 5)}),
			want:     map[string][]TopicPartition{"a": tps("t", 0, 1), "b": tps("t", 4, 5), "c": tps("t", 2, 3)}},
		{name: "a leaving member's partitions go to the least loaded", subs: all("a", "c"), counts: map[string]int32{"t": 5},
			previous: prev(map[string][]TopicPartition{"a": tps("t", 0, 1), "b": tps("t", 2, 3), "c": tps("t", 4)}),
			want:     map[string][]TopicPartition{"a": tps("t", 0, 1, 3), "c": tps("t", 2, 4)}},
		{name: "growth goes to the least loaded", subs: all("a", "b"), counts: map[string]int32{"t": 4},
			previous: prev(map[string][]TopicPartition{"a": tps("t", 0), "b": tps("t", 1)}),
			want:     map[string][]TopicPartition{"a": tps("t", 0, 2), "b": tps("t", 1, 3)}},
		{name: "shrink drops what is gone", subs: all("a", "b"), counts: map[string]int32{"t": 2},
			previous: prev(map[string][]TopicPartition{"a": tps("t", 0, 2), "b": tps("t", 1, 3)}),
			want:     map[string][]TopicPartition{"a": tps("t", 0), "b": tps("t", 1)}},
		{name: "an unsubscribed topic's partitions move, and balance follows", subs: map[string][]string{"a": {"t"}, "b": {"t", "u"}},
			counts:   map[string]int32{"t": 2, "u": 2},
			previous: prev(map[string][]TopicPartition{"a": append(tps("t", 0), tps("u", 0, 1)...), "b": tps("t", 1)}),
			want:     map[string][]TopicPartition{"a": tps("t", 0, 1), "b": tps("u", 0, 1)}},
		{name: "heterogeneous: the only subscriber of a topic may be loaded", subs: map[string][]string{"a": {"t"}, "b": {"t", "u"}},
			counts: map[string]int32{"t": 2, "u": 4},
			want:   map[string][]TopicPartition{"a": tps("t", 0, 1), "b": tps("u", 0, 1, 2, 3)}},
		{name: "no partitions known", subs: all("a"), counts: map[string]int32{},
			want: map[string][]TopicPartition{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := byMember(assign(tt.subs, tt.counts, tt.previous))
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("assign = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestAssignProperties checks random subscriptions and previous targets:
// every partition of a subscribed topic goes to exactly one subscriber; no
// partition could move to a member two or more below its holder (with equal
// subscriptions: loads differ by at most one); the result does not depend
// on map order; and a member leaving or joining a balanced group of equal
// subscriptions moves only what it must (the others only gain, or only
// lose).
func TestAssignProperties(t *testing.T) {
	rng := testseed.Rand(t)
	topics := []string{"a", "b", "c", "d"}
	for round := range 3000 {
		counts := map[string]int32{}
		for _, tp := range topics {
			if n := rng.IntN(9); n > 0 {
				counts[tp] = int32(n)
			}
		}
		same := rng.IntN(2) == 0
		subs := map[string][]string{}
		for i := range 1 + rng.IntN(6) {
			var ts []string
			for _, tp := range topics {
				if same || rng.IntN(2) == 0 {
					ts = append(ts, tp)
				}
			}
			if len(ts) == 0 {
				ts = topics[:1]
			}
			subs[fmt.Sprintf("m%d", i)] = ts
		}
		previous := map[TopicPartition]string{}
		ids := slices.Sorted(maps.Keys(subs))
		for tp, n := range counts {
			for p := range n + 2 {
				if rng.IntN(3) > 0 {
					previous[TopicPartition{tp, p}] = ids[rng.IntN(len(ids))] + []string{"", "x"}[rng.IntN(2)]
				}
			}
		}
		got := assign(subs, counts, previous)
		checkTarget(t, round, subs, counts, got)
		if again := assign(subs, counts, previous); !maps.Equal(got, again) {
			t.Fatalf("round %d: assign is not deterministic", round)
		}
		if !same || len(ids) < 2 {
			continue
		}
		// Leaving: the others keep everything they had.
		gone := ids[rng.IntN(len(ids))]
		rest := maps.Clone(subs)
		delete(rest, gone)
		after := assign(rest, counts, got)
		checkTarget(t, round, rest, counts, after)
		for tp, id := range got {
			if id != gone && after[tp] != id {
				t.Fatalf("round %d: %s left, and %v moved from %s to %s", round, gone, tp, id, after[tp])
			}
		}
		// Joining: the others only give up.
		joined := maps.Clone(subs)
		joined["new"] = subs[ids[0]]
		after = assign(joined, counts, got)
		checkTarget(t, round, joined, counts, after)
		for tp, id := range after {
			if id != "new" && got[tp] != id {
				t.Fatalf("round %d: new joined, and %v moved from %s to %s", round, tp, got[tp], id)
			}
		}
	}
}

func checkTarget(t *testing.T, round int, subs map[string][]string, counts map[string]int32, target map[TopicPartition]string) {
	t.Helper()
	load := map[string]int{}
	for tp, id := range target {
		if !slices.Contains(subs[id], tp.Topic) {
			t.Fatalf("round %d: %v given to %s, not subscribed", round, tp, id)
		}
		if tp.Partition < 0 || tp.Partition >= counts[tp.Topic] {
			t.Fatalf("round %d: %v does not exist", round, tp)
		}
		load[id]++
	}
	for id, ts := range subs {
		for _, tp := range ts {
			for p := range counts[tp] {
				if _, ok := target[TopicPartition{tp, p}]; !ok {
					t.Fatalf("round %d: %s/%d unassigned, %s subscribes to it", round, tp, p, id)
				}
			}
		}
	}
	same := true
	for a, ta := range subs {
		same = same && slices.Equal(ta, subs[slices.Sorted(maps.Keys(subs))[0]])
		for b, tb := range subs {
			if load[a] < load[b]+2 {
				continue
			}
			for tp, id := range target {
				if id == a && slices.Contains(tb, tp.Topic) {
					t.Fatalf("round %d: %s holds %d, %s holds %d, and %v could move", round, a, load[a], b, load[b], tp)
				}
			}
		}
	}
	if same && len(subs) > 0 {
		lo, hi := -1, 0
		for id := range subs {
			if lo < 0 || load[id] < lo {
				lo = load[id]
			}
			hi = max(hi, load[id])
		}
		if hi-lo > 1 {
			t.Fatalf("round %d: equal subscriptions, loads from %d to %d", round, lo, hi)
		}
	}
}
