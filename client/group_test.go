package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/record"
)

// fill appends one batch of n values to every partition of topic t.
func fill(t *testing.T, f *fakeAgent, partitions, from, to int) {
	t.Helper()
	for p := range partitions {
		appendValues(t, f, record.CodecNone, p, values(from, to)...)
	}
}

// collector polls a GroupConsumer in a goroutine and keeps what it got.
type collector struct {
	t      *testing.T
	mu     sync.Mutex
	got    map[TopicPartition][]int64
	err    error
	cancel context.CancelFunc
	done   chan struct{}
}

func collect(t *testing.T, g *GroupConsumer) *collector {
	ctx, cancel := context.WithCancel(context.Background())
	c := &collector{t: t, got: map[TopicPartition][]int64{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			records, err := g.Poll(ctx)
			if err != nil {
				if ctx.Err() == nil {
					c.mu.Lock()
					c.err = err
					c.mu.Unlock()
				}
				return
			}
			c.mu.Lock()
			for _, r := range records {
				if want := fmt.Sprintf("v%d", r.Offset); string(r.Value) != want || r.Topic != "t" {
					c.err = fmt.Errorf("record %s@%d is %q, want %q", r.TopicPartition(), r.Offset, r.Value, want)
				}
				c.got[r.TopicPartition()] = append(c.got[r.TopicPartition()], r.Offset)
			}
			c.mu.Unlock()
		}
	}()
	t.Cleanup(c.stop)
	return c
}

func (c *collector) stop() {
	c.cancel()
	<-c.done
}

func (c *collector) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		c.t.Errorf("poll: %v", c.err)
		c.err = nil
	}
	n := 0
	for _, o := range c.got {
		n += len(o)
	}
	return n
}

func (c *collector) offsets(tp TopicPartition) []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got[tp])
}

func span(from, to int64) []int64 {
	var out []int64
	for o := from; o < to; o++ {
		out = append(out, o)
	}
	return out
}

// events records the callbacks' partitions, as "assigned t/0 t/1".
type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) note(what string) func([]TopicPartition) {
	return func(tps []TopicPartition) {
		s := what
		for _, tp := range tps {
			s += " " + tp.String()
		}
		e.mu.Lock()
		e.log = append(e.log, s)
		e.mu.Unlock()
	}
}

func (e *events) get() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.log)
}

