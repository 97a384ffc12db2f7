package election

import (
	"context"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/consultest"
)

// TestStrayReleaseKeepsANewerLock: the stray-lock loop saw a's key held
// without a leadership at the index a lapsed leadership's election left,
// and before its release reached Consul a newer election of a took the key
// again with the same session. The release must not free the newer
// leadership's key: the partition would be free while a leads, and another
// replica could win the next epoch beside it. A stray whose key nobody took
// again is released.
func TestStrayReleaseKeepsANewerLock(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	a := newTestClient(t, srv, "a")
	register(t, a)
	createTopic(t, a, "sg", [][]string{{"a", "b"}})
	pk := partitionKey{topic: "sg", partition: 0}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	first := campaign(t, a, "sg", 0)
	session := sessionOf(a)
	a.lose(first, ErrLeaseExpired)
	seen := &strayLock{key: pk, index: first.leaderIndex, epoch: first.Epoch()}
	second := campaign(t, a, "sg", 0)
	if second.Epoch() != first.Epoch()+1 {
		t.Fatalf("second leadership at epoch %d, want %d", second.Epoch(), first.Epoch()+1)
	}
	released, err := a.releaseStray(ctx, session, seen)
	if err != nil {
		t.Fatal(err)
	}
	if released {
		t.Errorf("the release of the key seen stray at index %d was applied after epoch %d took it again", seen.index, second.Epoch())
	}
	if got := leaderHolder(t, srv, "sg", 0); got != session {
		t.Fatalf("after the stale release the leader key is held by %q, want %q (epoch %d leads)", got, session, second.Epoch())
	}
	if err := second.Err(); err != nil {
		t.Fatalf("epoch %d ended: %v", second.Epoch(), err)
	}

	// Nobody takes the key again after this one: its release frees it.
	a.lose(second, ErrLeaseExpired)
	if _, err := a.releaseStray(ctx, session, &strayLock{key: pk, index: second.leaderIndex, epoch: second.Epoch()}); err != nil {
		t.Fatal(err)
	}
	if got := leaderHolder(t, srv, "sg", 0); got != "" {
		t.Fatalf("after releasing the stray key of epoch %d it is held by %q, want free", second.Epoch(), got)
	}
}
