package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/logagent/logagent/wire"
)

// midPollKill is how long a member killed during a held heartbeat has its
// last heartbeat in flight before it dies: long enough for the agent to
// have received it and to hold it.
const midPollKill = 100 * time.Millisecond

// errorPause is how long a member waits after a failed heartbeat.
const errorPause = 100 * time.Millisecond

// member is one group member as a well-behaved consumer runs it: one
// heartbeat in flight at a time, held by the agent for up to waitMS,
// always with the complete owned set; revoked partitions are released at
// once (the next heartbeat leaves them out and is sent without waiting),
// granted ones are taken as the answer lists them. It consumes nothing:
// what it owns is what the benchmark measures.
type member struct {
	api       *groupAPI
	group     string
	topics    []string
	sessionMS int64
	waitMS    int64
	clock     Clock
	watch     *groupWatch

	// killAfterAnswer stops the loop at the next answer, before it sends
	// another heartbeat (a process that dies between two heartbeats).
	killAfterAnswer atomic.Bool
	// killMidPoll stops the loop midPollKill after it sent its next
	// heartbeat, dropping the connection while the agent holds it.
	killMidPoll atomic.Bool

	mu       sync.Mutex
	id       string
	idJSON   []byte
	epoch    int32
	owned    []gpart
	rejoins  int
	errs     int
	firstErr error
	// stoppedAt is when a kill took effect.
	stoppedAt time.Time

	cancel context.CancelFunc
	done   chan struct{}
}

// memberView is what a member knows from its last answer.
type memberView struct {
	owned    []gpart
	revoking bool
	at       time.Time
}

// start joins the group and runs the heartbeat loop until stop or a kill.
func (m *member) start(ctx context.Context) error {
	ans, err := m.api.join(ctx, m.group, m.topics, m.sessionMS)
	if err != nil {
		return fmt.Errorf("bench: join group %q: %w", m.group, err)
	}
	m.apply(ans, m.clock.Now())
	loopCtx, cancel := context.WithCancel(context.Background())
	m.cancel, m.done = cancel, make(chan struct{})
	go func() {
		defer close(m.done)
		m.run(loopCtx)
	}()
	return nil
}

// stop ends the loop (its heartbeat in flight is abandoned) and waits for
// it; the member stays in the group until leave or its session expires.
func (m *member) stop() {
	if m.cancel == nil {
		return
	}
	m.cancel()
	<-m.done
}

// leave stops the loop and leaves the group.
func (m *member) leave(ctx context.Context) error {
	m.stop()
	m.mu.Lock()
	id := m.id
	m.mu.Unlock()
	if err := m.api.leave(ctx, m.group, id); err != nil {
		return fmt.Errorf("bench: leave group %q: %w", m.group, err)
	}
	return nil
}

func (m *member) apply(ans memberAnswer, at time.Time) {
	m.mu.Lock()
	if ans.MemberID != "" && ans.MemberID != m.id {
		m.id = ans.MemberID
		m.idJSON, _ = json.Marshal(ans.MemberID)
	}
	m.epoch = ans.MemberEpoch
	m.owned = slices.Clone(ans.Assigned)
	revoking := len(ans.Revoke) > 0
	view := memberView{owned: slices.Clone(ans.Assigned), revoking: revoking, at: at}
	m.mu.Unlock()
	m.watch.publish(m, view)
}

// current returns what the member's commits carry.
func (m *member) current() (idJSON []byte, epoch int32, owned []gpart) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.idJSON, m.epoch, m.owned
}

func (m *member) run(ctx context.Context) {
	release := false
	for {
		m.mu.Lock()
		id, epoch, owned := m.id, m.epoch, slices.Clone(m.owned)
		m.mu.Unlock()
		wait := m.waitMS
		if release {
			wait = 0
		}
		hctx, cancelPoll := ctx, context.CancelFunc(func() {})
		midPoll := m.killMidPoll.Load()
		if midPoll {
			hctx, cancelPoll = context.WithTimeout(ctx, midPollKill)
		}
		ans, err := m.api.heartbeat(hctx, m.group, id, epoch, owned, wait)
		now := m.clock.Now()
		cancelPoll()
		switch {
		case ctx.Err() != nil:
			return
		case midPoll && err != nil && hctx.Err() != nil:
			m.mu.Lock()
			m.stoppedAt = now
			m.mu.Unlock()
			return
		case err != nil:
			if !m.recover(ctx, err) {
				return
			}
			continue
		}
		m.apply(ans, now)
		release = len(ans.Revoke) > 0
		if m.killAfterAnswer.Load() {
			m.mu.Lock()
			m.stoppedAt = now
			m.mu.Unlock()
			return
		}
		if m.waitMS == 0 && !release {
			pause := time.Duration(ans.HeartbeatIntervalMS) * time.Millisecond
			if m.clock.SleepUntil(ctx, now.Add(pause)) != nil {
				return
			}
		}
	}
}

