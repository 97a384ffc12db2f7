package election

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/logagent/logagent/internal/consultest"
	"github.com/logagent/logagent/internal/testseed"
)

// testPrefix keeps test keys apart from anything else in the same Consul.
const testPrefix = "logagent-test/"

// newTestClient builds a client for srv, closed gracefully when the test
// ends.
func newTestClient(t testing.TB, srv *consultest.Server, node string, opts ...func(*Config)) *Client {
	t.Helper()
	logger, stopLog := testLogger(t, node)
	cfg := Config{
		Consul:     srv.Config(),
		Prefix:     testPrefix,
		NodeID:     node,
		PeerAddr:   "127.0.0.1:7171",
		ClientAddr: "127.0.0.1:7070",
		Logger:     logger,
	}
	for _, opt := range opts {
		opt(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%s): %v", node, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Logf("close %s: %v", node, err)
		}
		stopLog()
	})
	return c
}

// startRegistered starts Consul and agent "a"'s client, registered, and
// returns them with an admin client of the same Consul.
func startRegistered(t *testing.T) (*consultest.Server, *api.Client, *Client) {
	t.Helper()
	srv := consultest.Start(t)
	a := newTestClient(t, srv, "a")
	register(t, a)
	return srv, srv.Client(), a
}

func register(t *testing.T, c *Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Register(ctx); err != nil {
		t.Fatalf("Register(%s): %v", c.NodeID(), err)
	}
}

func createTopic(t *testing.T, c *Client, name string, assignment [][]string, mutate ...func(*TopicConfig)) {
	t.Helper()
	tc := TopicConfig{Name: name, Partitions: len(assignment), ReplicationFactor: len(assignment[0]), MinInsyncReplicas: 1}
	for _, m := range mutate {
		m(&tc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.CreateTopic(ctx, tc, assignment); err != nil {
		t.Fatalf("CreateTopic(%s): %v", name, err)
	}
}

func campaign(t *testing.T, c *Client, topic string, partition int) *Leadership {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.Campaign(ctx, topic, partition)
	if err != nil {
		t.Fatalf("Campaign(%s, %s/%d): %v", c.NodeID(), topic, partition, err)
	}
	return l
}

// setISR overwrites a partition's state as an operator would, for tests
// that need a replica outside the ISR.
func setISR(t *testing.T, admin *api.Client, topic string, partition int, isr []string) {
	t.Helper()
	key := keyspace{prefix: testPrefix}.state(topic, partition)
	pair, _, err := admin.KV().Get(key, nil)
	if err != nil || pair == nil {
		t.Fatalf("get %s: %v, %v", key, pair, err)
	}
	st, err := decodeState(key, pair.Value)
	if err != nil {
		t.Fatal(err)
	}
	st.ISR = isr
	ok, _, err := admin.KV().CAS(&api.KVPair{Key: key, Value: encodeJSON(st), ModifyIndex: pair.ModifyIndex}, nil)
	if err != nil || !ok {
		t.Fatalf("cas %s: %v, %v", key, ok, err)
	}
}

func consulState(t *testing.T, admin *api.Client, topic string, partition int) PartitionState {
	t.Helper()
	key := keyspace{prefix: testPrefix}.state(topic, partition)
	pair, _, err := admin.KV().Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil {
		t.Fatalf("get %s: %v, %v", key, pair, err)
	}
	st, err := decodeState(key, pair.Value)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func sessionOf(c *Client) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessionID
}

// crash stops what a crashed process stops: check passes and session
// renewals. The lease keeper keeps running, as in an agent cut off from
// Consul, so the test can see it step down by itself.
func crash(c *Client) {
	c.mu.Lock()
	reg := c.registration
	c.mu.Unlock()
	reg.keepAliveCancel()
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return v
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return v
}

// record is one leadership seen by a contender.
type record struct {
	node      string
	partition int
	epoch     int32
	session   string
	wonAt     time.Time
	lostAt    time.Time
	cause     error
	l         *Leadership
}

// recorder collects leaderships from every contender of a test.
type recorder struct {
	mu      sync.Mutex
	records []*record
	changed chan struct{}
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{})} }

func (r *recorder) won(node string, l *Leadership) *record {
	rec := &record{node: node, partition: l.Partition(), epoch: l.Epoch(), session: l.session, wonAt: time.Now(), l: l}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec)
	close(r.changed)
	r.changed = make(chan struct{})
	return rec
}

func (r *recorder) lost(rec *record, cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec.lostAt, rec.cause = time.Now(), cause
	close(r.changed)
	r.changed = make(chan struct{})
}

// waitFor returns the first record matching match, waiting up to timeout.
func (r *recorder) waitFor(t *testing.T, timeout time.Duration, what string, match func(*record) bool) *record {
	t.Helper()
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		for _, rec := range r.records {
			if match(rec) {
				r.mu.Unlock()
				return rec
			}
		}
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
	}
}

// maxEpochLocked is the highest epoch recorded; call it from a waitFor
// match, which runs with r.mu held.
func (r *recorder) maxEpochLocked() int32 {
	var epoch int32
	for _, rec := range r.records {
		epoch = max(epoch, rec.epoch)
	}
	return epoch
}

func (r *recorder) snapshot() []record {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]record, 0, len(r.records))
	for _, rec := range r.records {
		out = append(out, *rec)
	}
	return out
}

// contend campaigns for a partition until ctx ends, recording each
// leadership; after resigning it lets another replica take over first.
func contend(ctx context.Context, c *Client, topic string, partition int, rec *recorder) {
	for {
		l, err := c.Campaign(ctx, topic, partition)
		if err != nil {
			return
		}
		r := rec.won(c.NodeID(), l)
		select {
		case <-l.Done():
		case <-ctx.Done():
			return
		}
		rec.lost(r, l.Err())
		if errors.Is(l.Err(), ErrResigned) {
			for snap := c.Metadata(); ; snap = c.Metadata() {
				pm, ok := snap.Partition(topic, partition)
				if ok && pm.State.Epoch > l.Epoch() {
					break
				}
				select {
				case <-ctx.Done():
					return
				case <-snap.Changed():
				}
			}
		}
	}
}

// contender is one node campaigning in the background.
type contender struct {
	client *Client
	cancel context.CancelFunc
	done   chan struct{}
}

