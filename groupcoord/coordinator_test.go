package groupcoord

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/group"
	"github.com/logagent/logagent/record"
)

// fakeHost is one agent's view of the offsets partitions: an in-memory log
// per partition, led at an epoch, whose appends commit at once unless
// failAppend says otherwise.
type fakeHost struct {
	mu         sync.Mutex
	epoch      int32
	leads      bool
	logs       map[int][][]byte // batches, base offsets assigned
	lso, leo   map[int]int64
	hwLag      int64 // how far the HW trails the LEO
	failAppend error
	// appendDelay is the replication round trip of an append.
	appendDelay time.Duration
	appends     int
	topics      map[string]int32
	hw          map[group.TopicPartition]int64
}

func newFakeHost() *fakeHost {
	return &fakeHost{epoch: 1, leads: true, logs: map[int][][]byte{}, lso: map[int]int64{}, leo: map[int]int64{},
		topics: map[string]int32{"t": 4}, hw: map[group.TopicPartition]int64{}}
}

func (h *fakeHost) OffsetsLeader(p int) (LeaderState, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return LeaderState{Epoch: h.epoch, LogStartOffset: h.lso[p], HighWatermark: h.leo[p] - h.hwLag, LogEndOffset: h.leo[p]}, h.leads
}

func (h *fakeHost) AppendOffsets(_ context.Context, p int, epoch int32, batch []byte, count int) (int64, error) {
	time.Sleep(h.appendDelay)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.appends++
	if h.failAppend != nil {
		return 0, h.failAppend
	}
	if !h.leads || epoch != h.epoch {
		return 0, errors.New("not leader at that epoch")
	}
	b := append([]byte(nil), batch...)
	hdr, _, err := record.ParseHeader(b, 1<<20)
	if err != nil {
		return 0, err
	}
	base := h.leo[p]
	binaryPutBase(b, base)
	h.logs[p] = append(h.logs[p], b)
	h.leo[p] += int64(hdr.RecordCount())
	return base, nil
}

// TrimOffsets drops the batches wholly below offset (each batch plays a
// segment).
func (h *fakeHost) TrimOffsets(p int, offset int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for len(h.logs[p]) > 0 {
		hdr, _, _ := record.ParseHeader(h.logs[p][0], 1<<20)
		if hdr.NextOffset() > offset {
			break
		}
		h.logs[p] = h.logs[p][1:]
		h.lso[p] = hdr.NextOffset()
	}
	return nil
}

func binaryPutBase(b []byte, base int64) {
	for i := range 8 {
		b[i] = byte(base >> (56 - 8*i))
	}
}

func (h *fakeHost) ReadOffsets(p int, offset int64, _ int) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []byte
	for _, b := range h.logs[p] {
		hdr, _, _ := record.ParseHeader(b, 1<<20)
		if hdr.LastOffset() >= offset && hdr.LastOffset() < h.leo[p]-h.hwLag {
			out = append(out, b...)
		}
	}
	return out, nil
}

func (h *fakeHost) Partitions(topic string) int32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.topics[topic]
}

func (h *fakeHost) Positions(_ context.Context, tp group.TopicPartition) (int64, int64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return 0, h.hw[tp], nil
}

// fakeStore is Consul's KV for group states, with CAS.
type fakeStore struct {
	mu     sync.Mutex
	values map[string][]byte
	index  map[string]uint64
	next   uint64
	writes int
}

func newFakeStore() *fakeStore {
	return &fakeStore{values: map[string][]byte{}, index: map[string]uint64{}, next: 10}
}

func (s *fakeStore) LoadGroupState(_ context.Context, g string) ([]byte, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.values[g], s.index[g], nil
}

func (s *fakeStore) SaveGroupState(_ context.Context, g string, v []byte, index uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.index[g] != index {
		return 0, fmt.Errorf("%w: at %d, not %d", election.ErrConflict, s.index[g], index)
	}
	s.next++
	s.values[g], s.index[g] = v, s.next
	s.writes++
	return s.next, nil
}

func (s *fakeStore) DeleteGroupState(_ context.Context, g string, index uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.index[g] != index && s.index[g] != 0 {
		return fmt.Errorf("%w: at %d, not %d", election.ErrConflict, s.index[g], index)
	}
	delete(s.values, g)
	delete(s.index, g)
	s.writes++
	return nil
}

func (s *fakeStore) GroupStateValues(context.Context) (map[string][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.values), nil
}

