package reassign

import (
	"fmt"
	"slices"
	"testing"

	"github.com/logagent/logagent/internal/testseed"
)

// spread is each agent's count of replicas and of preferred leaders
// after the changes.
func spread(parts []Placement, changes []Change, agents []string) (replicas, leaders map[string]int) {
	replicas, leaders = map[string]int{}, map[string]int{}
	for _, a := range agents {
		replicas[a], leaders[a] = 0, 0
	}
	for _, p := range parts {
		r := p.Replicas
		for _, c := range changes {
			if c.Topic == p.Topic && c.Partition == p.Partition {
				r = c.To
			}
		}
		for j, n := range r {
			replicas[n]++
			if j == 0 {
				leaders[n]++
			}
		}
	}
	return replicas, leaders
}

func within1(m map[string]int, agents []string) bool {
	var v []int
	for _, a := range agents {
		v = append(v, m[a])
	}
	return slices.Max(v)-slices.Min(v) <= 1
}

// roundRobin is n partitions of rf replicas placed over agents as topic
// creation does (partition p starts at agent p).
func roundRobin(topic string, n, rf int, agents []string) []Placement {
	var out []Placement
	for p := range n {
		var r []string
		for j := range rf {
			r = append(r, agents[(p+j)%len(agents)])
		}
		out = append(out, Placement{Topic: topic, Partition: p, Replicas: r})
	}
	return out
}

func TestRebalance(t *testing.T) {
	four := []string{"n1", "n2", "n3", "n4"}
	five := append(slices.Clone(four), "n5")
	cases := []struct {
		name   string
		parts  []Placement
		agents []string
		// moves is the number of changes wanted, -1 for any.
		moves int
		// balanced says both counts end within one.
		balanced bool
	}{
		{"balanced already: no move", roundRobin("t", 8, 3, four), four, 0, true},
		{"a fifth agent joins", roundRobin("t", 10, 3, four), five, -1, true},
		{"everything on three of five", roundRobin("t", 6, 3, four[:3]), five, -1, true},
		{"RF 1 topic piled on one agent", []Placement{
			{"a", 0, []string{"n1"}, false}, {"a", 1, []string{"n1"}, false}, {"a", 2, []string{"n1"}, false}, {"a", 3, []string{"n1"}, false},
		}, four, 3, true},
		{"only the order is off: preferred leaders reordered, nothing copied", []Placement{
			{"a", 0, []string{"n1", "n2"}, false}, {"a", 1, []string{"n1", "n2"}, false}, {"a", 2, []string{"n1", "n2"}, false}, {"a", 3, []string{"n1", "n2"}, false},
		}, four[:2], 2, true},
		{"a partition being moved, or on an agent not listed, stays", []Placement{
			{"a", 0, []string{"n1", "n2"}, true}, {"a", 1, []string{"n1", "n9"}, false}, {"a", 2, []string{"n1", "n2"}, false},
		}, []string{"n1", "n2", "n3"}, 1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			changes := Rebalance(c.parts, c.agents)
			if c.moves >= 0 && len(changes) != c.moves {
				t.Errorf("%d changes, want %d: %+v", len(changes), c.moves, changes)
			}
			checkChanges(t, c.parts, changes, c.agents)
			replicas, leaders := spread(c.parts, changes, c.agents)
			if c.balanced && (!within1(replicas, c.agents) || !within1(leaders, c.agents)) {
				t.Errorf("not balanced: replicas %v, preferred leaders %v", replicas, leaders)
			}
			if again := Rebalance(c.parts, c.agents); fmt.Sprint(again) != fmt.Sprint(changes) {
				t.Errorf("not deterministic: %v then %v", changes, again)
			}
		})
	}
}

// checkChanges: every change keeps the partition's replication factor
// and repeats no agent, touches only movable partitions, and moves only
// to listed agents.
func checkChanges(t *testing.T, parts []Placement, changes []Change, agents []string) {
	t.Helper()
	for _, ch := range changes {
		i := slices.IndexFunc(parts, func(p Placement) bool { return p.Topic == ch.Topic && p.Partition == ch.Partition })
		if i < 0 || !slices.Equal(parts[i].Replicas, ch.From) || parts[i].Moving {
			t.Errorf("change %+v of a partition that is not movable as given", ch)
			continue
		}
		if len(ch.To) != len(ch.From) {
			t.Errorf("change %+v alters the replication factor", ch)
		}
		for j, n := range ch.To {
			if slices.Contains(ch.To[:j], n) || !slices.Contains(agents, n) {
				t.Errorf("change %+v repeats %s or names an agent not listed", ch, n)
			}
		}
	}
}

// TestRebalanceRandom: any placement of movable partitions over agents
// ends with replica counts within one; with one replication factor (one
// topic, or topics alike) the preferred leaders too. With RF 1 and RF 3
// mixed, reordering cannot always even out the leaders (an RF 1
// partition's leader can only change by a copy), so only replicas are
// checked then.
func TestRebalanceRandom(t *testing.T) {
	rng := testseed.Rand(t)
	for trial := range 400 {
		mixed := trial%2 == 1
		n := 2 + rng.IntN(6)
		uniform := 1 + rng.IntN(min(3, n))
		var agents []string
		for i := range n {
			agents = append(agents, fmt.Sprintf("n%d", i+1))
		}
		var parts []Placement
		for p := range 1 + rng.IntN(30) {
			rf := uniform
			if mixed {
				rf = 1 + rng.IntN(min(3, n))
			}
			r := slices.Clone(agents)
			rng.Shuffle(len(r), func(i, j int) { r[i], r[j] = r[j], r[i] })
			parts = append(parts, Placement{Topic: "t", Partition: p, Replicas: r[:rf]})
		}
		changes := Rebalance(parts, agents)
		checkChanges(t, parts, changes, agents)
		replicas, leaders := spread(parts, changes, agents)
		if !within1(replicas, agents) || (!mixed && !within1(leaders, agents)) {
			t.Fatalf("%v over %v: not balanced after %v: replicas %v, preferred leaders %v", parts, agents, changes, replicas, leaders)
		}
	}
}