// recover handles a failed heartbeat: a member the group no longer knows
// or has fenced joins again (owning nothing), as a consumer does; other
// errors are retried after a pause. Every failure is counted, since a
// well-behaved member of a healthy group never sees one. It reports
// whether the loop goes on.
func (m *member) recover(ctx context.Context, err error) bool {
	m.mu.Lock()
	m.errs++
	if m.firstErr == nil {
		m.firstErr = err
	}
	m.mu.Unlock()
	if kind := ErrorKind(err); kind == wire.CodeUnknownMember || kind == wire.CodeFencedMemberEpoch {
		ans, jerr := m.api.join(ctx, m.group, m.topics, m.sessionMS)
		if jerr == nil {
			m.mu.Lock()
			m.rejoins++
			m.mu.Unlock()
			m.apply(ans, m.clock.Now())
			return true
		}
	}
	return m.clock.SleepUntil(ctx, m.clock.Now().Add(errorPause)) == nil
}

// problems says what went wrong with the member, "" if nothing did.
func (m *member) problems() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.errs == 0 {
		return ""
	}
	return fmt.Sprintf("member %s: %d failed heartbeats (first: %v), %d rejoins", m.id, m.errs, m.firstErr, m.rejoins)
}

// groupWatch follows what the members of one group know and says when the
// expected members have settled: see settled.
type groupWatch struct {
	partitions int

	mu        sync.Mutex
	views     map[*member]memberView
	expect    []*member
	settledAt time.Time
	settledCh chan struct{}
}

func newGroupWatch(partitions int) *groupWatch {
	return &groupWatch{partitions: partitions, views: map[*member]memberView{}}
}

// arm starts waiting for expect, and only them, to settle. The returned
// channel is closed at that moment, which settledTime then returns: the
// time of the answer that completed the assignment.
func (w *groupWatch) arm(expect []*member) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expect = slices.Clone(expect)
	w.settledAt = time.Time{}
	w.settledCh = make(chan struct{})
	w.check()
	return w.settledCh
}

func (w *groupWatch) settledTime() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.settledAt
}

// forget drops a member that is dead or gone.
func (w *groupWatch) forget(m *member) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.views, m)
}

func (w *groupWatch) publish(m *member, v memberView) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.views[m] = v
	w.check()
}

// check closes settledCh when the expected members have settled, with
// the time of the latest answer among them: the moment the last of them
// learnt its final set. Called with w.mu held.
func (w *groupWatch) check() {
	if w.settledCh == nil || !w.settledAt.IsZero() || len(w.expect) == 0 {
		return
	}
	views := make([]memberView, 0, len(w.expect))
	var latest time.Time
	for _, m := range w.expect {
		v, ok := w.views[m]
		if !ok {
			return
		}
		views = append(views, v)
		if v.at.After(latest) {
			latest = v.at
		}
	}
	if settled(views, w.partitions) {
		w.settledAt = latest
		close(w.settledCh)
	}
}

// describe lists who owns what, for an error message.
func (w *groupWatch) describe() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var parts []string
	for i, m := range w.expect {
		v, ok := w.views[m]
		if !ok {
			parts = append(parts, fmt.Sprintf("member %d: no answer yet", i))
			continue
		}
		ps := make([]int32, 0, len(v.owned))
		for _, p := range v.owned {
			ps = append(ps, p.Partition)
		}
		sort.Slice(ps, func(a, b int) bool { return ps[a] < ps[b] })
		parts = append(parts, fmt.Sprintf("member %d owns %v (revoking %t)", i, ps, v.revoking))
	}
	return strings.Join(parts, "; ")
}

// settled reports whether the members' views are a finished assignment of
// the topic's partitions: nobody is giving a partition up, no partition has
// two owners, every partition has one, and the counts differ by at most one
// (the balanced target of the group's assignor).
func settled(views []memberView, partitions int) bool {
	if len(views) == 0 {
		return false
	}
	seen := map[gpart]bool{}
	lo, hi := partitions+1, -1
	for _, v := range views {
		if v.revoking {
			return false
		}
		for _, p := range v.owned {
			if seen[p] {
				return false
			}
			seen[p] = true
		}
		lo, hi = min(lo, len(v.owned)), max(hi, len(v.owned))
	}
	return len(seen) == partitions && hi-lo <= 1
}
