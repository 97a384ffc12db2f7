package election

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/logagent/logagent/internal/consultest"
)

// leaderHolder reads, consistently, the session holding a partition's
// leader key ("" when free).
func leaderHolder(t *testing.T, srv *consultest.Server, topic string, partition int) string {
	t.Helper()
	key := keyspace{prefix: testPrefix}.leader(topic, partition)
	pair, _, err := srv.Client().KV().Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil {
		t.Fatalf("get %s: %v, %v", key, pair, err)
	}
	return pair.Session
}

// lapse does to a what a lapse of its lease does: every leadership ends
// (ErrLeaseExpired) and the lease stays invalid until a renewal sent after
// now succeeds, which the session loop is asked for at once. The session
// lives on, so the renewal proves it.
func lapse(c *Client) {
	now := c.clock.Now()
	c.updateLease(func(l *lease) bool { return l.requireProof(now) })
}

// TestStrayLeaderKeyIsReleased: a leader's lease lapses, a renewal then
// proves its session alive, and the replica does not campaign again (its
// log reopened with data loss, it is retiring). The session still holds
// the leader key, with no leadership and no campaign of the partition on
// the client: the client must release the key, so that the other in-sync
// replica wins the partition. Before, the key stayed locked until the
// agent deregistered, and the partition had no leader meanwhile.
func TestStrayLeaderKeyIsReleased(t *testing.T) {
	srv, a, b := twoClientsOfOnePartition(t, "sk")

	first := campaign(t, a, "sk", 0)
	session := sessionOf(a)
	lapse(a)
	if !errors.Is(first.Err(), ErrLeaseExpired) {
		t.Fatalf("a's leadership after the lapse: err %v, want ErrLeaseExpired", first.Err())
	}
	if got := leaderHolder(t, srv, "sk", 0); got != session {
		t.Fatalf("after the lapse the leader key is held by %q, want a's session %q", got, session)
	}
	waitFor(t, 5*time.Second, "a renewal proving a's session", func() bool {
		s, _, _ := a.usableSession()
		return s == session
	})

	// No campaign of a follows. b, in the ISR, must win within
	// strayLockGrace (2 s) and a few passes.
	const bound = 10 * time.Second
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	l, err := b.Campaign(ctx, "sk", 0)
	if err != nil {
		t.Fatalf("b did not win within %s of a's proved lapse: %v (leader key held by %q, a's session %q)",
			bound, err, leaderHolder(t, srv, "sk", 0), session)
	}
	t.Logf("b leads epoch %d, %s after a's session was proved", l.Epoch(), time.Since(start).Round(time.Millisecond))
	if l.Epoch() != first.Epoch()+1 {
		t.Fatalf("b leads epoch %d, want %d", l.Epoch(), first.Epoch()+1)
	}
	// The key was released, not freed by the end of a's session.
	if got := sessionOf(a); got != session {
		t.Fatalf("a's session is %q, want %q still", got, session)
	}
}

// TestLapsedLeaderCampaigningAgainKeepsItsKey: what the agent does after a
// lapse that a renewal proves harmless, and must go on doing: the replica
// campaigns again at once, its campaign (running while the lease waits for
// proof) takes the key back at the next epoch, and the key is never
// released meanwhile, so another replica does not win.
func TestLapsedLeaderCampaigningAgainKeepsItsKey(t *testing.T) {
	srv, a, b := twoClientsOfOnePartition(t, "kk")

	first := campaign(t, a, "kk", 0)
	lapse(a)
	second := campaign(t, a, "kk", 0)
	if second.Epoch() != first.Epoch()+1 {
		t.Fatalf("a leads epoch %d after the lapse, want %d", second.Epoch(), first.Epoch()+1)
	}
	// Past strayLockGrace (2 s): a key taken back is never stray.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if l, err := b.Campaign(ctx, "kk", 0); err == nil {
		t.Fatalf("b won epoch %d while a leads epoch %d", l.Epoch(), second.Epoch())
	}
	if err := second.Err(); err != nil {
		t.Fatalf("a's epoch %d ended: %v", second.Epoch(), err)
	}
	if got, want := leaderHolder(t, srv, "kk", 0), sessionOf(a); got != want {
		t.Fatalf("leader key held by %q, want a's session %q", got, want)
	}
}

// twoClientsOfOnePartition registers clients a and b on a new Consul
// server, and creates topic with one partition on replicas a and b.
func twoClientsOfOnePartition(t *testing.T, topic string) (srv *consultest.Server, a, b *Client) {
	t.Parallel()
	srv = consultest.Start(t)
	a = newTestClient(t, srv, "a")
	b = newTestClient(t, srv, "b")
	register(t, a)
	register(t, b)
	createTopic(t, a, topic, [][]string{{"a", "b"}})
	return srv, a, b
}
