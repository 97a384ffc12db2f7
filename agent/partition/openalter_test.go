package partition

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/internal/consultest"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"
)

// blockMkdirFS holds the first MkdirAll of a directory named dirName until
// release is closed, telling entered when it starts waiting.
type blockMkdirFS struct {
	segstore.OSFS
	dirName string
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (f *blockMkdirFS) MkdirAll(dir string, perm os.FileMode) error {
	if filepath.Base(dir) == f.dirName {
		f.once.Do(func() {
			close(f.entered)
			<-f.release
		})
	}
	return f.OSFS.MkdirAll(dir, perm)
}

// startManagerOpeningT0 starts a manager (node n1) whose open of partition
// t/0 is held in its MkdirAll, runs create (which creates topic t), and
// returns once the open is held; close fsys.release to let it go on.
func startManagerOpeningT0(t *testing.T, create func(context.Context, *election.Client) error) (*Manager, *election.Client, *blockMkdirFS, context.Context) {
	t.Helper()
	srv := consultest.Start(t)
	fsys := &blockMkdirFS{dirName: "t-0", entered: make(chan struct{}), release: make(chan struct{})}
	m, coord := startManagerFS(t, srv, "n1", "", time.Now, fsys)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if err := create(ctx, coord); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fsys.entered:
	case <-ctx.Done():
		t.Fatal("the partition's open never started")
	}
	return m, coord, fsys, ctx
}

// TestRetentionAlteredWhileOpeningIsApplied: a topic's retention changed
// while its partition's open is queued or under way (an agent starting
// with thousands of partitions, or a topic altered right after its
// creation) must be applied to the log once it is open. The log is opened
// with the settings of the apply that queued the open; the replica's first
// metadata comes from the newest snapshot, and the loop compares storage
// settings only from the second metadata on.
func TestRetentionAlteredWhileOpeningIsApplied(t *testing.T) {
	m, coord, fsys, ctx := startManagerOpeningT0(t, func(ctx context.Context, coord *election.Client) error {
		tc := election.TopicConfig{Name: "t", Partitions: 1, ReplicationFactor: 1, MinInsyncReplicas: 1,
			Storage: json.RawMessage(`{"segment_bytes":4096}`)}
		return coord.CreateTopic(ctx, tc, [][]string{{"n1"}})
	})
	altered := json.RawMessage(`{"segment_bytes":4096,"retention_bytes":1}`)
	if _, err := coord.AlterTopic(ctx, "t", func(old election.TopicConfig, _ [][]string) (election.TopicConfig, [][]string, error) {
		old.Storage = altered
		return old, nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	for {
		snap := coord.Metadata()
		if tm, ok := snap.Topic("t"); ok && string(tm.Config.Storage) == string(altered) {
			break
		}
		select {
		case <-snap.Changed():
		case <-ctx.Done():
			t.Fatal("the alter never showed in the metadata")
		}
	}
	time.Sleep(300 * time.Millisecond) // the manager applies the snapshot meanwhile
	close(fsys.release)
	r := waitLeading(t, m, "t")
	for i := range 12 {
		out := r.Produce(testBatch(t, []string{strings.Repeat("v", 1000)}), replicate.AcksLeader, AnyEpoch, time.Now().Add(5*time.Second), 6*time.Second)
		if out.Err != nil {
			t.Fatalf("produce %d: %v", i, out.Err)
		}
	}
	log := r.CurrentLog()
	n, err := log.ApplyRetention(log.HighWatermark())
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatalf("topic altered to retention_bytes 1 while its partition opened: retention deletes nothing (log start %d, hw %d); the log kept the settings it was opened with",
			log.LogStartOffset(), log.HighWatermark())
	}
}

// TestReplicaOpenedDuringRetireAllDoesNotLead: a partition whose open was
// under way when the graceful stop's RetireAll began must not campaign and
// lead afterwards: the agent leaves Consul right after, and the partition
// is then without a leader until the lock delay and a new election. Only
// the replicas open when RetireAll starts are retired.
func TestReplicaOpenedDuringRetireAllDoesNotLead(t *testing.T) {
	m, _, fsys, ctx := startManagerOpeningT0(t, func(_ context.Context, coord *election.Client) error {
		createTopic(t, coord, "t", [][]string{{"n1"}}, 1)
		return nil
	})
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	m.RetireAll(rctx) // the agent's graceful stop begins
	rcancel()
	close(fsys.release)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if r := m.Get("t", 0); r != nil && r.CurrentView().Role == RoleLeader {
			t.Fatalf("t/0, opened while the agent retired its replicas, leads after RetireAll (epoch %d)", r.CurrentView().Epoch)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if m.Get("t", 0) == nil {
		t.Fatal("t/0 never opened: the test saw no replica that could have led")
	}
}
