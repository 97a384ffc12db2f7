package partition

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/internal/consultest"
	"github.com/logagent/logagent/producer"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"
)

// startLeaderManager runs a Manager for node n1 against a real Consul,
// with topic created (one partition, replicated once, on n1) and now as
// the replicas' clock; everything stops when the test ends, as the
// agent's graceful stop does it.
func startLeaderManager(t *testing.T, topic string, now func() time.Time) *Manager {
	t.Helper()
	srv := consultest.Start(t)
	m, coord := startManager(t, srv, "n1", "", now)
	createTopic(t, coord, topic, [][]string{{"n1"}}, 1)
	return m
}

// startManager runs a Manager for node against srv, with extraHCL added to
// its configuration and now as the replicas' clock, and returns it with its
// election client; everything stops when the test ends, as the agent's
// graceful stop does it.
func startManager(t *testing.T, srv *consultest.Server, node, extraHCL string, now func() time.Time) (*Manager, *election.Client) {
	t.Helper()
	return startManagerFS(t, srv, node, extraHCL, now, segstore.OSFS{})
}

// startManagerFS is startManager with the partitions' files on fsys.
func startManagerFS(t *testing.T, srv *consultest.Server, node, extraHCL string, now func() time.Time, fsys segstore.FS) (*Manager, *election.Client) {
	t.Helper()
	return startManagerCoord(t, srv, node, extraHCL, now, fsys, func(c *election.Client) Coordinator { return c })
}

// startManagerCoord is startManagerFS with the partitions asking Consul
// through wrap(the election client), which the test may fault.
func startManagerCoord(t *testing.T, srv *consultest.Server, node, extraHCL string, now func() time.Time, fsys segstore.FS, wrap func(*election.Client) Coordinator) (*Manager, *election.Client) {
	t.Helper()
	cfg, log := testConfig(t, srv, node, extraHCL)
	coord := startCoord(t, cfg, log)
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		t.Fatal(err)
	}
	m := NewManager(&Deps{
		Self:            cfg.NodeID,
		Config:          cfg,
		Coord:           wrap(coord),
		Peers:           peer.NewClients("", 1<<20, false, nil),
		LookupAgent:     func(string) (election.AgentInfo, bool) { return election.AgentInfo{}, false },
		Log:             log,
		Now:             now,
		FS:              fsys,
		Durability:      replicate.DurabilityFsync,
		ProducerOptions: producer.Options{Expiration: cfg.Producer.IDExpiration},
		LogOptions:      segstore.Options{SegmentBytes: 1 << 20, IndexIntervalBytes: 4096, MaxBatchBytes: segstore.DefaultMaxBatchBytes, Now: now},
	}, cfg.DataDir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Start(ctx, func(ctx context.Context) (*election.Snapshot, error) { return coord.WaitMetadata(ctx, 1) }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.RetireAll(ctx)
		if err := coord.Close(ctx); err != nil {
			t.Errorf("close the election client: %v", err)
		}
		if err := m.Stop(); err != nil {
			t.Errorf("stop the partitions: %v", err)
		}
	})
	return m, coord
}

// testConfig is node's configuration, talking to srv, with extraHCL added,
// and a logger writing to the test's log.
func testConfig(t *testing.T, srv *consultest.Server, node, extraHCL string) (*config.Config, hclog.Logger) {
	t.Helper()
	logs := newTestWriter(t)
	dir := t.TempDir()
	hcl := filepath.Join(dir, "agent.hcl")
	body := fmt.Sprintf(`node_id = %q
data_dir = %q
consul {
  address     = %q
  session_ttl = "5s"
  check_ttl   = "2s"
  lock_delay  = "100ms"
}
%s
`, node, filepath.Join(dir, "data"), srv.HTTPAddr(), extraHCL)
	if err := os.WriteFile(hcl, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(hcl)
	if err != nil {
		t.Fatal(err)
	}
	// An InterceptLogger: a test may register a sink to watch for a line.
	return cfg, hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: node, Level: hclog.Debug, Output: logs})
}

