package groupcoord

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/logagent/logagent/group"
)

func classicJoinReq(member, newID string) ClassicJoinRequest {
	return ClassicJoinRequest{MemberID: member, NewMemberID: newID, ProtocolType: "consumer",
		Protocols: []ClassicProtocol{{Name: "range", Metadata: []byte("m")}}, SessionTimeoutMS: 10_000,
		RebalanceTimeoutMS: 30_000, WaitMS: 5_000}
}

// TestClassicHeldJoinAndSync: a second member's join is held until the
// first joins again; the follower's sync until the leader's; a commit at
// the generation is durable and a new coordinator serves it, while the
// classic membership (memory only) is gone there.
func TestClassicHeldJoinAndSync(t *testing.T) {
	ctx := context.Background()
	h, st, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	h.hw[group.TopicPartition{Topic: "t", Partition: 0}] = 100
	c := newTestCoordinator(t, h, st, clock)

	a, err := c.ClassicJoin(ctx, "g", classicJoinReq("", "a"))
	if err != nil || !a.Done || a.Generation != 1 || a.Leader != "a" {
		t.Fatalf("a's join: %+v, %v", a, err)
	}
	if _, err := c.ClassicSync(ctx, "g", ClassicSyncRequest{MemberID: "a", Generation: 1}); err != nil {
		t.Fatal(err)
	}
	type joined struct {
		r   ClassicJoinResponse
		err error
	}
	bc := make(chan joined, 1)
	go func() {
		r, err := c.ClassicJoin(ctx, "g", classicJoinReq("", "b"))
		bc <- joined{r, err}
	}()
	// a learns of the rebalance from its heartbeat, once b's join is in.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := c.ClassicHeartbeat(ctx, "g", ClassicHeartbeatRequest{MemberID: "a", Generation: 1})
		if errors.Is(err, group.ErrRebalanceInProgress) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("a's heartbeat: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case j := <-bc:
		t.Fatalf("b's join answered before a joined again: %+v, %v", j.r, j.err)
	default:
	}
	a, err = c.ClassicJoin(ctx, "g", classicJoinReq("a", ""))
	if err != nil || !a.Done || a.Generation != 2 || len(a.Members) != 2 {
		t.Fatalf("a's second join: %+v, %v", a, err)
	}
	j := <-bc
	if j.err != nil || !j.r.Done || j.r.Generation != 2 || j.r.MemberID != "b" || j.r.Leader != "a" {
		t.Fatalf("b's join: %+v, %v", j.r, j.err)
	}
	sc := make(chan ClassicSyncResponse, 1)
	go func() {
		r, err := c.ClassicSync(ctx, "g", ClassicSyncRequest{MemberID: "b", Generation: 2, WaitMS: 5_000})
		if err != nil {
			t.Error(err)
		}
		sc <- r
	}()
	if _, err := c.ClassicSync(ctx, "g", ClassicSyncRequest{MemberID: "a", Generation: 2,
		Assignments: map[string][]byte{"a": []byte("A"), "b": []byte("B")}}); err != nil {
		t.Fatal(err)
	}
	if r := <-sc; !r.Done || string(r.Assignment) != "B" {
		t.Fatalf("b's sync: %+v", r)
	}

	commit := ClassicCommitRequest{MemberID: "b", Generation: 2, Offsets: []OffsetCommit{{Topic: "t", Partition: 0, Offset: 42}}}
	stale := commit
	stale.Generation = 1
	if err := c.ClassicCommit(ctx, "g", stale); !errors.Is(err, group.ErrIllegalGeneration) {
		t.Fatalf("commit at an old generation: %v", err)
	}
	simple := ClassicCommitRequest{Generation: -1, Offsets: commit.Offsets}
	if err := c.ClassicCommit(ctx, "g", simple); !errors.Is(err, group.ErrUnknownMember) {
		t.Fatalf("simple commit to a group with members: %v", err)
	}
	if err := c.ClassicCommit(ctx, "g", commit); err != nil {
		t.Fatal(err)
	}

	h.mu.Lock()
	h.epoch++
	h.mu.Unlock()
	c2 := newTestCoordinator(t, h, st, clock)
	o, err := c2.Offsets(ctx, "g", "")
	if err != nil || len(o.Offsets) != 1 || o.Offsets[0].Offset != 42 {
		t.Fatalf("offsets at the new coordinator: %+v, %v", o, err)
	}
	if err := c2.ClassicHeartbeat(ctx, "g", ClassicHeartbeatRequest{MemberID: "a", Generation: 2}); !errors.Is(err, group.ErrUnknownMember) {
		t.Fatalf("heartbeat at the new coordinator: %v, want unknown member", err)
	}
	if d, err := c2.ClassicDescribe(ctx, "g"); err != nil || d.State != "Empty" {
		t.Fatalf("describe at the new coordinator: %+v, %v", d, err)
	}
	if err := c2.ClassicCommit(ctx, "g", simple); err != nil {
		t.Fatalf("simple commit to a group without members: %v", err)
	}
}

