package reassign

import (
	"slices"
	"testing"
	"time"
)

func TestReplace(t *testing.T) {
	cases := []struct {
		name     string
		replicas []string
		dead     []string
		alive    []string
		load     map[string]int
		want     []string
		ok       bool
	}{
		{"the one live agent without a replica takes the dead one's place",
			[]string{"n1", "n2", "n3"}, []string{"n2"}, []string{"n1", "n3", "n4"}, nil,
			[]string{"n1", "n4", "n3"}, true},
		{"the dead preferred leader is replaced in first place",
			[]string{"n3", "n1", "n2"}, []string{"n3"}, []string{"n1", "n2", "n4"}, nil,
			[]string{"n4", "n1", "n2"}, true},
		{"the least loaded live agent, then the lower id",
			[]string{"n1", "n2", "n3"}, []string{"n3"}, []string{"n1", "n2", "n4", "n5", "n6"},
			map[string]int{"n4": 5, "n5": 2, "n6": 2},
			[]string{"n1", "n2", "n5"}, true},
		{"two dead: each pick counts before the next, no agent twice",
			[]string{"n1", "n2", "n3"}, []string{"n1", "n2"}, []string{"n3", "n4", "n5"},
			map[string]int{"n4": 1, "n5": 1},
			[]string{"n4", "n5", "n3"}, true},
		{"no live agent without a replica: wait",
			[]string{"n1", "n2", "n3"}, []string{"n2"}, []string{"n1", "n3"}, nil,
			nil, false},
		{"only one of two dead replaceable: wait rather than shrink",
			[]string{"n1", "n2", "n3"}, []string{"n1", "n2"}, []string{"n3", "n4"}, nil,
			nil, false},
		{"a dead agent is never a candidate (alive lists the live ones only)",
			[]string{"n1", "n2"}, []string{"n2"}, []string{"n1"}, nil,
			nil, false},
		{"nothing dead: no move",
			[]string{"n1", "n2", "n3"}, nil, []string{"n1", "n2", "n3", "n4"}, nil,
			nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			load := map[string]int{}
			for k, v := range c.load {
				load[k] = v
			}
			got, ok := Replace(c.replicas, c.dead, c.alive, load)
			if ok != c.ok || !slices.Equal(got, c.want) {
				t.Fatalf("Replace = %v, %v; want %v, %v", got, ok, c.want, c.ok)
			}
			if len(load) != len(c.load) {
				t.Fatalf("Replace changed the caller's load: %v", load)
			}
		})
	}
}

func TestDeadSince(t *testing.T) {
	t0 := time.Unix(1000, 0)
	d := DeadSince{}
	d.Observe([]string{"n3"}, t0)
	d.Observe([]string{"n3", "n2"}, t0.Add(20*time.Second))
	replicas := []string{"n1", "n2", "n3"}
	steps := []struct {
		at    time.Duration
		after time.Duration
		want  []string
	}{
		{29 * time.Second, 30 * time.Second, nil},
		{30 * time.Second, 30 * time.Second, []string{"n3"}},
		{50 * time.Second, 30 * time.Second, []string{"n2", "n3"}},
		{time.Hour, 0, nil}, // off
	}
	for _, s := range steps {
		if got := d.Due(replicas, s.after, t0.Add(s.at)); !slices.Equal(got, s.want) {
			t.Errorf("Due(after %s) at +%s = %v, want %v", s.after, s.at, got, s.want)
		}
	}
	// n3 came back, then died again: it counts from its new death.
	d.Observe([]string{"n2"}, t0.Add(60*time.Second))
	d.Observe([]string{"n2", "n3"}, t0.Add(70*time.Second))
	if got := d.Due(replicas, 30*time.Second, t0.Add(90*time.Second)); !slices.Equal(got, []string{"n2"}) {
		t.Errorf("after n3 came back and died again: Due = %v, want [n2]", got)
	}
}

func TestStalledSince(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const after = time.Minute
	s := StalledSince{}
	steps := []struct {
		name  string
		at    time.Duration
		added []Added
		want  []string
	}{
		{"first look: the count starts", 0,
			[]Added{{ID: "n4", LogEnd: -1}, {ID: "n5", LogEnd: 0}}, nil},
		{"not yet for after", after - time.Second,
			[]Added{{ID: "n4", LogEnd: -1}, {ID: "n5", LogEnd: 100}}, nil},
		{"n4 never fetched for after: stalled; n5 moved and counts from then", after,
			[]Added{{ID: "n4", LogEnd: -1}, {ID: "n5", LogEnd: 100}}, []string{"n4"}},
		{"n5 unmoved for after too", 2*after - time.Second,
			[]Added{{ID: "n4", LogEnd: -1}, {ID: "n5", LogEnd: 100}}, []string{"n4", "n5"}},
		{"n4 fetched at last: its count starts again; n5 in the ISR is done", 2 * after,
			[]Added{{ID: "n4", LogEnd: 5}, {ID: "n5", LogEnd: 100, InSync: true}}, nil},
		{"n5 out of the ISR again counts afresh", 3*after - time.Second,
			[]Added{{ID: "n4", LogEnd: 5}, {ID: "n5", LogEnd: 100}}, nil},
		{"n4 unmoved since", 3 * after,
			[]Added{{ID: "n4", LogEnd: 5}, {ID: "n5", LogEnd: 100}}, []string{"n4"}},
		{"a replica no longer added is forgotten", 4 * after,
			[]Added{{ID: "n5", LogEnd: 100}}, []string{"n5"}},
	}
	for _, st := range steps {
		now := t0.Add(st.at)
		s.Observe(st.added, now)
		if got := s.Stalled(after, now); !slices.Equal(got, st.want) {
			t.Fatalf("%s: Stalled at +%s = %v, want %v", st.name, st.at, got, st.want)
		}
	}
	if got := s.Stalled(0, t0.Add(time.Hour)); got != nil {
		t.Fatalf("with self-healing off (after 0) Stalled = %v, want none", got)
	}
}
