package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"
)

// ErrGroupConsumerClosed is returned by a GroupConsumer's calls after
// Close; it matches ErrClosed.
var ErrGroupConsumerClosed = fmt.Errorf("%w: group consumer", ErrClosed)

// GroupRecord is a record a GroupConsumer returns: the Record (with its
// topic and partition); Topic repeats Record.Topic.
type GroupRecord struct {
	Topic string
	Record
}

// TopicPartition of the record.
func (r GroupRecord) TopicPartition() TopicPartition {
	return TopicPartition{Topic: r.Topic, Partition: r.Partition}
}

// PartitionStatus is what a GroupConsumer knows of a partition it owns.
type PartitionStatus struct {
	TopicPartition
	// Position is the offset of the next record Poll returns; -1 until
	// the first fetch says where the partition starts.
	Position int64
	// Committed is the offset last committed by this member, or the
	// group's committed offset it started from; -1 when none is known.
	Committed int64
	// HighWatermark is the partition's, in the last fetch answer; -1
	// before the first.
	HighWatermark int64
}

type groupConfig struct {
	sessionTimeout time.Duration
	autoCommit     time.Duration
	memberID       string
	reset          int64
	fetch          []ConsumerOption
	onAssigned     func([]TopicPartition)
	onRevoked      func([]TopicPartition)
}

// GroupOption configures a GroupConsumer.
type GroupOption func(*groupConfig)

// WithSessionTimeout is how long the agent keeps the member without a
// heartbeat before it gives its partitions to others (default 10s; 1s to
// 300s).
func WithSessionTimeout(d time.Duration) GroupOption {
	return func(c *groupConfig) { c.sessionTimeout = d }
}

// WithAutoCommitInterval is how often Poll commits the positions of the
// owned partitions (default 1s); 0 turns periodic commits off, leaving
// Commit, CommitOffsets, revocations and Close.
func WithAutoCommitInterval(d time.Duration) GroupOption {
	return func(c *groupConfig) { c.autoCommit = d }
}

// WithMemberID joins with this member id (1 to 255 bytes) instead of one
// the agent generates. Joining with an id the group has is a restart of
// that member: it owns nothing until it is given partitions again.
func WithMemberID(id string) GroupOption { return func(c *groupConfig) { c.memberID = id } }

// WithResetPolicy is where the consumer starts a partition the group has
// no committed offset of, or whose committed offset is out of range:
// OffsetEarliest (the default, the log start) or OffsetLatest (the high
// watermark).
func WithResetPolicy(to int64) GroupOption { return func(c *groupConfig) { c.reset = to } }

// WithFetchOptions configures the fetches of every partition as for a
// Consumer: WithFetchMaxBytes, WithFetchMaxWait, WithFetchLimits,
// WithFetchBackoff (whose delays also pace the retries of joins,
// heartbeats and commits). WithOffsetReset (see WithResetPolicy) and
// WithBufferReuse (records are fetched ahead of Poll) are refused.
func WithFetchOptions(opts ...ConsumerOption) GroupOption {
	return func(c *groupConfig) { c.fetch = append(c.fetch, opts...) }
}

// WithOnAssigned has f called with the partitions the group grants the
// member, before they are fetched. WithOnRevoked has f called with
// partitions the member gives up: for a revocation after their positions
// were committed and before they are released; when the member lost them
// (fenced, session expired, not the owner) without a commit, which the
// agent would refuse; and by Close after its commit. Except for Close's,
// both are called from the consumer's heartbeat goroutine, one call at a
// time: they must return soon (the member's heartbeats wait) and must not
// call Close.
func WithOnAssigned(f func([]TopicPartition)) GroupOption {
	return func(c *groupConfig) { c.onAssigned = f }
}

// WithOnRevoked: see WithOnAssigned.
func WithOnRevoked(f func([]TopicPartition)) GroupOption {
	return func(c *groupConfig) { c.onRevoked = f }
}

// GroupConsumer is a member of a consumer group: the partitions of its
// topics are shared among the group's members, and the group's committed
// offsets say where each partition resumes. See the package documentation,
// "Consumer groups". Poll and Commit may be called from one goroutine
// while others call Commit, CommitOffsets, Assigned and Status.
type GroupConsumer struct {
	client *Client
	// static: no group; the partitions are the ones a MultiConsumer was
	// made with, fetched from where it said, never committed (see
	// multi.go). No heartbeat goroutine runs.
	static   bool
	group    string
	path     string // of the group, escaped
	topics   []string
	cfg      groupConfig
	fetchCfg consumerConfig
	clock    Clock
	backoff  backoff

	// commitMu makes commits one at a time, so that two commits of a
	// partition cannot reach the coordinator in the other order.
	commitMu sync.Mutex

	mu       sync.Mutex
	memberID string // empty while not a member
	// lastMemberID is the id to join again with after a fence or an
	// expired session: the coordinator then takes it as the same member
	// restarting and frees its partitions at once, where a new id would
	// leave them with the old member until its session expired.
	lastMemberID string
	epoch        int64
	heartbeat    time.Duration // the interval the agent asks for
	owned        map[TopicPartition]*groupPartition
	changed      chan struct{} // closed and replaced at every change Poll waits for
	err          error         // the member cannot go on: Poll returns it
	closed       bool
	cursor       int // where the next Poll starts, for fairness
	nextCommit   time.Time

	runCtx    context.Context // ends at Close: the heartbeat goroutine and the fetchers
	stopRun   context.CancelFunc
	done      chan struct{} // closed when the heartbeat goroutine returns
	closeDone chan struct{} // closed when the first Close returns
	fetchers  sync.WaitGroup
}