func mustGroupConsumer(t *testing.T, c *Client, opts ...GroupOption) *GroupConsumer {
	t.Helper()
	g, err := c.NewGroupConsumer("g", []string{"t"}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	return g
}

// pollAfterLastRecord calls Poll once more after the test took every
// record, as an application does once it has processed what Poll returned,
// and fails if Poll returns records.
func pollAfterLastRecord(t *testing.T, ctx context.Context, g *GroupConsumer) {
	t.Helper()
	shortCtx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if records, err := g.Poll(shortCtx); len(records) > 0 {
		t.Fatalf("Poll returned %d records after the last one, err %v", len(records), err)
	}
}

// indexOf is the position of the first event with prefix, -1 if none.
func indexOf(log []string, prefix string) int {
	return slices.IndexFunc(log, func(s string) bool { return strings.HasPrefix(s, prefix) })
}

func TestGroupConsumerAssignment(t *testing.T) {
	tp := func(p int) TopicPartition { return TopicPartition{"t", p} }
	cases := []struct {
		name      string
		committed map[TopicPartition]int64 // before the consumer joins
		reset     int64
		want      map[TopicPartition][]int64
		// noOffset: the partitions whose first member fetch goes without
		// an offset (nothing committed: the agent applies the reset
		// policy).
		noOffset []TopicPartition
	}{
		{"nothing committed, earliest", nil, OffsetEarliest,
			map[TopicPartition][]int64{tp(0): span(0, 15), tp(1): span(0, 15), tp(2): span(0, 15), tp(3): span(0, 15)},
			[]TopicPartition{tp(0), tp(1), tp(2), tp(3)}},
		{"committed offsets mid-batch", map[TopicPartition]int64{tp(1): 3, tp(2): 10}, OffsetEarliest,
			map[TopicPartition][]int64{tp(0): span(0, 15), tp(1): span(3, 15), tp(2): span(10, 15), tp(3): span(0, 15)},
			[]TopicPartition{tp(0), tp(3)}},
		{"nothing committed, latest", map[TopicPartition]int64{tp(3): 4}, OffsetLatest,
			map[TopicPartition][]int64{tp(0): span(10, 15), tp(1): span(10, 15), tp(2): span(10, 15), tp(3): span(4, 15)},
			[]TopicPartition{tp(0), tp(1), tp(2)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeAgent(t)
			f.addTopic("t", 4)
			fill(t, f, 4, 0, 10)
			f.mu.Lock()
			g := f.groupLocked("g", true)
			for tp, o := range c.committed {
				g.committed[tp] = o
			}
			f.mu.Unlock()
			var ev events
			gc := mustGroupConsumer(t, f.newClient(), WithResetPolicy(c.reset), WithOnAssigned(ev.note("assigned")),
				WithFetchOptions(WithFetchMaxWait(100*time.Millisecond)))
			col := collect(t, gc)
			eventually(t, "four partitions fetched", func() bool {
				st := gc.Status()
				if len(st) != 4 {
					return false
				}
				for _, s := range st {
					if s.HighWatermark != 10 {
						return false
					}
				}
				return true
			})
			fill(t, f, 4, 10, 15)
			want := 0
			for _, o := range c.want {
				want += len(o)
			}
			eventually(t, "every record", func() bool { return col.total() >= want })
			time.Sleep(50 * time.Millisecond) // room for a duplicate to show
			for tp, w := range c.want {
				if got := col.offsets(tp); !slices.Equal(got, w) {
					t.Errorf("%s: offsets %v, want %v", tp, got, w)
				}
			}
			if got, want := ev.get(), []string{"assigned t/0 t/1 t/2 t/3"}; !slices.Equal(got, want) {
				t.Errorf("callbacks %v, want %v", got, want)
			}
			if got := gc.Assigned(); !slices.Equal(got, []TopicPartition{tp(0), tp(1), tp(2), tp(3)}) {
				t.Errorf("Assigned() = %v", got)
			}
			member, epoch := gc.Member()
			for _, q := range f.fetchQueries() {
				if q.Get("group") != "g" || q.Get("member_id") != member || q.Get("member_epoch") == "" {
					t.Errorf("fetch %v is not member %s's (epoch %d)", q, member, epoch)
				}
			}
			for p := range 4 {
				first := f.fetchesOf(p)[0]
				if slices.Contains(c.noOffset, tp(p)) {
					if first.Has("offset") || (first.Get("reset") == "latest") != (c.reset == OffsetLatest) {
						t.Errorf("partition %d: first fetch %v, want no offset and the reset policy", p, first)
					}
				} else if first.Get("offset") != fmt.Sprint(c.committed[tp(p)]) {
					t.Errorf("partition %d: first fetch %v, want the committed offset %d", p, first, c.committed[tp(p)])
				}
			}
		})
	}
}

func TestGroupConsumerRevocationCommitsBeforeRelease(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 4)
	fill(t, f, 4, 0, 10)
	c := f.newClient()
	var evA events
	// At OnRevoked, the fake must show the positions committed and the
	// partitions still member-1's.
	var atRevoke []string // guarded by f.mu
	gcA := mustGroupConsumer(t, c, WithAutoCommitInterval(0), WithOnAssigned(evA.note("assigned")),
		WithOnRevoked(func(tps []TopicPartition) {
			evA.note("revoked")(tps)
			f.mu.Lock()
			defer f.mu.Unlock()
			for _, tp := range tps {
				atRevoke = append(atRevoke, fmt.Sprintf("%s committed=%d owner=%s", tp, f.groups["g"].committed[tp], f.groups["g"].owner[tp]))
			}
		}))
	colA := collect(t, gcA)
	eventually(t, "member-1 reads everything", func() bool { return colA.total() == 40 })

	var evB events
	gcB := mustGroupConsumer(t, c, WithAutoCommitInterval(0), WithOnAssigned(evB.note("assigned")))
	colB := collect(t, gcB)
	eventually(t, "member-2 gets two partitions", func() bool { return len(gcB.Assigned()) == 2 })
	fill(t, f, 4, 10, 15)
	eventually(t, "the new records", func() bool { return colA.total()+colB.total() >= 60 })
	time.Sleep(50 * time.Millisecond)

	for p := range 4 {
		tp := TopicPartition{"t", p}
		want, got := span(0, 15), append(colA.offsets(tp), colB.offsets(tp)...)
		if p >= 2 {
			// member-1 read 0-9, member-2 resumes at the commit.
			if a, b := colA.offsets(tp), colB.offsets(tp); !slices.Equal(a, span(0, 10)) || !slices.Equal(b, span(10, 15)) {
				t.Errorf("%s: member-1 read %v, member-2 %v; want 0-9 and 10-14", tp, a, b)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: read %v, want %v", tp, got, want)
		}
	}
	if got := gcA.Assigned(); !slices.Equal(got, []TopicPartition{{"t", 0}, {"t", 1}}) {
		t.Errorf("member-1 owns %v, want t/0 t/1", got)
	}
	if got := gcB.Assigned(); !slices.Equal(got, []TopicPartition{{"t", 2}, {"t", 3}}) {
		t.Errorf("member-2 owns %v, want t/2 t/3", got)
	}
	log := f.groupEvents()
	for _, tp := range []string{"t/2", "t/3"} {
		commit, release, grant := indexOf(log, "commit member-1 "+tp+"=10"), indexOf(log, "release member-1 "+tp), indexOf(log, "grant member-2 "+tp)
		if commit < 0 || release < commit || grant < release {
			t.Errorf("%s: commit at %d, release at %d, grant at %d, want in that order: %v", tp, commit, release, grant, log)
		}
	}
	if indexOf(log, "commit member-1 t/0") >= 0 {
		t.Errorf("member-1 committed a partition it keeps, with auto-commit off: %v", log)
	}
	f.mu.Lock()
	seen := slices.Clone(atRevoke)
	f.mu.Unlock()
	if want := []string{"t/2 committed=10 owner=member-1", "t/3 committed=10 owner=member-1"}; !slices.Equal(seen, want) {
		t.Errorf("at OnRevoked the coordinator had %v, want %v", seen, want)
	}
	if got, want := evA.get(), []string{"assigned t/0 t/1 t/2 t/3", "revoked t/2 t/3"}; !slices.Equal(got, want) {
		t.Errorf("member-1 callbacks %v, want %v", got, want)
	}
	if got, want := evB.get(), []string{"assigned t/2 t/3"}; !slices.Equal(got, want) {
		t.Errorf("member-2 callbacks %v, want %v", got, want)
	}
	// Every heartbeat names the complete owned set: after the revocation
	// member-1's never holds t/2 or t/3 again.
	released := false
	for _, hb := range f.heartbeatCalls() {
		if hb.member != "member-1" {
			continue
		}
		has := slices.Contains(hb.owned, TopicPartition{"t", 2})
		if released && has {
			t.Errorf("member-1 heartbeat %+v names t/2 after releasing it", hb)
		}
		if !has && len(hb.owned) == 2 {
			released = true
		}
		if hb.waitMS != 3000 {
			t.Errorf("heartbeat wait %d ms, want 3000 (3 intervals of 1 s, under a third of 10 s)", hb.waitMS)
		}
	}
	if !released {
		t.Error("member-1 never heartbeat without t/2")
	}
}

// Records fetched but not yet returned by Poll are not consumed: a
// revocation commits the position Poll reached, drops them, and Poll never
// returns them.
func TestGroupConsumerRevocationDropsRecordsNotHandedOut(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 4)
	fill(t, f, 4, 0, 10)
	c := f.newClient()
	// A Poll between the revocation's commit and the release (here from
	// OnRevoked) must not return the partitions' fetched records either.
	var gcA *GroupConsumer
	var revokeMu sync.Mutex
	var duringRevoke []GroupRecord
	gcA = mustGroupConsumer(t, c, WithAutoCommitInterval(0), WithOnRevoked(func([]TopicPartition) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		records, _ := gcA.Poll(ctx)
		revokeMu.Lock()
		duringRevoke = records
		revokeMu.Unlock()
	}))
	ctx := testContext(t)
	got := 0
	for got < 40 {
		records, err := gcA.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got += len(records)
	}
	// The application comes back for more: the 40 records are processed
	// (a revocation commits no record the latest Poll returned).
	pollAfterLastRecord(t, ctx, gcA)
	fill(t, f, 4, 10, 15)
	eventually(t, "member-1 fetched the new records", func() bool {
		for _, s := range gcA.Status() {
			if s.HighWatermark != 15 {
				return false
			}
		}
		return true
	})
	gcB := mustGroupConsumer(t, c, WithAutoCommitInterval(0))
	colB := collect(t, gcB)
	eventually(t, "member-2 reads its partitions", func() bool { return colB.total() == 10 })
	for _, p := range []int{2, 3} {
		tp := TopicPartition{"t", p}
		if o, _ := f.committedOffset("g", tp); o != 10 {
			t.Errorf("%s: member-1 committed %d at the revocation, want 10 (what Poll returned)", tp, o)
		}
		if got := colB.offsets(tp); !slices.Equal(got, span(10, 15)) {
			t.Errorf("%s: member-2 read %v, want 10-14", tp, got)
		}
	}
	revokeMu.Lock()
	afterA := duringRevoke
	revokeMu.Unlock()
	for len(afterA) < 10 {
		records, err := gcA.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		afterA = append(afterA, records...)
	}
	for _, r := range afterA {
		if r.Partition >= 2 || r.Offset < 10 {
			t.Errorf("member-1 returned %s@%d after giving the partition up", r.TopicPartition(), r.Offset)
		}
	}
}

