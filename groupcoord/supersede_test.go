package groupcoord

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/logagent/logagent/group"
)

// TestOlderCommitNeverLandsAfterANewerOne: a member's commit of a
// partition that waits for the partition's high watermark (up to
// HighWatermarkWait) while the member commits the same partition again
// must not be appended after the newer commit: the committed offset went
// back (60 to 50), and the partition's next owner consumed 50..59 again.
// Abandoned: the caller of the old commit gave up (a sidecar's deadline
// passed) before the wait ended; it was still appended. Live: its caller
// still waits (its deadline, measured by the coordinator, ends later than
// the sidecar's); the newer commit arrived later, so the old one is
// refused as superseded, not appended.
func TestOlderCommitNeverLandsAfterANewerOne(t *testing.T) {
	for _, tc := range []struct {
		name      string
		abandoned bool
		want      error
	}{
		{"abandoned", true, ErrUnavailable},
		{"live", false, ErrCommitSuperseded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fh, st, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
			tp := group.TopicPartition{Topic: "t", Partition: 1}
			fh.hw[tp] = 40
			h := &hookHost{fakeHost: fh}
			waiting, release := make(chan struct{}), make(chan struct{})
			looks := 0
			h.hook(func() {
				// The old commit's second look at the high watermark
				// (the first found it below the offset): it blocks
				// until the newer commit is applied.
				h.hmu.Lock()
				looks++
				block := looks == 2
				h.hmu.Unlock()
				if block {
					close(waiting)
					<-release
				}
			}, nil)
			c := newTestCoordinator(t, h, st, clock)
			bg := context.Background()
			j, err := c.Join(bg, "g", JoinRequest{Topics: []string{"t"}, MemberID: "a"})
			if err != nil {
				t.Fatal(err)
			}
			commit := func(ctx context.Context, offset int64) error {
				_, err := c.Commit(ctx, "g", CommitRequest{MemberID: "a", MemberEpoch: j.MemberEpoch,
					Offsets: []OffsetCommit{{Topic: "t", Partition: 1, Offset: offset}}})
				return err
			}
			oldCtx, abandon := context.WithCancel(bg)
			defer abandon()
			oldDone := make(chan error, 1)
			go func() { oldDone <- commit(oldCtx, 50) }()
			<-waiting
			if tc.abandoned {
				abandon()
			}
			fh.mu.Lock()
			fh.hw[tp] = 60
			fh.mu.Unlock()
			if err := commit(bg, 60); err != nil {
				t.Fatalf("newer commit: %v", err)
			}
			close(release)
			if err := <-oldDone; !errors.Is(err, tc.want) {
				t.Errorf("older commit answered %v, want %v", err, tc.want)
			}
			// A commit the old one's caller left queued is appended by
			// the next flush, whoever's.
			if _, err := c.Commit(bg, "g", CommitRequest{MemberID: "a", MemberEpoch: j.MemberEpoch,
				Offsets: []OffsetCommit{{Topic: "t", Partition: 2, Offset: 0}}}); err != nil {
				t.Fatalf("commit of t/2: %v", err)
			}
			o, err := c.Offsets(bg, "g", "t")
			if err != nil || len(o.Offsets) != 2 || o.Offsets[0].Offset != 60 {
				t.Fatalf("offsets = %+v, %v; want t/1 at 60 (the newer commit), t/2 at 0", o, err)
			}
		})
	}
}

// TestAbandonedQueuedCommitIsNotAppended: a commit queued behind an
// append in flight whose caller gives up is taken out of the queue, and
// answered as not appended: the flush after it appended it anyway, after
// the caller's client had been told it failed and had committed again.
func TestAbandonedQueuedCommitIsNotAppended(t *testing.T) {
	fh, st, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	for p := range int32(4) {
		fh.hw[group.TopicPartition{Topic: "t", Partition: p}] = 100
	}
	h := &hookHost{fakeHost: fh}
	appending, release := make(chan struct{}), make(chan struct{})
	c := newTestCoordinator(t, h, st, clock)
	bg := context.Background()
	j, err := c.Join(bg, "g", JoinRequest{Topics: []string{"t"}, MemberID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	commit := func(ctx context.Context, p int32, offset int64) error {
		_, err := c.Commit(ctx, "g", CommitRequest{MemberID: "a", MemberEpoch: j.MemberEpoch,
			Offsets: []OffsetCommit{{Topic: "t", Partition: p, Offset: offset}}})
		return err
	}
	h.hook(nil, func(call int) error {
		if call == 0 {
			close(appending)
			<-release
		}
		return nil
	})
	firstDone := make(chan error, 1)
	go func() { firstDone <- commit(bg, 0, 10) }()
	<-appending
	s := c.shards[PartitionFor("g", 3)]
	ctx, abandon := context.WithCancel(bg)
	abandonedDone := make(chan error, 1)
	go func() { abandonedDone <- commit(ctx, 1, 50) }()
	for queued := false; !queued; {
		// Queued behind the append in flight, which holds the turn.
		s.mu.Lock()
		queued = len(s.pending) == 1
		s.mu.Unlock()
		runtime.Gosched()
	}
	abandon()
	if err := <-abandonedDone; !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "not appended") {
		t.Errorf("abandoned commit answered %v, want ErrUnavailable, not appended", err)
	}
	close(release)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	if err := commit(bg, 2, 5); err != nil {
		t.Fatal(err)
	}
	o, err := c.Offsets(bg, "g", "t")
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range o.Offsets {
		if off.Partition == 1 {
			t.Fatalf("t/1 committed at %d by a commit whose caller gave up while it was queued", off.Offset)
		}
	}
}