// groupPartition is an owned partition. Its fields are guarded by the
// GroupConsumer's mu, but cons, which only the running fetcher uses.
type groupPartition struct {
	tp       TopicPartition
	cons     *Consumer
	position int64 // next offset Poll hands out; -1 unknown
	// inHand is the first offset of the records the latest Poll handed
	// out, which the application may still be processing; -1 when that
	// Poll handed out none. They count as processed at its next Poll.
	inHand    int64
	committed int64 // -1 none known
	hw        int64
	// buffered is the last answer's records not yet handed out; answered
	// says an answer (perhaps empty) came since the last Poll, and
	// fetchNext is the offset after it.
	buffered  []Record
	answered  bool
	fetchNext int64
	// fetchEpoch is the member epoch of the last fetch sent.
	fetchEpoch int64
	running    bool // a fetcher runs
	revoking   bool // stopped for a revocation whose commit is pending
	// released: the agent said the member does not own the partition,
	// so heartbeats leave it out until the agent grants it again.
	released bool
	err      error // a fetch failure Poll returns once
	cancel   context.CancelFunc
	done     chan struct{} // of the last fetcher, closed when it returns
	drained  chan struct{} // signalled when Poll takes buffered records
}

// NewGroupConsumer joins group as a consumer of topics, in a goroutine of
// its own that then heartbeats until Close: Poll returns records as soon
// as partitions are assigned.
func (c *Client) NewGroupConsumer(group string, topics []string, opts ...GroupOption) (*GroupConsumer, error) {
	if err := validateGroupID("group", group); err != nil {
		return nil, err
	}
	if len(topics) == 0 {
		return nil, fmt.Errorf("%w: a group consumer needs a topic", ErrInvalidOption)
	}
	for _, t := range topics {
		if err := ValidateTopicName(t); err != nil {
			return nil, err
		}
	}
	cfg := groupConfig{sessionTimeout: 10 * time.Second, autoCommit: time.Second, reset: OffsetEarliest}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case cfg.sessionTimeout < time.Second || cfg.sessionTimeout > 300*time.Second:
		return nil, fmt.Errorf("%w: session timeout %v: want 1s to 300s", ErrInvalidOption, cfg.sessionTimeout)
	case cfg.autoCommit < 0:
		return nil, fmt.Errorf("%w: auto-commit interval %v", ErrInvalidOption, cfg.autoCommit)
	case cfg.reset != OffsetEarliest && cfg.reset != OffsetLatest:
		return nil, fmt.Errorf("%w: reset policy %d: want OffsetEarliest or OffsetLatest", ErrInvalidOption, cfg.reset)
	}
	if cfg.memberID != "" {
		if err := validateGroupID("member", cfg.memberID); err != nil {
			return nil, err
		}
	}
	// A consumer built with the fetch options checks their values.
	probe, err := c.NewConsumer(topics[0], 0, OffsetEarliest, cfg.fetch...)
	if err != nil {
		return nil, err
	}
	if probe.cfg.reset != 0 || probe.cfg.reuse {
		return nil, fmt.Errorf("%w: WithOffsetReset and WithBufferReuse do not apply to a group consumer", ErrInvalidOption)
	}
	runCtx, stop := context.WithCancel(context.Background())
	g := &GroupConsumer{
		client:     c,
		group:      group,
		path:       groupPath(group),
		topics:     slices.Clone(topics),
		cfg:        cfg,
		fetchCfg:   probe.cfg,
		clock:      c.clock,
		backoff:    newBackoff(probe.cfg.backoffMin, probe.cfg.backoffMax),
		memberID:   "",
		heartbeat:  time.Second,
		owned:      map[TopicPartition]*groupPartition{},
		changed:    make(chan struct{}),
		nextCommit: c.clock.Now().Add(cfg.autoCommit),
		runCtx:     runCtx,
		stopRun:    stop,
		done:       make(chan struct{}),
		closeDone:  make(chan struct{}),
	}
	if err := c.track(g); err != nil {
		stop()
		return nil, err
	}
	go g.run()
	return g, nil
}