func (s *fakeStore) GroupStates(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id := range s.values {
		ids = append(ids, id)
	}
	return ids, nil
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newTestCoordinator(t testing.TB, h Host, s *fakeStore, clock *fakeClock) *Coordinator {
	t.Helper()
	return newTestCoordinatorWith(t, h, s, clock, func(*Config) {})
}

// newTestCoordinatorWith is newTestCoordinator's with the changes set
// makes to its Config.
func newTestCoordinatorWith(t testing.TB, h Host, s *fakeStore, clock *fakeClock, set func(*Config)) *Coordinator {
	t.Helper()
	cfg := Config{Partitions: 3, Host: h, Store: s, Now: clock.Now, Logger: hclog.NewNullLogger(),
		TickInterval: time.Hour, Limits: record.Limits{MaxBatchBytes: 1 << 20, MaxRecordBytes: 1 << 20},
		HighWatermarkWait: 50 * time.Millisecond}
	set(&cfg)
	c := New(cfg)
	t.Cleanup(c.Close)
	return c
}

func TestCommitSurvivesFailover(t *testing.T) {
	ctx := context.Background()
	h, s, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	h.hw[group.TopicPartition{Topic: "t", Partition: 1}] = 50
	c := newTestCoordinator(t, h, s, clock)
	j, err := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Assigned) != 4 {
		t.Fatalf("join assigned %v, want all 4 partitions", j.Assigned)
	}
	if _, err := c.Commit(ctx, "g", CommitRequest{MemberID: "a", MemberEpoch: j.MemberEpoch,
		Offsets: []OffsetCommit{{Topic: "t", Partition: 1, Offset: 42, Metadata: "m"}}}); err != nil {
		t.Fatal(err)
	}
	// Beyond the high watermark: refused, nothing appended.
	before := h.appends
	_, err = c.Commit(ctx, "g", CommitRequest{MemberID: "a", MemberEpoch: j.MemberEpoch,
		Offsets: []OffsetCommit{{Topic: "t", Partition: 1, Offset: 40}, {Topic: "t", Partition: 1, Offset: 51}}})
	if !errors.Is(err, group.ErrOffsetBeyondHighWatermark) || h.appends != before {
		t.Fatalf("commit beyond the HW = %v with %d appends, want ErrOffsetBeyondHighWatermark and none", err, h.appends-before)
	}

	// A new coordinator (another agent, the next leader epoch) rebuilds the
	// offsets from the partition and takes the group from the store: the
	// member keeps its epoch and partitions.
	h.epoch++
	c2 := newTestCoordinator(t, h, s, clock)
	o, err := c2.Offsets(ctx, "g", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Offsets) != 1 || o.Offsets[0].Offset != 42 || o.Offsets[0].Metadata != "m" {
		t.Fatalf("offsets after failover = %+v, want t/1 at 42", o.Offsets)
	}
	f, err := c2.CheckFetch(ctx, "g", FetchRequest{MemberID: "a", MemberEpoch: j.MemberEpoch, Topic: "t", Partition: 1})
	if err != nil || f.Committed != 42 {
		t.Fatalf("CheckFetch after failover = %+v, %v", f, err)
	}
	// An agent that does not lead the partition refuses.
	h.mu.Lock()
	h.leads = false
	h.mu.Unlock()
	if _, err := c.Commit(ctx, "g", CommitRequest{MemberID: "a", MemberEpoch: j.MemberEpoch,
		Offsets: []OffsetCommit{{Topic: "t", Partition: 1, Offset: 43}}}); !IsRetriable(err) {
		t.Fatalf("commit at the old coordinator = %v, want a retriable refusal", err)
	}
}

func TestRebuildWaitsForPredecessorsAppends(t *testing.T) {
	ctx := context.Background()
	h, s, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	h.hw[group.TopicPartition{Topic: "t", Partition: 0}] = 10
	c := newTestCoordinator(t, h, s, clock)
	j, _ := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "a"})
	if _, err := c.Commit(ctx, "g", CommitRequest{MemberID: "a", MemberEpoch: j.MemberEpoch,
		Offsets: []OffsetCommit{{Topic: "t", Partition: 0, Offset: 7}}}); err != nil {
		t.Fatal(err)
	}
	// The new leader's high watermark trails its log end: the commit is in
	// its log but not known to be committed, so it waits, and tells the
	// caller to come back once its wait ran out.
	h.epoch++
	h.hwLag = 1
	c2 := newTestCoordinator(t, h, s, clock)
	ctx2, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c2.Offsets(ctx2, "g", ""); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Offsets while loading = %v, want the wait to run out", err)
	}
	h.mu.Lock()
	h.hwLag = 0
	h.mu.Unlock()
	o, err := c2.Offsets(ctx, "g", "")
	if err != nil || len(o.Offsets) != 1 || o.Offsets[0].Offset != 7 {
		t.Fatalf("Offsets = %+v, %v; want t/0 at 7", o, err)
	}
}

