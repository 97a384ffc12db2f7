package groupcoord

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/group"
)

// gatedHost is a fakeHost whose next Positions call (once armed) blocks
// until released: the partition leader's answer is slow, as a remote
// leader's HTTP round trip can be.
type gatedHost struct {
	*fakeHost
	gmu     sync.Mutex
	gate    chan struct{}
	release chan struct{}
	entered chan struct{}
}

func (g *gatedHost) arm() {
	g.gmu.Lock()
	g.gate, g.entered = make(chan struct{}), make(chan struct{}, 1)
	g.release = g.gate
	g.gmu.Unlock()
}

func (g *gatedHost) Positions(ctx context.Context, tp group.TopicPartition) (int64, int64, error) {
	g.gmu.Lock()
	gate, entered := g.gate, g.entered
	g.gate = nil
	g.gmu.Unlock()
	if gate != nil {
		entered <- struct{}{}
		<-gate
	}
	return g.fakeHost.Positions(ctx, tp)
}

// TestCommitOfExpiredMemberDoesNotOverwriteNewOwner: a commit is checked
// (ownership, epoch) under the shard's lock, the lock is released, and
// only then is the high watermark asked and the record queued. A member
// whose session expired in between, after its partition went to another
// member that committed, still got its (older) commit appended after the
// new owner's: the new owner's acknowledged commit was overwritten, and
// the expired member was told its commit succeeded. The commit is checked
// again as it is queued.
func TestCommitOfExpiredMemberDoesNotOverwriteNewOwner(t *testing.T) {
	ctx := context.Background()
	fh, s, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	tp0 := group.TopicPartition{Topic: "t", Partition: 0}
	fh.hw[tp0] = 100
	h := &gatedHost{fakeHost: fh}
	c := newTestCoordinator(t, h, s, clock)

	a, err := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "a", SessionTimeoutMS: 3000})
	if err != nil || len(a.Assigned) != 4 {
		t.Fatalf("a's join: %+v, %v", a, err)
	}
	// a commits t/0 at 10; the partition leader is slow to give its HW.
	h.arm()
	aDone := make(chan error, 1)
	go func() {
		_, err := c.Commit(ctx, "g", CommitRequest{MemberID: "a", MemberEpoch: a.MemberEpoch,
			Offsets: []OffsetCommit{{Topic: "t", Partition: 0, Offset: 10}}})
		aDone <- err
	}()
	<-h.entered
	// Meanwhile a's session expires, b takes t/0 over and commits 50.
	clock.Add(3 * time.Second)
	c.tick()
	b, err := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "b"})
	if err != nil || len(b.Assigned) != 4 {
		t.Fatalf("b's join after a expired: %+v, %v", b, err)
	}
	if _, err := c.Commit(ctx, "g", CommitRequest{MemberID: "b", MemberEpoch: b.MemberEpoch,
		Offsets: []OffsetCommit{{Topic: "t", Partition: 0, Offset: 50}}}); err != nil {
		t.Fatalf("b's commit: %v", err)
	}
	// The leader answers a's HW request.
	close(h.release)
	errA := <-aDone

	o, err := c.Offsets(ctx, "g", "t")
	if err != nil {
		t.Fatal(err)
	}
	got := int64(-1)
	for _, off := range o.Offsets {
		if off.Partition == 0 {
			got = off.Offset
		}
	}
	// What a successor rebuilds from the log.
	fh.mu.Lock()
	fh.epoch++
	fh.mu.Unlock()
	c2 := newTestCoordinator(t, h, s, clock)
	o2, err := c2.Offsets(ctx, "g", "t")
	if err != nil {
		t.Fatal(err)
	}
	rebuilt := int64(-1)
	for _, off := range o2.Offsets {
		if off.Partition == 0 {
			rebuilt = off.Offset
		}
	}
	if errA == nil || got != 50 || rebuilt != 50 {
		t.Fatalf("expired member a's commit = %v (want refused); t/0 committed %d, rebuilt by a successor %d; "+
			"want b's acknowledged 50", errA, got, rebuilt)
	}
}

// TestSimpleCommitWhileHTTPMemberOwns: a classic group left empty
// (all its Kafka members left) stays in the shard until the next tick; an
// HTTP member may join meanwhile, and then a "simple" commit (generation
// -1, no member: kafka-consumer-groups --reset-offsets, or a consumer
// using assign()) was checked against the empty classic group only and
// overwrote the offset of a partition the HTTP member owns.
func TestSimpleCommitWhileHTTPMemberOwns(t *testing.T) {
	ctx := context.Background()
	h, st, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	h.hw[group.TopicPartition{Topic: "t", Partition: 0}] = 100
	c := newTestCoordinator(t, h, st, clock)
	if r, err := c.ClassicJoin(ctx, "g", classicJoinReq("", "k1")); err != nil || !r.Done {
		t.Fatalf("classic join: %+v, %v", r, err)
	}
	if _, err := c.ClassicLeave(ctx, "g", ClassicLeaveRequest{MemberIDs: []string{"k1"}}); err != nil {
		t.Fatal(err)
	}
	j, err := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "h1"})
	if err != nil || len(j.Assigned) != 4 {
		t.Fatalf("HTTP join: %+v, %v", j, err)
	}
	if _, err := c.Commit(ctx, "g", CommitRequest{MemberID: "h1", MemberEpoch: j.MemberEpoch,
		Offsets: []OffsetCommit{{Topic: "t", Partition: 0, Offset: 50}}}); err != nil {
		t.Fatal(err)
	}
	err = c.ClassicCommit(ctx, "g", ClassicCommitRequest{Generation: -1,
		Offsets: []OffsetCommit{{Topic: "t", Partition: 0, Offset: 3}}})
	o, oerr := c.Offsets(ctx, "g", "t")
	if oerr != nil {
		t.Fatal(oerr)
	}
	if !errors.Is(err, group.ErrUnknownMember) {
		t.Fatalf("simple commit while HTTP member h1 owns t/0 = %v, want ErrUnknownMember; offsets now %+v", err, o.Offsets)
	}
}