func TestGroupConsumerRejoins(t *testing.T) {
	cases := []struct {
		name string
		lose func(f *fakeAgent, member string)
	}{
		{"fenced", func(f *fakeAgent, m string) { f.fenceMember("g", m) }},
		{"session expired", func(f *fakeAgent, m string) { f.expireMember("g", m) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeAgent(t)
			f.addTopic("t", 2)
			fill(t, f, 2, 0, 10)
			var ev events
			gc := mustGroupConsumer(t, f.newClient(), WithAutoCommitInterval(0),
				WithOnAssigned(ev.note("assigned")), WithOnRevoked(ev.note("revoked")))
			col := collect(t, gc)
			eventually(t, "every record", func() bool { return col.total() == 20 })
			if err := gc.Commit(testContext(t)); err != nil {
				t.Fatal(err)
			}
			fill(t, f, 2, 10, 13)
			eventually(t, "three more each", func() bool { return col.total() == 26 })
			old, oldEpoch := gc.Member()
			c.lose(f, old)
			// It joins again under the same id, which the coordinator
			// takes as the member restarting (it frees what the member
			// owned at once), at a new epoch.
			eventually(t, "the member joined again", func() bool {
				id, epoch := gc.Member()
				return id == old && epoch != oldEpoch && len(gc.Assigned()) == 2
			})
			// The records after the last commit come again: at least once.
			eventually(t, "the redelivery", func() bool { return col.total() == 32 })
			fill(t, f, 2, 13, 15)
			eventually(t, "the new records", func() bool { return col.total() == 36 })
			time.Sleep(50 * time.Millisecond)
			for p := range 2 {
				tp := TopicPartition{"t", p}
				want := append(span(0, 13), span(10, 15)...)
				if got := col.offsets(tp); !slices.Equal(got, want) {
					t.Errorf("%s: read %v, want %v", tp, got, want)
				}
			}
			if got, want := ev.get(), []string{"assigned t/0 t/1", "revoked t/0 t/1", "assigned t/0 t/1"}; !slices.Equal(got, want) {
				t.Errorf("callbacks %v, want %v", got, want)
			}
			if ids := f.memberIDs("g"); len(ids) != 1 || ids[0] != old {
				t.Errorf("members %v, want %s alone, joined again", ids, old)
			}
			if log := f.groupEvents(); indexOf(log, "refuse commit "+old) >= 0 {
				t.Errorf("the lost member tried to commit at its lost epoch: %v", log)
			}
		})
	}
}

