package groupcoord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/group"
)

// sameShardAs returns a group id other than id that hashes to id's offsets
// partition (of the test coordinator's 3).
func sameShardAs(t *testing.T, id string) string {
	t.Helper()
	for i := range 100 {
		if other := fmt.Sprintf("%s-%d", id, i); PartitionFor(other, 3) == PartitionFor(id, 3) {
			return other
		}
	}
	t.Fatalf("no group id shares %q's partition", id)
	return ""
}

// TestDeleteGroup: a group with members is not deleted (ErrGroupNotEmpty);
// an empty one loses its stored state and its committed offsets, here and
// at the coordinator that rebuilds from the log after a failover, while a
// group of the same offsets partition keeps its own; a join then starts a
// new group, and a second delete, or one of a group that never was, is
// ErrUnknownGroup.
func TestDeleteGroup(t *testing.T) {
	ctx := context.Background()
	h, s, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	for p := range int32(4) {
		h.hw[group.TopicPartition{Topic: "t", Partition: p}] = 100
	}
	c := newTestCoordinator(t, h, s, clock)
	other := sameShardAs(t, "g")
	commitAs := func(c *Coordinator, id, member string, offset int64) int32 {
		t.Helper()
		j, err := c.Join(ctx, id, JoinRequest{Topics: []string{"t"}, MemberID: member})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Commit(ctx, id, CommitRequest{MemberID: member, MemberEpoch: j.MemberEpoch,
			Offsets: []OffsetCommit{{Topic: "t", Partition: 1, Offset: offset}, {Topic: "t", Partition: 2, Offset: offset}}}); err != nil {
			t.Fatal(err)
		}
		return j.MemberEpoch
	}
	commitAs(c, "g", "a", 42)
	commitAs(c, other, "o", 7)
	if err := c.Leave(ctx, other, "o"); err != nil {
		t.Fatal(err)
	}

	if err := c.Delete(ctx, "g"); !errors.Is(err, ErrGroupNotEmpty) {
		t.Fatalf("delete with a member = %v, want ErrGroupNotEmpty", err)
	}
	if err := c.Leave(ctx, "g", "a"); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "g"); err != nil {
		t.Fatalf("delete of the empty group = %v", err)
	}
	if v, _, _ := s.LoadGroupState(ctx, "g"); v != nil {
		t.Fatalf("stored state after the delete: %s", v)
	}
	gone := func(c *Coordinator, when string) {
		t.Helper()
		if o, err := c.Offsets(ctx, "g", ""); !errors.Is(err, group.ErrUnknownGroup) {
			t.Errorf("%s: offsets of g = %+v, %v; want ErrUnknownGroup", when, o, err)
		}
		if o, err := c.Offsets(ctx, other, ""); err != nil || len(o.Offsets) != 2 || o.Offsets[0].Offset != 7 {
			t.Errorf("%s: offsets of %s = %+v, %v; want both at 7", when, other, o, err)
		}
	}
	gone(c, "after the delete")
	if err := c.Delete(ctx, "g"); !errors.Is(err, group.ErrUnknownGroup) {
		t.Errorf("second delete = %v, want ErrUnknownGroup", err)
	}
	if err := c.Delete(ctx, "never"); !errors.Is(err, group.ErrUnknownGroup) {
		t.Errorf("delete of a group that never was = %v, want ErrUnknownGroup", err)
	}

	// The next coordinator rebuilds from the log: the tombstone deletes
	// what the commits before it stored.
	h.mu.Lock()
	h.epoch++
	h.mu.Unlock()
	c2 := newTestCoordinator(t, h, s, clock)
	gone(c2, "after a failover")

	// A join starts a new group: no committed offset, epoch 1.
	j, err := c2.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "b"})
	if err != nil || j.MemberEpoch != 1 {
		t.Fatalf("join after the delete = %+v, %v; want a new group's member epoch 1", j, err)
	}
	f, err := c2.CheckFetch(ctx, "g", FetchRequest{MemberID: "b", MemberEpoch: j.MemberEpoch, Topic: "t", Partition: 1})
	if err != nil || f.Committed != -1 {
		t.Fatalf("fetch after the delete = %+v, %v; want no committed offset", f, err)
	}
}