// closeFor is Client.Close's.
func (g *GroupConsumer) closeFor(ctx context.Context) error {
	if err := g.Close(ctx); !errors.Is(err, ErrGroupConsumerClosed) {
		return err
	}
	return nil
}

// Group is the group's id.
func (g *GroupConsumer) Group() string { return g.group }

// Member is the member id and epoch, "" and 0 while not a member (before
// the join is answered, or between a fence and the join after it).
func (g *GroupConsumer) Member() (id string, epoch int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.memberID, g.epoch
}

// Assigned is the partitions the member owns and consumes, sorted.
func (g *GroupConsumer) Assigned() []TopicPartition {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []TopicPartition
	for _, p := range g.sortedLocked() {
		if !p.revoking && !p.released {
			out = append(out, p.tp)
		}
	}
	return out
}

// Status is the position, committed offset and high watermark of each
// partition of Assigned.
func (g *GroupConsumer) Status() []PartitionStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []PartitionStatus
	for _, p := range g.sortedLocked() {
		if !p.revoking && !p.released {
			out = append(out, PartitionStatus{TopicPartition: p.tp, Position: p.position, Committed: p.committed, HighWatermark: p.hw})
		}
	}
	return out
}

func (g *GroupConsumer) sortedLocked() []*groupPartition {
	ps := make([]*groupPartition, 0, len(g.owned))
	for _, p := range g.owned {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b *groupPartition) int {
		return cmp.Or(cmp.Compare(a.tp.Topic, b.tp.Topic), cmp.Compare(a.tp.Partition, b.tp.Partition))
	})
	return ps
}

// broadcastLocked wakes a waiting Poll.
func (g *GroupConsumer) broadcastLocked() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// Poll returns records of the owned partitions: those fetched since the
// last Poll, from every partition that has some, starting each time at
// the next partition so that none waits behind the others. It waits until
// there are records or a fetch came back empty (its max wait passed), so
// it may return none. The records it returns count as consumed: commits
// (periodic ones, which Poll itself makes when they are due, Commit,
// Close's) take the member's position past them. A revocation, which the
// heartbeat goroutine makes while the application may still be processing
// what the latest Poll returned, commits only the records returned before
// it: those of the latest Poll are read again by the next owner.
func (g *GroupConsumer) Poll(ctx context.Context) ([]GroupRecord, error) {
	g.mu.Lock()
	for _, p := range g.owned {
		p.inHand = -1
	}
	g.mu.Unlock()
	for {
		g.mu.Lock()
		if g.closed {
			g.mu.Unlock()
			return nil, ErrGroupConsumerClosed
		}
		if g.err != nil {
			err := g.err
			g.mu.Unlock()
			return nil, err
		}
		for _, p := range g.owned {
			if p.err != nil {
				err := p.err
				p.err = nil
				g.mu.Unlock()
				return nil, err
			}
		}
		if g.static {
			// Without a heartbeat, a partition whose fetch failed
			// starts again, where it stopped, at the next Poll.
			for _, p := range g.owned {
				if !p.running {
					g.startLocked(p)
				}
			}
		}
		now := g.clock.Now()
		if g.cfg.autoCommit > 0 && !now.Before(g.nextCommit) {
			g.nextCommit = now.Add(g.cfg.autoCommit)
			g.mu.Unlock()
			if err := g.commitOwned(ctx); err != nil && !commitMayPass(err) {
				return nil, err
			}
			continue
		}
		if records, ok := g.takeLocked(); ok {
			g.mu.Unlock()
			return records, nil
		}
		changed, until := g.changed, g.nextCommit.Sub(now)
		g.mu.Unlock()
		var commitDue chan struct{}
		var timer Timer
		if g.cfg.autoCommit > 0 {
			commitDue = make(chan struct{})
			timer = g.clock.AfterFunc(until, func() { close(commitDue) })
		}
		select {
		case <-changed:
		case <-commitDue:
		case <-ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// commitMayPass: a periodic commit that fails because the membership is
// changing, or the agent cannot answer now, is no failure of Poll: the
// heartbeat sorts the membership out, and the next commit carries the
// positions.
func commitMayPass(err error) bool {
	return errors.Is(err, ErrStaleMemberEpoch) || errors.Is(err, ErrFencedMember) || errors.Is(err, ErrUnknownMember) ||
		errors.Is(err, ErrNotOwner) || errors.Is(err, ErrUnknownGroup) || fetchRetriable(err)
}

// takeLocked hands out the buffered records of every partition that has an
// answer, round-robin from the cursor, and reports whether any answered.
func (g *GroupConsumer) takeLocked() ([]GroupRecord, bool) {
	ps := g.sortedLocked()
	var out []GroupRecord
	answered := false
	for i := range ps {
		p := ps[(g.cursor+i)%len(ps)]
		if !p.answered || p.revoking || p.released {
			continue
		}
		answered = true
		for _, r := range p.buffered {
			out = append(out, GroupRecord{Topic: p.tp.Topic, Record: r})
		}
		g.client.stats.consumed(p.buffered)
		if len(p.buffered) > 0 && p.inHand < 0 {
			p.inHand = p.buffered[0].Offset
			if p.position >= 0 {
				p.inHand = p.position
			}
		}
		if p.fetchNext >= 0 {
			p.position = p.fetchNext
		}
		if len(p.buffered) > 0 {
			p.buffered = nil
			select {
			case p.drained <- struct{}{}:
			default:
			}
		}
		p.answered = false
	}
	if answered {
		g.cursor++
	}
	return out, answered
}

// Commit commits the position of every owned partition that moved since
// its last commit. A commit is acknowledged once durable on the group's
// offsets partition.
func (g *GroupConsumer) Commit(ctx context.Context) error {
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		return ErrGroupConsumerClosed
	}
	return g.commitOwned(ctx)
}

// CommitOffsets commits the given offsets (each the next offset to
// consume) of partitions the member owns. The agent commits all of them
// or, on an error, none (per request of up to 1000 offsets).
func (g *GroupConsumer) CommitOffsets(ctx context.Context, offsets map[TopicPartition]int64) error {
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		return ErrGroupConsumerClosed
	}
	list := make([]PartitionOffset, 0, len(offsets))
	for tp, o := range offsets {
		if o < 0 {
			return fmt.Errorf("%w: commit offset %d of %s", ErrInvalidOption, o, tp)
		}
		list = append(list, PartitionOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: o})
	}
	g.commitMu.Lock()
	defer g.commitMu.Unlock()
	return g.commitLocked(ctx, list)
}