func startContender(t *testing.T, c *Client, topic string, partitions []int, rec *recorder) *contender {
	ctx, cancel := context.WithCancel(context.Background())
	ct := &contender{client: c, cancel: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	for _, p := range partitions {
		wg.Go(func() { contend(ctx, c, topic, p, rec) })
	}
	go func() {
		wg.Wait()
		close(ct.done)
	}()
	t.Cleanup(ct.stop)
	return ct
}

func (ct *contender) stop() {
	ct.cancel()
	<-ct.done
}

func TestRegistrationPassesThenGoesCritical(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	admin := srv.Client()
	c := newTestClient(t, srv, "n1", func(cfg *Config) {
		cfg.PeerAddr, cfg.ClientAddr, cfg.Version = "127.0.0.1:7200", "127.0.0.1:7100", "v1.2.3"
	})
	register(t, c)
	ctx := context.Background()

	agents, err := c.Agents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []AgentInfo{{NodeID: "n1", PeerAddr: "127.0.0.1:7200", ClientAddr: "127.0.0.1:7100", ConsulNode: srv.NodeName(), Passing: true, Version: "v1.2.3"}}
	if !slices.Equal(agents, want) {
		t.Fatalf("Agents() = %+v, want %+v", agents, want)
	}
	entries, _, err := admin.Health().Service("logagent", "", true, nil)
	if err != nil || len(entries) != 1 || entries[0].Service.ID != "logagent-n1" || entries[0].Service.Port != 7200 {
		t.Fatalf("health lists %+v, %v; want logagent-n1 passing", entries, err)
	}

	waitFor(t, 5*time.Second, "a session", func() bool { return sessionOf(c) != "" })
	id := sessionOf(c)
	info, _, err := admin.Session().Info(id, nil)
	if err != nil || info == nil {
		t.Fatalf("session info: %v, %v", info, err)
	}
	if info.LockDelay != DefaultLockDelay || info.TTL != "10s" || info.Behavior != "release" ||
		!slices.Equal(info.NodeChecks, []string{"serfHealth"}) || len(info.ServiceChecks) != 1 || info.ServiceChecks[0].ID != c.checkID {
		t.Fatalf("session = %+v; want lock delay 1s, ttl 10s, release, serfHealth + %s", info, c.checkID)
	}

	// The check goes critical a TTL after the last pass Consul took, and a
	// pass already sent when the passes stop can reach it later than that on
	// a loaded machine (a CI run saw 3.274 s with the TTL 3 s), so the bound
	// is the TTL plus a second: a longer TTL, or passes that go on, fail it.
	stopped := time.Now()
	crash(c)
	waitFor(t, DefaultCheckTTL+time.Second, "the check to go critical", func() bool {
		entries, _, err := admin.Health().Service("logagent", "", true, nil)
		return err == nil && len(entries) == 0
	})
	critical := time.Since(stopped)
	waitFor(t, time.Second, "the session to be invalidated", func() bool {
		info, _, err := admin.Session().Info(id, nil)
		return err == nil && info == nil
	})
	t.Logf("check critical and session invalidated %v after passes stopped (check ttl %v)", critical.Round(time.Millisecond), DefaultCheckTTL)
}

func TestDeregisterRemovesServiceAndSession(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	admin := srv.Client()
	c := newTestClient(t, srv, "n1")
	register(t, c)
	register(t, c) // a no-op the second time
	waitFor(t, 5*time.Second, "a session", func() bool { return sessionOf(c) != "" })
	id := sessionOf(c)
	if err := c.Deregister(context.Background()); err != nil {
		t.Fatal(err)
	}
	services, err := admin.Agent().Services()
	if err != nil || len(services) != 0 {
		t.Fatalf("services after Deregister = %v, %v", services, err)
	}
	if info, _, err := admin.Session().Info(id, nil); err != nil || info != nil {
		t.Fatalf("session after Deregister = %+v, %v", info, err)
	}
	if _, err := c.Campaign(context.Background(), "t", 0); !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("Campaign after Deregister = %v, want ErrNotRegistered", err)
	}
}

// TestRestartedAgentEndsItsPreviousSession: an agent that crashed and
// comes back at once must not leave its old session holding locks until
// the session TTL.
func TestRestartedAgentEndsItsPreviousSession(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	admin := srv.Client()
	first := newTestClient(t, srv, "n1")
	register(t, first)
	createTopic(t, first, "t", [][]string{{"n1"}})
	l := campaign(t, first, "t", 0)
	first.halt()

	second := newTestClient(t, srv, "n1")
	restarted := time.Now()
	register(t, second)
	waitFor(t, time.Second, "the crashed incarnation's session to end", func() bool {
		info, _, err := admin.Session().Info(l.session, nil)
		return err == nil && info == nil
	})
	t.Logf("old session gone %v after the new incarnation registered", time.Since(restarted).Round(time.Millisecond))
	if l2 := campaign(t, second, "t", 0); l2.Epoch() != 2 {
		t.Fatalf("new incarnation leads at epoch %d, want 2", l2.Epoch())
	}
}

func TestWaitForConsul(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	c := newTestClient(t, srv, "n1")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.WaitForConsul(ctx); err != nil {
		t.Fatalf("WaitForConsul with Consul up: %v", err)
	}
	srv.Stop()
	short, cancelShort := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancelShort()
	if err := c.WaitForConsul(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitForConsul with Consul down = %v, want the context's deadline", err)
	}
	result := make(chan error, 1)
	go func() { result <- c.WaitForConsul(ctx) }()
	time.Sleep(200 * time.Millisecond)
	srv.Restart()
	if err := <-result; err != nil {
		t.Fatalf("WaitForConsul across a Consul start: %v", err)
	}
}

// TestConsulDataLoss restarts a dev-mode Consul, which forgets everything:
// the agent registers again, gets a new session, and the watch follows
// Consul's new state. Whether the new Consul's index is below the old one
// depends on how much the fresh server wrote by then, so the test waits for
// the content, not for a lower index; a watch left blocking on the old
// index (which the new Consul may not reach for its whole wait time) fails
// it.
func TestConsulDataLoss(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	c := newTestClient(t, srv, "n1")
	register(t, c)
	createTopic(t, c, "gone", [][]string{{"n1"}})
	l := campaign(t, c, "gone", 0)
	before := c.Metadata().Index
	oldSession := sessionOf(c)

	srv.Restart()
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("leadership survived Consul losing its data")
	}
	waitFor(t, 15*time.Second, "the agent registered again", func() bool {
		agents, err := c.Agents(context.Background())
		return err == nil && len(agents) == 1
	})
	waitFor(t, 15*time.Second, "a new session", func() bool {
		id := sessionOf(c)
		return id != "" && id != oldSession
	})
	waitFor(t, 15*time.Second, "the watch to follow Consul's new state", func() bool {
		snap := c.Metadata()
		return snap.Loaded() && len(snap.Topics()) == 0
	})
	t.Logf("leadership ended with %v; metadata index %d before the restart, %d after", l.Err(), before, c.Metadata().Index)
	createTopic(t, c, "gone", [][]string{{"n1"}})
	if l2 := campaign(t, c, "gone", 0); l2.Epoch() != 1 {
		t.Fatalf("epoch %d on the re-created topic, want 1", l2.Epoch())
	}
}

