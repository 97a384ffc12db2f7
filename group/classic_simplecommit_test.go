package group

import (
	"testing"
	"time"
)

// A "simple" OffsetCommit (generation -1, no member id: a consumer using
// assign() with a group id, kcat -o with -G's group, an admin's offset
// reset) is taken while the group is Empty, Kafka's rule
// (validateOffsetCommit checks the group's state). A member id handed out
// with MEMBER_ID_REQUIRED and not used yet does not make a group
// non-Empty in Kafka (the pending member is not a member and the state
// does not change), so it does not refuse the commit either; a join phase
// under way does, even once every member left it.
func TestClassicSimpleCommitFollowsTheState(t *testing.T) {
	pending := func(g *Classic, id string, now time.Time) {
		req := joinReq("", id)
		req.RequireKnownMemberID = true
		g.Join(req, now)
	}
	tests := []struct {
		name      string
		setup     func(t *testing.T, g *Classic)
		wantState ClassicState
		want      error // nil: taken
	}{
		{"new group", func(*testing.T, *Classic) {}, ClassicEmpty, nil},
		{"a member id handed out", func(_ *testing.T, g *Classic) { pending(g, "p1", t0) }, ClassicEmpty, nil},
		{"two member ids handed out", func(_ *testing.T, g *Classic) {
			pending(g, "p1", t0)
			pending(g, "p2", t0)
		}, ClassicEmpty, nil},
		{"emptied, then a member id handed out", func(t *testing.T, g *Classic) {
			join(t, g, joinReq("", "a"), t0, true)
			g.Leave([]string{"a"}, t0)
			pending(g, "p1", t0)
		}, ClassicEmpty, nil},
		{"a member", func(t *testing.T, g *Classic) {
			join(t, g, joinReq("", "a"), t0, true)
			sync(t, g, "a", 1, nil, t0, true)
		}, ClassicStable, ErrUnknownMember},
		{"a member awaiting its assignment", func(t *testing.T, g *Classic) {
			join(t, g, joinReq("", "a"), t0, true)
		}, ClassicCompletingRebalance, ErrUnknownMember},
		{"the last member left during a join phase that waits for a member id", func(t *testing.T, g *Classic) {
			join(t, g, joinReq("", "a"), t0, true)
			sync(t, g, "a", 1, nil, t0, true)
			pending(g, "p1", t0)
			join(t, g, joinReq("", "b"), t0, false) // a join phase
			g.Leave([]string{"a", "b"}, t0)
		}, ClassicPreparingRebalance, ErrUnknownMember},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newClassic(t)
			tt.setup(t, g)
			if g.State() != tt.wantState {
				t.Fatalf("state %v, want %v", g.State(), tt.wantState)
			}
			err := g.CheckCommit("", -1)
			if tt.want == nil && err != nil {
				t.Fatalf("simple commit to a group %v with %d members and member ids: %v, want it taken", g.State(), g.Members(), err)
			}
			if tt.want != nil {
				wantErr(t, "simple commit", err, tt.want)
			}
		})
	}
}
