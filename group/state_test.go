package group

import (
	"errors"
	"testing"
	"time"
)

func TestRestoreRefusesInconsistentState(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	member := func(id string, epoch int32, assigned ...GrantState) MemberState {
		return MemberState{ID: id, Topics: []string{"t"}, SessionTimeoutMS: 10_000, Epoch: epoch, Assigned: assigned}
	}
	tests := []struct {
		name  string
		state State
	}{
		{"partition owned twice", State{Epoch: 2, Members: []MemberState{
			member("a", 2, GrantState{"t", 0, 2}), member("b", 2, GrantState{"t", 0, 2})}}},
		{"grant ahead of its member", State{Epoch: 3, Members: []MemberState{member("a", 2, GrantState{"t", 0, 3})}}},
		{"member ahead of the group", State{Epoch: 1, Members: []MemberState{member("a", 2)}}},
		{"member twice", State{Epoch: 2, Members: []MemberState{member("a", 2), member("a", 2)}}},
		{"no session timeout", State{Epoch: 2, Members: []MemberState{{ID: "a", Topics: []string{"t"}, Epoch: 1}}}},
		{"no topics", State{Epoch: 2, Members: []MemberState{{ID: "a", SessionTimeoutMS: 1000, Epoch: 1}}}},
		{"target names no member", State{Epoch: 2, Target: []TargetEntry{{"t", 0, "ghost"}}}},
		{"target twice", State{Epoch: 2, Members: []MemberState{member("a", 2)},
			Target: []TargetEntry{{"t", 0, "a"}, {"t", 0, "a"}}}},
		{"no partitions", State{Epoch: 2, Partitions: map[string]int32{"t": 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Restore("g", Options{}, tt.state, now); !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("Restore = %v, want ErrInvalidInput", err)
			}
		})
	}
}

func TestRestoreKeepsMembersAlive(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	g, _ := New("g", Options{})
	if err := g.SetPartitions("t", 4); err != nil {
		t.Fatal(err)
	}
	r, err := g.Join("a", []string{"t"}, 10*time.Second, now)
	if err != nil {
		t.Fatal(err)
	}
	// The new coordinator takes over 9 s later: the member gets a whole
	// session timeout from then, and its epoch and partitions stay valid.
	later := now.Add(9 * time.Second)
	h, err := Restore("g", Options{}, g.State(), later)
	if err != nil {
		t.Fatal(err)
	}
	if dead := h.Tick(later.Add(9 * time.Second)); len(dead) != 0 {
		t.Fatalf("Tick expired %v within the session timeout after the takeover", dead)
	}
	if err := h.CheckCommit("a", r.MemberEpoch, TopicPartition{"t", 3}); err != nil {
		t.Fatalf("CheckCommit after Restore: %v", err)
	}
	if _, err := h.Heartbeat("a", r.MemberEpoch, r.Assigned, later); err != nil {
		t.Fatalf("Heartbeat after Restore: %v", err)
	}
	if dead := h.Tick(later.Add(18 * time.Second)); len(dead) != 1 {
		t.Fatalf("Tick = %v a whole session timeout after the last heartbeat, want [a]", dead)
	}
}