// TestWatchResetAbandonsBlockedQuery: a blocking query on an index Consul
// has not reached (what a Consul restarted without its data answers an old
// index with) waits its whole wait time unless resetWatches, which the
// session and check loops call when Consul forgets them, abandons it.
func TestWatchResetAbandonsBlockedQuery(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	c := newTestClient(t, srv, "n1")
	type result struct {
		stale bool
		err   error
	}
	done := make(chan result, 1)
	go func() {
		ctx, finish := c.blockingQuery(c.watchGeneration())
		_, _, err := c.listTopics(ctx, 1<<40)
		done <- result{finish(), err}
	}()
	select {
	case r := <-done:
		t.Fatalf("query on an unreached index returned at once (stale %t, err %v): the test shows nothing", r.stale, r.err)
	case <-time.After(500 * time.Millisecond):
	}
	start := time.Now()
	c.resetWatches()
	select {
	case r := <-done:
		if !r.stale {
			t.Fatalf("query ended without being reported stale, err %v", r.err)
		}
		t.Logf("blocked query abandoned %s after resetWatches", time.Since(start).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatalf("query still blocked 5s after resetWatches (wait time %s)", c.cfg.WatchWait)
	}
	// A reset between the generation read and the query cancels it at once.
	gen := c.watchGeneration()
	c.resetWatches()
	ctx, finish := c.blockingQuery(gen)
	if _, _, err := c.listTopics(ctx, 1<<40); err == nil || !finish() {
		t.Fatalf("query after a reset: err %v; want it cancelled and stale", err)
	}
}

// TestEpochAboveTheLogsAfterRollback: a Consul restored from an old
// snapshot holds a lower epoch than the replicas' logs; a new leader takes an
// epoch above its own log's, never one the log already used.
func TestEpochAboveTheLogsAfterRollback(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	admin := srv.Client()
	c := newTestClient(t, srv, "n1")
	register(t, c)
	createTopic(t, c, "rolled", [][]string{{"n1"}})
	cases := []struct {
		name      string
		consul    int32 // epoch the rolled-back state holds
		logEpoch  int32
		wantEpoch int32
	}{
		{"log ahead of a rolled-back consul", 2, 7, 8},
		{"consul ahead of the log", 9, 3, 10},
		{"empty log", 10, NoEpoch, 11},
	}
	for _, tc := range cases {
		key := keyspace{prefix: testPrefix}.state("rolled", 0)
		if _, err := admin.KV().Put(&api.KVPair{Key: key, Value: encodeJSON(PartitionState{Leader: "n1", Epoch: tc.consul, ISR: []string{"n1"}})}, nil); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		l, err := c.CampaignAs(ctx, "rolled", 0, Candidate{LogEpoch: tc.logEpoch})
		cancel()
		if err != nil {
			t.Fatalf("%s: CampaignAs: %v", tc.name, err)
		}
		if l.Epoch() != tc.wantEpoch {
			t.Errorf("%s: won epoch %d, want %d", tc.name, l.Epoch(), tc.wantEpoch)
		}
		if err := l.Resign(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCampaignOfAnotherIncarnation: a candidate whose log holds a deleted
// incarnation of the topic does not win the one created again under its
// name (epochs and ISR start afresh, so it qualified, and led the new topic
// with the deleted one's records): refused when the snapshot shows another
// topic id, and by the election's guard on the replicas key when the
// snapshot it decided on is older than the creation.
func TestCampaignOfAnotherIncarnation(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	c := newTestClient(t, srv, "n1")
	register(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topicMeta := func(after uint64) *TopicMeta {
		t.Helper()
		for {
			snap, err := c.WaitMetadata(ctx, after)
			if err != nil {
				t.Fatal(err)
			}
			if tm, ok := snap.Topic("again"); ok {
				return tm
			}
			after = snap.Index + 1
		}
	}
	createTopic(t, c, "again", [][]string{{"n1"}})
	old := topicMeta(1)

	if l, err := c.CampaignAs(ctx, "again", 0, Candidate{LogEpoch: NoEpoch, TopicID: "0123456789abcdef0123456789abcdef"}); !errors.Is(err, ErrOtherIncarnation) {
		t.Fatalf("a candidate of another topic id: %v, %v; want ErrOtherIncarnation", l, err)
	}

	// The topic is deleted and created again; a campaign decided on the
	// snapshot of the old incarnation is refused by Consul.
	if err := c.DeleteTopic(ctx, "again"); err != nil {
		t.Fatal(err)
	}
	createTopic(t, c, "again", [][]string{{"n1"}})
	session, _, failure := c.usableSession()
	if session == "" {
		t.Fatalf("no session: %v", failure)
	}
	if l, err := c.tryLead(ctx, old.Partitions[0], 1, session, electClean, Candidate{LogEpoch: NoEpoch, TopicID: old.Config.ID}); l != nil || err != nil {
		t.Fatalf("an election decided on the deleted incarnation's snapshot: %v, %v; want it refused", l, err)
	}

	current := topicMeta(1)
	for current.Config.ID == old.Config.ID {
		current = topicMeta(current.Partitions[0].ReplicasIndex + 1)
	}
	l, err := c.CampaignAs(ctx, "again", 0, Candidate{LogEpoch: NoEpoch, TopicID: current.Config.ID})
	if err != nil || l == nil {
		t.Fatalf("the new incarnation's own candidate: %v, %v", l, err)
	}
}

func TestTopicLifecycle(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	a := newTestClient(t, srv, "a")
	register(t, a)
	ctx := context.Background()

	createTopic(t, a, "life", [][]string{{"a", "b"}, {"b", "a"}})
	err := a.CreateTopic(ctx, TopicConfig{Name: "life", Partitions: 1, ReplicationFactor: 1, MinInsyncReplicas: 1}, [][]string{{"a"}})
	if !errors.Is(err, ErrTopicExists) {
		t.Fatalf("second CreateTopic = %v, want ErrTopicExists", err)
	}
	if err := a.CreateTopic(ctx, TopicConfig{Name: "bad/name", Partitions: 1, ReplicationFactor: 1, MinInsyncReplicas: 1}, [][]string{{"a"}}); !errors.Is(err, ErrInvalidTopic) {
		t.Fatalf("CreateTopic(bad/name) = %v, want ErrInvalidTopic", err)
	}

	// 40 partitions take two transactions; the topic appears complete.
	wide, err := AssignReplicas([]string{"a", "b", "c"}, 40, 2)
	if err != nil {
		t.Fatal(err)
	}
	createTopic(t, a, "wide", wide)
	snap, err := a.WaitMetadata(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "both topics in the metadata", func() bool {
		snap = a.Metadata()
		_, ok1 := snap.Topic("life")
		tm, ok2 := snap.Topic("wide")
		return ok1 && ok2 && tm.Err == nil && len(tm.Partitions) == 40
	})
	tm, _ := snap.Topic("wide")
	if tm.Config.ID == "" || tm.Partitions[39].State.Epoch != 0 || !slices.Equal(tm.Partitions[39].State.ISR, wide[39]) {
		t.Fatalf("wide/39 = %+v, config %+v", tm.Partitions[39], tm.Config)
	}

	if _, err := a.Campaign(ctx, "life", 7); !errors.Is(err, ErrUnknownPartition) {
		t.Fatalf("Campaign(life/7) = %v, want ErrUnknownPartition", err)
	}
	notReplica := slices.IndexFunc(wide, func(rs []string) bool { return !slices.Contains(rs, "a") })
	if _, err := a.Campaign(ctx, "wide", notReplica); !errors.Is(err, ErrNotReplica) {
		t.Fatalf("Campaign(wide/%d) = %v, want ErrNotReplica", notReplica, err)
	}

	l := campaign(t, a, "life", 0)
	if l.Epoch() != 1 || !slices.Equal(l.State().ISR, []string{"a", "b"}) {
		t.Fatalf("first leadership epoch %d state %+v", l.Epoch(), l.State())
	}
	if again := campaign(t, a, "life", 0); again != l {
		t.Fatal("Campaign while leading returned a different leadership")
	}
	lifeTopic, _ := a.Metadata().Topic("life")
	if err := a.DeleteTopic(ctx, "life"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the deleted incarnation's tombstone", func() bool {
		return a.Metadata().Deleted(lifeTopic.Config.ID)
	})
	if _, ok := a.Metadata().Topic("life"); ok {
		t.Fatal("a deleted topic is still in the metadata")
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("leadership survived the deletion of its topic")
	}
	if !errors.Is(l.Err(), ErrLeadershipLost) || context.Cause(l.Context()) != l.Err() {
		t.Fatalf("leadership ended with %v (context cause %v), want ErrLeadershipLost", l.Err(), context.Cause(l.Context()))
	}
	if err := a.DeleteTopic(ctx, "life"); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("second DeleteTopic = %v, want ErrUnknownTopic", err)
	}
	// Re-created, the topic gets a new id: its epochs start again.
	createTopic(t, a, "life", [][]string{{"a"}})
	waitFor(t, 5*time.Second, "the re-created topic", func() bool {
		tm, ok := a.Metadata().Topic("life")
		return ok && len(tm.Partitions) == 1
	})
	recreated, _ := a.Metadata().Topic("life")
	if recreated.Config.ID == "" {
		t.Fatal("re-created topic has no id")
	}
}

func TestProposeISR(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	admin := srv.Client()
	a, b := newTestClient(t, srv, "a"), newTestClient(t, srv, "b")
	register(t, a)
	register(t, b)
	createTopic(t, a, "isr", [][]string{{"a", "b", "c"}})
	ctx := context.Background()

	la := campaign(t, a, "isr", 0)
	rec := newRecorder()
	startContender(t, b, "isr", []int{0}, rec)

	if err := a.ProposeISR(ctx, "isr", 0, la.Epoch(), []string{"b"}, nil); !errors.Is(err, ErrInvalidTopic) {
		t.Fatalf("ISR without the leader = %v, want ErrInvalidTopic", err)
	}
	if err := a.ProposeISR(ctx, "isr", 0, la.Epoch(), []string{"a", "x"}, nil); !errors.Is(err, ErrInvalidTopic) {
		t.Fatalf("ISR with a non-replica = %v, want ErrInvalidTopic", err)
	}

	// Two proposals from the same base: one wins, the other conflicts.
	la.mu.Lock()
	base := la.stateIndex
	la.mu.Unlock()
	proposals := [][]string{{"a", "b"}, {"a", "c"}}
	errs := make([]error, len(proposals))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, isr := range proposals {
		wg.Go(func() {
			<-start
			errs[i] = a.casState(ctx, la, base, PartitionState{Leader: "a", Epoch: la.Epoch(), ISR: isr})
		})
	}
	close(start)
	wg.Wait()
	winner := slices.IndexFunc(errs, func(err error) bool { return err == nil })
	loser := 1 - winner
	if winner < 0 || !errors.Is(errs[loser], ErrConflict) {
		t.Fatalf("concurrent proposals = %v, want one nil and one ErrConflict", errs)
	}
	if got := consulState(t, admin, "isr", 0); !slices.Equal(got.ISR, proposals[winner]) || got.Epoch != la.Epoch() {
		t.Fatalf("state after the race = %+v, want isr %v", got, proposals[winner])
	}
	if got := la.State(); !slices.Equal(got.ISR, proposals[winner]) {
		t.Fatalf("leader's view after the race = %+v, want isr %v", got, proposals[winner])
	}
	// Through the public call, after re-reading: the loser's change goes in.
	if err := a.ProposeISR(ctx, "isr", 0, la.Epoch(), proposals[loser], nil); err != nil {
		t.Fatalf("retried proposal: %v", err)
	}
	// A change behind the leader's back at its epoch is a conflict, and the
	// leadership re-reads it.
	setISR(t, admin, "isr", 0, []string{"a", "b", "c"})
	if err := a.ProposeISR(ctx, "isr", 0, la.Epoch(), []string{"a"}, nil); !errors.Is(err, ErrConflict) {
		t.Fatalf("proposal over an external change = %v, want ErrConflict", err)
	}
	if got := la.State(); !slices.Equal(got.ISR, []string{"a", "b", "c"}) {
		t.Fatalf("leader's view after the conflict = %+v, want the re-read isr", got)
	}
	if err := a.ProposeISR(ctx, "isr", 0, la.Epoch(), []string{"a", "b"}, nil); err != nil {
		t.Fatalf("proposal after re-reading: %v", err)
	}

	// The leader loses its session; b takes over at a new epoch.
	oldEpoch, oldBase := la.Epoch(), la.stateIndex
	if _, err := admin.Session().Destroy(la.session, nil); err != nil {
		t.Fatal(err)
	}
	rb := rec.waitFor(t, 10*time.Second, "b to lead", func(r *record) bool { return r.epoch > oldEpoch })
	<-la.Done()
	if err := a.ProposeISR(ctx, "isr", 0, oldEpoch, []string{"a"}, nil); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("ex-leader's proposal = %v, want ErrNotLeader", err)
	}
	// Consul refuses it too, not only the local bookkeeping.
	if err := a.casState(ctx, la, oldBase, PartitionState{Leader: "a", Epoch: oldEpoch, ISR: []string{"a"}}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("ex-leader's guarded txn = %v, want ErrNotLeader", err)
	}
	if got := consulState(t, admin, "isr", 0); got.Leader != "b" || got.Epoch != rb.epoch {
		t.Fatalf("state after the ex-leader's attempts = %+v, want leader b epoch %d", got, rb.epoch)
	}
	if err := b.ProposeISR(ctx, "isr", 0, rb.epoch, []string{"b"}, nil); err != nil {
		t.Fatalf("new leader's proposal: %v", err)
	}
}

// TestCleanElectionLeavesOutDeadMembers: after the leader's crash, a
// clean election writes the ISR without it once Consul reports it dead,
// when the rest reaches min_insync_replicas (partition 0), and keeps it
// whole when it would not (partition 1: ISR [a b], min ISR 2).
func TestCleanElectionLeavesOutDeadMembers(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	admin := srv.Client()
	a, b, c := newTestClient(t, srv, "a"), newTestClient(t, srv, "b"), newTestClient(t, srv, "c")
	for _, cl := range []*Client{a, b, c} {
		register(t, cl)
	}
	const topic = "deadisr"
	createTopic(t, a, topic, [][]string{{"a", "b", "c"}, {"a", "b", "c"}}, func(tc *TopicConfig) { tc.MinInsyncReplicas = 2 })
	setISR(t, admin, topic, 1, []string{"a", "b"})
	campaign(t, a, topic, 0)
	campaign(t, a, topic, 1)

	crash(a)
	// b campaigns once its liveness reports a dead, so that its election
	// sees it.
	deadline := time.Now().Add(30 * time.Second)
	for lv := b.Liveness(); !lv.Dead("a"); lv = b.Liveness() {
		select {
		case <-lv.Changed():
		case <-time.After(time.Until(deadline)):
			t.Fatal("timed out waiting for b's liveness to report a dead")
		}
	}
	for p, want := range [][]string{{"b", "c"}, {"a", "b"}} {
		l := campaign(t, b, topic, p)
		if got := consulState(t, admin, topic, p); got.Leader != "b" || !slices.Equal(got.ISR, want) || !slices.Equal(l.State().ISR, want) {
			t.Errorf("partition %d: state after b's election = %+v (leadership's ISR %v), want leader b, ISR %v", p, got, l.State().ISR, want)
		}
	}
}

func TestUncleanElection(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	admin := srv.Client()
	b := newTestClient(t, srv, "b")
	register(t, b)
	const delay = time.Second
	createTopic(t, b, "clean", [][]string{{"a", "b"}})
	createTopic(t, b, "unclean", [][]string{{"a", "b"}}, func(tc *TopicConfig) {
		tc.UncleanLeaderElection = true
		tc.UncleanDelay = delay
	})
	setISR(t, admin, "clean", 0, []string{"a"})
	setISR(t, admin, "unclean", 0, []string{"a"})

	// b is outside the ISR and a is down: the clean topic stays offline.
	ctx, cancel := context.WithTimeout(context.Background(), 2*delay)
	defer cancel()
	if l, err := b.Campaign(ctx, "clean", 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Campaign outside the ISR = %v, %v; want no leadership", l, err)
	}
	started := time.Now()
	l := campaign(t, b, "unclean", 0)
	waited := time.Since(started)
	if waited < delay || l.Epoch() != 1 || !slices.Equal(l.State().ISR, []string{"b"}) {
		t.Fatalf("unclean leadership after %v: epoch %d state %+v; want after %v, isr [b]", waited, l.Epoch(), l.State(), delay)
	}
	if got := consulState(t, admin, "unclean", 0); got.Leader != "b" || !slices.Equal(got.ISR, []string{"b"}) {
		t.Fatalf("stored state %+v", got)
	}
}

// TestFailover drives forced failovers among three contenders of one
// partition, two of them in the ISR. It does not run in parallel, so its
// timings are not disturbed by the other tests of the package.
// LOGAGENT_FAILOVER_CYCLES (default 8) sets the number of failovers,
// LOGAGENT_FAILOVER_MODES (default crash,destroy,resign,close) which kinds
// rotate; LOGAGENT_FAILOVER_CHECK_TTL and LOGAGENT_FAILOVER_LOCK_DELAY try
// other settings than the shipped defaults.
func TestFailover(t *testing.T) {
	cycles := envInt(t, "LOGAGENT_FAILOVER_CYCLES", 8)
	checkTTL := envDuration(t, "LOGAGENT_FAILOVER_CHECK_TTL", DefaultCheckTTL)
	lockDelay := envDuration(t, "LOGAGENT_FAILOVER_LOCK_DELAY", DefaultLockDelay)
	timings := func(cfg *Config) {
		cfg.CheckTTL, cfg.LockDelay = checkTTL, lockDelay
		cfg.LeaseMargin = min(DefaultLeaseMargin, checkTTL/6)
	}
	srv := consultest.Start(t)
	admin := srv.Client()
	const topic = "failover"
	nodes := []string{"a", "b", "c"}
	rec := newRecorder()
	contenders := map[string]*contender{}
	start := func(node string) {
		c := newTestClient(t, srv, node, timings)
		register(t, c)
		contenders[node] = startContender(t, c, topic, []int{0}, rec)
	}
	setup := newTestClient(t, srv, "setup")
	// min_insync_replicas 2: an election keeps a crashed leader in the
	// ISR [a b] (cleanElectionISR would leave it out with 1), and no leader
	// here runs the replication that would add it back.
	createTopic(t, setup, topic, [][]string{nodes}, func(tc *TopicConfig) { tc.MinInsyncReplicas = 2 })
	// c is a replica outside the ISR: with unclean election off it must
	// never lead.
	setISR(t, admin, topic, 0, []string{"a", "b"})
	for _, node := range nodes {
		start(node)
	}

	rng := testseed.Rand(t)
	modes := []string{"crash", "destroy", "resign", "close"}
	if s := os.Getenv("LOGAGENT_FAILOVER_MODES"); s != "" {
		modes = strings.Split(s, ",")
		for _, m := range modes {
			if !slices.Contains([]string{"crash", "destroy", "resign", "close"}, m) {
				t.Fatalf("LOGAGENT_FAILOVER_MODES: unknown mode %q", m)
			}
		}
	}
	failovers := map[string][]time.Duration{}
	lastEpoch := int32(1)
	ctx := context.Background()
	for i := range cycles {
		holder := rec.waitFor(t, 30*time.Second, fmt.Sprintf("a leader at epoch %d or later", lastEpoch),
			func(r *record) bool {
				return r.epoch >= lastEpoch && r.lostAt.IsZero() && r.epoch == rec.maxEpochLocked()
			})
		mode := modes[i%len(modes)]
		ct := contenders[holder.node]
		// Failovers chain off each other, which would lock every crash to
		// the same phase of the check passes: a random pause spreads them
		// over the pass interval, as real crashes are.
		time.Sleep(time.Duration(rng.Int64N(int64(checkTTL / heartbeatsPerTTL))))
		began := time.Now()
		switch mode {
		case "crash":
			crash(ct.client)
		case "destroy":
			if _, err := admin.Session().Destroy(holder.session, nil); err != nil {
				t.Fatal(err)
			}
		case "resign":
			if err := holder.l.Resign(ctx); err != nil {
				t.Fatal(err)
			}
		case "close":
			if err := ct.client.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
		next := rec.waitFor(t, 30*time.Second, fmt.Sprintf("a leader after %s of %s at epoch %d", mode, holder.node, holder.epoch),
			func(r *record) bool { return r.epoch > holder.epoch })
		failovers[mode] = append(failovers[mode], next.wonAt.Sub(began))
		t.Logf("cycle %d: %s of %s (epoch %d) -> %s leads epoch %d after %v", i, mode, holder.node, holder.epoch,
			next.node, next.epoch, next.wonAt.Sub(began).Round(time.Millisecond))
		lastEpoch = next.epoch
		if mode == "crash" || mode == "close" {
			// The crashed incarnation is gone for good; the node comes back
			// as a new process.
			ct.client.halt()
			ct.stop()
			start(holder.node)
		}
	}

	records := rec.snapshot()
	slices.SortFunc(records, func(x, y record) int { return x.wonAt.Compare(y.wonAt) })
	for i, r := range records {
		if r.node == "c" {
			t.Errorf("c, outside the ISR, won epoch %d", r.epoch)
		}
		if i == 0 {
			continue
		}
		prev := records[i-1]
		if r.epoch <= prev.epoch {
			t.Errorf("epoch %d (%s) won after epoch %d (%s): epochs must grow", r.epoch, r.node, prev.epoch, prev.node)
		}
		if prev.lostAt.IsZero() || prev.lostAt.After(r.wonAt) {
			t.Errorf("%s still led epoch %d (lost at %v) when %s won epoch %d at %v", prev.node, prev.epoch,
				prev.lostAt.Format(time.StampMicro), r.node, r.epoch, r.wonAt.Format(time.StampMicro))
		}
	}
	for _, r := range records {
		if r.lostAt.IsZero() {
			continue
		}
		t.Logf("epoch %3d %s lost after %v: %v", r.epoch, r.node, r.lostAt.Sub(r.wonAt).Round(time.Millisecond), r.cause)
	}
	if got := consulState(t, admin, topic, 0); got.Epoch != records[len(records)-1].epoch {
		t.Errorf("stored epoch %d, last leadership epoch %d", got.Epoch, records[len(records)-1].epoch)
	}
	if len(records) < cycles+1 {
		t.Errorf("%d leaderships for %d failovers", len(records), cycles)
	}
	t.Logf("failover with check_ttl %v, lock_delay %v, session_ttl %v (%d cycles):", checkTTL, lockDelay, DefaultSessionTTL, cycles)
	for _, mode := range modes {
		ds := failovers[mode]
		if len(ds) == 0 {
			continue
		}
		slices.Sort(ds)
		t.Logf("  %-8s n=%2d  median %6v  max %6v", mode, len(ds), median(ds).Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
	}
	// What the design promises (the goals are reported, not asserted):
	// a crash is detected within the check TTL and the lock delay follows;
	// a graceful hand-over skips both.
	for _, d := range failovers["crash"] {
		if limit := checkTTL + lockDelay + time.Second; d > limit {
			t.Errorf("crash failover took %v, more than check ttl + lock delay + 1s = %v", d, limit)
		}
	}
	for _, mode := range []string{"resign", "close"} {
		for _, d := range failovers[mode] {
			if d > 500*time.Millisecond {
				t.Errorf("%s failover took %v, more than 500ms", mode, d)
			}
		}
	}
}

func median(sorted []time.Duration) time.Duration {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

func TestConsulRestart(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t, consultest.Persistent())
	a, b := newTestClient(t, srv, "a"), newTestClient(t, srv, "b")
	register(t, a)
	register(t, b)
	const topic = "restart"
	assignment := [][]string{{"a", "b"}, {"b", "a"}, {"a", "b"}, {"b", "a"}}
	createTopic(t, a, topic, assignment)
	rec := newRecorder()
	all := []int{0, 1, 2, 3}
	startContender(t, a, topic, all, rec)
	startContender(t, b, topic, all, rec)
	for p := range assignment {
		rec.waitFor(t, 10*time.Second, fmt.Sprintf("a leader of %d", p), func(r *record) bool { return r.partition == p })
	}
	sessions := map[string]string{"a": sessionOf(a), "b": sessionOf(b)}

	stopped := time.Now()
	srv.Stop()
	// Nothing can extend a lease once Consul is gone: these are final.
	deadlines := map[string]time.Time{}
	for _, c := range []*Client{a, b} {
		deadlines[c.NodeID()] = c.LeaseDeadline()
		if deadlines[c.NodeID()].IsZero() {
			t.Fatalf("%s has no lease right after Consul stopped", c.NodeID())
		}
	}
	leading := rec.snapshot()
	for _, r := range leading {
		if !r.lostAt.IsZero() {
			continue
		}
		got := rec.waitFor(t, DefaultCheckTTL+2*time.Second, fmt.Sprintf("%s to step down from %d", r.node, r.partition),
			func(x *record) bool { return x.l == r.l && !x.lostAt.IsZero() })
		stepDown := got.lostAt.Sub(stopped)
		t.Logf("%s stepped down from %s/%d %v after Consul stopped (lease deadline +%v): %v", r.node, topic, r.partition,
			stepDown.Round(time.Millisecond), deadlines[r.node].Sub(stopped).Round(time.Millisecond), got.cause)
		if late := got.lostAt.Sub(deadlines[r.node]); late > 100*time.Millisecond {
			t.Errorf("%s stepped down %v after its lease deadline", r.node, late)
		}
		if stepDown > DefaultCheckTTL {
			t.Errorf("%s stepped down %v after Consul stopped, more than the check ttl", r.node, stepDown)
		}
		if !errors.Is(got.cause, ErrLeaseExpired) {
			t.Errorf("%s stepped down with %v, want ErrLeaseExpired", r.node, got.cause)
		}
	}

	srv.Restart()
	restarted := time.Now()
	for p := range assignment {
		r := rec.waitFor(t, 30*time.Second, fmt.Sprintf("a leader of %d after the restart", p),
			func(r *record) bool { return r.partition == p && r.wonAt.After(restarted) })
		before := slices.IndexFunc(leading, func(x record) bool { return x.partition == p })
		t.Logf("%s/%d led by %s at epoch %d %v after Consul came back (before: %s epoch %d); session kept: %v",
			topic, p, r.node, r.epoch, r.wonAt.Sub(restarted).Round(time.Millisecond),
			leading[before].node, leading[before].epoch, r.session == sessions[r.node])
		if r.epoch <= leading[before].epoch {
			t.Errorf("%s/%d epoch %d after the restart, not above %d", topic, p, r.epoch, leading[before].epoch)
		}
	}
}

func TestACL(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t, consultest.WithACL())
	admin := srv.Client()
	policyRules, err := os.ReadFile("acl-policy.hcl")
	if err != nil {
		t.Fatal(err)
	}
	// The shipped policy names the default prefix; the tests use their own.
	rules := strings.ReplaceAll(string(policyRules), `"`+DefaultPrefix+`"`, `"`+testPrefix+`"`)
	token := func(name, rules string) string {
		policy, _, err := admin.ACL().PolicyCreate(&api.ACLPolicy{Name: name, Rules: rules}, nil)
		if err != nil {
			t.Fatalf("create policy %s: %v", name, err)
		}
		tok, _, err := admin.ACL().TokenCreate(&api.ACLToken{Policies: []*api.ACLTokenPolicyLink{{ID: policy.ID}}}, nil)
		if err != nil {
			t.Fatalf("create token %s: %v", name, err)
		}
		return tok.SecretID
	}
	withToken := func(secret string) func(*Config) { return func(cfg *Config) { cfg.Consul.Token = secret } }
	ctx := context.Background()

	t.Run("documented policy suffices", func(t *testing.T) {
		a := newTestClient(t, srv, "a", withToken(token("logagent", rules)))
		register(t, a)
		agents, err := a.Agents(ctx)
		if err != nil || len(agents) != 1 || agents[0].NodeID != "a" {
			t.Fatalf("Agents() = %+v, %v", agents, err)
		}
		createTopic(t, a, "acl", [][]string{{"a"}})
		l := campaign(t, a, "acl", 0)
		if err := a.ProposeISR(ctx, "acl", 0, l.Epoch(), []string{"a"}, nil); err != nil {
			t.Fatalf("ProposeISR: %v", err)
		}
		if _, ok := a.Metadata().Partition("acl", 0); !ok {
			t.Fatal("watch does not see the topic")
		}
		if err := l.Resign(ctx); err != nil {
			t.Fatalf("Resign: %v", err)
		}
		if err := a.DeleteTopic(ctx, "acl"); err != nil {
			t.Fatalf("DeleteTopic: %v", err)
		}
	})

	t.Run("no token names each missing rule", func(t *testing.T) {
		anon := newTestClient(t, srv, "anon", withToken(""))
		tests := []struct {
			op   string
			call func() error
			rule string
		}{
			{op: "register", call: func() error { return anon.Register(ctx) }, rule: serviceRule},
			{op: "create topic", call: func() error {
				return anon.CreateTopic(ctx, TopicConfig{Name: "x", Partitions: 1, ReplicationFactor: 1, MinInsyncReplicas: 1}, [][]string{{"anon"}})
			}, rule: keyRule(testPrefix)},
		}
		for _, tt := range tests {
			err := tt.call()
			var perm *PermissionError
			if !errors.As(err, &perm) || perm.Rule != tt.rule || !strings.Contains(err.Error(), tt.rule) {
				t.Errorf("%s without a token = %v; want a PermissionError naming %s", tt.op, err, tt.rule)
				continue
			}
			t.Logf("%s: %v", tt.op, err)
		}
	})

	t.Run("no node rule fails the agent list", func(t *testing.T) {
		noNode := strings.Replace(rules, `node_prefix ""`, `node_prefix "nothing-here"`, 1)
		d := newTestClient(t, srv, "d", withToken(token("no-node", noNode)))
		register(t, d)
		_, err := d.Agents(ctx)
		var perm *PermissionError
		if !errors.As(err, &perm) || !strings.Contains(err.Error(), nodeRule) {
			t.Fatalf("Agents() without node read = %v; want a PermissionError naming %s", err, nodeRule)
		}
		t.Logf("list agents: %v", err)
	})

	t.Run("groups hidden by ACLs fail the groups' listings", func(t *testing.T) {
		// A group the token cannot read would look deleted: listed,
		// expired, reported gone.
		hidden := rules + fmt.Sprintf("\nkey_prefix %q {\n  policy = \"deny\"\n}\n", testPrefix+"groups/hidden")
		e := newTestClient(t, srv, "e", withToken(token("hidden-group", hidden)))
		admin := newTestClient(t, srv, "admin-groups")
		for _, g := range []string{"seen", "hidden"} {
			if _, err := admin.SaveGroupState(ctx, g, []byte(`{}`), 0); err != nil {
				t.Fatal(err)
			}
		}
		for name, list := range map[string]func() error{
			"GroupStateValues": func() error { _, err := e.GroupStateValues(ctx); return err },
			"GroupStates":      func() error { _, err := e.GroupStates(ctx); return err },
		} {
			var perm *PermissionError
			if err := list(); !errors.As(err, &perm) {
				t.Errorf("%s with a group hidden by ACLs = %v; want a PermissionError", name, err)
			}
		}
	})

	t.Run("no session rule fails the campaign", func(t *testing.T) {
		noSession := strings.Replace(rules, `session_prefix ""`, `session_prefix "nothing-here"`, 1)
		b := newTestClient(t, srv, "b", withToken(token("no-session", noSession)))
		register(t, b)
		createTopic(t, newTestClient(t, srv, "admin"), "acl2", [][]string{{"b"}})
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := b.Campaign(cctx, "acl2", 0)
		var perm *PermissionError
		if !errors.As(err, &perm) || perm.Rule != sessionRule {
			t.Fatalf("Campaign without session rights = %v; want a PermissionError naming %s", err, sessionRule)
		}
		t.Logf("campaign: %v", err)
	})
}

// blockingCounter counts the blocking queries (those with an index or wait
// parameter) in flight through one client's HTTP transport.
type blockingCounter struct {
	base     http.RoundTripper
	total    atomic.Int64
	mu       sync.Mutex
	paths    map[string]int
	inflight map[string]int
	peak     map[string]int
}

func (b *blockingCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	q := req.URL.Query()
	if !q.Has("index") && !q.Has("wait") {
		return b.base.RoundTrip(req)
	}
	path := req.URL.Path
	b.total.Add(1)
	b.mu.Lock()
	b.paths[path]++
	b.inflight[path]++
	b.peak[path] = max(b.peak[path], b.inflight[path])
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.inflight[path]--
		b.mu.Unlock()
	}()
	return b.base.RoundTrip(req)
}

func TestOneBlockingQueryServesAllPartitions(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	nodes := []string{"a", "b", "c"}
	const partitions = 200
	assignment, err := AssignReplicas(nodes, partitions, 2)
	if err != nil {
		t.Fatal(err)
	}
	counters := map[string]*blockingCounter{}
	clients := map[string]*Client{}
	for _, node := range nodes {
		counter := &blockingCounter{base: http.DefaultTransport.(*http.Transport).Clone(), paths: map[string]int{},
			inflight: map[string]int{}, peak: map[string]int{}}
		counters[node] = counter
		clients[node] = newTestClient(t, srv, node, func(cfg *Config) { cfg.Consul.HttpClient = &http.Client{Transport: counter} })
		register(t, clients[node])
	}
	createTopic(t, clients["a"], "wide", assignment)
	rec := newRecorder()
	started := time.Now()
	for _, node := range nodes {
		var mine []int
		for p, replicas := range assignment {
			if slices.Contains(replicas, node) {
				mine = append(mine, p)
			}
		}
		startContender(t, clients[node], "wide", mine, rec)
	}
	led := map[int]bool{}
	rec.waitFor(t, 60*time.Second, "every partition led", func(r *record) bool {
		led[r.partition] = true
		return len(led) == partitions
	})
	elected := time.Since(started)
	time.Sleep(time.Second) // quiet time: no per-partition polling may show up

	// One watch of the metadata and one of the agents' health (the
	// campaigns of eligible replicas ask who is dead), whatever the number
	// of partitions.
	want := []string{"/v1/kv/" + testPrefix + "topics/", "/v1/health/service/logagent"}
	for _, node := range nodes {
		c := counters[node]
		c.mu.Lock()
		paths, peak := maps.Clone(c.paths), maps.Clone(c.peak)
		c.mu.Unlock()
		t.Logf("%s: %d blocking queries, at most %v in flight, paths %v", node, c.total.Load(), peak, paths)
		if paths[want[0]] == 0 {
			t.Errorf("%s never watched %s", node, want[0])
		}
		for path, n := range peak {
			if !slices.Contains(want, path) || n != 1 {
				t.Errorf("%s had %d blocking queries on %s in flight at once, want at most one on each of %v", node, n, path, want)
			}
		}
	}
	t.Logf("%d partitions (rf 2, 3 agents) all led %v after the campaigns started", partitions, elected.Round(time.Millisecond))
}

// TestSyncMetadataSeesATopicJustCreatedElsewhere: after another client
// creates a topic, SyncMetadata returns a snapshot that has it, without
// waiting for the watch's own pace.
func TestSyncMetadataSeesATopicJustCreatedElsewhere(t *testing.T) {
	srv := consultest.Start(t)
	a, b := newTestClient(t, srv, "a"), newTestClient(t, srv, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.WaitMetadata(ctx, 1); err != nil {
		t.Fatal(err)
	}
	createTopic(t, a, "fresh", [][]string{{"a"}})
	snap, err := b.SyncMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := snap.Topic("fresh"); !ok {
		t.Fatalf("snapshot at index %d lacks the topic just created", snap.Index)
	}
}

// TestHandOver: a leader that hands its partition over names the successor
// in the released key; the named replica wins the next election at once
// while the others hold back, and if the named one does not campaign the
// others take over after HandoverHold.
func TestHandOver(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	nodes := map[string]*Client{}
	for _, n := range []string{"a", "b", "c"} {
		nodes[n] = newTestClient(t, srv, n)
		register(t, nodes[n])
	}
	createTopic(t, nodes["a"], "ho", [][]string{{"a", "b", "c"}})
	first := campaign(t, nodes["a"], "ho", 0)

	type won struct {
		l   *Leadership
		err error
		at  time.Time
	}
	contend := func(c *Client) (<-chan won, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		ch := make(chan won, 1)
		go func() {
			l, err := c.Campaign(ctx, "ho", 0)
			ch <- won{l, err, time.Now()}
		}()
		return ch, cancel
	}
	bWon, stopB := contend(nodes["b"])
	defer stopB()
	cWon, stopC := contend(nodes["c"])
	defer stopC()
	// Both campaigns are waiting on the held key.
	time.Sleep(200 * time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	released := time.Now()
	if err := first.HandOver(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(first.Err(), ErrResigned) {
		t.Fatalf("handed-over leadership ended with %v, want ErrResigned", first.Err())
	}
	var second *Leadership
	select {
	case w := <-cWon:
		if w.err != nil {
			t.Fatal(w.err)
		}
		second = w.l
		t.Logf("the successor led %s after the release", w.at.Sub(released).Round(time.Millisecond))
		if took := w.at.Sub(released); took >= HandoverHold {
			t.Fatalf("the named successor took %s to lead: not before the others' hold ended", took)
		}
	case w := <-bWon:
		t.Fatalf("b, not named, won the election (epoch %d, err %v)", w.l.Epoch(), w.err)
	case <-time.After(5 * time.Second):
		t.Fatal("the named successor did not lead within 5s")
	}
	if second.Epoch() != first.Epoch()+1 {
		t.Fatalf("successor's epoch %d, want %d", second.Epoch(), first.Epoch()+1)
	}

	// Handed to a replica that does not campaign (a stops): b waits out
	// the hold, then leads.
	released = time.Now()
	if err := second.HandOver(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the hint in b's metadata", func() bool {
		pm, _ := nodes["b"].Metadata().Partition("ho", 0)
		return pm.Successor == "a" && pm.LeaderSession == ""
	})
	select {
	case w := <-bWon:
		if w.err != nil {
			t.Fatal(w.err)
		}
		if took := w.at.Sub(released); took < HandoverHold {
			t.Fatalf("b led %s after a handover to a: it did not hold back %s", took, HandoverHold)
		}
		if w.l.Epoch() != second.Epoch()+1 {
			t.Fatalf("b's epoch %d, want %d", w.l.Epoch(), second.Epoch()+1)
		}
		waitFor(t, 5*time.Second, "the hint gone once b holds the key", func() bool {
			pm, _ := nodes["b"].Metadata().Partition("ho", 0)
			return pm.LeaderSession != "" && pm.Successor == ""
		})
	case <-time.After(10 * time.Second):
		t.Fatal("b did not lead within 10s of a handover to a replica that does not campaign")
	}
}

// TestResignOfAnEndedLeadershipKeepsTheNewerOnesLock: a leadership that
// ended while its session kept the leader key (a lapsed lease, a stop that
// resigns in the background) is resigned after the same agent won the
// partition again with the same session. The resignation must not release
// the key the newer leadership holds: the key would be free while the
// newer one leads, and another replica would win the next epoch beside it.
// Resigning an ended leadership whose key nobody took again still releases
// it.
func TestResignOfAnEndedLeadershipKeepsTheNewerOnesLock(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	a := newTestClient(t, srv, "a")
	register(t, a)
	createTopic(t, a, "rs", [][]string{{"a", "b"}})

	first := campaign(t, a, "rs", 0)
	// What the lease loop does when the lease lapses: the leadership ends,
	// the session (renewed in time after all) keeps the key.
	a.lose(first, ErrLeaseExpired)
	second := campaign(t, a, "rs", 0)
	if second.Epoch() != first.Epoch()+1 {
		t.Fatalf("second leadership at epoch %d, want %d", second.Epoch(), first.Epoch()+1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := leaderHolder(t, srv, "rs", 0), sessionOf(a); got != want {
		t.Fatalf("after the resignation of epoch %d the leader key is held by %q, want %q (epoch %d still leads)",
			first.Epoch(), got, want, second.Epoch())
	}
	if err := second.Err(); err != nil {
		t.Fatalf("epoch %d ended: %v", second.Epoch(), err)
	}

	// Nobody took the key again: resigning the ended leadership frees it.
	a.lose(second, ErrLeaseExpired)
	if err := second.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if got := leaderHolder(t, srv, "rs", 0); got != "" {
		t.Fatalf("after resigning the last leadership the leader key is held by %q, want free", got)
	}
}

// TestSecondElectionEndsTheFirstLeadership: two campaigns of one partition
// on one client (each past Campaign's check for a current leadership before
// the other won) both win, the second at the next epoch with the same
// session. The first leadership is superseded and must end: left running
// outside the client's leaderships, nothing (no snapshot, no lapse of the
// lease, not Close) would ever end it, and it would go on leading at an
// epoch that Consul has moved past.
func TestSecondElectionEndsTheFirstLeadership(t *testing.T) {
	t.Parallel()
	srv := consultest.Start(t)
	a := newTestClient(t, srv, "a")
	register(t, a)
	createTopic(t, a, "se", [][]string{{"a", "b"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var pm PartitionMeta
	waitFor(t, 5*time.Second, "the topic in a's metadata", func() bool {
		var ok bool
		pm, ok = a.Metadata().Partition("se", 0)
		return ok
	})
	var session string
	waitFor(t, 5*time.Second, "a usable session", func() bool {
		session, _, _ = a.usableSession()
		return session != ""
	})
	// Both campaigns decided on the same snapshot; each election reads the
	// state afresh, so the second wins the epoch after the first's.
	cand := Candidate{LogEpoch: NoEpoch}
	first, err := a.tryLead(ctx, pm, 1, session, electClean, cand)
	if err != nil || first == nil {
		t.Fatalf("first election: %v, %v", first, err)
	}
	second, err := a.tryLead(ctx, pm, 1, session, electClean, cand)
	if err != nil || second == nil {
		t.Fatalf("second election: %v, %v", second, err)
	}
	if second.Epoch() != first.Epoch()+1 {
		t.Fatalf("second election at epoch %d, want %d", second.Epoch(), first.Epoch()+1)
	}
	if !errors.Is(first.Err(), ErrLeadershipLost) {
		t.Fatalf("epoch %d leadership after epoch %d was won: err %v, want ErrLeadershipLost", first.Epoch(), second.Epoch(), first.Err())
	}
	if err := second.Err(); err != nil {
		t.Fatalf("epoch %d ended: %v", second.Epoch(), err)
	}
}