// commitOwned commits the positions that moved, of every owned partition.
func (g *GroupConsumer) commitOwned(ctx context.Context) error {
	return g.commitPartitions(ctx, nil, false)
}

// commitPartitions commits the positions that moved of only (every owned
// partition when only is nil). With processedOnly, a partition the latest
// Poll returned records of is committed at the first of them, or where the
// application committed it since, if that is past them.
func (g *GroupConsumer) commitPartitions(ctx context.Context, only []TopicPartition, processedOnly bool) error {
	g.commitMu.Lock()
	defer g.commitMu.Unlock()
	g.mu.Lock()
	var list []PartitionOffset
	add := func(p *groupPartition) {
		if p == nil || p.released {
			return
		}
		offset := p.position
		if processedOnly && p.inHand >= 0 {
			offset = p.inHand
			// What the application committed itself of the records in
			// hand (Commit, CommitOffsets) it has processed: committing
			// below it would have the next owner read them again.
			if p.committed > offset {
				offset = min(p.committed, p.position)
			}
		}
		if offset >= 0 && offset != p.committed {
			list = append(list, PartitionOffset{Topic: p.tp.Topic, Partition: p.tp.Partition, Offset: offset})
		}
	}
	if only == nil {
		for _, p := range g.sortedLocked() {
			add(p)
		}
	} else {
		for _, tp := range only {
			add(g.owned[tp])
		}
	}
	g.mu.Unlock()
	return g.commitLocked(ctx, list)
}

// maxCommitOffsets is the most offsets the agent takes in one commit.
const maxCommitOffsets = 1000

// commitLocked sends offsets, 1000 a request, and records what was
// committed. commitMu is held.
func (g *GroupConsumer) commitLocked(ctx context.Context, offsets []PartitionOffset) error {
	for len(offsets) > 0 {
		n := min(len(offsets), maxCommitOffsets)
		chunk := offsets[:n]
		offsets = offsets[n:]
		g.mu.Lock()
		member, epoch := g.memberID, g.epoch
		g.mu.Unlock()
		if member == "" {
			return fmt.Errorf("commit offsets of group %q: %w", g.group, ErrUnknownMember)
		}
		in := struct {
			MemberID    string            `json:"member_id"`
			MemberEpoch int64             `json:"member_epoch"`
			Offsets     []PartitionOffset `json:"offsets"`
		}{member, epoch, chunk}
		var out struct {
			Committed []PartitionOffset `json:"committed"`
		}
		cctx, cancel := context.WithTimeout(ctx, groupCallTimeout)
		err := g.client.doGroupJSON(cctx, http.MethodPost, g.path+"/offsets", nil, in, &out)
		cancel()
		if err != nil {
			return fmt.Errorf("commit offsets of group %q: %w", g.group, err)
		}
		g.mu.Lock()
		for _, o := range chunk {
			if p := g.owned[TopicPartition{o.Topic, o.Partition}]; p != nil {
				p.committed = o.Offset
			}
		}
		g.mu.Unlock()
	}
	return nil
}

// groupCallTimeout bounds a join, commit or leave that gets no answer.
const groupCallTimeout = 30 * time.Second