// TestClassicExpiryWakesHeldSync: a follower waiting for the sync learns
// of the leader's expiry (REBALANCE_IN_PROGRESS) at the tick that removes
// it, not at the end of its wait.
func TestClassicExpiryWakesHeldSync(t *testing.T) {
	ctx := context.Background()
	h, st, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	c := newTestCoordinator(t, h, st, clock)
	c.ClassicJoin(ctx, "g", classicJoinReq("", "a"))
	bc := make(chan error, 1)
	go func() {
		_, err := c.ClassicJoin(ctx, "g", classicJoinReq("", "b"))
		bc <- err
	}()
	for {
		if err := c.ClassicHeartbeat(ctx, "g", ClassicHeartbeatRequest{MemberID: "a", Generation: 1}); err != nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := c.ClassicJoin(ctx, "g", classicJoinReq("a", "")); err != nil {
		t.Fatal(err)
	}
	if err := <-bc; err != nil {
		t.Fatal(err)
	}
	sc := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := c.ClassicSync(ctx, "g", ClassicSyncRequest{MemberID: "b", Generation: 2, WaitMS: 15_000})
		sc <- err
	}()
	// b's sync renews its session; a, the leader, never syncs.
	time.Sleep(20 * time.Millisecond)
	clock.Add(5 * time.Second)
	if err := c.ClassicHeartbeat(ctx, "g", ClassicHeartbeatRequest{MemberID: "b", Generation: 2}); err != nil {
		t.Fatal(err)
	}
	clock.Add(5 * time.Second)
	c.tick()
	if err := <-sc; !errors.Is(err, group.ErrRebalanceInProgress) {
		t.Fatalf("b's held sync: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("b's held sync answered after %v", took)
	}
}

// TestProtocolsExcludeEachOther: a group id with members of one protocol
// refuses members of the other, and a reset while classic members exist.
func TestProtocolsExcludeEachOther(t *testing.T) {
	ctx := context.Background()
	h, st, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	c := newTestCoordinator(t, h, st, clock)
	if _, err := c.Join(ctx, "http", JoinRequest{Topics: []string{"t"}, MemberID: "h1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ClassicJoin(ctx, "http", classicJoinReq("", "k1")); !errors.Is(err, group.ErrInconsistentProtocol) {
		t.Fatalf("classic join to an HTTP group: %v", err)
	}
	if _, err := c.ClassicDescribe(ctx, "http"); !errors.Is(err, group.ErrUnknownGroup) {
		t.Fatalf("describe of an HTTP group: %v", err)
	}
	if _, err := c.ClassicJoin(ctx, "kafka", classicJoinReq("", "k1")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Join(ctx, "kafka", JoinRequest{Topics: []string{"t"}, MemberID: "h2"}); !errors.Is(err, group.ErrInconsistentProtocol) {
		t.Fatalf("HTTP join to a classic group: %v", err)
	}
	if _, err := c.Reset(ctx, "kafka", ResetRequest{Topic: "t", To: "earliest"}); !errors.Is(err, ErrGroupNotEmpty) {
		t.Fatalf("reset of a classic group with members: %v", err)
	}
	if r, err := c.ClassicLeave(ctx, "kafka", ClassicLeaveRequest{MemberIDs: []string{"k1", "nobody"}}); err != nil ||
		r.Unknown[0] || !r.Unknown[1] {
		t.Fatalf("leave: %+v, %v", r, err)
	}
	c.tick()
	if _, err := c.Join(ctx, "kafka", JoinRequest{Topics: []string{"t"}, MemberID: "h2"}); err != nil {
		t.Fatalf("HTTP join once the classic members left: %v", err)
	}
	if l := c.ClassicList(); len(l) != 0 {
		t.Fatalf("ClassicList %+v, want none (no offsets, no classic members)", l)
	}
}

// TestClassicSimpleCommitWithPendingMemberID: a group whose only trace is
// a member id handed out with MEMBER_ID_REQUIRED (the client has not
// joined again with it yet) is Empty, as in Kafka, and takes a simple
// commit (generation -1, no member id); it was refused UNKNOWN_MEMBER_ID.
func TestClassicSimpleCommitWithPendingMemberID(t *testing.T) {
	ctx := context.Background()
	h, st, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	h.hw[group.TopicPartition{Topic: "t", Partition: 0}] = 100
	c := newTestCoordinator(t, h, st, clock)
	req := classicJoinReq("", "p1")
	req.RequireKnownMemberID = true
	if r, err := c.ClassicJoin(ctx, "g", req); !errors.Is(err, group.ErrMemberIDRequired) || r.MemberID != "p1" {
		t.Fatalf("first join: %+v, %v; want MEMBER_ID_REQUIRED with p1", r, err)
	}
	if d, err := c.ClassicDescribe(ctx, "g"); err != nil || d.State != "Empty" || len(d.Members) != 0 {
		t.Fatalf("describe with a member id handed out: %+v, %v; want Empty", d, err)
	}
	simple := ClassicCommitRequest{Generation: -1, Offsets: []OffsetCommit{{Topic: "t", Partition: 0, Offset: 7}}}
	if err := c.ClassicCommit(ctx, "g", simple); err != nil {
		t.Fatalf("simple commit to an Empty group with a member id handed out: %v", err)
	}
	o, err := c.Offsets(ctx, "g", "t")
	if err != nil || len(o.Offsets) != 1 || o.Offsets[0].Offset != 7 {
		t.Fatalf("offsets after the simple commit: %+v, %v", o, err)
	}
	// The member joins with its id: the group has a member, and a simple
	// commit is refused again.
	if r, err := c.ClassicJoin(ctx, "g", classicJoinReq("p1", "")); err != nil || !r.Done || r.Generation != 1 {
		t.Fatalf("join with the id: %+v, %v", r, err)
	}
	if err := c.ClassicCommit(ctx, "g", simple); !errors.Is(err, group.ErrUnknownMember) {
		t.Fatalf("simple commit to a group with a member: %v, want ErrUnknownMember", err)
	}
}

// TestClassicPendingMemberIDIsNoMember: a classic group whose only trace
// is a member id handed out with MEMBER_ID_REQUIRED has no member, as in
// Kafka, so a delete, an offset reset and an HTTP join go ahead (all three
// were refused as a group with a member until the id expired); the id
// survives the coordinator's tick until then. After the delete or the HTTP
// join the id is gone with the classic group: a classic join with it is
// UNKNOWN_MEMBER_ID, or INCONSISTENT_GROUP_PROTOCOL beside the HTTP
// member; after the reset it joins.
func TestClassicPendingMemberIDIsNoMember(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name     string
		op       func(c *Coordinator) error
		thenJoin error // what the classic join with the handed-out id gets; nil: it joins
	}{
		{"delete", func(c *Coordinator) error { return c.Delete(ctx, "g") }, group.ErrUnknownMember},
		{"reset", func(c *Coordinator) error {
			_, err := c.Reset(ctx, "g", ResetRequest{Topic: "t", To: "earliest"})
			return err
		}, nil},
		{"HTTP join", func(c *Coordinator) error {
			_, err := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "h"})
			return err
		}, group.ErrInconsistentProtocol},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, st, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
			h.hw[group.TopicPartition{Topic: "t", Partition: 0}] = 100
			c := newTestCoordinator(t, h, st, clock)
			req := classicJoinReq("", "p1")
			req.RequireKnownMemberID = true
			if r, err := c.ClassicJoin(ctx, "g", req); !errors.Is(err, group.ErrMemberIDRequired) || r.MemberID != "p1" {
				t.Fatalf("first join: %+v, %v; want MEMBER_ID_REQUIRED with p1", r, err)
			}
			clock.Add(time.Second)
			c.tick()
			if err := tc.op(c); err != nil {
				t.Fatalf("%s with only a member id handed out: %v", tc.name, err)
			}
			r, err := c.ClassicJoin(ctx, "g", classicJoinReq("p1", ""))
			if tc.thenJoin != nil {
				if !errors.Is(err, tc.thenJoin) {
					t.Fatalf("join with the handed-out id after the %s: %+v, %v; want %v", tc.name, r, err, tc.thenJoin)
				}
				return
			}
			if err != nil || !r.Done || r.Generation != 1 {
				t.Fatalf("join with the handed-out id after the %s: %+v, %v", tc.name, r, err)
			}
		})
	}
}