// TestDeleteClassicGroup: a group with members of Kafka's classic
// protocol is not deleted; once they left (the coordinator forgets the
// group, its offsets stay) its offsets are, and OffsetFetch's path finds
// none, also after a restatement and a failover.
func TestDeleteClassicGroup(t *testing.T) {
	ctx := context.Background()
	h, s, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	h.hw[group.TopicPartition{Topic: "t", Partition: 0}] = 100
	c := newTestCoordinator(t, h, s, clock)
	a, err := c.ClassicJoin(ctx, "k", classicJoinReq("", "a"))
	if err != nil || !a.Done {
		t.Fatalf("join: %+v, %v", a, err)
	}
	if _, err := c.ClassicSync(ctx, "k", ClassicSyncRequest{MemberID: "a", Generation: a.Generation}); err != nil {
		t.Fatal(err)
	}
	if err := c.ClassicCommit(ctx, "k", ClassicCommitRequest{MemberID: "a", Generation: a.Generation,
		Offsets: []OffsetCommit{{Topic: "t", Partition: 0, Offset: 5}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "k"); !errors.Is(err, ErrGroupNotEmpty) {
		t.Fatalf("delete with a classic member = %v, want ErrGroupNotEmpty", err)
	}
	if _, err := c.ClassicLeave(ctx, "k", ClassicLeaveRequest{MemberIDs: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	c.tick()
	if err := c.Delete(ctx, "k"); err != nil {
		t.Fatalf("delete of the emptied classic group = %v", err)
	}
	if o, err := c.Offsets(ctx, "k", ""); !errors.Is(err, group.ErrUnknownGroup) {
		t.Fatalf("offsets after the delete = %+v, %v", o, err)
	}
	// A restatement writes nothing of the deleted group, and the log it
	// leaves rebuilds without it.
	clock.Add(DefaultRestateEvery)
	c.tick()
	h.mu.Lock()
	h.epoch++
	h.mu.Unlock()
	c2 := newTestCoordinator(t, h, s, clock)
	if o, err := c2.Offsets(ctx, "k", ""); !errors.Is(err, group.ErrUnknownGroup) {
		t.Fatalf("offsets after a restatement and a failover = %+v, %v", o, err)
	}
}

// TestDeleteLosesToAJoinElsewhere: a coordinator whose cached group is
// behind Consul (another coordinator of the group let a member join since)
// deletes nothing: the CAS fails (retriable), and the retry, which reloads
// the group, finds the member (ErrGroupNotEmpty).
func TestDeleteLosesToAJoinElsewhere(t *testing.T) {
	ctx := context.Background()
	h, s, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	c := newTestCoordinator(t, h, s, clock)
	if _, err := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Leave(ctx, "g", "a"); err != nil {
		t.Fatal(err)
	}
	other := newTestCoordinator(t, h, s, clock)
	if _, err := other.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "b"}); err != nil {
		t.Fatal(err)
	}
	appends := h.appends
	if err := c.Delete(ctx, "g"); !errors.Is(err, ErrUnavailable) || !IsRetriable(err) {
		t.Fatalf("delete from a stale cache = %v, want a retriable ErrUnavailable", err)
	}
	if v, _, _ := s.LoadGroupState(ctx, "g"); v == nil || h.appends != appends {
		t.Fatalf("a refused delete changed something: state %q, %d appends", v, h.appends-appends)
	}
	if err := c.Delete(ctx, "g"); !errors.Is(err, ErrGroupNotEmpty) {
		t.Fatalf("retried delete = %v, want ErrGroupNotEmpty", err)
	}
}

// TestDeleteRacesAJoin: a join and a delete of an empty group with a
// committed offset, at once, 50 times. Whichever goes first, the outcome is
// one of the two orders: the delete wins (the join's member is in a new
// group with no committed offset) or the join wins (the delete is refused,
// and the member's group keeps its offset).
func TestDeleteRacesAJoin(t *testing.T) {
	ctx := context.Background()
	h, s, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	h.hw[group.TopicPartition{Topic: "t", Partition: 0}] = 100
	c := newTestCoordinator(t, h, s, clock)
	wins := map[bool]int{}
	for i := range 50 {
		id := fmt.Sprintf("g%d", i)
		_, err := c.Reset(ctx, id, ResetRequest{Topic: "t", To: "17"})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var joinErr, delErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, joinErr = c.Join(ctx, id, JoinRequest{Topics: []string{"t"}, MemberID: "m"})
		}()
		go func() {
			defer wg.Done()
			delErr = c.Delete(ctx, id)
		}()
		wg.Wait()
		if joinErr != nil {
			t.Fatalf("%s: join = %v", id, joinErr)
		}
		d, err := c.Describe(ctx, id, "self")
		if err != nil {
			t.Fatal(err)
		}
		committed := d.Partitions[0].Committed
		switch {
		case delErr == nil:
			if len(d.Members) != 1 || committed != -1 {
				t.Fatalf("%s: the delete won, but the group has %d members and t/0 committed at %d; want the member and none",
					id, len(d.Members), committed)
			}
		case errors.Is(delErr, ErrGroupNotEmpty):
			if len(d.Members) != 1 || committed != 17 {
				t.Fatalf("%s: the join won, but the group has %d members and t/0 committed at %d; want the member and 17",
					id, len(d.Members), committed)
			}
		default:
			t.Fatalf("%s: delete = %v", id, delErr)
		}
		wins[delErr == nil]++
	}
	t.Logf("delete first %d times, join first %d times", wins[true], wins[false])
}