// Close commits the positions of the owned partitions, leaves the group
// (its partitions go to the other members at once), and stops the
// consumer's goroutines, waiting for them. It returns the commit's or the
// leave's error; the consumer is closed either way. A Close after the
// first waits for it (or for ctx) and returns ErrGroupConsumerClosed.
func (g *GroupConsumer) Close(ctx context.Context) error {
	return g.close(ctx, true)
}

// CloseWithoutCommit is Close without its commit, for a consumer that could
// not process what Poll returned (its output failed): the group reads the
// records after its last commit again, where Close would count them
// consumed. Commits made before stand.
func (g *GroupConsumer) CloseWithoutCommit(ctx context.Context) error {
	return g.close(ctx, false)
}

func (g *GroupConsumer) close(ctx context.Context, commit bool) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		select {
		case <-g.closeDone:
			return ErrGroupConsumerClosed
		case <-ctx.Done():
			return fmt.Errorf("close: waiting for another Close: %w", ctx.Err())
		}
	}
	g.closed = true
	g.broadcastLocked()
	g.mu.Unlock()
	defer close(g.closeDone)
	g.client.forget(g)
	g.stopRun()
	<-g.done
	g.fetchers.Wait()
	if g.static {
		return nil
	}

	var err error
	if commit {
		err = g.commitOwned(ctx)
	}
	if errors.Is(err, ErrStaleMemberEpoch) {
		// A heartbeat answer that was cut short may have carried a new
		// epoch: ask for it at once, and commit again.
		g.mu.Lock()
		member, epoch, owned := g.memberID, g.epoch, g.ownedLocked()
		g.mu.Unlock()
		if a, herr := g.sendHeartbeat(ctx, member, epoch, owned, 0); herr == nil {
			g.mu.Lock()
			g.epoch = a.MemberEpoch
			g.mu.Unlock()
			err = g.commitOwned(ctx)
		}
	}
	g.mu.Lock()
	tps, member := make([]TopicPartition, 0, len(g.owned)), g.memberID
	for _, p := range g.sortedLocked() {
		tps = append(tps, p.tp)
	}
	g.mu.Unlock()
	if len(tps) > 0 && g.cfg.onRevoked != nil {
		g.cfg.onRevoked(tps)
	}
	if member != "" {
		lctx, cancel := context.WithTimeout(ctx, groupCallTimeout)
		lerr := g.client.doGroupJSON(lctx, http.MethodDelete, g.memberPath(member), nil, nil, nil)
		cancel()
		if lerr != nil && !errors.Is(lerr, ErrUnknownMember) {
			err = errors.Join(err, fmt.Errorf("leave group %q: %w", g.group, lerr))
		}
	}
	g.mu.Lock()
	g.owned = map[TopicPartition]*groupPartition{}
	g.memberID = ""
	g.mu.Unlock()
	return err
}

func (g *GroupConsumer) memberPath(member string) string {
	return g.path + "/members/" + url.PathEscape(member)
}

// groupAnswer is the answer of a join or a heartbeat.
type groupAnswer struct {
	Group               string           `json:"group"`
	MemberID            string           `json:"member_id"`
	MemberEpoch         int64            `json:"member_epoch"`
	Assigned            []TopicPartition `json:"assigned"`
	Revoke              []TopicPartition `json:"revoke"`
	HeartbeatIntervalMS int64            `json:"heartbeat_interval_ms"`
}

func (g *GroupConsumer) join(ctx context.Context) (*groupAnswer, error) {
	in := struct {
		Topics           []string `json:"topics"`
		SessionTimeoutMS int64    `json:"session_timeout_ms"`
		MemberID         string   `json:"member_id,omitempty"`
	}{g.topics, g.cfg.sessionTimeout.Milliseconds(), g.cfg.memberID}
	if in.MemberID == "" {
		g.mu.Lock()
		in.MemberID = g.lastMemberID
		g.mu.Unlock()
	}
	var a groupAnswer
	ctx, cancel := context.WithTimeout(ctx, groupCallTimeout)
	defer cancel()
	if err := g.client.doGroupJSON(ctx, http.MethodPost, g.path+"/members", nil, in, &a); err != nil {
		return nil, fmt.Errorf("join group %q: %w", g.group, err)
	}
	if a.MemberID == "" || (in.MemberID != "" && a.MemberID != in.MemberID) {
		return nil, fmt.Errorf("%w: join group %q as %q answered member %q", ErrProtocol, g.group, in.MemberID, a.MemberID)
	}
	return &a, nil
}

// sendHeartbeat tells the coordinator the complete set of partitions the
// member still consumes, and waits up to wait for news.
func (g *GroupConsumer) sendHeartbeat(ctx context.Context, member string, epoch int64, owned []TopicPartition, wait time.Duration) (*groupAnswer, error) {
	in := struct {
		MemberEpoch int64            `json:"member_epoch"`
		Owned       []TopicPartition `json:"owned"`
		WaitMS      int64            `json:"wait_ms"`
	}{epoch, owned, wait.Milliseconds()}
	var a groupAnswer
	ctx, cancel := context.WithTimeout(ctx, wait+requestGrace)
	defer cancel()
	if err := g.client.doGroupJSON(ctx, http.MethodPost, g.memberPath(member)+"/heartbeat", nil, in, &a); err != nil {
		return nil, fmt.Errorf("heartbeat of member %q of group %q: %w", member, g.group, err)
	}
	if a.MemberID != member {
		return nil, fmt.Errorf("%w: heartbeat of member %q answered member %q", ErrProtocol, member, a.MemberID)
	}
	return &a, nil
}

