package reassign

import (
	"cmp"
	"slices"
)

// Placement is one partition's replicas as the planner sees them. A
// partition being moved (Moving) is left as it is, and so is one with a
// replica on an agent outside the planner's agents (dead or being
// drained: self-healing and the drain move those); their replicas still
// count.
type Placement struct {
	Topic     string
	Partition int
	Replicas  []string
	Moving    bool
}

// Change is one partition's move in a rebalance plan: From its replicas
// To the target.
type Change struct {
	Topic     string
	Partition int
	From, To  []string
}

// Rebalance plans the moves that even out, over agents, the replicas and
// the preferred leaders (a partition's first replica): after them each
// agent's count of either is within one of every other's, as far as the
// movable partitions allow. Replicas are moved first, each from the agent
// with the most to the one with the fewest, in a partition holding the
// first and not the second (one where it is not the preferred leader
// first); then preferred leaders, by reordering replicas so that the agent
// with the fewest leads one more partition and the one with the most one
// fewer (moves that copy nothing): directly when a partition the first
// leads holds the second, else along a chain of such partitions through
// other agents, whose counts stay. Each step lowers the sum of the squared
// counts, so it ends; ties go to the lower node id and the earlier
// partition, so the plan is the same for the same input. The moves come
// in the order of parts.
func Rebalance(parts []Placement, agents []string) []Change {
	cur := make([][]string, len(parts))
	movable := make([]bool, len(parts))
	for i, p := range parts {
		cur[i] = slices.Clone(p.Replicas)
		movable[i] = !p.Moving && !slices.ContainsFunc(p.Replicas, func(n string) bool { return !slices.Contains(agents, n) })
	}
	sorted := slices.Sorted(slices.Values(agents))
	counts := func(first bool) map[string]int {
		c := make(map[string]int, len(sorted))
		for _, a := range sorted {
			c[a] = 0
		}
		for _, r := range cur {
			for j, n := range r {
				if _, ok := c[n]; ok && (!first || j == 0) {
					c[n]++
				}
			}
		}
		return c
	}
	// byCount is the agents from the fewest to the most, then by id.
	byCount := func(c map[string]int) []string {
		return slices.SortedStableFunc(slices.Values(sorted), func(a, b string) int { return cmp.Compare(c[a], c[b]) })
	}
	for {
		c := counts(false)
		order := byCount(c)
		if !moveOne(cur, movable, order, c, func(r []string, hi, lo string) bool {
			i := slices.Index(r, hi)
			if i < 0 || slices.Contains(r, lo) {
				return false
			}
			r[i] = lo
			return true
		}) {
			break
		}
	}
	for {
		c := counts(true)
		if !moveLeader(cur, movable, byCount(c), c) {
			break
		}
	}
	var out []Change
	for i, p := range parts {
		if !slices.Equal(cur[i], p.Replicas) {
			out = append(out, Change{Topic: p.Topic, Partition: p.Partition, From: slices.Clone(p.Replicas), To: cur[i]})
		}
	}
	return out
}

// moveOne applies step to one movable partition, taking a unit from an
// agent with the most (the last of order) to the one with the fewest that
// a partition allows, among pairs more than one apart; it reports whether
// it did. For replica moves a partition where hi is not the first replica
// is tried before one where it is, so preferred leaders move only when
// they must.
func moveOne(cur [][]string, movable []bool, order []string, c map[string]int, step func(r []string, hi, lo string) bool) bool {
	for h := len(order) - 1; h >= 0; h-- {
		hi := order[h]
		for _, lo := range order {
			if c[hi]-c[lo] <= 1 {
				break
			}
			for _, notFirst := range []bool{true, false} {
				for i, r := range cur {
					if !movable[i] || (notFirst && len(r) > 0 && r[0] == hi) {
						continue
					}
					if step(r, hi, lo) {
						return true
					}
				}
			}
		}
	}
	return false
}

// moveLeader moves one preferred leadership from an agent with the most
// (the last of order) to one with the fewest, more than one apart: a
// breadth-first search over "a movable partition led by A holds B" finds
// the shortest chain hi -> ... -> lo, and each partition on it is
// reordered so that the next agent leads it. It reports whether it did.
func moveLeader(cur [][]string, movable []bool, order []string, c map[string]int) bool {
	for h := len(order) - 1; h >= 0; h-- {
		hi := order[h]
		// via[b] is the partition whose reordering hands b the lead, on
		// the chain from hi.
		via := map[string]int{hi: -1}
		queue := []string{hi}
		for len(queue) > 0 {
			a := queue[0]
			queue = queue[1:]
			for i, r := range cur {
				if !movable[i] || len(r) == 0 || r[0] != a {
					continue
				}
				for _, b := range r[1:] {
					if _, seen := via[b]; !seen {
						via[b] = i
						queue = append(queue, b)
					}
				}
			}
		}
		for _, lo := range order {
			if c[hi]-c[lo] <= 1 {
				break
			}
			if _, ok := via[lo]; !ok {
				continue
			}
			// Walk back from lo: each step's partition is led by the
			// agent before it.
			for b := lo; b != hi; {
				r := cur[via[b]]
				a := r[0]
				j := slices.Index(r, b)
				r[0], r[j] = r[j], r[0]
				b = a
			}
			return true
		}
	}
	return false
}