func TestGroupConsumerPeriodicCommit(t *testing.T) {
	cases := []struct {
		name     string
		interval time.Duration
		// committed after the clock moved 999ms, then 1ms more.
		before, after bool
	}{
		{"every second", time.Second, false, true},
		{"off", 0, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeAgent(t)
			f.addTopic("t", 1)
			fill(t, f, 1, 0, 10)
			clock := newFakeClock(false)
			gc := mustGroupConsumer(t, f.newClient(WithClock(clock)), WithAutoCommitInterval(c.interval),
				WithFetchOptions(WithFetchMaxWait(20*time.Second)))
			ctx := testContext(t)
			got := 0
			for got < 10 {
				records, err := gc.Poll(ctx)
				if err != nil {
					t.Fatal(err)
				}
				got += len(records)
			}
			// Poll waits now: the fetch long-polls, and the commit is
			// due a second after the consumer began.
			done := make(chan error, 1)
			pctx, cancel := context.WithCancel(ctx)
			go func() {
				_, err := gc.Poll(pctx)
				done <- err
			}()
			tp := TopicPartition{"t", 0}
			if c.interval > 0 {
				eventually(t, "the commit timer", func() bool { return clock.pendingTimers() > 0 })
			}
			clock.Advance(999 * time.Millisecond)
			time.Sleep(100 * time.Millisecond)
			if _, ok := f.committedOffset("g", tp); ok != c.before {
				t.Errorf("committed after 999ms: %v, want %v", ok, c.before)
			}
			clock.Advance(time.Millisecond)
			if c.after {
				// Both sides: the answer must have reached the consumer
				// before the Poll below is cancelled.
				eventually(t, "the periodic commit", func() bool {
					o, ok := f.committedOffset("g", tp)
					st := gc.Status()
					return ok && o == 10 && len(st) == 1 && st[0].Committed == 10
				})
			} else {
				time.Sleep(100 * time.Millisecond)
				if o, ok := f.committedOffset("g", tp); ok {
					t.Errorf("committed %d with periodic commits off", o)
				}
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Poll ended with %v, want context.Canceled", err)
			}
			commits := 0
			for _, e := range f.groupEvents() {
				if strings.HasPrefix(e, "commit ") {
					commits++
				}
			}
			if err := gc.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			// Commit sends only what moved: nothing after a periodic one.
			after := 0
			for _, e := range f.groupEvents() {
				if strings.HasPrefix(e, "commit ") {
					after++
				}
			}
			if wantNew := map[bool]int{true: 0, false: 1}[c.after]; after-commits != wantNew {
				t.Errorf("Commit sent %d commit(s), want %d", after-commits, wantNew)
			}
			if o, _ := f.committedOffset("g", tp); o != 10 {
				t.Errorf("committed %d, want 10", o)
			}
		})
	}
}