func TestHeartbeatLongPollWakesOnRelease(t *testing.T) {
	ctx := context.Background()
	h, s, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	c := newTestCoordinator(t, h, s, clock)
	a, _ := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "a"})
	b, err := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "b"})
	if err != nil || len(b.Assigned) != 0 {
		t.Fatalf("b joined with %v, %v: a still owns everything", b.Assigned, err)
	}
	got := make(chan MemberResponse, 1)
	go func() {
		r, err := c.Heartbeat(ctx, "g", "b", HeartbeatRequest{MemberEpoch: b.MemberEpoch, WaitMS: 20_000})
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	// a learns it must give two partitions up, and releases them.
	ra, err := c.Heartbeat(ctx, "g", "a", HeartbeatRequest{MemberEpoch: a.MemberEpoch, Owned: a.Assigned})
	if err != nil || len(ra.Revoke) != 2 {
		t.Fatalf("a's heartbeat = %+v, %v; want 2 to revoke", ra, err)
	}
	select {
	case r := <-got:
		t.Fatalf("b's held heartbeat answered %+v before a released anything", r)
	case <-time.After(50 * time.Millisecond):
	}
	start := time.Now()
	if _, err := c.Heartbeat(ctx, "g", "a", HeartbeatRequest{MemberEpoch: ra.MemberEpoch, Owned: ra.Assigned}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if len(r.Assigned) != 2 {
			t.Fatalf("b's held heartbeat = %+v, want the 2 released partitions", r)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("b's held heartbeat answered %v after the release", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("b's held heartbeat was not answered after the release")
	}
}

func TestConcurrentCommitsShareAppends(t *testing.T) {
	ctx := context.Background()
	h, s, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	for p := range int32(4) {
		h.hw[group.TopicPartition{Topic: "t", Partition: p}] = 1 << 40
	}
	h.appendDelay = 2 * time.Millisecond
	c := newTestCoordinator(t, h, s, clock)
	j, _ := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "a"})
	const workers, each = 16, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				if _, err := c.Commit(ctx, "g", CommitRequest{MemberID: "a", MemberEpoch: j.MemberEpoch,
					Offsets: []OffsetCommit{{Topic: "t", Partition: int32(w % 4), Offset: int64(w*1000 + i)}}}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	o, err := c.Offsets(ctx, "g", "")
	if err != nil {
		t.Fatal(err)
	}
	// Each partition ends at the last commit of one of its workers.
	for _, off := range o.Offsets {
		if off.Offset%1000 != each-1 {
			t.Errorf("%s/%d at %d: not the last commit of a worker", off.Topic, off.Partition, off.Offset)
		}
	}
	t.Logf("%d commits in %d appends", workers*each, h.appends)
	// While one append is in flight, the other workers' commits queue
	// for the next: far fewer appends than commits.
	if h.appends > workers*each/4 {
		t.Fatalf("%d commits took %d appends: concurrent commits were not batched", workers*each, h.appends)
	}
}

func TestFailedAppendCommitsNothingAndReloads(t *testing.T) {
	ctx := context.Background()
	h, s, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	h.hw[group.TopicPartition{Topic: "t", Partition: 0}] = 100
	c := newTestCoordinator(t, h, s, clock)
	j, _ := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "a"})
	commit := func(off int64) error {
		_, err := c.Commit(ctx, "g", CommitRequest{MemberID: "a", MemberEpoch: j.MemberEpoch,
			Offsets: []OffsetCommit{{Topic: "t", Partition: 0, Offset: off}}})
		return err
	}
	if err := commit(5); err != nil {
		t.Fatal(err)
	}
	h.failAppend = errors.New("ack timeout")
	if err := commit(9); !IsRetriable(err) {
		t.Fatalf("commit with a failing append = %v, want retriable", err)
	}
	h.failAppend = nil
	o, err := c.Offsets(ctx, "g", "")
	if err != nil || len(o.Offsets) != 1 || o.Offsets[0].Offset != 5 {
		t.Fatalf("offsets after the failed append = %+v, %v; want 5 (the log holds no 9)", o, err)
	}
}