// startCoord registers an election client for cfg's node with srv; the
// caller closes it.
func startCoord(t *testing.T, cfg *config.Config, log hclog.Logger) *election.Client {
	t.Helper()
	coord, err := election.New(election.Config{
		Consul:     cfg.Consul.API,
		Prefix:     cfg.Consul.Prefix,
		NodeID:     cfg.NodeID,
		PeerAddr:   cfg.Peer.AdvertiseAddress,
		ClientAddr: cfg.Client.Address,
		CheckTTL:   cfg.Consul.CheckTTL,
		SessionTTL: cfg.Consul.SessionTTL,
		LockDelay:  cfg.Consul.LockDelay,
		Logger:     log.Named("election"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := coord.WaitForConsul(ctx); err != nil {
		t.Fatal(err)
	}
	if err := coord.Register(ctx); err != nil {
		t.Fatal(err)
	}
	return coord
}

// createTopic creates a topic of one partition per assignment entry
// through coord.
func createTopic(t *testing.T, coord *election.Client, topic string, assignment [][]string, minISR int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := coord.CreateTopic(ctx, election.TopicConfig{Name: topic, Partitions: len(assignment), ReplicationFactor: len(assignment[0]), MinInsyncReplicas: minISR},
		assignment); err != nil {
		t.Fatal(err)
	}
}

// waitLeading returns topic's partition 0 once its replica leads.
func waitLeading(t *testing.T, m *Manager, topic string) *Replica {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if r := m.Get(topic, 0); r != nil && r.CurrentView().Role == RoleLeader {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/0 has no leader after 30s", topic)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testWriter sends log lines to t.Log until the test has ended; a
// goroutine that logs after it writes nowhere.
type testWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

// newTestWriter is made before anything that logs to it, so its cleanup
// runs after theirs.
func newTestWriter(t *testing.T) *testWriter {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return w
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// pausableClock is a replica clock that can hold the next goroutine asking
// it for the time, for tests that need the replica loop stopped at a known
// point (its reconcile asks the clock after every event).
type pausableClock struct {
	mu     sync.Mutex
	pause  chan struct{}
	paused chan struct{}
}

func (c *pausableClock) now() time.Time {
	c.mu.Lock()
	pause, paused := c.pause, c.paused
	c.pause, c.paused = nil, nil
	c.mu.Unlock()
	if pause != nil {
		close(paused)
		<-pause
	}
	return time.Now()
}

// arm makes the next caller block until release is called; paused is closed
// once one does.
func (c *pausableClock) arm() (paused <-chan struct{}, release func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pause, c.paused = make(chan struct{}), make(chan struct{})
	pause := c.pause
	return c.paused, func() { close(pause) }
}

// TestLeadershipLossBeforeQueuedProduce: when the leadership has ended and a
// produce is queued at the same time, the loop steps down first, so the
// write is refused, never appended and acknowledged by a former leader.
// Before the fix the loop's select chose between the two at random; 20
// rounds make a miss practically certain.
func TestLeadershipLossBeforeQueuedProduce(t *testing.T) {
	clock := &pausableClock{}
	m := startLeaderManager(t, "prio", clock.now)
	const rounds = 20
	for round := 0; round < rounds; {
		r := waitLeading(t, m, "prio")
		// A wake makes the loop ask the clock (its reconcile does): an
		// idle leader is not ticked, so the test wakes it with a read of
		// its progress.
		paused, release := clock.arm()
		go r.Progress(context.Background())
		select {
		case <-paused:
		case <-time.After(5 * time.Second):
			release()
			t.Fatal("the clock was never asked")
		}
		// Whoever the clock holds, the loop must be the one: a queued
		// produce stays queued.
		outcome := make(chan ProduceOutcome, 1)
		go func() {
			outcome <- r.Produce(testBatch(t, []string{"late"}), replicate.AcksLeader, AnyEpoch, time.Now().Add(5*time.Second), 6*time.Second)
		}()
		waitQueued := time.Now().Add(time.Second)
		for len(r.events) == 0 && time.Now().Before(waitQueued) {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
		if len(r.events) != 1 {
			release()
			<-outcome
			continue // the clock held some other goroutine: try again
		}
		l := r.leadership // the loop is held: no concurrent writer
		if err := l.Resign(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-l.Done()
		before := r.CurrentLog().LogEndOffset()
		release()
		out := <-outcome
		if out.Err == nil || out.Appended || r.CurrentLog().LogEndOffset() != before {
			t.Fatalf("round %d: produce queued behind a lost leadership: err %v, appended %t, log end %d -> %d",
				round, out.Err, out.Appended, before, r.CurrentLog().LogEndOffset())
		}
		if !errors.Is(out.Err, ErrNotLeaderHere) {
			t.Fatalf("round %d: err %v, want not leader", round, out.Err)
		}
		round++
	}
}
