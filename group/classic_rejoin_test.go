package group

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// A member id handed out with MEMBER_ID_REQUIRED and never used (the
// client's answer was lost and it joined again as another id, or it gave
// up) expires with its session; in Kafka that removal rebalances nothing
// (removePendingMemberAndUpdateGroup only completes a join phase under
// way). A Stable group must stay Stable at the same generation.
func TestClassicUnusedPendingIDExpiryDoesNotRebalanceStableGroup(t *testing.T) {
	g := newClassic(t)
	t0 := time.Unix(1000, 0)
	r := join(t, g, joinReq("", "a"), t0, true)
	sync(t, g, "a", r.Generation, map[string][]byte{"a": []byte("p0,p1")}, t0, true)
	gen := g.Generation()
	// A new v4 member's first join: its id is handed out, never used.
	req := joinReq("", "ghost")
	req.RequireKnownMemberID = true
	if _, _, err := g.Join(req, t0.Add(time.Second)); err == nil {
		t.Fatal("want MEMBER_ID_REQUIRED")
	}
	// a heartbeats; the ghost id expires with its session.
	now := t0
	for i := 0; i < 20; i++ {
		now = now.Add(time.Second)
		if err := g.Heartbeat("a", gen, now); err != nil {
			t.Fatalf("heartbeat at %v: %v", now.Sub(t0), err)
		}
		if d := g.Deadline(); !d.IsZero() && !now.Before(d) {
			g.Tick(now)
		}
	}
	if g.State() != ClassicStable || g.Generation() != gen {
		t.Fatalf("after an unused member id expired: state %v generation %d, want Stable generation %d (a rebalance for nothing)",
			g.State(), g.Generation(), gen)
	}
	if err := g.CheckCommit("a", gen); err != nil {
		t.Fatalf("commit of the stable member: %v", err)
	}
}

// The same for a LeaveGroup naming an unused member id.
func TestClassicLeaveOfPendingIDDoesNotRebalanceStableGroup(t *testing.T) {
	g := newClassic(t)
	t0 := time.Unix(1000, 0)
	r := join(t, g, joinReq("", "a"), t0, true)
	sync(t, g, "a", r.Generation, map[string][]byte{"a": []byte("p0")}, t0, true)
	gen := g.Generation()
	req := joinReq("", "ghost")
	req.RequireKnownMemberID = true
	g.Join(req, t0)
	g.Leave([]string{"ghost"}, t0)
	if g.State() != ClassicStable || g.Generation() != gen {
		t.Fatalf("after a pending id left: state %v generation %d, want Stable generation %d", g.State(), g.Generation(), gen)
	}
}

// Followers held in SyncGroup for the leader's assignment send no
// heartbeats (franz-go, sarama: heartbeats start after the sync). Kafka
// keeps a member awaiting its sync alive (MemberMetadata.shouldKeepAlive:
// awaitingSyncCallback != nil), so when the leader dies after its
// JoinGroup answer, its session expiry starts a join phase and the
// followers are answered REBALANCE_IN_PROGRESS and join again with their
// ids. Here the same tick expires the followers too (their sessions
// started milliseconds after the leader's): the group empties and they
// are answered UNKNOWN_MEMBER_ID, dropping their ids (and a cooperative
// member's partitions).
func TestClassicFollowersAwaitingSyncSurviveDeadLeader(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	g := newClassic(t)
	t0 := time.Unix(1000, 0)
	join(t, g, joinReq("", "a"), t0, true)
	sync(t, g, "a", 1, map[string][]byte{"a": []byte("x")}, t0, true)
	// b and c join: a rebalance; a (the leader) joins again.
	join(t, g, joinReq("", "b"), t0, false)
	join(t, g, joinReq("", "c"), t0, false)
	t1 := t0.Add(time.Second)
	join(t, g, joinReq("a", ""), t1, true)
	gen := g.Generation()
	// The followers sync within a few ms; the leader dies before its sync.
	for _, m := range []string{"b", "c"} {
		sync(t, g, m, gen, nil, t1.Add(time.Duration(rng.IntN(100))*time.Millisecond), false)
	}
	// The coordinator ticks every 250 ms from the leader's expiry.
	now := t1.Add(testSession).Add(time.Duration(rng.IntN(250)) * time.Millisecond)
	for ; g.State() == ClassicCompletingRebalance; now = now.Add(250 * time.Millisecond) {
		if d := g.Deadline(); !d.IsZero() && !now.Before(d) {
			t.Logf("tick at +%v removes %v", now.Sub(t1), g.Tick(now))
		}
	}
	for _, m := range []string{"b", "c"} {
		_, done, err := g.SyncAnswer(m, gen)
		if !done || !errorsIs(err, ErrRebalanceInProgress) {
			t.Fatalf("held sync of follower %s after the leader died: done %v, %v; want REBALANCE_IN_PROGRESS (state %v, members %d)",
				m, done, err, g.State(), g.Members())
		}
	}
	// They join again half a second later (a tick in between): still
	// members, and the join phase ends without the leader.
	now = now.Add(250 * time.Millisecond)
	if d := g.Deadline(); !d.IsZero() && !now.Before(d) {
		t.Logf("tick at +%v removes %v", now.Sub(t1), g.Tick(now))
	}
	now = now.Add(250 * time.Millisecond)
	join(t, g, joinReq("b", ""), now, false)
	r := join(t, g, joinReq("c", ""), now, true)
	if r.Generation != gen+1 {
		t.Fatalf("followers' join: generation %d, want %d", r.Generation, gen+1)
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