func TestSessionExpiryAndStateStoredOnChangesOnly(t *testing.T) {
	ctx := context.Background()
	h, s, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	c := newTestCoordinator(t, h, s, clock)
	j, _ := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "a", SessionTimeoutMS: 3000})
	writes := s.writes
	for range 5 {
		clock.Add(time.Second)
		if _, err := c.Heartbeat(ctx, "g", "a", HeartbeatRequest{MemberEpoch: j.MemberEpoch, Owned: j.Assigned}); err != nil {
			t.Fatal(err)
		}
	}
	if s.writes != writes {
		t.Fatalf("%d Consul writes for heartbeats that changed nothing", s.writes-writes)
	}
	clock.Add(3 * time.Second)
	c.tick()
	if _, err := c.Heartbeat(ctx, "g", "a", HeartbeatRequest{MemberEpoch: j.MemberEpoch}); !errors.Is(err, group.ErrUnknownMember) {
		t.Fatalf("heartbeat after the session expired = %v, want ErrUnknownMember", err)
	}
	if s.writes != writes+1 {
		t.Fatalf("%d Consul writes for one expiry, want 1", s.writes-writes)
	}
}

func TestBadRequests(t *testing.T) {
	ctx := context.Background()
	h, s, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	h.hw[group.TopicPartition{Topic: "t", Partition: 0}] = 100
	c := newTestCoordinator(t, h, s, clock)
	j, _ := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "a"})
	if _, err := c.Join(ctx, "other", JoinRequest{Topics: []string{"t"}, MemberID: "b"}); err != nil {
		t.Fatal(err)
	}
	commit := func(g, m string, epoch int32, p int32) error {
		_, err := c.Commit(ctx, g, CommitRequest{MemberID: m, MemberEpoch: epoch, Offsets: []OffsetCommit{{Topic: "t", Partition: p, Offset: 1}}})
		return err
	}
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"unknown group", commit("nope", "a", j.MemberEpoch, 0), group.ErrUnknownGroup},
		{"member of another group", commit("g", "b", 1, 0), group.ErrUnknownMember},
		{"stale member epoch", commit("g", "a", j.MemberEpoch-1, 0), group.ErrStaleMemberEpoch},
		{"no offsets", func() error { _, err := c.Commit(ctx, "g", CommitRequest{MemberID: "a", MemberEpoch: 1}); return err }(), ErrInvalidRequest},
		{"unknown topic", func() error { _, err := c.Join(ctx, "g", JoinRequest{Topics: []string{"nope"}}); return err }(), ErrUnknownTopic},
		{"internal topic", func() error {
			h.topics[OffsetsTopic] = 3
			_, err := c.Join(ctx, "g", JoinRequest{Topics: []string{OffsetsTopic}})
			return err
		}(), ErrInvalidRequest},
		{"short session", func() error {
			_, err := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, SessionTimeoutMS: 10})
			return err
		}(), ErrInvalidRequest},
		{"reset while owned", func() error { _, err := c.Reset(ctx, "g", ResetRequest{Topic: "t", To: "earliest"}); return err }(), ErrGroupNotEmpty},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !errors.Is(tt.err, tt.want) {
				t.Fatalf("err = %v, want %v", tt.err, tt.want)
			}
		})
	}
	if o, err := c.Offsets(ctx, "g", ""); err != nil || len(o.Offsets) != 0 {
		t.Fatalf("offsets after refused commits = %+v, %v; want none", o, err)
	}
}

