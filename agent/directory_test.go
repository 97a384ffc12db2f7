package agent

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/election"
)

// TestDirectoryStopWaitsForRefreshes: stop cancels the refresh a lookup
// miss started and the periodic one, and returns only once both have
// ended; a miss after stop starts nothing.
func TestDirectoryStopWaitsForRefreshes(t *testing.T) {
	var calls atomic.Int32
	var ended atomic.Bool
	started := make(chan struct{})
	list := func(ctx context.Context) ([]election.AgentInfo, error) {
		if calls.Add(1) == 1 {
			close(started)
		}
		<-ctx.Done() // a Consul that does not answer
		ended.Store(true)
		return nil, ctx.Err()
	}
	d := newDirectory(list, hclog.NewNullLogger(), time.Now)
	d.minGap = 0
	d.start(time.Hour)
	if _, ok := d.lookup("n1"); ok {
		t.Fatal("lookup found an agent in an empty directory")
	}
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("a lookup miss started no refresh")
	}

	stopped := make(chan struct{})
	go func() {
		d.stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(peerCallTimeout / 2):
		t.Fatal("stop did not cancel the refresh in flight")
	}
	if !ended.Load() {
		t.Error("stop returned before the refresh ended")
	}

	d.lookup("n1")
	d.tasks.Wait()
	if n := calls.Load(); n != 1 {
		t.Errorf("Consul was asked %d times, want once: a miss after stop refreshed", n)
	}
}
