package partition

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"
)

// TestResendFlagsDropsTheFirstFetchsAnswer: resendFlags sends the fetch
// waiting at the leader again when the retiring (or data_loss) flag
// changes. When the first fetch's answer is already delivered, waiting in
// the loop's mailbox, the leader answers the second too: two answers to
// one fetch offset, of the same generation. The loop took both: the second
// as the answer to a fetch no longer in flight (the follower state machine
// refused it: "following again", with a backoff) or to the next fetch
// (records no longer contiguous with the log: a backoff; and the next
// fetch, still pending, forgotten). Only the answer to the fetch in
// flight counts.
func TestResendFlagsDropsTheFirstFetchsAnswer(t *testing.T) {
	batch := testBatch(t, []string{"a", "b"})
	record.SetLeaderEpoch(batch, 1)
	cases := []struct {
		name string
		// records: the log is empty and both answers carry offsets 0-1;
		// otherwise the log holds 0-1 and both answers carry the HW 2.
		records bool
		// apart: the loop takes the first answer, sends the next fetch,
		// and only then takes the second.
		apart bool
	}{
		{"records taken together", true, false},
		{"positions taken together", false, false},
		{"records, the second taken after the next fetch", true, true},
		{"positions, the second taken after the next fetch", false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, log, clock := resendFollower(t)
			if !c.records {
				appendLeader(t, log, 1, "a", "b")
			}
			r.becomeFollower(followTarget{node: "n1", epoch: 1})
			r.driveFollower()
			if r.fetchAddr == "" {
				t.Fatal("no fetch sent")
			}
			answer := peer.FetchAnswer{Positions: peer.FetchPositions{LeaderEpoch: 1, HighWatermark: 2, LogEndOffset: 2}}
			if c.records {
				answer.Batches = batch
				answer.Positions.HighWatermark = 0
			}
			// The sessions are closed: each fetch is answered at once with
			// ErrSessionsClosed, which the test replaces by the leader's
			// answer, keeping what the loop tagged it with.
			leaderAnswer := func() fetchAnswered {
				t.Helper()
				got := r.takeFetchAnswers()
				if len(got) != 1 {
					t.Fatalf("%d answers delivered, want 1", len(got))
				}
				a := got[0]
				a.answer, a.err = answer, nil
				return a
			}
			first := leaderAnswer()
			// The first answer waits in the mailbox; the agent starts
			// stopping meanwhile.
			leading := make(chan bool, 1)
			r.onRetire(retireRequest{leading: leading})
			if !r.fetchOut.Retiring {
				t.Fatal("the fetch was not sent again with the retiring flag")
			}
			second := leaderAnswer()

			r.onFetchAnswered(first)
			pendingNext := false
			if c.apart {
				r.driveFollower()
				// A next fetch sent here is pending at the leader: its
				// answer (ErrSessionsClosed) is not the leader's.
				pendingNext = len(r.takeFetchAnswers()) == 1
			}
			r.onFetchAnswered(second)
			if r.follower == nil {
				t.Fatal("the second answer restarted the follower")
			}
			if r.followRetryAt.After(clock.now()) {
				t.Fatalf("the second answer set a backoff (retry at %s, now %s)", r.followRetryAt, clock.now())
			}
			if log.LogEndOffset() != 2 {
				t.Fatalf("log end %d, want 2", log.LogEndOffset())
			}
			if pendingNext && r.fetchAddr == "" {
				t.Fatal("the next fetch, still pending at the leader, was taken as answered by the second answer")
			}
			r.driveFollower()
			if r.fetchAddr == "" || r.fetchOut.FetchOffset != 2 {
				t.Fatalf("after both answers: fetch in flight %t at %d, want one at 2", r.fetchAddr != "", r.fetchOut.FetchOffset)
			}
		})
	}
}

// resendFollower is a replica (n2) with an empty log, not following yet,
// whose fetch sessions are closed, on a fake clock.
func resendFollower(t *testing.T) (*Replica, *segstore.Log, *fakeNow) {
	t.Helper()
	root := t.TempDir()
	fsys := segstore.OSFS{}
	opts := segstore.Options{SegmentBytes: 1 << 20, IndexIntervalBytes: 256, IndexBytes: 4096, Logger: hclog.NewNullLogger()}
	sessions := peer.NewSessions(nil, "n2", time.Second, nil)
	sessions.Close()
	clock := &fakeNow{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	deps := &Deps{Self: "n2", Config: &config.Config{}, Log: hclog.NewNullLogger(), Now: clock.now, FS: fsys, LogOptions: opts,
		Durability: replicate.DurabilityReplicated, sessions: sessions,
		LookupAgent: func(string) (election.AgentInfo, bool) {
			return election.AgentInfo{NodeID: "n1", PeerAddr: "127.0.0.1:1"}, true
		}}
	dir := filepath.Join(root, "t-0")
	log, _, err := openPartitionLog(fsys, dir, opts, func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	r := newReplica(deps, "t", 0, "id", dir, log, false)
	r.loadProducers()
	return r, log, clock
}