// TestRestatementBoundsTheRebuild: once enough commits piled up, the
// coordinator appends every committed offset again and deletes the log
// below; a new coordinator rebuilds the same offsets from what is left,
// including one committed once, long before, and never again.
func TestRestatementBoundsTheRebuild(t *testing.T) {
	ctx := context.Background()
	h, s, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	for p := range int32(4) {
		h.hw[group.TopicPartition{Topic: "t", Partition: p}] = 1 << 40
	}
	c := newTestCoordinatorWith(t, h, s, clock, func(cfg *Config) { cfg.RestateAfter = 50 })
	j, _ := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "a"})
	commit := func(p int32, off int64) {
		t.Helper()
		if _, err := c.Commit(ctx, "g", CommitRequest{MemberID: "a", MemberEpoch: j.MemberEpoch,
			Offsets: []OffsetCommit{{Topic: "t", Partition: p, Offset: off}}}); err != nil {
			t.Fatal(err)
		}
	}
	commit(3, 7) // the idle partition
	for i := range 500 {
		commit(int32(i%3), int64(i))
	}
	p := PartitionFor("g", 3)
	st, _ := h.OffsetsLeader(p)
	if st.LogStartOffset == 0 {
		t.Fatalf("500 commits and no restatement: log start still 0, end %d", st.LogEndOffset)
	}
	if kept := st.LogEndOffset - st.LogStartOffset; kept > 50+2*4+10 {
		t.Fatalf("%d records kept after restatements, want at most RestateAfter plus a restatement", kept)
	}
	h.epoch++
	c2 := newTestCoordinatorWith(t, h, s, clock, func(cfg *Config) { cfg.RestateAfter = 50 })
	o, err := c2.Offsets(ctx, "g", "")
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{0: 498, 1: 499, 2: 497, 3: 7}
	if len(o.Offsets) != len(want) {
		t.Fatalf("rebuilt offsets %+v, want %v", o.Offsets, want)
	}
	for _, off := range o.Offsets {
		if want[off.Partition] != off.Offset {
			t.Fatalf("rebuilt offsets %+v, want %v", o.Offsets, want)
		}
	}
}

// TestRestatementByTime: an idle coordinator restates once RestateEvery
// passed, so retention never takes the only record of a live offset.
func TestRestatementByTime(t *testing.T) {
	ctx := context.Background()
	h, s, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	h.hw[group.TopicPartition{Topic: "t", Partition: 0}] = 100
	c := newTestCoordinator(t, h, s, clock)
	j, _ := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "a"})
	if _, err := c.Commit(ctx, "g", CommitRequest{MemberID: "a", MemberEpoch: j.MemberEpoch,
		Offsets: []OffsetCommit{{Topic: "t", Partition: 0, Offset: 9}}}); err != nil {
		t.Fatal(err)
	}
	p := PartitionFor("g", 3)
	before, _ := h.OffsetsLeader(p)
	clock.Add(DefaultRestateEvery)
	// The member heartbeats, so the tick expires nobody.
	if _, err := c.Heartbeat(ctx, "g", "a", HeartbeatRequest{MemberEpoch: j.MemberEpoch, Owned: j.Assigned}); err != nil {
		t.Fatal(err)
	}
	c.tick()
	after, _ := h.OffsetsLeader(p)
	if after.LogStartOffset <= before.LogStartOffset || after.LogEndOffset != before.LogEndOffset+1 {
		t.Fatalf("before %+v, after %+v: want one restated record and the log below it deleted", before, after)
	}
}

// TestHeldHeartbeatDoesNotLengthenTheSession: the session counts from a
// heartbeat's arrival, not from the end of its hold, so a member that dies
// while its heartbeat is held expires a session timeout after it sent it.
func TestHeldHeartbeatDoesNotLengthenTheSession(t *testing.T) {
	ctx := context.Background()
	h, s, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	c := newTestCoordinator(t, h, s, clock)
	j, err := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "a", SessionTimeoutMS: 3000})
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	go func() {
		_, err := c.Heartbeat(ctx, "g", "a", HeartbeatRequest{MemberEpoch: j.MemberEpoch, Owned: j.Assigned, WaitMS: 300})
		answered <- err
	}()
	time.Sleep(100 * time.Millisecond)
	clock.Add(2 * time.Second) // the hold lasts, in the coordinator's time
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Second) // 3 s after the heartbeat arrived
	c.tick()
	if _, err := c.Heartbeat(ctx, "g", "a", HeartbeatRequest{MemberEpoch: j.MemberEpoch, Owned: j.Assigned}); !errors.Is(err, group.ErrUnknownMember) {
		t.Fatalf("heartbeat a session timeout after the held one arrived = %v, want ErrUnknownMember", err)
	}
}

