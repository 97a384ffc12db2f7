package client

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/record"
)

// TestGroupConsumerRevocationCommitLeavesTimeToHeartbeat: a revocation's
// commit that the agent holds (a coordinator loading, a slow offsets
// partition) gives up after half the session timeout, so that the member
// heartbeats within its session. The heartbeat goroutine, which makes the
// commit, waited for it up to the 30 s call timeout, sending no heartbeat:
// the coordinator ended the session of a live member and gave away every
// partition it had, not only those revoked.
func TestGroupConsumerRevocationCommitLeavesTimeToHeartbeat(t *testing.T) {
	const session = 2 * time.Second
	f := newFakeAgent(t)
	f.addTopic("t", 4)
	fill(t, f, 4, 0, 10)
	c := f.newClient()
	release := make(chan struct{})
	var mu sync.Mutex
	var hungAt time.Time
	heartbeatsBefore := -1
	f.onGroup = func(op string, call int) *fakeAnswer {
		if op != "commit" || call != 0 {
			return nil
		}
		f.mu.Lock()
		mu.Lock()
		hungAt, heartbeatsBefore = time.Now(), len(f.heartbeats)
		mu.Unlock()
		f.mu.Unlock()
		return &fakeAnswer{release: release}
	}
	gcA := mustGroupConsumer(t, c, WithAutoCommitInterval(0), WithSessionTimeout(session))
	colA := collect(t, gcA)
	eventually(t, "member-1 reads everything", func() bool { return colA.total() == 40 })
	gcB := mustGroupConsumer(t, c, WithAutoCommitInterval(0), WithSessionTimeout(session))
	collect(t, gcB)
	t.Cleanup(func() { close(release) })

	eventually(t, "the revocation's commit held", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return heartbeatsBefore >= 0
	})
	var heartbeatAt time.Time
	eventually(t, "member-1 heartbeats while its commit is held", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		for _, hb := range f.heartbeats[heartbeatsBefore:] {
			if hb.member == "member-1" {
				heartbeatAt = time.Now()
				return true
			}
		}
		return false
	})
	mu.Lock()
	defer mu.Unlock()
	if took := heartbeatAt.Sub(hungAt); took >= session {
		t.Errorf("member-1's next heartbeat came %v after its commit was held, not within its session timeout %v", took, session)
	}
}

// TestGroupConsumerRevocationCommitsOnlyProcessedRecords: a revocation
// comes from the heartbeat goroutine, while the application may still be
// processing what its latest Poll returned; committing past those records
// lost them when the member died processing them (the next owner started
// after them). It commits what the Polls before returned, and the next
// owner reads the latest Poll's records again. What the application
// committed itself of the latest Poll's records (Commit, CommitOffsets)
// stands: the revocation does not take the committed offset back below
// it, which made the next owner read records again that the application
// had said were processed.
func TestGroupConsumerRevocationCommitsOnlyProcessedRecords(t *testing.T) {
	tp := TopicPartition{"t", 1}
	for _, tc := range []struct {
		name   string
		commit func(ctx context.Context, g *GroupConsumer) error // after the latest Poll
		want   int64
	}{
		{"nothing committed", nil, 10},
		{"Commit", func(ctx context.Context, g *GroupConsumer) error { return g.Commit(ctx) }, 15},
		{"CommitOffsets", func(ctx context.Context, g *GroupConsumer) error {
			return g.CommitOffsets(ctx, map[TopicPartition]int64{tp: 13})
		}, 13},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAgent(t)
			f.addTopic("t", 2)
			fill(t, f, 2, 0, 10)
			c := f.newClient()
			gcA := mustGroupConsumer(t, c, WithAutoCommitInterval(0))
			ctx := testContext(t)
			pollUntil := func(want int) []GroupRecord {
				t.Helper()
				var got []GroupRecord
				for len(got) < want {
					records, err := gcA.Poll(ctx)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, records...)
				}
				return got
			}
			pollUntil(20)
			// The application comes back for more: the 20 records are processed.
			pollAfterLastRecord(t, ctx, gcA)
			appendValues(t, f, record.CodecNone, 1, values(10, 15)...)
			if inHand := pollUntil(5); inHand[0].Partition != 1 || inHand[0].Offset != 10 {
				t.Fatalf("the latest Poll returned %s@%d first, want t/1@10", inHand[0].TopicPartition(), inHand[0].Offset)
			}
			if tc.commit != nil {
				if err := tc.commit(ctx, gcA); err != nil {
					t.Fatal(err)
				}
			}

			// member-1 is still processing t/1's 10-14 when member-2 joins.
			gcB := mustGroupConsumer(t, c, WithAutoCommitInterval(0))
			colB := collect(t, gcB)
			// t/1 is granted to member-2 once member-1 committed and released it.
			eventually(t, "member-2 owns t/1", func() bool { return slices.Equal(gcB.Assigned(), []TopicPartition{tp}) })
			if o, _ := f.committedOffset("g", tp); o != tc.want {
				t.Fatalf("the revocation left t/1 committed at %d, want %d", o, tc.want)
			}
			eventually(t, "member-2 reads t/1", func() bool { return len(colB.offsets(tp)) >= int(15-tc.want) })
			if got := colB.offsets(tp); !slices.Equal(got, span(tc.want, 15)) {
				t.Errorf("member-2 read t/1's %v, want %v", got, span(tc.want, 15))
			}
		})
	}
}