func TestGroupConsumerCloseCommitsAndLeaves(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 2)
	fill(t, f, 2, 0, 10)
	c := f.newClient()
	var ev events
	gc, member := readEvery(t, c, 20, WithAutoCommitInterval(0), WithOnRevoked(ev.note("revoked")))
	if err := gc.Close(testContext(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gc.done:
	default:
		t.Error("the heartbeat goroutine runs after Close")
	}
	log := f.groupEvents()
	c0, c1, leave := indexOf(log, "commit "+member+" t/0=10"), indexOf(log, "commit "+member+" t/1=10"), indexOf(log, "leave "+member)
	if c0 < 0 || c1 < 0 || leave < max(c0, c1) {
		t.Errorf("commits at %d and %d, leave at %d: want both commits, then the leave: %v", c0, c1, leave, log)
	}
	if ids := f.memberIDs("g"); len(ids) != 0 {
		t.Errorf("members %v after Close", ids)
	}
	if got, want := ev.get(), []string{"revoked t/0 t/1"}; !slices.Equal(got, want) {
		t.Errorf("callbacks %v, want %v", got, want)
	}
	if _, err := gc.Poll(testContext(t)); !errors.Is(err, ErrGroupConsumerClosed) {
		t.Errorf("Poll after Close: %v", err)
	}
	if err := gc.Commit(testContext(t)); !errors.Is(err, ErrGroupConsumerClosed) {
		t.Errorf("Commit after Close: %v", err)
	}
	// The next member resumes where the first stopped.
	next := mustGroupConsumer(t, c)
	fill(t, f, 2, 10, 12)
	col2 := collect(t, next)
	eventually(t, "the new records", func() bool { return col2.total() == 4 })
	for p := range 2 {
		if got := col2.offsets(TopicPartition{"t", p}); !slices.Equal(got, span(10, 12)) {
			t.Errorf("t/%d: the next member read %v, want 10-11", p, got)
		}
	}
}

// readEvery returns a member of group g on topic t that has been handed
// its n records, polling no more, and the member's id.
func readEvery(t *testing.T, c *Client, n int, opts ...GroupOption) (*GroupConsumer, string) {
	t.Helper()
	gc, err := c.NewGroupConsumer("g", []string{"t"}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	col := collect(t, gc)
	eventually(t, "every record", func() bool { return col.total() == n })
	col.stop()
	member, _ := gc.Member()
	return gc, member
}

// TestGroupConsumerCloseWithoutCommit: a consumer that could not process
// what Poll gave it leaves without committing, and the next member reads
// those records again.
func TestGroupConsumerCloseWithoutCommit(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 2)
	fill(t, f, 2, 0, 10)
	c := f.newClient()
	gc, member := readEvery(t, c, 20, WithAutoCommitInterval(0))
	if err := gc.CloseWithoutCommit(testContext(t)); err != nil {
		t.Fatal(err)
	}
	log := f.groupEvents()
	if indexOf(log, "leave "+member) < 0 || slices.ContainsFunc(log, func(e string) bool { return strings.HasPrefix(e, "commit ") }) {
		t.Errorf("events %v: want the leave and no commit", log)
	}
	if err := gc.Close(testContext(t)); !errors.Is(err, ErrGroupConsumerClosed) {
		t.Errorf("Close after CloseWithoutCommit: %v", err)
	}
	next := mustGroupConsumer(t, c)
	col2 := collect(t, next)
	eventually(t, "the records again", func() bool { return col2.total() == 20 })
	for p := range 2 {
		if got := col2.offsets(TopicPartition{"t", p}); !slices.Equal(got, span(0, 10)) {
			t.Errorf("t/%d: the next member read %v, want 0-9", p, got)
		}
	}
}

