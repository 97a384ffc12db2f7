package partition

import (
	"errors"
	"maps"
	"testing"
	"time"
)

// TestHealLimiter: one replica of an agent at a time starts a healing
// move, until the metadata shows it (the partition's replicas key past
// the index the start decided from, even if the move is over by then),
// its start failed, or healHoldMax passed.
func TestHealLimiter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	indexes := map[string]uint64{}
	replicasIndex := func(topic string, _ int) uint64 { return indexes[topic] }
	steps := []struct {
		name    string
		indexes map[string]uint64
		topic   string
		at      time.Duration
		want    bool
	}{
		{"the first start takes the turn", map[string]uint64{"a": 10, "b": 11, "c": 12}, "a", 0, true},
		{"a second one waits while the metadata does not show the first", map[string]uint64{"a": 10, "b": 11, "c": 12}, "b", time.Second, false},
		{"it may once it does (the move already over)", map[string]uint64{"a": 30, "b": 11, "c": 12}, "b", 2 * time.Second, true},
		{"then a third waits for b's", map[string]uint64{"a": 30, "b": 11, "c": 12}, "c", 3 * time.Second, false},
		{"or for healHoldMax", map[string]uint64{"a": 30, "b": 11, "c": 12}, "c", 2*time.Second + healHoldMax, true},
		{"b's topic deleted does not free c's turn", map[string]uint64{"a": 30, "c": 12}, "d", 3*time.Second + healHoldMax, false},
	}
	l := &healLimiter{}
	for _, s := range steps {
		indexes = s.indexes
		if got := l.take(replicasIndex, s.topic, 0, indexes[s.topic], t0.Add(s.at)); got != s.want {
			t.Fatalf("%s: take(%s) = %v, want %v", s.name, s.topic, got, s.want)
		}
	}
	l.release("c", 0)
	if !l.take(replicasIndex, "d", 0, 0, t0.Add(time.Minute)) {
		t.Fatal("a start after the held one failed (released) must take the turn")
	}
	l.release("c", 0) // not the holder: no effect
	if l.take(replicasIndex, "e", 0, 0, t0.Add(time.Minute+time.Second)) {
		t.Fatal("a release by another partition than the holder freed the turn")
	}
}

// TestFailedHealStartOfAnEndedLeadershipFreesTheTurn: a start of a
// re-placing holds the agent's turn (healLimiter) until the metadata shows
// it. One that failed gives the turn back; so must one whose answer comes
// after the leadership that sent it ended (its generation gone): the
// metadata never shows a start that failed, and every other replica of the
// agent waited healHoldMax (10 s) to re-place anything.
func TestFailedHealStartOfAnEndedLeadershipFreesTheTurn(t *testing.T) {
	t0 := time.Unix(1000, 0)
	heals := &healLimiter{}
	indexes := map[string]uint64{"a": 10, "b": 20}
	replicasIndex := func(topic string, _ int) uint64 { return indexes[topic] }
	if !heals.take(replicasIndex, "a", 0, 10, t0) {
		t.Fatal("the first start did not take the turn")
	}
	r := &Replica{deps: &Deps{heals: heals, Now: func() time.Time { return t0 }}, topic: "a", partition: 0, gen: 2}
	r.onHealResult(healResult{gen: 1, target: []string{"n1", "n2", "n4"}, err: errors.New("refused")})
	if !heals.take(replicasIndex, "b", 0, 20, t0.Add(time.Second)) {
		t.Fatal("a failed start of an ended leadership kept the agent's turn: other partitions wait healHoldMax")
	}
}

// TestDrainGuards: a move re-placing drained replicas names their drain
// keys' indexes for its start to check; a replica dead (drained or not) is
// re-placed either way and names none.
func TestDrainGuards(t *testing.T) {
	index := map[string]uint64{"n2": 7, "n3": 9, "n4": 11}
	cases := []struct {
		name      string
		due, dead []string
		want      map[string]uint64
	}{
		{"drained only", []string{"n2"}, nil, map[string]uint64{"n2": 7}},
		{"two drained, one dead", []string{"n3", "n2", "n4"}, []string{"n3"}, map[string]uint64{"n2": 7, "n4": 11}},
		{"dead (its drain key, n3's, is no guard)", []string{"n3"}, []string{"n3"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := drainGuards(c.due, c.dead, func(node string) uint64 { return index[node] })
			if !maps.Equal(got, c.want) {
				t.Fatalf("drainGuards(%v, dead %v) = %v, want %v", c.due, c.dead, got, c.want)
			}
		})
	}
}
