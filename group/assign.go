package group

import (
	"cmp"
	"slices"
)

// assign computes a group's target assignment: which member each partition
// of a subscribed topic should go to. It is deterministic: the same
// subscriptions, partition counts and previous target give the same result,
// whatever the order of the maps.
//
//  1. Sticky: a partition stays where the previous target put it when that
//     member is still there and subscribed to its topic.
//  2. The others (new partitions, those of members gone or no longer
//     subscribed) go one by one, in topic and partition order, to the
//     subscribed member with the fewest partitions, the smallest member id
//     among equals.
//  3. Balance: while some member a holds a partition of a topic that a
//     member b with at least two partitions fewer subscribes to, one such
//     partition moves from a to b (the most loaded a first, the least loaded
//     b), preferring partitions step 2 placed, which no member has yet.
//     Each move lowers the sum of the squared loads, so this ends. When all
//     members subscribe to the same topics, loads then differ by at most
//     one; otherwise no partition can move to a member two or more below
//     its holder.
//
// subs maps member ids to their topics (distinct); a topic missing from
// counts has no partitions.
func assign(subs map[string][]string, counts map[string]int32, previous map[TopicPartition]string) map[TopicPartition]string {
	ids := make([]string, 0, len(subs))
	subscribed := make(map[string]map[string]bool, len(subs))
	eligible := make(map[string][]string)
	for id, topics := range subs {
		ids = append(ids, id)
		set := make(map[string]bool, len(topics))
		for _, t := range topics {
			set[t] = true
			eligible[t] = append(eligible[t], id)
		}
		subscribed[id] = set
	}
	slices.Sort(ids)
	topics := make([]string, 0, len(eligible))
	for t, members := range eligible {
		if counts[t] > 0 {
			topics = append(topics, t)
			slices.Sort(members)
		}
	}
	slices.Sort(topics)

	target := make(map[TopicPartition]string)
	held := make(map[string][]TopicPartition, len(ids))
	// placed counts each member's partitions that the previous target did
	// not give it, so that movable does not search a member that has none
	// (when a member joins a group of thousands of partitions that all
	// stayed put, every move would scan them all).
	placed := make(map[string]int, len(ids))
	give := func(tp TopicPartition, id string) {
		target[tp] = id
		held[id] = append(held[id], tp)
		if previous[tp] != id {
			placed[id]++
		}
	}
	for _, t := range topics {
		for p := range counts[t] {
			tp := TopicPartition{t, p}
			if o, ok := previous[tp]; ok && subscribed[o][t] {
				give(tp, o)
			}
		}
	}
	for _, t := range topics {
		for p := range counts[t] {
			tp := TopicPartition{t, p}
			if _, ok := target[tp]; ok {
				continue
			}
			best := ""
			for _, id := range eligible[t] {
				if best == "" || len(held[id]) < len(held[best]) {
					best = id
				}
			}
			give(tp, best)
		}
	}

	byLoad := slices.Clone(ids)
	for {
		slices.SortFunc(byLoad, func(a, b string) int {
			return cmp.Or(cmp.Compare(len(held[a]), len(held[b])), cmp.Compare(a, b))
		})
		moved := false
		for i := len(byLoad) - 1; i >= 0 && !moved; i-- {
			a := byLoad[i]
			for _, b := range byLoad {
				if len(held[b])+1 >= len(held[a]) {
					break
				}
				if k := movable(held[a], subscribed[b], previous, a, placed[a] > 0); k >= 0 {
					tp := held[a][k]
					held[a] = slices.Delete(held[a], k, k+1)
					if previous[tp] != a {
						placed[a]--
					}
					give(tp, b)
					moved = true
					break
				}
			}
		}
		if !moved {
			return target
		}
	}
}

// movable returns the index in from (a's partitions) of the partition to
// move to a member subscribed to topics, or -1 if none can go: one the
// previous target did not give to a if there is one (step 2 placed it, so
// moving it changes nothing a was meant to keep), else the last one.
// anyPlaced says whether from holds any partition step 2 placed.
func movable(from []TopicPartition, topics map[string]bool, previous map[TopicPartition]string, a string, anyPlaced bool) int {
	pick := -1
	for k := len(from) - 1; k >= 0; k-- {
		tp := from[k]
		if !topics[tp.Topic] {
			continue
		}
		if !anyPlaced {
			return k
		}
		if previous[tp] != a {
			return k
		}
		if pick < 0 {
			pick = k
		}
	}
	return pick
}
