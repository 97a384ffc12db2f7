package partition

import (
	"testing"
	"time"

	"github.com/logagent/logagent/internal/consultest"
	"github.com/logagent/logagent/replicate"
)

// TestLeaderRecoversAfterConsulOutage: a leader whose Consul stops for
// longer than its lease steps down, and once Consul comes back (data
// kept) leads again and acknowledges writes.
func TestLeaderRecoversAfterConsulOutage(t *testing.T) {
	srv := consultest.Start(t, consultest.Persistent())
	m, coord := startManager(t, srv, "n1", "", time.Now)
	createTopic(t, coord, "out", [][]string{{"n1"}}, 1)
	r := waitLeading(t, m, "out")
	epoch := r.CurrentView().Epoch
	if out := r.Produce(testBatch(t, []string{"a"}), replicate.AcksAll, AnyEpoch, time.Now().Add(5*time.Second), 6*time.Second); out.Err != nil {
		t.Fatalf("first write: %v", out.Err)
	}
	srv.Stop()
	waitFor(t, func() bool { return r.CurrentView().Role != RoleLeader }, "the leader to step down")
	time.Sleep(3 * time.Second)
	srv.Restart()
	restarted := time.Now()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v := r.CurrentView()
		if v.Role == RoleLeader && v.Epoch > epoch {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not leading 30s after Consul came back: role %v epoch %d (was %d)", v.Role, v.Epoch, epoch)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("leading again %v after Consul came back", time.Since(restarted))
	if out := r.Produce(testBatch(t, []string{"b"}), replicate.AcksAll, AnyEpoch, time.Now().Add(5*time.Second), 6*time.Second); out.Err != nil {
		t.Fatalf("write after the outage: %v", out.Err)
	}
}
