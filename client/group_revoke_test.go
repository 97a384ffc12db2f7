package client

import (
	"sync"
	"testing"
	"time"
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