func TestGroupConsumerStaleEpochOnFetch(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	fill(t, f, 1, 0, 5)
	gc := mustGroupConsumer(t, f.newClient(), WithFetchOptions(WithFetchMaxWait(20*time.Second)))
	col := collect(t, gc)
	eventually(t, "every record", func() bool { return col.total() == 5 })
	eventually(t, "a long poll after the records", func() bool { return len(f.fetchQueries()) >= 2 })
	member, epoch := gc.Member()
	f.bumpMemberEpoch("g", member)
	eventually(t, "the new epoch", func() bool { _, e := gc.Member(); return e > epoch })
	// The fetch in flight carries the old epoch: it is refused once it
	// wakes, and the consumer fetches again under the new one.
	fill(t, f, 1, 5, 8)
	eventually(t, "the new records", func() bool { return col.total() == 8 })
	time.Sleep(50 * time.Millisecond)
	if got := col.offsets(TopicPartition{"t", 0}); !slices.Equal(got, span(0, 8)) {
		t.Errorf("read %v, want 0-7", got)
	}
	stale := 0
	for _, q := range f.fetchQueries() {
		if q.Get("member_epoch") == fmt.Sprint(epoch) {
			stale++
		}
	}
	if stale == 0 || len(gc.Assigned()) != 1 {
		t.Errorf("%d fetches under the old epoch, assigned %v", stale, gc.Assigned())
	}
}