// ownedLocked is what a heartbeat says the member owns: every partition it
// has not given up, those whose revocation is pending included.
func (g *GroupConsumer) ownedLocked() []TopicPartition {
	out := []TopicPartition{}
	for _, p := range g.sortedLocked() {
		if !p.released {
			out = append(out, p.tp)
		}
	}
	return out
}

// heartbeatWait is how long a heartbeat may wait on the coordinator:
// three heartbeat intervals, but at most a third of the session timeout,
// so that a lost answer still leaves time for two more.
func (g *GroupConsumer) heartbeatWait() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return min(3*g.heartbeat, g.cfg.sessionTimeout/3, maxHeartbeatWait)
}

// maxHeartbeatWait is the longest wait_ms the agent takes.
const maxHeartbeatWait = 30 * time.Second

// run is the heartbeat goroutine: it joins, heartbeats, applies the
// answers, and joins again after a fence or a lost session, until Close.
func (g *GroupConsumer) run() {
	defer close(g.done)
	ctx := g.runCtx
	attempt := 0
	var lastOK time.Time // of the last answered heartbeat
	now := false         // the next heartbeat must not wait
	for ctx.Err() == nil {
		g.mu.Lock()
		member, epoch, owned := g.memberID, g.epoch, g.ownedLocked()
		g.mu.Unlock()
		var a *groupAnswer
		var err error
		if member == "" {
			a, err = g.join(ctx)
		} else {
			wait := g.heartbeatWait()
			if now {
				wait = 0
			}
			a, err = g.sendHeartbeat(ctx, member, epoch, owned, wait)
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			switch {
			case member != "" && (errors.Is(err, ErrFencedMember) || errors.Is(err, ErrUnknownMember) || errors.Is(err, ErrUnknownGroup)):
				// The member is gone: what it owned is someone else's.
				g.dropAll()
				attempt = 0
				continue
			case fetchRetriable(err):
				if member != "" && g.clock.Now().Sub(lastOK) >= g.cfg.sessionTimeout {
					// The agent has ended the session by now, and others
					// may consume the partitions: stop, and join again.
					g.dropAll()
				}
				var retryAfter time.Duration
				if e := (*Error)(nil); errors.As(err, &e) {
					retryAfter = e.RetryAfter
				}
				if sleep(ctx, g.clock, g.backoff.delay(attempt, retryAfter)) != nil {
					return
				}
				attempt++
				continue
			default:
				g.dropAll()
				g.mu.Lock()
				g.err = err
				g.broadcastLocked()
				g.mu.Unlock()
				return
			}
		}
		attempt, lastOK = 0, g.clock.Now()
		now = !g.apply(ctx, a)
	}
}

