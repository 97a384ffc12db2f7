package groupcoord

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/logagent/logagent/group"
)

// TestGroupsExpireAfterOffsetsRetention: with OffsetsRetention a week, the
// tick deletes a group without members once its last commit and its last
// member's leave are a week old (its stored state and offsets, as Delete
// does), and one with a stored state only; a group with a member that
// committed as long ago stays, and so does one committed to since. After
// a failover the new coordinator counts from its load (what its
// predecessor saw is not kept), and finds a group with a stored state only
// in the store.
func TestGroupsExpireAfterOffsetsRetention(t *testing.T) {
	ctx := context.Background()
	const week = 7 * 24 * time.Hour
	h, st, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	for p := range int32(4) {
		h.hw[group.TopicPartition{Topic: "t", Partition: p}] = 100
	}
	retention := func(cfg *Config) { cfg.OffsetsRetention = week }
	c := newTestCoordinatorWith(t, h, st, clock, retention)
	join := func(c *Coordinator, id, member string) MemberResponse {
		t.Helper()
		j, err := c.Join(ctx, id, JoinRequest{Topics: []string{"t"}, MemberID: member, SessionTimeoutMS: 300_000})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	commit := func(c *Coordinator, id string, j MemberResponse, p int32) {
		t.Helper()
		if _, err := c.Commit(ctx, id, CommitRequest{MemberID: j.MemberID, MemberEpoch: j.MemberEpoch,
			Offsets: []OffsetCommit{{Topic: "t", Partition: p, Offset: 5}}}); err != nil {
			t.Fatal(err)
		}
	}
	leave := func(c *Coordinator, id, member string) {
		t.Helper()
		if err := c.Leave(ctx, id, member); err != nil {
			t.Fatal(err)
		}
	}
	commit(c, "old", join(c, "old", "a"), 0)
	leave(c, "old", "a")
	leave(c, "stateonly", join(c, "stateonly", "s").MemberID)
	live := join(c, "live", "b")
	commit(c, "live", live, 1)
	// Another group of simple's offsets partition, with a stored state
	// only: after the failover only the store names it.
	idle := sameShardAs(t, "simple")
	leave(c, idle, join(c, idle, "i").MemberID)

	// step moves the clock on, keeps live's member alive and ticks c.
	step := func(c *Coordinator, d time.Duration) {
		t.Helper()
		clock.Add(d)
		r, err := c.Heartbeat(ctx, "live", "b", HeartbeatRequest{MemberEpoch: live.MemberEpoch, Owned: live.Assigned})
		if err != nil {
			t.Fatal(err)
		}
		live = r
		c.tick()
	}
	exists := func(c *Coordinator, id string) bool {
		t.Helper()
		_, err := c.Offsets(ctx, id, "")
		st.mu.Lock()
		stored := st.values[id] != nil
		st.mu.Unlock()
		if err != nil && !errors.Is(err, group.ErrUnknownGroup) {
			t.Fatal(err)
		}
		return err == nil || stored
	}
	want := func(c *Coordinator, when string, ids map[string]bool) {
		t.Helper()
		for id, w := range ids {
			if got := exists(c, id); got != w {
				t.Errorf("%s: group %s exists %v, want %v", when, id, got, w)
			}
		}
	}

	for range 3 {
		step(c, 24*time.Hour)
	}
	if err := c.ClassicCommit(ctx, "simple", ClassicCommitRequest{Generation: -1,
		Offsets: []OffsetCommit{{Topic: "t", Partition: 2, Offset: 1}}}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		step(c, 24*time.Hour)
	}
	step(c, 24*time.Hour-time.Minute)
	want(c, "a minute before a week", map[string]bool{"old": true, "stateonly": true, "live": true, "simple": true, idle: true})
	step(c, 11*time.Minute)
	want(c, "a week after", map[string]bool{"old": false, "stateonly": false, "live": true, "simple": true, idle: false})

	// The failover: a new group with a stored state only, and a new
	// coordinator. simple's commit is 4 days old: c would have deleted it
	// 3 days later, the new coordinator deletes it a week after its load.
	leave(c, idle, join(c, idle, "i").MemberID)
	h.mu.Lock()
	h.epoch++
	h.mu.Unlock()
	c2 := newTestCoordinatorWith(t, h, st, clock, retention)
	if !exists(c2, "simple") { // loads simple's (and idle's) partition
		t.Fatal("simple is gone after the failover")
	}
	for range 4 {
		step(c2, 24*time.Hour)
	}
	want(c2, "4 days after the failover", map[string]bool{"live": true, "simple": true, idle: true})
	for range 3 {
		step(c2, 24*time.Hour)
	}
	step(c2, 10*time.Minute)
	want(c2, "a week after the failover", map[string]bool{"live": true, "simple": false, idle: false})
	if d, err := c2.Describe(ctx, "live", "n1"); err != nil || len(d.Members) != 1 || d.Partitions[1].Committed != 5 {
		t.Fatalf("live after two weeks: %+v, %v", d, err)
	}
}

// TestGroupExpiryBoundedPerCheck: the tick deletes the groups past
// OffsetsRetention itself, each with an acks=all append, between session
// expiries; a check deletes at most maxExpiriesPerCheck of them, and the
// next check (expiryCheckInterval later) the rest.
func TestGroupExpiryBoundedPerCheck(t *testing.T) {
	ctx := context.Background()
	const week = 7 * 24 * time.Hour
	h, st, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	for p := range int32(4) {
		h.hw[group.TopicPartition{Topic: "t", Partition: p}] = 100
	}
	c := newTestCoordinatorWith(t, h, st, clock, func(cfg *Config) { cfg.OffsetsRetention = week })
	const groups = maxExpiriesPerCheck + 10
	for i := range groups {
		id := fmt.Sprintf("g%d", i)
		j, err := c.Join(ctx, id, JoinRequest{Topics: []string{"t"}, SessionTimeoutMS: 300_000})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Leave(ctx, id, j.MemberID); err != nil {
			t.Fatal(err)
		}
	}
	stored := func() int {
		st.mu.Lock()
		defer st.mu.Unlock()
		n := 0
		for _, v := range st.values {
			if v != nil {
				n++
			}
		}
		return n
	}
	if n := stored(); n != groups {
		t.Fatalf("%d groups stored, want %d", n, groups)
	}
	c.tick() // the first check, nothing due
	clock.Add(week + time.Minute)
	c.tick()
	if n := stored(); n != groups-maxExpiriesPerCheck {
		t.Fatalf("after one check %d groups stored, want %d: one check deletes at most %d", n, groups-maxExpiriesPerCheck, maxExpiriesPerCheck)
	}
	clock.Add(expiryCheckInterval)
	c.tick()
	if n := stored(); n != 0 {
		t.Fatalf("after the next check %d groups stored, want none", n)
	}
}
