package partition

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/segstore"
)

// TestReopenKeepsTopicStorage: a log reopened after a failure keeps its
// topic's storage settings; the consumer groups' offsets topic, which has
// no retention, must not take the agent's after a failed fsync.
func TestReopenKeepsTopicStorage(t *testing.T) {
	root := t.TempDir()
	fsys, err := segstore.NewFaultFS(root)
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeNow{}
	agentOpts := segstore.Options{SegmentBytes: 1 << 20, IndexIntervalBytes: 256, IndexBytes: 4096, RetentionBytes: 1, Logger: hclog.NewNullLogger()}
	tc := election.TopicConfig{ID: "id", Name: "t", Partitions: 1, ReplicationFactor: 1, MinInsyncReplicas: 1,
		Storage: json.RawMessage(`{"segment_bytes":4096,"no_retention":true}`)}
	opts, err := LogOptionsFor(agentOpts, tc)
	if err != nil {
		t.Fatal(err)
	}
	deps := &Deps{Self: "n1", Log: hclog.NewNullLogger(), Now: clock.now, FS: fsys, LogOptions: agentOpts}
	dir := filepath.Join(root, "t-0")
	log, _, err := openPartitionLog(fsys, dir, opts, func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	r := newReplica(deps, "t", 0, "id", dir, log, false)
	r.meta = replicaMeta{tc: tc, usable: true}
	r.startSyncer(log)
	t.Cleanup(func() {
		r.cancel()
		if !r.logFailed {
			close(r.syncerStop)
			r.CurrentLog().Close()
		}
	})
	for range 12 {
		appendLeader(t, log, 1, strings.Repeat("v", 1000))
	}
	if _, err := log.Sync(); err != nil {
		t.Fatal(err)
	}
	hw := log.LogEndOffset()
	if err := log.SetHighWatermark(hw); err != nil {
		t.Fatal(err)
	}
	r.failLog(errors.New("injected"))
	r.reopen()
	if r.logFailed {
		t.Fatal("reopen did not succeed")
	}
	reopened := r.CurrentLog()
	if n, err := reopened.ApplyRetention(hw); err != nil || n != 0 || reopened.LogStartOffset() != 0 {
		t.Fatalf("retention on the reopened log of a topic without retention deleted %d segments (log start %d, %v)",
			n, reopened.LogStartOffset(), err)
	}
}