// apply makes an answer's assignment true: partitions granted are fetched
// (after OnAssigned), partitions to revoke are stopped, committed and
// released (OnRevoked between), partitions the coordinator no longer
// counts as the member's are dropped. It reports false when the next
// heartbeat must go at once: a revocation could not be committed under a
// stale epoch.
func (g *GroupConsumer) apply(ctx context.Context, a *groupAnswer) bool {
	assigned := map[TopicPartition]bool{}
	for _, tp := range a.Assigned {
		assigned[tp] = true
	}
	revoke := map[TopicPartition]bool{}
	for _, tp := range a.Revoke {
		revoke[tp] = true
	}
	g.mu.Lock()
	g.memberID, g.epoch = a.MemberID, a.MemberEpoch
	if a.HeartbeatIntervalMS > 0 {
		g.heartbeat = time.Duration(a.HeartbeatIntervalMS) * time.Millisecond
	}
	var added []TopicPartition
	var lost, toRevoke []*groupPartition
	for _, p := range g.sortedLocked() {
		switch {
		case revoke[p.tp]:
			toRevoke = append(toRevoke, p)
		case !assigned[p.tp]:
			lost = append(lost, p)
		}
	}
	for _, tp := range a.Assigned {
		if g.owned[tp] == nil && !revoke[tp] {
			added = append(added, tp)
		}
	}
	slices.SortFunc(added, func(a, b TopicPartition) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	g.mu.Unlock()

	if len(lost) > 0 {
		g.drop(lost)
	}
	if len(added) > 0 && g.cfg.onAssigned != nil {
		g.cfg.onAssigned(added)
	}
	g.mu.Lock()
	for _, tp := range added {
		p, err := g.newPartition(tp)
		if err != nil {
			// The topic was checked at NewGroupConsumer: not reached.
			g.err = err
			continue
		}
		g.owned[tp] = p
	}
	for _, p := range g.owned {
		// New partitions, and those stopped (a stale epoch, a revocation
		// the coordinator took back) that are still the member's.
		if assigned[p.tp] && !revoke[p.tp] && !p.running && p.err == nil {
			g.startLocked(p)
		}
	}
	g.broadcastLocked()
	g.mu.Unlock()

	if len(toRevoke) > 0 {
		return g.revoke(ctx, toRevoke)
	}
	return true
}

func (g *GroupConsumer) newPartition(tp TopicPartition) (*groupPartition, error) {
	cons, err := g.client.NewConsumer(tp.Topic, tp.Partition, OffsetEarliest, append(slices.Clone(g.cfg.fetch), WithOffsetReset(g.cfg.reset))...)
	if err != nil {
		return nil, err
	}
	p := &groupPartition{tp: tp, cons: cons, position: -1, inHand: -1, committed: -1, hw: -1, fetchNext: -1, drained: make(chan struct{}, 1)}
	// Where a reset policy (or a reset out of range) starts the partition
	// is its position from then on, before Poll takes an answer: a commit
	// then (a revocation's, Close's) keeps the records fetched from it for
	// the group. The fetcher resolves only once Poll took every record
	// fetched before.
	cons.resolved = func(o int64) {
		g.mu.Lock()
		defer g.mu.Unlock()
		p.position = o
	}
	if g.static {
		return p, nil
	}
	cons.member = func(q url.Values) {
		g.mu.Lock()
		defer g.mu.Unlock()
		q.Set("group", g.group)
		q.Set("member_id", g.memberID)
		q.Set("member_epoch", strconv.FormatInt(g.epoch, 10))
		p.fetchEpoch = g.epoch
	}
	return p, nil
}

// revoke stops the partitions, commits the positions the application has
// processed (Poll's inHand) and releases them.
// A commit refused for a stale epoch keeps them (stopped) and reports
// false: the next heartbeat brings the epoch, and the revocation again.
func (g *GroupConsumer) revoke(ctx context.Context, ps []*groupPartition) bool {
	dones := make([]chan struct{}, 0, len(ps))
	tps := make([]TopicPartition, 0, len(ps))
	g.mu.Lock()
	for _, p := range ps {
		p.revoking = true
		// Fetched records not handed out are not consumed: the next
		// owner fetches them again.
		p.buffered, p.answered = nil, false
		if p.running {
			p.cancel()
			dones = append(dones, p.done)
		}
		tps = append(tps, p.tp)
	}
	g.broadcastLocked()
	g.mu.Unlock()
	for _, d := range dones {
		<-d
	}
	deadline := g.clock.Now().Add(g.cfg.sessionTimeout / 2)
	// This goroutine sends the member's heartbeats: a commit the agent
	// holds (a coordinator loading, a slow offsets partition) must not
	// outlast the session, or the coordinator ends it and gives away every
	// partition of the member, not only these.
	cctx, cancel := context.WithTimeout(ctx, g.cfg.sessionTimeout/2)
	defer cancel()
	for attempt := 0; ; attempt++ {
		err := g.commitPartitions(cctx, tps, true)
		switch {
		case err == nil, ctx.Err() != nil:
		case errors.Is(err, ErrStaleMemberEpoch):
			return false
		case errors.Is(err, ErrFencedMember) || errors.Is(err, ErrUnknownMember):
			g.dropAll()
			return true
		case fetchRetriable(err) && g.clock.Now().Before(deadline):
			if sleep(cctx, g.clock, g.backoff.delay(attempt, 0)) == nil {
				continue
			}
		}
		// Committed, or not committable in time: either way the
		// partitions go, as the group needs them elsewhere; what was
		// not committed is consumed again by the next owner.
		break
	}
	if ctx.Err() != nil {
		// Close: it commits what is still owned, and leaves.
		return true
	}
	if g.cfg.onRevoked != nil {
		g.cfg.onRevoked(tps)
	}
	g.mu.Lock()
	for _, p := range ps {
		if g.owned[p.tp] == p {
			delete(g.owned, p.tp)
		}
	}
	g.broadcastLocked()
	g.mu.Unlock()
	return true
}

// drop stops partitions the member no longer owns, without a commit (the
// agent would refuse it), and tells OnRevoked.
func (g *GroupConsumer) drop(ps []*groupPartition) {
	var dones []chan struct{}
	tps := make([]TopicPartition, 0, len(ps))
	g.mu.Lock()
	for _, p := range ps {
		if p.running {
			p.cancel()
			dones = append(dones, p.done)
		}
		if g.owned[p.tp] == p {
			delete(g.owned, p.tp)
		}
		tps = append(tps, p.tp)
	}
	g.broadcastLocked()
	g.mu.Unlock()
	for _, d := range dones {
		<-d
	}
	if len(tps) > 0 && g.cfg.onRevoked != nil {
		g.cfg.onRevoked(tps)
	}
}

// dropAll drops every partition and forgets the membership: the next turn
// of run joins again, under the same member id.
func (g *GroupConsumer) dropAll() {
	g.mu.Lock()
	ps := g.sortedLocked()
	if g.memberID != "" {
		g.lastMemberID = g.memberID
	}
	g.memberID, g.epoch = "", 0
	g.mu.Unlock()
	g.drop(ps)
}

// startLocked starts a fetcher of p, at the position Poll reached.
func (g *GroupConsumer) startLocked(p *groupPartition) {
	ctx, cancel := context.WithCancel(g.runCtx)
	done := make(chan struct{})
	p.cancel, p.done, p.running = cancel, done, true
	p.revoking, p.released = false, false
	p.buffered, p.answered = nil, false
	if p.position >= 0 {
		// SeekTo fails only for offsets below OffsetEarliest.
		_ = p.cons.SeekTo(p.position)
	}
	resolve := p.position < 0 && !g.static
	g.fetchers.Add(1)
	go func() {
		defer g.fetchers.Done()
		defer close(done)
		defer func() {
			g.mu.Lock()
			if p.done == done {
				p.running = false
			}
			g.broadcastLocked()
			g.mu.Unlock()
			cancel()
		}()
		g.fetch(ctx, p, resolve)
	}()
}

// fetch is a partition's fetcher: it fetches an answer, leaves it for
// Poll, and fetches the next once Poll took it. It returns when ctx ends
// or a fetch fails for a reason the heartbeat or Poll must handle.
func (g *GroupConsumer) fetch(ctx context.Context, p *groupPartition, resolve bool) {
	if resolve {
		if err := g.resolveStart(ctx, p); err != nil {
			if ctx.Err() == nil {
				g.mu.Lock()
				p.err = fmt.Errorf("group %q, partition %s: %w", g.group, p.tp, err)
				g.mu.Unlock()
			}
			return
		}
	}
	for {
		records, err := p.cons.poll(ctx)
		if ctx.Err() != nil {
			return
		}
		g.mu.Lock()
		if err != nil {
			switch {
			case errors.Is(err, ErrStaleMemberEpoch) && p.fetchEpoch != g.epoch:
				// A heartbeat brought the new epoch meanwhile.
				g.mu.Unlock()
				continue
			case errors.Is(err, ErrStaleMemberEpoch), errors.Is(err, ErrUnknownMember), errors.Is(err, ErrFencedMember):
				// Stopped until the next heartbeat answer says whether
				// the partition is still the member's, under which epoch.
			case g.static:
				p.err = err
			case errors.Is(err, ErrNotOwner):
				p.released = true
			default:
				p.err = fmt.Errorf("group %q: %w", g.group, err)
			}
			g.mu.Unlock()
			return
		}
		p.buffered, p.answered = records, true
		p.fetchNext, p.hw = p.cons.Position(), p.cons.HighWatermark()
		g.broadcastLocked()
		g.mu.Unlock()
		if len(records) == 0 {
			if g.fetchCfg.maxWait == 0 && sleep(ctx, g.clock, g.fetchCfg.backoffMin) != nil {
				return
			}
			continue
		}
		for {
			g.mu.Lock()
			taken := p.buffered == nil
			g.mu.Unlock()
			if taken {
				break
			}
			select {
			case <-p.drained:
			case <-ctx.Done():
				return
			}
		}
	}
}

// resolveStart finds where a partition new to the member starts: at the
// group's committed offset, asked for so that the records before it in
// the first batch can be skipped; without one, where the reset policy
// says, which a fetch without an offset gets from the agent.
func (g *GroupConsumer) resolveStart(ctx context.Context, p *groupPartition) error {
	for attempt := 0; ; attempt++ {
		offsets, err := g.client.CommittedOffsets(ctx, g.group, p.tp.Topic)
		if errors.Is(err, ErrUnknownGroup) {
			err, offsets = nil, nil
		}
		if err == nil {
			start := g.cfg.reset
			for _, o := range offsets {
				if o.Topic == p.tp.Topic && o.Partition == p.tp.Partition {
					start = o.Offset
				}
			}
			if err := p.cons.SeekTo(start); err != nil {
				return fmt.Errorf("%w: committed offset %d", ErrProtocol, start)
			}
			if start >= 0 {
				g.mu.Lock()
				p.position, p.committed = start, start
				g.mu.Unlock()
			}
			return nil
		}
		if !fetchRetriable(err) {
			return err
		}
		var retryAfter time.Duration
		if e := (*Error)(nil); errors.As(err, &e) {
			retryAfter = e.RetryAfter
		}
		if serr := sleep(ctx, g.clock, g.backoff.delay(attempt, retryAfter)); serr != nil {
			return serr
		}
	}
}