// appendGateHost is a fakeHost whose AppendOffsets calls, once armed,
// block one by one: the first until released and then fails (an ack
// timeout), the second until released and then appends.
type appendGateHost struct {
	*fakeHost
	gmu     sync.Mutex
	calls   int
	armed   bool
	gates   [2]chan struct{}
	entered chan int
}

func (g *appendGateHost) arm() {
	g.gmu.Lock()
	g.armed, g.calls = true, 0
	g.gates = [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	g.entered = make(chan int, 2)
	g.gmu.Unlock()
}

func (g *appendGateHost) AppendOffsets(ctx context.Context, p int, epoch int32, batch []byte, count int) (int64, error) {
	g.gmu.Lock()
	n := g.calls
	g.calls++
	armed := g.armed && n < 2
	g.gmu.Unlock()
	if armed {
		g.entered <- n
		<-g.gates[n]
		if n == 0 {
			return 0, errors.New("ack timeout")
		}
	}
	return g.fakeHost.AppendOffsets(ctx, p, epoch, batch, count)
}

// TestDroppedShardAppendsNothing: a failed append drops the shard,
// but a commit queued behind it (group commit) then took the dropped
// shard's turn and appended anyway, while a new shard (same leader epoch,
// its own turn) had already rebuilt from the log and served commits. The
// stray record landed after the new shard's commit: the live coordinator
// answered 7, a successor rebuilt 9.
func TestDroppedShardAppendsNothing(t *testing.T) {
	ctx := context.Background()
	fh, s, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	fh.hw[group.TopicPartition{Topic: "t", Partition: 0}] = 100
	h := &appendGateHost{fakeHost: fh}
	c := newTestCoordinator(t, h, s, clock)
	j, err := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	commit := func(off int64) error {
		_, err := c.Commit(ctx, "g", CommitRequest{MemberID: "a", MemberEpoch: j.MemberEpoch,
			Offsets: []OffsetCommit{{Topic: "t", Partition: 0, Offset: off}}})
		return err
	}
	if err := commit(5); err != nil {
		t.Fatal(err)
	}
	h.arm()
	errX, errY := make(chan error, 1), make(chan error, 1)
	go func() { errX <- commit(6) }()
	<-h.entered // 6 is being appended
	go func() { errY <- commit(9) }()
	p := PartitionFor("g", 3)
	for deadline := time.Now().Add(5 * time.Second); ; {
		c.mu.Lock()
		sh := c.shards[p]
		c.mu.Unlock()
		sh.mu.Lock()
		queued := len(sh.pending)
		sh.mu.Unlock()
		if queued == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("9 never queued")
		}
		time.Sleep(time.Millisecond)
	}
	close(h.gates[0]) // 6's append fails: the shard is dropped
	if err := <-errX; !IsRetriable(err) {
		t.Fatalf("commit 6 = %v, want retriable", err)
	}
	// Either 9, queued on the dropped shard, is refused there, or its
	// append reaches the partition (and is held there for now).
	stray := false
	select {
	case <-h.entered:
		stray = true
	case err := <-errY:
		t.Logf("commit 9 (queued on the dropped shard) = %v", err)
		close(h.gates[1]) // nothing holds it: let later appends through
	case <-time.After(5 * time.Second):
		t.Fatal("commit 9 neither appended nor answered")
	}
	// The next request loads a new shard, and a commits 7 through it.
	if err := commit(7); err != nil {
		t.Fatalf("commit 7 through the new shard: %v", err)
	}
	if stray {
		close(h.gates[1])
		t.Logf("commit 9 (queued on the dropped shard, appended) = %v", <-errY)
	}
	live, err := c.Offsets(ctx, "g", "t")
	if err != nil {
		t.Fatal(err)
	}
	fh.mu.Lock()
	fh.epoch++
	fh.mu.Unlock()
	c2 := newTestCoordinator(t, h, s, clock)
	rebuilt, err := c2.Offsets(ctx, "g", "t")
	if err != nil {
		t.Fatal(err)
	}
	if len(live.Offsets) != 1 || len(rebuilt.Offsets) != 1 || live.Offsets[0].Offset != rebuilt.Offsets[0].Offset {
		t.Fatalf("live coordinator serves %+v, a successor rebuilds %+v from the same log", live.Offsets, rebuilt.Offsets)
	}
}
