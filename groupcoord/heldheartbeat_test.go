package groupcoord

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/group"
)

// TestHeldHeartbeatNotAppliedAfterALaterOne: a held heartbeat of a member
// that sent another one meanwhile applies nothing when it is woken. A
// later heartbeat that was answered at once (wait_ms 0) left the held one
// registered, and the next change woke it and applied it after the later
// one: its arrival time set the member's last heartbeat back, and a
// member that heartbeated within its session expired (its owned set, as
// old, was applied too).
func TestHeldHeartbeatNotAppliedAfterALaterOne(t *testing.T) {
	ctx := context.Background()
	fh, st, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	c := newTestCoordinator(t, fh, st, clock)
	j, err := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "a", SessionTimeoutMS: 30_000})
	if err != nil {
		t.Fatal(err)
	}
	owned := j.Assigned
	held := holdHeartbeat(ctx, c, "a", HeartbeatRequest{MemberEpoch: j.MemberEpoch, Owned: owned, WaitMS: 10_000})
	// The member gave up on the held heartbeat and sends another, which
	// its session counts from.
	clock.Add(9 * time.Second)
	if _, err := c.Heartbeat(ctx, "g", "a", HeartbeatRequest{MemberEpoch: j.MemberEpoch, Owned: owned}); err != nil {
		t.Fatal(err)
	}
	// A change with news for the member: b's join revokes some of its
	// partitions.
	if _, err := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "b", SessionTimeoutMS: 30_000}); err != nil {
		t.Fatal(err)
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	// 30 s after the held heartbeat arrived, 21 s after the later one.
	clock.Add(21*time.Second + time.Millisecond)
	c.tick()
	if _, err := c.Heartbeat(ctx, "g", "a", HeartbeatRequest{MemberEpoch: j.MemberEpoch, Owned: owned}); errors.Is(err, group.ErrUnknownMember) {
		t.Fatalf("member expired 21 s after its last heartbeat, with a 30 s session: the held one, older, was applied after it (%v)", err)
	}
}

// holdHeartbeat sends member's heartbeat req of group g, and returns once
// the coordinator holds it; its outcome comes on the channel.
func holdHeartbeat(ctx context.Context, c *Coordinator, member string, req HeartbeatRequest) <-chan error {
	held := make(chan error, 1)
	go func() {
		_, err := c.Heartbeat(ctx, "g", member, req)
		held <- err
	}()
	s := c.shards[PartitionFor("g", 3)]
	for waiting := false; !waiting; runtime.Gosched() {
		s.mu.Lock()
		waiting = s.groups["g"].waiters[member] != nil
		s.mu.Unlock()
	}
	return held
}

// leaderHookHost blocks one call of OffsetsLeader, which every request
// makes before it takes the shard's lock: the call numbered block (from
// 1) signals entered and waits for release.
type leaderHookHost struct {
	*fakeHost
	hmu              sync.Mutex
	calls, block     int
	entered, release chan struct{}
}

func (h *leaderHookHost) OffsetsLeader(p int) (LeaderState, bool) {
	h.hmu.Lock()
	h.calls++
	stop := h.calls == h.block
	h.hmu.Unlock()
	if stop {
		close(h.entered)
		<-h.release
	}
	return h.fakeHost.OffsetsLeader(p)
}

// TestWokenHeartbeatNotAppliedAfterALaterOne: a held heartbeat woken with
// news that has not run again yet when the member's next heartbeats
// arrive (they get the news and act on it) applies nothing when it runs.
// It was applied: with the older owned set, which left out a partition
// the member was granted since and is now asked to revoke, it released
// that partition while the member still consumed it, and another member
// was granted it.
func TestWokenHeartbeatNotAppliedAfterALaterOne(t *testing.T) {
	ctx := context.Background()
	fh, st, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	h := &leaderHookHost{fakeHost: fh, entered: make(chan struct{}), release: make(chan struct{})}
	c := newTestCoordinator(t, h, st, clock)
	heartbeat := func(member string, epoch int32, owned []Partition, wait int64) MemberResponse {
		t.Helper()
		r, err := c.Heartbeat(ctx, "g", member, HeartbeatRequest{MemberEpoch: epoch, Owned: owned, WaitMS: wait})
		if err != nil {
			t.Fatalf("heartbeat of %s: %v", member, err)
		}
		return r
	}
	// A long session, so that the hold (a third of it, and the wait)
	// outlasts the test.
	a, err := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "a", SessionTimeoutMS: 300_000})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	// a gives b its half; b takes it.
	a = heartbeat("a", a.MemberEpoch, a.Assigned, 0)
	a = heartbeat("a", a.MemberEpoch, a.Assigned, 0)
	b = heartbeat("b", b.MemberEpoch, nil, 0)
	if len(a.Assigned) != 2 || len(b.Assigned) != 2 {
		t.Fatalf("a %v, b %v: want two partitions each", a.Assigned, b.Assigned)
	}
	held := holdHeartbeat(ctx, c, "a", HeartbeatRequest{MemberEpoch: a.MemberEpoch, Owned: a.Assigned, WaitMS: 30_000})
	// b leaves, which wakes a's held heartbeat (its partitions are free);
	// it stops before it runs again (the call after Leave's).
	h.hmu.Lock()
	h.block = h.calls + 2
	h.hmu.Unlock()
	if err := c.Leave(ctx, "g", "b"); err != nil {
		t.Fatal(err)
	}
	<-h.entered
	// Meanwhile a's next heartbeat takes all four, and x joins: a must
	// give two back, and is still consuming them.
	all := heartbeat("a", a.MemberEpoch, a.Assigned, 0)
	if len(all.Assigned) != 4 {
		t.Fatalf("a got %v, want all four", all.Assigned)
	}
	if _, err := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "x"}); err != nil {
		t.Fatal(err)
	}
	revoking := heartbeat("a", all.MemberEpoch, all.Assigned, 0)
	if len(revoking.Revoke) != 2 {
		t.Fatalf("a asked to revoke %v, want two", revoking.Revoke)
	}
	close(h.release)
	// Its answer, whatever it is, goes to nobody: the member gave up on it.
	heldErr := <-held
	s := c.shards[PartitionFor("g", 3)]
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.groups["g"].g.Current("a")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Revoke) != 2 {
		t.Fatalf("a still consumes %v, which it was asked to revoke, but they are no longer its: the old held heartbeat released them (a has %+v; the held heartbeat answered %v)",
			revoking.Revoke, r, heldErr)
	}
}