// BenchmarkRebuild measures a new coordinator's rebuild of an offsets
// partition: records read, decoded and applied per second, the figure
// that, with RestateAfter, bounds a failover's load time.
func BenchmarkRebuild(b *testing.B) {
	const records = 100_000
	h := newFakeHost()
	p := PartitionFor("g", 3)
	var bld record.Builder
	now := time.Unix(1_700_000_000, 0)
	for i := 0; i < records; i += 1000 {
		bld.Reset()
		for j := range 1000 {
			r, err := group.OffsetRecord("g", group.TopicPartition{Topic: "t", Partition: int32((i + j) % 64)}, group.Committed{Offset: int64(i + j), CommitTime: now})
			if err != nil {
				b.Fatal(err)
			}
			if err := bld.Add(now.UnixMilli(), r.Key, r.Value, nil); err != nil {
				b.Fatal(err)
			}
		}
		batch, err := bld.AppendTo(nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := h.AppendOffsets(context.Background(), p, h.epoch, batch, bld.Len()); err != nil {
			b.Fatal(err)
		}
	}
	c := New(Config{Partitions: 3, Host: h, Store: newFakeStore(), Now: time.Now, Logger: hclog.NewNullLogger(),
		TickInterval: time.Hour, Limits: record.Limits{MaxBatchBytes: 1 << 20, MaxRecordBytes: 1 << 20}})
	defer c.Close()
	b.ResetTimer()
	for range b.N {
		o, n, err := c.rebuild(p, 0, records)
		if err != nil || n != records || len(o.Group("g")) != 64 {
			b.Fatalf("rebuild: %d records, %v", n, err)
		}
	}
	b.ReportMetric(float64(records)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// TestOversizedCommitRefused: a commit is appended whole (all or
// nothing), so one that would not fit a batch is refused as a bad
// request, and nothing is appended.
func TestOversizedCommitRefused(t *testing.T) {
	ctx := context.Background()
	h, s, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	h.hw[group.TopicPartition{Topic: "t", Partition: 0}] = 100
	c := newTestCoordinator(t, h, s, clock)
	j, _ := c.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "a"})
	req := CommitRequest{MemberID: "a", MemberEpoch: j.MemberEpoch}
	for i := range 300 {
		req.Offsets = append(req.Offsets, OffsetCommit{Topic: "t", Partition: 0, Offset: int64(i % 100), Metadata: strings.Repeat("m", group.MaxMetadataLen)})
	}
	before := h.appends
	if _, err := c.Commit(ctx, "g", req); !errors.Is(err, ErrInvalidRequest) || h.appends != before {
		t.Fatalf("a 1.2 MB commit = %v with %d appends, want ErrInvalidRequest and none", err, h.appends-before)
	}
	req.Offsets = req.Offsets[:100]
	if _, err := c.Commit(ctx, "g", req); err != nil {
		t.Fatalf("a 400 KB commit: %v", err)
	}
}

// TestGroupHashedOverTheOffsetsTopic: a group's partition is hashed over
// the offsets topic's partition count, not groups.offsets_partitions,
// which shapes the topic's creation only. A coordinator whose setting was
// lowered after the topic existed (8 to 3) hashed the group to another
// partition and did not find its commits: the group started over.
func TestGroupHashedOverTheOffsetsTopic(t *testing.T) {
	ctx := context.Background()
	h, s, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	h.topics[OffsetsTopic] = 8
	h.hw[group.TopicPartition{Topic: "t", Partition: 0}] = 100
	groupID := ""
	for i := 0; groupID == ""; i++ {
		if g := fmt.Sprintf("g%d", i); PartitionFor(g, 8) != PartitionFor(g, 3) {
			groupID = g
		}
	}
	coordinator := func(setting int) *Coordinator {
		c := New(Config{Partitions: setting, Host: h, Store: s, Now: clock.Now, Logger: hclog.NewNullLogger(),
			TickInterval: time.Hour, Limits: record.Limits{MaxBatchBytes: 1 << 20, MaxRecordBytes: 1 << 20}})
		t.Cleanup(c.Close)
		return c
	}
	c8 := coordinator(8)
	j, err := c8.Join(ctx, groupID, JoinRequest{Topics: []string{"t"}, MemberID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c8.Commit(ctx, groupID, CommitRequest{MemberID: "a", MemberEpoch: j.MemberEpoch,
		Offsets: []OffsetCommit{{Topic: "t", Partition: 0, Offset: 42}}}); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.epoch++ // the coordinator moves, and the new one's setting is 3
	h.mu.Unlock()
	o, err := coordinator(3).Offsets(ctx, groupID, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Offsets) != 1 || o.Offsets[0].Offset != 42 {
		t.Fatalf("offsets after the coordinator moved to one set to 3 partitions: %+v, want t/0 at 42", o.Offsets)
	}
}