func TestGroupConsumerRetriesCoordinatorNotAvailable(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	fill(t, f, 1, 0, 5)
	unavailable := &fakeAnswer{status: 503, code: CodeCoordinatorNotAvailable, retriable: true, retryAfter: "0"}
	f.onGroup = func(op string, call int) *fakeAnswer {
		switch {
		case op == "join" && call < 2, op == "heartbeat" && call < 3, op == "commit" && call == 0:
			return unavailable
		}
		return nil
	}
	clock := newFakeClock(true)
	gc := mustGroupConsumer(t, f.newClient(WithClock(clock)), WithAutoCommitInterval(0))
	col := collect(t, gc)
	eventually(t, "every record", func() bool { return col.total() == 5 })
	err := gc.Commit(testContext(t))
	if !errors.Is(err, ErrCoordinatorNotAvailable) || !IsRetriable(err) {
		t.Fatalf("commit: %v, want a retriable coordinator_not_available", err)
	}
	if err := gc.Commit(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if o, _ := f.committedOffset("g", TopicPartition{"t", 0}); o != 5 {
		t.Errorf("committed %d, want 5", o)
	}
	// The records come once the join is answered; the heartbeats retry
	// meanwhile, until one is answered.
	eventually(t, "an answered heartbeat", func() bool { return len(f.heartbeatCalls()) > 0 })
	// Two failed joins and three failed heartbeats: five backoff sleeps of
	// 25-50ms, 50-100ms, ..., within the fetch backoff's bounds.
	var sleeps []time.Duration
	for _, d := range clock.durations() {
		if d > 0 && d <= time.Second {
			sleeps = append(sleeps, d)
		}
	}
	if len(sleeps) < 5 {
		t.Errorf("backoff sleeps %v, want at least 5", sleeps)
	}
	f.mu.Lock()
	joins, heartbeats := f.groupCalls["join"], f.groupCalls["heartbeat"]
	f.mu.Unlock()
	if joins != 3 || heartbeats < 4 {
		t.Errorf("%d joins, %d heartbeats: want 3 and at least 4", joins, heartbeats)
	}
}

func TestGroupAdmin(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 2)
	fill(t, f, 2, 0, 10)
	c := f.newClient()
	ctx := testContext(t)
	gc := mustGroupConsumer(t, c, WithAutoCommitInterval(0))
	col := collect(t, gc)
	eventually(t, "every record", func() bool { return col.total() == 20 })
	if err := gc.CommitOffsets(ctx, map[TopicPartition]int64{{"t", 0}: 7}); err != nil {
		t.Fatal(err)
	}
	member, _ := gc.Member()

	groups, err := c.ListGroups(ctx)
	if err != nil || len(groups) != 1 || groups[0].Group != "g" || groups[0].Members != 1 {
		t.Errorf("ListGroups: %+v, %v", groups, err)
	}
	d, err := c.DescribeGroup(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Members) != 1 || d.Members[0].MemberID != member || len(d.Members[0].Assigned) != 2 || d.Members[0].SessionTimeoutMS != 10000 {
		t.Errorf("members %+v", d.Members)
	}
	wantParts := []GroupPartition{
		{Topic: "t", Partition: 0, Owner: member, Committed: 7, HighWatermark: 10, Lag: 3},
		{Topic: "t", Partition: 1, Owner: member, Committed: -1, HighWatermark: 10, Lag: 10},
	}
	if !slices.Equal(d.Partitions, wantParts) {
		t.Errorf("partitions %+v, want %+v", d.Partitions, wantParts)
	}
	offsets, err := c.CommittedOffsets(ctx, "g", "t")
	if err != nil || len(offsets) != 1 || offsets[0].Offset != 7 || offsets[0].CommitTimeMS == 0 {
		t.Errorf("CommittedOffsets: %+v, %v", offsets, err)
	}
	if _, err := c.ResetOffsets(ctx, "g", "t", "earliest"); !errors.Is(err, ErrGroupNotEmpty) {
		t.Errorf("reset with a member: %v, want ErrGroupNotEmpty", err)
	}
	if err := c.DeleteGroup(ctx, "g"); !errors.Is(err, ErrGroupNotEmpty) {
		t.Errorf("delete with a member: %v, want ErrGroupNotEmpty", err)
	}
	col.stop()
	if err := gc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, to := range []struct {
		to   string
		want int64
	}{{"latest", 10}, {"earliest", 0}, {"4", 4}} {
		got, err := c.ResetOffsets(ctx, "g", "t", to.to)
		if err != nil || len(got) != 2 || got[0].Offset != to.want || got[1].Offset != to.want {
			t.Errorf("reset to %s: %+v, %v", to.to, got, err)
		}
	}
	if _, err := c.ResetOffsets(ctx, "g", "t", "11"); !errors.Is(err, ErrOffsetBeyondHighWatermark) {
		t.Errorf("reset beyond the HW: %v", err)
	}
	if err := c.DeleteGroup(ctx, "g"); err != nil {
		t.Errorf("delete the emptied group: %v", err)
	}
	if _, err := c.CommittedOffsets(ctx, "g", ""); !errors.Is(err, ErrUnknownGroup) {
		t.Errorf("offsets of the deleted group: %v, want ErrUnknownGroup", err)
	}
	if err := c.DeleteGroup(ctx, "g"); !errors.Is(err, ErrUnknownGroup) {
		t.Errorf("delete a deleted group: %v, want ErrUnknownGroup", err)
	}
	if _, err := c.DescribeGroup(ctx, "nope"); !errors.Is(err, ErrUnknownGroup) {
		t.Errorf("describe an unknown group: %v", err)
	}
	if _, err := c.CommittedOffsets(ctx, "nope", ""); !errors.Is(err, ErrUnknownGroup) {
		t.Errorf("offsets of an unknown group: %v", err)
	}
	before := len(f.groupEvents())
	for _, call := range []error{
		func() error { _, err := c.DescribeGroup(ctx, ""); return err }(),
		c.DeleteGroup(ctx, strings.Repeat("g", 256)),
		func() error { _, err := c.ResetOffsets(ctx, strings.Repeat("g", 256), "t", "0"); return err }(),
	} {
		if !errors.Is(call, ErrInvalidGroupID) {
			t.Errorf("bad group id: %v, want ErrInvalidGroupID", call)
		}
	}
	if _, err := c.ResetOffsets(ctx, "g", "t", "-1"); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("reset to -1: %v, want ErrInvalidOption", err)
	}
	if len(f.groupEvents()) != before {
		t.Error("a bad argument reached the agent")
	}
}

