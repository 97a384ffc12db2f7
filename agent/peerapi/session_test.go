package peerapi

import (
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/peer"
)

// stuckHost is a Host whose lookup of the stuck partition waits until
// released, as a fetch waits for a busy partition loop; it holds no
// replica of any partition.
type stuckHost struct {
	stuck   int
	release chan struct{}
	mu      sync.Mutex
	looked  []int
}

func (h *stuckHost) Serving(*fasthttp.RequestCtx) bool { return true }
func (h *stuckHost) RequestReplica(*fasthttp.RequestCtx, string, int) *partition.Replica {
	return nil
}

func (h *stuckHost) Replica(_ string, p int) *partition.Replica {
	if p == h.stuck {
		<-h.release
	}
	h.mu.Lock()
	h.looked = append(h.looked, p)
	h.mu.Unlock()
	return nil
}

// TestSessionFetchesDoNotWaitForOtherPartitions: a fetch held up at its
// partition's loop holds up only the requests of partitions on its worker,
// which follow it in order; the session's other partitions are answered.
func TestSessionFetchesDoNotWaitForOtherPartitions(t *testing.T) {
	const partitions = 64
	host := &stuckHost{stuck: 0, release: make(chan struct{})}
	srv := &Server{cfg: Config{Host: host, Now: time.Now, Logger: hclog.NewNullLogger(), FetchServed: func() {}}}
	s := &leaderSession{srv: srv, replicaID: "n2", wake: make(chan struct{}, 1), stop: make(chan struct{}),
		parts: map[sessionKey]*sessionPart{}}
	stopWorkers := s.startWorkers()
	stuckShard := shard("t", host.stuck, sessionWorkers)
	var behind, others int
	for p := range partitions {
		req := peer.SessionRequest{Kind: peer.SessionFetch, ID: uint32(p), Fetch: peer.Fetch{Topic: "t", Partition: p}}
		s.work[shard("t", p, sessionWorkers)] <- sessionRequest{SessionRequest: req, at: time.Now()}
		if p != host.stuck && shard("t", p, sessionWorkers) == stuckShard {
			behind++
		} else if p != host.stuck {
			others++
		}
	}
	if others == 0 || behind == partitions-1 {
		t.Fatalf("shard puts %d of %d partitions behind the stuck one", behind, partitions-1)
	}
	answered := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.dirty)
	}
	deadline := time.Now().Add(10 * time.Second)
	for answered() < others {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the %d partitions on other workers answered while one partition's loop was busy", answered(), others)
		}
		time.Sleep(time.Millisecond)
	}
	if n := answered(); n != others {
		t.Fatalf("%d answered, want %d: the partitions behind the stuck one went ahead of it", n, others)
	}

	close(host.release)
	stopWorkers()
	if n := answered(); n != partitions {
		t.Fatalf("%d of %d partitions answered once the stuck loop went on", n, partitions)
	}
	// The stuck partition's worker took its requests in order.
	var order []int
	for _, p := range host.looked {
		if shard("t", p, sessionWorkers) == stuckShard {
			order = append(order, p)
		}
	}
	for i := 1; i < len(order); i++ {
		if order[0] != host.stuck || order[i] <= order[i-1] {
			t.Fatalf("the stuck partition's worker took %v, want %d first and the rest in order", order, host.stuck)
		}
	}
}

// TestAnnounceLeadership: a leading frame goes to the sessions that asked
// for them of the partition's other replicas' agents, and to no other.
func TestAnnounceLeadership(t *testing.T) {
	srv := &Server{cfg: Config{Now: time.Now, Logger: hclog.NewNullLogger()}}
	open := func(replicaID string, leading bool) *leaderSession {
		s := &leaderSession{srv: srv, replicaID: replicaID, leading: leading, wake: make(chan struct{}, 1)}
		if !srv.sessions.add(s) {
			t.Fatal("sessions closed")
		}
		return s
	}
	follower, older, stranger, self := open("n2", true), open("n3", false), open("n9", true), open("n1", true)
	l := peer.Leading{Topic: "t", Partition: 2, Epoch: 7, Leader: "n1"}
	srv.AnnounceLeadership(l, []string{"n1", "n2", "n3"})
	if want := peer.AppendLeadingFrame(nil, l); string(follower.announced) != string(want) || len(follower.wake) != 1 {
		t.Fatalf("the follower's session has %q queued (woken %t), want %q", follower.announced, len(follower.wake) == 1, want)
	}
	for name, s := range map[string]*leaderSession{"a session that did not ask": older, "a stranger's session": stranger, "the leader's own": self} {
		if len(s.announced) != 0 || len(s.wake) != 0 {
			t.Errorf("%s has %q queued", name, s.announced)
		}
	}
	for _, s := range []*leaderSession{follower, older, stranger, self} {
		srv.sessions.remove(s)
	}
}