func TestNewGroupConsumerRefusesBadOptions(t *testing.T) {
	f := newFakeAgent(t)
	c := f.newClient()
	cases := []struct {
		name   string
		group  string
		topics []string
		opts   []GroupOption
		want   error
	}{
		{"empty group", "", []string{"t"}, nil, ErrInvalidGroupID},
		{"long group", strings.Repeat("g", 256), []string{"t"}, nil, ErrInvalidGroupID},
		{"no topic", "g", nil, nil, ErrInvalidOption},
		{"bad topic", "g", []string{"a/b"}, nil, ErrInvalidTopicName},
		{"short session", "g", []string{"t"}, []GroupOption{WithSessionTimeout(999 * time.Millisecond)}, ErrInvalidOption},
		{"long session", "g", []string{"t"}, []GroupOption{WithSessionTimeout(301 * time.Second)}, ErrInvalidOption},
		{"negative commit interval", "g", []string{"t"}, []GroupOption{WithAutoCommitInterval(-1)}, ErrInvalidOption},
		{"reset to an offset", "g", []string{"t"}, []GroupOption{WithResetPolicy(5)}, ErrInvalidOption},
		{"long member id", "g", []string{"t"}, []GroupOption{WithMemberID(strings.Repeat("m", 256))}, ErrInvalidGroupID},
		{"offset reset", "g", []string{"t"}, []GroupOption{WithFetchOptions(WithOffsetReset(OffsetLatest))}, ErrInvalidOption},
		{"buffer reuse", "g", []string{"t"}, []GroupOption{WithFetchOptions(WithBufferReuse())}, ErrInvalidOption},
		{"bad max bytes", "g", []string{"t"}, []GroupOption{WithFetchOptions(WithFetchMaxBytes(0))}, ErrInvalidOption},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if g, err := c.NewGroupConsumer(tc.group, tc.topics, tc.opts...); !errors.Is(err, tc.want) {
				if g != nil {
					_ = g.Close(context.Background())
				}
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
	if n := len(f.groupEvents()); n != 0 {
		t.Errorf("%d group requests for refused options", n)
	}
}

// TestGroupRequestsCarryTheirDeadline: every group request sends what is
// left of its context's deadline as the timeout parameter, so that the
// agent gives the operation up when the client does. Without it the agent
// retried an unavailable coordinator for its own 15 s: a commit the client
// had given up on, and then sent again or followed with a newer one, could
// land after it and take the committed offset back.
func TestGroupRequestsCarryTheirDeadline(t *testing.T) {
	f := newFakeAgent(t)
	f.addTopic("t", 1)
	fill(t, f, 1, 0, 5)
	c := f.newClient()
	const bound = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	gc := mustGroupConsumer(t, c, WithAutoCommitInterval(0))
	col := collect(t, gc)
	eventually(t, "every record", func() bool { return col.total() == 5 })
	if err := gc.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DescribeGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CommittedOffsets(ctx, "g", "t"); err != nil {
		t.Fatal(err)
	}
	col.stop()
	if err := gc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ResetOffsets(ctx, "g", "t", "earliest"); err != nil {
		t.Fatal(err)
	}
	// A context without a deadline sends none: the agent's own bound.
	if _, err := c.CommittedOffsets(context.Background(), "g", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListGroups(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}

	f.mu.Lock()
	requests := slices.Clone(f.groupRequests)
	f.mu.Unlock()
	seen := map[string]int{}
	for _, r := range requests {
		most := bound // the request's own bound
		switch {
		case r.what == "POST /v1/groups/g/members":
			most = groupCallTimeout
		case strings.HasSuffix(r.what, "/heartbeat"):
			most = maxHeartbeatWait + requestGrace
		case r.what == "GET /v1/groups/g/offsets" && r.timeout == "":
			// The consumer's look at where a partition starts, and the
			// last call: no deadline.
			seen["without a deadline"]++
			continue
		}
		seen[r.what]++
		d, err := time.ParseDuration(r.timeout)
		if err != nil || d <= 0 || d > most {
			t.Errorf("%s sent timeout=%q, want what is left of its deadline, at most %v", r.what, r.timeout, most)
		}
	}
	for _, want := range []string{"POST /v1/groups/g/members", "POST /v1/groups/g/members/member-1/heartbeat",
		"POST /v1/groups/g/offsets", "GET /v1/groups/g", "GET /v1/groups/g/offsets", "DELETE /v1/groups/g/members/member-1",
		"POST /v1/groups/g/offsets/reset", "GET /v1/groups", "DELETE /v1/groups/g", "without a deadline"} {
		if seen[want] == 0 {
			t.Errorf("no %s request among %v", want, requests)
		}
	}
}
