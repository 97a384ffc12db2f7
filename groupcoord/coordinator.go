package groupcoord

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/group"
	"github.com/logagent/logagent/record"
)

// Config configures a Coordinator.
type Config struct {
	// Partitions is the offsets topic's partition count.
	Partitions int
	Host       Host
	Store      Store
	Now        func() time.Time
	Logger     hclog.Logger
	// HeartbeatInterval is what members are told (group.Options).
	HeartbeatInterval time.Duration
	// TickInterval is how often sessions are checked for expiry.
	TickInterval time.Duration
	// Limits bound the batches read back from the offsets partitions.
	Limits record.Limits
	// RestateAfter and RestateEvery say when the committed offsets are
	// appended again and the log below them deleted (restateIfDue):
	// after that many records, or that long.
	RestateAfter int64
	RestateEvery time.Duration
	// HighWatermarkWait bounds how long a commit above the high watermark
	// its partition's leader reports waits for it to catch up before it is
	// refused: a new leader's trails its predecessor's for a moment, and
	// members read up to the predecessor's. Zero means
	// DefaultHighWatermarkWait.
	HighWatermarkWait time.Duration
	// OffsetsRetention is how long a group without members is kept, as
	// Kafka's offsets.retention.minutes (KIP-211): the tick deletes a
	// group that had no member, commit or change for that long, as Delete
	// does (expireGroups). Zero keeps every group until it is deleted.
	OffsetsRetention time.Duration
	// MaxStateBytes is the largest group state Store takes
	// (election.MaxGroupStateBytes); a change that would make a larger
	// one is refused with ErrInvalidRequest. Zero means no bound.
	MaxStateBytes int
}

// Defaults of the restatement.
const (
	DefaultRestateAfter = 100_000
	DefaultRestateEvery = 24 * time.Hour
)

// DefaultHighWatermarkWait is Config.HighWatermarkWait's default.
const DefaultHighWatermarkWait = 5 * time.Second

// expiryCheckInterval is how often the tick looks for groups past
// OffsetsRetention (Kafka's offsets.retention.check.interval.ms), and
// expiryTimeout bounds one group's deletion.
const (
	expiryCheckInterval = 10 * time.Minute
	expiryTimeout       = 10 * time.Second
	// maxExpiriesPerCheck bounds the deletions of one check: each is an
	// acks=all append (and a Consul write) made by the tick, which expires
	// sessions too; the groups past it wait for the next check.
	maxExpiriesPerCheck = 64
)

// errInUse: a group about to expire was used again before its deletion was
// queued.
var errInUse = errors.New("groupcoord: group used again")

// loadTimeout bounds how long a request waits for a new coordinator's
// high watermark to reach the log end offset it took over with.
const loadTimeout = 10 * time.Second

// rebuildReadBytes is how much of an offsets partition one read takes.
const rebuildReadBytes = 1 << 20

// maxAppendBytes bounds one batch of commits appended to an offsets
// partition, well below the batch limit.
const maxAppendBytes = 512 << 10

// Coordinator serves the groups of the offsets partitions this agent
// leads. It is safe for concurrent use; Close stops its goroutine.
type Coordinator struct {
	cfg  Config
	log  hclog.Logger
	opts group.Options

	mu     sync.Mutex
	shards map[int]*shard
	// expiryCheckedAt is when the tick last looked for expired groups.
	expiryCheckedAt time.Time

	stop chan struct{}
	done chan struct{}
}

// shard is one offsets partition's coordinator state, valid for the leader
// epoch it was loaded at.
type shard struct {
	p     int
	epoch int32

	mu sync.Mutex
	// dropped: leadership was lost or an append failed; the shard is
	// replaced at the next request.
	dropped bool
	offsets *group.Offsets
	groups  map[string]*entry
	// classic are the groups of Kafka's classic protocol, in memory only
	// (§7.5).
	classic map[string]*classicEntry
	// hw caches partitions' high watermarks for commit checks: they only
	// grow, so an offset at or below the cached one needs no request.
	hw map[group.TopicPartition]int64
	// arrivals numbers the commits as they reach the shard; queued is the
	// latest arrival queued per group and partition. A commit that waited
	// for a high watermark while a later one of the same partition was
	// queued is refused (ErrCommitSuperseded): appended after it, it would
	// take the committed offset back.
	arrivals uint64
	queued   map[commitKey]uint64

	// pending commits wait for the one flusher (turn, capacity 1).
	pending []*pendingCommit
	turn    chan struct{}
	// records counts the records in the log since its start or the last
	// restatement; restatedAt is when that was (or the load).
	records    int64
	restatedAt time.Time
	// restateFloor is the records count below which a restatement is
	// not worth it (twice the offsets at the last look).
	restateFloor int64
	// loadedAt is when the shard was loaded, and active when this
	// coordinator last saw each group in use (a member gone, a commit or
	// reset queued, its classic group forgotten once empty; a group with
	// members is in use anyway): what a predecessor saw is not kept, so
	// OffsetsRetention counts from the load at the earliest
	// (expiredLocked).
	loadedAt time.Time
	active   map[string]time.Time
}

// storedState is what a coordinator stores of a group in Consul: the
// group's state and the leader epoch of the offsets partition at which it
// was written (docs/design.md §7.3). It fences a coordinator that lost its
// partition without knowing it yet and still reaches Consul: one that
// finds a later epoch stored refuses the group (ErrNotCoordinator), and
// one that finds an earlier epoch claims the group by storing it at its
// own before serving it, so a predecessor holding the group cached fails
// its next write (the index moved), reloads, and refuses. The fields of
// group.State stay at the top level, as states stored before the epoch
// have them (read as epoch 0).
type storedState struct {
	group.State
	CoordinatorEpoch int32 `json:"coordinator_epoch,omitempty"`
}

// entry is one group a shard serves.
type entry struct {
	g *group.Group
	// index is the Consul index of the stored state, saved its bytes.
	index uint64
	saved []byte
	// waiters are the held heartbeats, by member.
	waiters map[string]*waiter
}

type commitKey struct {
	group string
	tp    group.TopicPartition
}

type pendingCommit struct {
	records []group.Record
	done    chan error
}

// New returns a coordinator; its goroutine expires sessions until Close.
func New(cfg Config) *Coordinator {
	if cfg.TickInterval <= 0 {
		cfg.TickInterval = 250 * time.Millisecond
	}
	if cfg.RestateAfter <= 0 {
		cfg.RestateAfter = DefaultRestateAfter
	}
	if cfg.RestateEvery <= 0 {
		cfg.RestateEvery = DefaultRestateEvery
	}
	if cfg.HighWatermarkWait <= 0 {
		cfg.HighWatermarkWait = DefaultHighWatermarkWait
	}
	c := &Coordinator{
		cfg:    cfg,
		log:    cfg.Logger,
		opts:   group.Options{HeartbeatInterval: cfg.HeartbeatInterval},
		shards: make(map[int]*shard),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go c.run()
	return c
}

// Close stops the coordinator and answers held heartbeats.
func (c *Coordinator) Close() {
	close(c.stop)
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, s := range c.shards {
		s.drop()
		delete(c.shards, p)
	}
}

func (c *Coordinator) run() {
	defer close(c.done)
	t := time.NewTicker(c.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.tick()
		}
	}
}

// tick drops shards whose leadership ended, expires sessions and, every
// expiryCheckInterval, groups past OffsetsRetention.
func (c *Coordinator) tick() {
	now := c.cfg.Now()
	c.mu.Lock()
	shards := slices.Collect(maps.Values(c.shards))
	expire := c.cfg.OffsetsRetention > 0 && now.Sub(c.expiryCheckedAt) >= expiryCheckInterval
	if expire {
		c.expiryCheckedAt = now
	}
	c.mu.Unlock()
	// Groups with a stored state only (no offsets, not loaded since the
	// shard was) are found in Consul.
	var stored []string
	budget := maxExpiriesPerCheck
	if expire {
		ctx, cancel := context.WithTimeout(context.Background(), expiryTimeout)
		var err error
		if stored, err = c.cfg.Store.GroupStates(ctx); err != nil {
			c.log.Warn("listing groups to expire failed", "error", err)
		}
		cancel()
	}
	for _, s := range shards {
		st, ok := c.cfg.Host.OffsetsLeader(s.p)
		s.mu.Lock()
		if !ok || st.Epoch != s.epoch {
			s.drop()
			s.mu.Unlock()
			c.forget(s)
			continue
		}
		for id, e := range s.groups {
			if dead := e.g.Tick(now); len(dead) > 0 {
				s.active[id] = now
				c.log.Info("members expired", "group", id, "members", dead, "epoch", e.g.Epoch())
				if err := c.save(context.Background(), s, id, e); err != nil {
					c.log.Warn("storing group state failed", "group", id, "error", err)
				}
			}
		}
		c.tickClassic(s, now)
		due := now.Sub(s.restatedAt) >= c.cfg.RestateEvery
		s.mu.Unlock()
		if due {
			ctx, cancel := context.WithTimeout(context.Background(), restateTimeout)
			if err := s.commit(ctx, c, nil, nil); err != nil {
				c.log.Warn("restating offsets failed", "partition", s.p, "error", err)
			}
			cancel()
		}
		if expire {
			budget -= c.expireGroups(s, stored, now, budget)
		}
	}
}

// restateTimeout bounds a restatement the tick starts.
const restateTimeout = time.Minute

// drop ends a shard: held heartbeats are answered (not coordinator).
// Called with s.mu held.
func (s *shard) drop() {
	s.dropped = true
	for _, ce := range s.classic {
		ce.notify()
	}
	for _, e := range s.groups {
		for id, w := range e.waiters {
			w.wake()
			delete(e.waiters, id)
		}
	}
}

// changedHandsError is a dropped shard's refusal of a commit, wherever the
// commit finds it dropped (queued, taken by the flusher, or after its own
// append): its leadership was lost, an append failed or the coordinator
// closed, so what it holds is no longer the partition's and a new shard,
// here or at the new leader, serves the group. It is ErrNotCoordinator:
// the caller finds the coordinator again.
type changedHandsError struct{ p int }

func (e changedHandsError) Error() string {
	return fmt.Sprintf("%v: %s/%d changed hands", ErrNotCoordinator, OffsetsTopic, e.p)
}

func (e changedHandsError) Unwrap() error { return ErrNotCoordinator }

func (c *Coordinator) forget(s *shard) {
	c.mu.Lock()
	if c.shards[s.p] == s {
		delete(c.shards, s.p)
	}
	c.mu.Unlock()
}

// offsetsPartitions is what a group's partition is hashed over: the
// offsets topic's partition count once it exists, as Kafka does, not the
// setting, which applies to its creation only (a setting changed later had
// every group hashed to another partition, where its commits are not).
func (c *Coordinator) offsetsPartitions() int {
	if n := c.cfg.Host.Partitions(OffsetsTopic); n > 0 {
		return int(n)
	}
	return c.cfg.Partitions
}

// shardFor returns the loaded shard of group's offsets partition, locked.
func (c *Coordinator) shardFor(ctx context.Context, groupID string) (*shard, error) {
	if err := checkID("group id", groupID); err != nil {
		return nil, err
	}
	p := PartitionFor(groupID, c.offsetsPartitions())
	deadline := c.cfg.Now().Add(loadTimeout)
	for {
		st, ok := c.cfg.Host.OffsetsLeader(p)
		if !ok {
			return nil, fmt.Errorf("%w: %s/%d is not led here", ErrNotCoordinator, OffsetsTopic, p)
		}
		c.mu.Lock()
		s := c.shards[p]
		if s != nil && (s.epoch != st.Epoch) {
			s.mu.Lock()
			s.drop()
			s.mu.Unlock()
			delete(c.shards, p)
			s = nil
		}
		if s == nil {
			// A predecessor's appends are the log up to its end; they are
			// all committed before the shard serves.
			if st.HighWatermark < st.LogEndOffset {
				c.mu.Unlock()
				if c.cfg.Now().After(deadline) {
					return nil, fmt.Errorf("%w: %s/%d: high watermark %d below log end %d",
						ErrLoading, OffsetsTopic, p, st.HighWatermark, st.LogEndOffset)
				}
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(20 * time.Millisecond):
				}
				continue
			}
			s = &shard{p: p, epoch: st.Epoch, groups: make(map[string]*entry), classic: make(map[string]*classicEntry),
				hw: make(map[group.TopicPartition]int64), queued: make(map[commitKey]uint64), turn: make(chan struct{}, 1),
				active: make(map[string]time.Time)}
			start := c.cfg.Now()
			offsets, n, err := c.rebuild(p, st.LogStartOffset, st.HighWatermark)
			if err != nil {
				c.mu.Unlock()
				return nil, err
			}
			s.offsets, s.records, s.restatedAt = offsets, int64(n), c.cfg.Now()
			s.loadedAt = s.restatedAt
			c.shards[p] = s
			c.log.Info("coordinator loaded", "partition", p, "epoch", st.Epoch, "records", n,
				"from", st.LogStartOffset, "to", st.HighWatermark, "took", c.cfg.Now().Sub(start))
		}
		s.mu.Lock()
		c.mu.Unlock()
		if s.dropped {
			s.mu.Unlock()
			continue
		}
		return s, nil
	}
}

// rebuild reads offsets partition p's committed records in [from, to).
func (c *Coordinator) rebuild(p int, from, to int64) (*group.Offsets, int, error) {
	o := group.NewOffsets()
	dec := record.NewDecoder(c.cfg.Limits)
	n := 0
	for from < to {
		b, err := c.cfg.Host.ReadOffsets(p, from, rebuildReadBytes)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: rebuild of %s/%d from %d: %v", ErrUnavailable, OffsetsTopic, p, from, err)
		}
		if len(b) == 0 {
			break
		}
		for len(b) > 0 {
			h, size, err := record.ParseHeader(b, c.cfg.Limits.MaxBatchBytes)
			if err != nil {
				return nil, 0, fmt.Errorf("%w: rebuild of %s/%d at %d: %v", ErrUnavailable, OffsetsTopic, p, from, err)
			}
			batch := b[:size]
			b = b[size:]
			last := h.LastOffset()
			if last < from {
				continue
			}
			it, err := dec.Records(batch)
			if err != nil {
				return nil, 0, fmt.Errorf("%w: rebuild of %s/%d at %d: %v", ErrUnavailable, OffsetsTopic, p, h.BaseOffset(), err)
			}
			for it.Next() {
				r := it.Record()
				if r.Offset < from {
					continue
				}
				if err := o.Apply(r.Key, r.Value); err != nil {
					// A record no coordinator wrote (the topic is not
					// writable through the API): skipped, loudly.
					c.log.Error("skipping a corrupt offsets record", "partition", p,
						"offset", r.Offset, "error", err)
					continue
				}
				n++
			}
			if err := it.Err(); err != nil {
				return nil, 0, fmt.Errorf("%w: rebuild of %s/%d at %d: %v", ErrUnavailable, OffsetsTopic, p, h.BaseOffset(), err)
			}
			from = last + 1
		}
	}
	return o, n, nil
}

// loadGroup returns the group's entry, restoring its stored state on
// first use; nil, nil when there is neither a stored state nor create.
// Called with s.mu held.
func (c *Coordinator) loadGroup(ctx context.Context, s *shard, id string, create bool) (*entry, error) {
	if e := s.groups[id]; e != nil {
		return e, nil
	}
	value, index, err := c.cfg.Store.LoadGroupState(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("%w: load group %q: %v", ErrUnavailable, id, err)
	}
	var g *group.Group
	if value != nil {
		st, err := decodeState(value)
		if err != nil {
			return nil, fmt.Errorf("%w: stored state of group %q: %v", ErrUnavailable, id, err)
		}
		if st.CoordinatorEpoch > s.epoch {
			return nil, fmt.Errorf("%w: group %q was stored by the coordinator of %s/%d at epoch %d, this agent's is at %d",
				ErrNotCoordinator, id, OffsetsTopic, s.p, st.CoordinatorEpoch, s.epoch)
		}
		if g, err = group.Restore(id, c.opts, st.State, c.cfg.Now()); err != nil {
			return nil, fmt.Errorf("%w: stored state of group %q: %v", ErrUnavailable, id, err)
		}
	} else {
		if !create {
			return nil, nil
		}
		if g, err = group.New(id, c.opts); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
		}
	}
	e := &entry{g: g, index: index, saved: value, waiters: make(map[string]*waiter)}
	s.groups[id] = e
	if value != nil {
		// The claim: a state stored at an earlier epoch is written again
		// at this one before the group is served (save writes nothing
		// when the epoch is already this one's).
		if err := c.save(ctx, s, id, e); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// knownGroup returns the shard (locked) and the entry of a group that
// exists: ErrUnknownGroup when it has no stored state. On an error no lock
// is held.
func (c *Coordinator) knownGroup(ctx context.Context, groupID string) (*shard, *entry, error) {
	s, err := c.shardFor(ctx, groupID)
	if err != nil {
		return nil, nil, err
	}
	e, err := c.loadGroup(ctx, s, groupID, false)
	if err == nil && e == nil {
		err = fmt.Errorf("%w: %q", group.ErrUnknownGroup, groupID)
	}
	if err != nil {
		s.mu.Unlock()
		return nil, nil, err
	}
	return s, e, nil
}

// save stores the group's state if it changed, and wakes the held
// heartbeats that have news. A failed write forgets the group, so the
// next request restores what Consul holds. Called with s.mu held.
func (c *Coordinator) save(ctx context.Context, s *shard, id string, e *entry) error {
	defer c.wake(e)
	b, err := encodeState(storedState{State: e.g.State(), CoordinatorEpoch: s.epoch}, c.cfg.MaxStateBytes)
	if err != nil {
		return fmt.Errorf("%w: encode group %q: %v", ErrUnavailable, id, err)
	}
	if string(b) == string(e.saved) {
		return nil
	}
	if limit := c.cfg.MaxStateBytes; limit > 0 && len(b) > limit {
		// The store refuses it, and every retry of the change that made
		// it would meet the same refusal (503 unavailable, retried until
		// the callers gave up): the change is refused, and the group
		// stays as stored.
		c.forgetEntry(s, id, e)
		return fmt.Errorf("%w: group %q's state would take %d bytes, more than the %d the group store holds: fewer members or partitions per group (docs/api.md, \"Consumer groups\")",
			ErrInvalidRequest, id, len(b), limit)
	}
	index, err := c.cfg.Store.SaveGroupState(ctx, id, b, e.index)
	if err != nil {
		c.forgetEntry(s, id, e)
		return fmt.Errorf("%w: store group %q: %v", ErrUnavailable, id, err)
	}
	e.index, e.saved = index, b
	return nil
}

// forgetEntry drops a group whose change was not stored, waking its held
// heartbeats: the next request restores what the store holds. Called with
// s.mu held.
func (c *Coordinator) forgetEntry(s *shard, id string, e *entry) {
	for m, w := range e.waiters {
		w.wake()
		delete(e.waiters, m)
	}
	delete(s.groups, id)
}

// wake answers the held heartbeats of the members Ready names.
func (c *Coordinator) wake(e *entry) {
	for _, m := range e.g.Ready().Wake {
		if w := e.waiters[m]; w != nil {
			w.wake()
		}
	}
}

// refreshPartitions gives the group the partition counts of the topics
// its members subscribe to (metadata may have changed since).
func (c *Coordinator) refreshPartitions(e *entry, topics []string) error {
	seen := map[string]bool{}
	for _, t := range topics {
		seen[t] = true
	}
	for _, t := range e.g.Subscriptions() {
		seen[t] = true
	}
	for t := range seen {
		if err := e.g.SetPartitions(t, c.cfg.Host.Partitions(t)); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidRequest, err)
		}
	}
	return nil
}

// Join adds a member.
func (c *Coordinator) Join(ctx context.Context, groupID string, req JoinRequest) (MemberResponse, error) {
	timeout := DefaultSessionTimeout
	if req.SessionTimeoutMS != 0 {
		timeout = time.Duration(req.SessionTimeoutMS) * time.Millisecond
	}
	if timeout < MinSessionTimeout || timeout > MaxSessionTimeout {
		return MemberResponse{}, fmt.Errorf("%w: session_timeout_ms %d: from %d to %d", ErrInvalidRequest,
			req.SessionTimeoutMS, MinSessionTimeout.Milliseconds(), MaxSessionTimeout.Milliseconds())
	}
	if len(req.Topics) == 0 {
		return MemberResponse{}, fmt.Errorf("%w: no topics to subscribe to", ErrInvalidRequest)
	}
	for _, t := range req.Topics {
		if c.cfg.Host.Partitions(t) == 0 {
			return MemberResponse{}, fmt.Errorf("%w: no topic %q", ErrUnknownTopic, t)
		}
		if t == OffsetsTopic {
			return MemberResponse{}, fmt.Errorf("%w: %s is internal", ErrInvalidRequest, OffsetsTopic)
		}
	}
	member := req.MemberID
	if member == "" {
		member = NewMemberID()
	} else if err := checkID("member id", member); err != nil {
		return MemberResponse{}, err
	}
	s, err := c.shardFor(ctx, groupID)
	if err != nil {
		return MemberResponse{}, err
	}
	defer s.mu.Unlock()
	if ce := s.classic[groupID]; ce != nil && ce.g.Members() > 0 {
		return MemberResponse{}, fmt.Errorf("%w: group %q has members of Kafka's classic protocol", group.ErrInconsistentProtocol, groupID)
	}
	e, err := c.loadGroup(ctx, s, groupID, true)
	if err != nil {
		return MemberResponse{}, err
	}
	if err := c.refreshPartitions(e, req.Topics); err != nil {
		return MemberResponse{}, err
	}
	if w := e.waiters[member]; w != nil {
		w.supersede()
		delete(e.waiters, member)
	}
	r, err := e.g.Join(member, req.Topics, timeout, c.cfg.Now())
	if err != nil {
		return MemberResponse{}, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	if err := c.save(ctx, s, groupID, e); err != nil {
		return MemberResponse{}, err
	}
	// An empty classic group gives way, as Kafka replaces an empty classic
	// group by a consumer group: its member ids handed out and not used
	// yet go with it, so that a classic join with one cannot put a classic
	// member beside this one (a classic join creating the group again
	// checks for members of this protocol).
	delete(s.classic, groupID)
	c.log.Info("member joined", "group", groupID, "member", member, "topics", req.Topics, "epoch", e.g.Epoch())
	return memberResponse(groupID, member, r), nil
}

func memberResponse(groupID, member string, r group.Response) MemberResponse {
	return MemberResponse{
		Group:               groupID,
		MemberID:            member,
		MemberEpoch:         r.MemberEpoch,
		Assigned:            partitionsOf(r.Assigned),
		Revoke:              partitionsOf(r.Revoke),
		HeartbeatIntervalMS: r.HeartbeatInterval.Milliseconds(),
	}
}

// Heartbeat is a member's heartbeat, held up to its wait (and a third of
// its session timeout) until there is news for it. The member's session
// counts from the heartbeat's arrival, however long it is held: a member
// that died during the hold expires on time.
func (c *Coordinator) Heartbeat(ctx context.Context, groupID, member string, req HeartbeatRequest) (MemberResponse, error) {
	wait := time.Duration(req.WaitMS) * time.Millisecond
	if wait < 0 || wait > MaxHeartbeatWait {
		return MemberResponse{}, fmt.Errorf("%w: wait_ms %d: from 0 to %d", ErrInvalidRequest, req.WaitMS, MaxHeartbeatWait.Milliseconds())
	}
	owned := make([]group.TopicPartition, 0, len(req.Owned))
	for _, p := range req.Owned {
		owned = append(owned, group.TopicPartition{Topic: p.Topic, Partition: p.Partition})
	}
	arrived := c.cfg.Now()
	var timer <-chan time.Time
	// mine is this heartbeat's hold once woken with news: it stays
	// registered until the heartbeat runs again, so that a later
	// heartbeat of the member arriving in between supersedes it.
	var mine *waiter
	for {
		s, e, err := c.knownGroup(ctx, groupID)
		if err != nil {
			return MemberResponse{}, err
		}
		if err := c.refreshPartitions(e, nil); err != nil {
			s.mu.Unlock()
			return MemberResponse{}, err
		}
		if w := e.waiters[member]; w != mine || mine != nil && mine.superseded {
			if mine != nil {
				// A later heartbeat of the member ran or is held:
				// applied now, this one would set the session and the
				// owned set back to older ones.
				return c.currentLocked(s, e, groupID, member)
			}
			// Applied first, a held heartbeat woken later would be
			// applied after this one.
			w.supersede()
			delete(e.waiters, member)
		} else if mine != nil {
			delete(e.waiters, member)
		}
		// A woken heartbeat runs again with its arrival time, so that the
		// hold does not lengthen the member's session.
		r, err := e.g.Heartbeat(member, req.MemberEpoch, owned, arrived)
		if err == nil {
			err = c.save(ctx, s, groupID, e)
		}
		if err != nil {
			s.mu.Unlock()
			return MemberResponse{}, err
		}
		news := r.MemberEpoch != req.MemberEpoch || len(r.Revoke) > 0 || !samePartitions(r.Assigned, owned)
		if news || wait == 0 || timer == nil && slices.Contains(e.g.Ready().Wake, member) {
			s.mu.Unlock()
			return memberResponse(groupID, member, r), nil
		}
		if timer == nil {
			timer = time.After(min(wait, e.g.SessionTimeout(member)/3))
		}
		w := &waiter{ch: make(chan struct{})}
		e.waiters[member] = w
		s.mu.Unlock()
		select {
		case <-w.ch:
		case <-timer:
		case <-ctx.Done():
			s.mu.Lock()
			if e.waiters[member] == w {
				delete(e.waiters, member)
			}
			s.mu.Unlock()
			return MemberResponse{}, ctx.Err()
		}
		s.mu.Lock()
		if w.superseded || !w.woken() {
			// The member sent another heartbeat (or joined again), or
			// the wait ended without news: answer what it has now,
			// changing nothing; its owned set may be outdated.
			if e.waiters[member] == w {
				delete(e.waiters, member)
			}
			return c.currentLocked(s, e, groupID, member)
		}
		s.mu.Unlock()
		// News, or the shard ended: heartbeat again to learn which,
		// unless the member's next heartbeat comes first (or a new
		// shard serves the group, which has not heard of this hold: it
		// answers what the member has).
		wait, mine = 0, w
	}
}

// currentLocked answers a heartbeat with what the member has, changing
// nothing, and unlocks s.
func (c *Coordinator) currentLocked(s *shard, e *entry, groupID, member string) (MemberResponse, error) {
	r, err := e.g.Current(member)
	s.mu.Unlock()
	if err != nil {
		return MemberResponse{}, err
	}
	return memberResponse(groupID, member, r), nil
}

// waiter is a held heartbeat; ch is closed to answer it.
type waiter struct {
	ch chan struct{}
	// superseded: a later heartbeat or join of the same member replaced
	// it, so its owned set must not be applied again.
	superseded bool
}

// wake answers the hold; a woken waiter stays registered until its
// heartbeat runs again (Heartbeat), so wake may find it woken already.
func (w *waiter) wake() {
	if !w.woken() {
		close(w.ch)
	}
}

func (w *waiter) supersede() {
	w.superseded = true
	w.wake()
}

func (w *waiter) woken() bool {
	select {
	case <-w.ch:
		return true
	default:
		return false
	}
}

func samePartitions(a, b []group.TopicPartition) bool {
	if len(a) != len(b) {
		return false
	}
	set := make(map[group.TopicPartition]bool, len(a))
	for _, tp := range a {
		set[tp] = true
	}
	for _, tp := range b {
		if !set[tp] {
			return false
		}
	}
	return true
}

// Leave removes a member.
func (c *Coordinator) Leave(ctx context.Context, groupID, member string) error {
	s, e, err := c.knownGroup(ctx, groupID)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if err := e.g.Leave(member); err != nil {
		return err
	}
	s.active[groupID] = c.cfg.Now()
	if w := e.waiters[member]; w != nil {
		w.supersede()
		delete(e.waiters, member)
	}
	c.log.Info("member left", "group", groupID, "member", member, "epoch", e.g.Epoch())
	return c.save(ctx, s, groupID, e)
}

// CheckFetch allows a member's fetch and returns the committed offset.
func (c *Coordinator) CheckFetch(ctx context.Context, groupID string, req FetchRequest) (FetchResponse, error) {
	s, e, err := c.knownGroup(ctx, groupID)
	if err != nil {
		return FetchResponse{}, err
	}
	defer s.mu.Unlock()
	tp := group.TopicPartition{Topic: req.Topic, Partition: req.Partition}
	if err := e.g.CheckFetch(req.MemberID, req.MemberEpoch, tp); err != nil {
		return FetchResponse{}, err
	}
	if co, ok := s.offsets.Committed(groupID, tp); ok {
		return FetchResponse{Committed: co.Offset}, nil
	}
	return FetchResponse{Committed: -1}, nil
}

// Commit commits a member's offsets: all or none, answered once the
// offsets partition committed them.
func (c *Coordinator) Commit(ctx context.Context, groupID string, req CommitRequest) (CommitResponse, error) {
	if len(req.Offsets) == 0 || len(req.Offsets) > MaxCommitOffsets {
		return CommitResponse{}, fmt.Errorf("%w: %d offsets: from 1 to %d", ErrInvalidRequest, len(req.Offsets), MaxCommitOffsets)
	}
	s, e, err := c.knownGroup(ctx, groupID)
	if err != nil {
		return CommitResponse{}, err
	}
	now := c.cfg.Now()
	var records []group.Record
	var answer CommitResponse
	for _, oc := range req.Offsets {
		tp := group.TopicPartition{Topic: oc.Topic, Partition: oc.Partition}
		// Membership and ownership here and again as the records are
		// queued (allowed); the high watermark in appendCommit.
		r, err := group.Commit(e.g, group.CommitRequest{MemberID: req.MemberID, MemberEpoch: req.MemberEpoch,
			Partition: tp, Offset: oc.Offset, Metadata: oc.Metadata}, oc.Offset, now)
		if err != nil {
			s.mu.Unlock()
			return CommitResponse{}, err
		}
		records = append(records, r)
		answer.Committed = append(answer.Committed, Committed{Topic: oc.Topic, Partition: oc.Partition, Offset: oc.Offset, Metadata: oc.Metadata})
	}
	s.mu.Unlock()
	allowed := func() error {
		e := s.groups[groupID]
		if e == nil {
			return fmt.Errorf("%w: group %q was reloaded while the commit waited: commit again", ErrUnavailable, groupID)
		}
		for _, oc := range req.Offsets {
			if err := e.g.CheckCommit(req.MemberID, req.MemberEpoch, group.TopicPartition{Topic: oc.Topic, Partition: oc.Partition}); err != nil {
				return err
			}
		}
		return nil
	}
	if err := c.appendCommit(ctx, s, groupID, req.Offsets, records, allowed); err != nil {
		return CommitResponse{}, err
	}
	return answer, nil
}

// appendCommit appends a checked commit's records (records[i] stores
// offsets[i]) once every offset is at most its partition's high watermark
// (from the shard's cache, refreshed from the partition's leader for an
// offset above it), and returns when they are committed and applied.
// allowed checks the commit again as its records are queued (shard.commit).
//
// A commit that waited for a high watermark to catch up (the lock
// released for up to HighWatermarkWait) is refused if a commit of one of
// its partitions that reached the shard after it was queued meanwhile:
// appended after that one, it would take the committed offset back, and
// the partition's next owner would read again what was consumed and
// committed. Its caller has usually given up on it and committed again;
// one that has not learns that a later commit went first. A commit that
// did not wait (at most one look at a high watermark) is queued in arrival
// order but for the moments between its locks, and is never refused for
// that: two commits of one partition that close together are concurrent,
// with no order to keep; a look that lasts is bounded by the caller's
// deadline (ctx), past which nothing is queued.
func (c *Coordinator) appendCommit(ctx context.Context, s *shard, groupID string, offsets []OffsetCommit, records []group.Record, allowed func() error) error {
	if err := c.checkCommitSize(len(offsets), records); err != nil {
		return err
	}
	s.mu.Lock()
	s.arrivals++
	arrival := s.arrivals
	s.mu.Unlock()
	waited := false
	for _, oc := range offsets {
		tp := group.TopicPartition{Topic: oc.Topic, Partition: oc.Partition}
		s.mu.Lock()
		hw, ok := s.hw[tp]
		s.mu.Unlock()
		if ok && oc.Offset <= hw {
			continue
		}
		if oc.Partition < 0 || oc.Partition >= c.cfg.Host.Partitions(oc.Topic) {
			return fmt.Errorf("%w: %v", ErrUnknownTopic, tp)
		}
		paused, err := c.awaitHighWatermark(ctx, s, groupID, tp, oc.Offset)
		if err != nil {
			return err
		}
		waited = waited || paused
	}
	return s.commit(ctx, c, records, func() error {
		if err := allowed(); err != nil {
			return err
		}
		for _, oc := range offsets {
			tp := group.TopicPartition{Topic: oc.Topic, Partition: oc.Partition}
			if waited && s.queued[commitKey{groupID, tp}] > arrival {
				return fmt.Errorf("%w: group %q, %v: offset %d", ErrCommitSuperseded, groupID, tp, oc.Offset)
			}
		}
		for _, oc := range offsets {
			k := commitKey{groupID, group.TopicPartition{Topic: oc.Topic, Partition: oc.Partition}}
			s.queued[k] = max(s.queued[k], arrival)
		}
		s.active[groupID] = c.cfg.Now()
		return nil
	})
}

// awaitHighWatermark returns once tp's high watermark, as its leader
// reports it, reaches offset. A new leader's trails what its predecessor
// committed until its followers fetch again, and members read up to the
// predecessor's: an offset above it is refused (not retriable) only when
// HighWatermarkWait did not bring the high watermark to it. paused says
// whether it had to wait for it (more than the first look).
func (c *Coordinator) awaitHighWatermark(ctx context.Context, s *shard, groupID string, tp group.TopicPartition, offset int64) (paused bool, err error) {
	timeout := time.NewTimer(c.cfg.HighWatermarkWait)
	defer timeout.Stop()
	pause := 20 * time.Millisecond
	for ; ; paused = true {
		_, hw, err := c.cfg.Host.Positions(ctx, tp)
		if err != nil {
			return paused, fmt.Errorf("%w: high watermark of %v: %v", ErrUnavailable, tp, err)
		}
		s.mu.Lock()
		s.hw[tp] = max(s.hw[tp], hw)
		s.mu.Unlock()
		if offset <= hw {
			return paused, nil
		}
		select {
		case <-time.After(pause):
			pause = min(2*pause, 500*time.Millisecond)
		case <-timeout.C:
			return paused, fmt.Errorf("%w: group %q, %v: offset %d, high watermark %d",
				group.ErrOffsetBeyondHighWatermark, groupID, tp, offset, hw)
		case <-ctx.Done():
			return paused, fmt.Errorf("%w: %v: offset %d above the high watermark %d: %v", ErrUnavailable, tp, offset, hw, ctx.Err())
		}
	}
}

// recordOverhead bounds what a record's framing adds to its key and value
// in a batch (length, attributes, deltas, header count: varints).
const recordOverhead = 24

// checkCommitSize refuses a commit whose records would not fit one batch:
// it is appended whole, so that it is all or nothing.
func (c *Coordinator) checkCommitSize(offsets int, records []group.Record) error {
	size := record.HeaderSize
	for _, r := range records {
		size += len(r.Key) + len(r.Value) + recordOverhead
	}
	if limit := c.cfg.Limits.MaxBatchBytes; size > limit {
		return fmt.Errorf("%w: a commit of %d offsets takes %d bytes, over the batch limit of %d: commit fewer at once, or with less metadata",
			ErrInvalidRequest, offsets, size, limit)
	}
	return nil
}

// commit appends records through the shard's one flusher and waits until
// they are committed and applied. nil records ask for a restatement.
// allowed (nil: no check) runs with s.mu held as the records are queued:
// the log takes them in queue order, so a commit allowed there goes before
// any commit of a later owner of its partitions. Checked only before a
// wait for a partition's high watermark, which releases the lock, a member
// that expired meanwhile had its commit written after the new owner's,
// which it overwrote.
//
// A commit whose caller has given up (ctx done) is not queued, and one
// still queued when its caller gives up is taken out: the caller answered
// its client, whose next commit must not be overtaken by this one. Only a
// commit already in an append can still land after its caller left.
func (s *shard) commit(ctx context.Context, c *Coordinator, records []group.Record, allowed func() error) error {
	pc := &pendingCommit{records: records, done: make(chan error, 1)}
	s.mu.Lock()
	if s.dropped {
		s.mu.Unlock()
		return changedHandsError{p: s.p}
	}
	if err := ctx.Err(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("%w: commit not appended: %v", ErrUnavailable, err)
	}
	if allowed != nil {
		if err := allowed(); err != nil {
			s.mu.Unlock()
			return err
		}
	}
	s.pending = append(s.pending, pc)
	s.mu.Unlock()
	for {
		select {
		case err := <-pc.done:
			return err
		case <-ctx.Done():
			s.mu.Lock()
			i := slices.Index(s.pending, pc)
			if i >= 0 {
				s.pending = slices.Delete(s.pending, i, i+1)
			}
			s.mu.Unlock()
			if i >= 0 {
				return fmt.Errorf("%w: commit not appended: %v", ErrUnavailable, ctx.Err())
			}
			return fmt.Errorf("%w: commit outcome unknown: %v", ErrUnavailable, ctx.Err())
		case s.turn <- struct{}{}:
			s.mu.Lock()
			batch := s.pending
			s.pending = nil
			s.mu.Unlock()
			s.flush(ctx, c, batch)
			<-s.turn
		}
	}
}

// flush appends the pending commits, in batches, and applies them once
// committed; a failed append drops the shard, since what the log holds is
// no longer known. Then it restates the offsets if that is due.
func (s *shard) flush(ctx context.Context, c *Coordinator, batch []*pendingCommit) {
	force := false
	var units [][]group.Record
	for _, pc := range batch {
		if pc.records == nil {
			force = true
			continue
		}
		units = append(units, pc.records)
	}
	_, err := s.appendRecords(ctx, c, units)
	if err == nil {
		err = s.restateIfDue(ctx, c, force)
	}
	for _, pc := range batch {
		pc.done <- err
	}
}

// appendRecords appends units of records, each unit whole in one batch
// (a commit is all or nothing), units together up to about maxAppendBytes
// a batch, and applies each batch once it is committed. It returns the
// first batch's base offset (-1 with no records). On an error the shard
// is dropped.
func (s *shard) appendRecords(ctx context.Context, c *Coordinator, units [][]group.Record) (int64, error) {
	var b record.Builder
	var buf []byte
	now := c.cfg.Now().UnixMilli()
	first := int64(-1)
	for len(units) > 0 {
		b.Reset()
		n := 0
		var err error
		for ; n < len(units) && (n == 0 || b.Size() < maxAppendBytes) && err == nil; n++ {
			for _, r := range units[n] {
				if err = b.Add(now, r.Key, r.Value, nil); err != nil {
					break
				}
			}
		}
		var part []group.Record
		for _, u := range units[:n] {
			part = append(part, u...)
		}
		units = units[n:]
		var base int64
		if err == nil {
			buf, err = b.AppendTo(buf[:0])
		}
		if err == nil {
			// A shard dropped by a failed append before this one (commits
			// that queued behind it) writes nothing more: a new shard may
			// already have rebuilt from the log and be writing its own.
			s.mu.Lock()
			if s.dropped {
				err = changedHandsError{p: s.p}
			}
			s.mu.Unlock()
		}
		if err == nil {
			base, err = c.cfg.Host.AppendOffsets(ctx, s.p, s.epoch, buf, b.Len())
		}
		s.mu.Lock()
		if err == nil && s.dropped {
			// Appended, but not applied here: a new shard rebuilds it
			// from the log. The commit is refused as by a shard dropped
			// before it; the client's retry commits the same again.
			err = changedHandsError{p: s.p}
		}
		if err != nil && errors.Is(err, ErrNotAppended) && !s.dropped {
			// The log is as it was, and so are the offsets applied: the
			// shard stays. Dropped, it was rebuilt at every commit while
			// the partition lacked in-sync replicas, holding the lock
			// every shard's requests take.
			s.mu.Unlock()
			return 0, fmt.Errorf("%w: append to %s/%d: %v", ErrUnavailable, OffsetsTopic, s.p, err)
		}
		if err != nil {
			s.drop()
			s.mu.Unlock()
			c.forget(s)
			if errors.As(err, new(changedHandsError)) {
				return 0, err
			}
			return 0, fmt.Errorf("%w: append to %s/%d: %v", ErrUnavailable, OffsetsTopic, s.p, err)
		}
		for _, r := range part {
			if aerr := s.offsets.Apply(r.Key, r.Value); aerr != nil {
				c.log.Error("applying a commit failed", "error", aerr)
			}
		}
		s.records += int64(len(part))
		s.mu.Unlock()
		if first < 0 {
			first = base
		}
	}
	return first, nil
}

// restateIfDue appends every committed offset again when the records
// since the last restatement reach RestateAfter and twice the offsets
// kept, or when RestateEvery has passed (force), and then deletes the
// segments below the restatement: the log start offset moves up to it, so
// a rebuild reads at most one segment, the restatement and what came
// after it. Retention can then never delete the only record of an offset
// that is still committed. Called by the flusher, holding the turn, so no
// other record lands between the restated ones.
func (s *shard) restateIfDue(ctx context.Context, c *Coordinator, force bool) error {
	if !force && s.records < max(c.cfg.RestateAfter, s.restateFloor) {
		return nil
	}
	var records []group.Record
	s.mu.Lock()
	for _, g := range s.offsets.Groups() {
		for _, po := range s.offsets.Group(g) {
			r, err := group.OffsetRecord(g, po.TopicPartition, po.Committed)
			if err != nil {
				s.mu.Unlock()
				return fmt.Errorf("%w: restate %s/%d: %v", ErrUnavailable, OffsetsTopic, s.p, err)
			}
			records = append(records, r)
		}
	}
	s.mu.Unlock()
	if !force && s.records < 2*int64(len(records)) {
		// Not worth it yet; no need to look again before it could be.
		s.restateFloor = 2 * int64(len(records))
		return nil
	}
	start := c.cfg.Now()
	before := s.records
	units := make([][]group.Record, len(records))
	for i := range records {
		units[i] = records[i : i+1]
	}
	first, err := s.appendRecords(ctx, c, units)
	if err != nil {
		return err
	}
	if first < 0 {
		// Nothing is committed any more: everything before now is moot.
		st, ok := c.cfg.Host.OffsetsLeader(s.p)
		if !ok {
			return nil
		}
		first = st.HighWatermark
	}
	if err := c.cfg.Host.TrimOffsets(s.p, first); err != nil {
		c.log.Warn("deleting restated segments failed", "partition", s.p, "error", err)
	}
	s.mu.Lock()
	s.records = int64(len(records))
	s.restatedAt = c.cfg.Now()
	s.mu.Unlock()
	c.log.Info("offsets restated", "partition", s.p, "offsets", len(records), "records_before", before,
		"restated_from", first, "took", c.cfg.Now().Sub(start))
	return nil
}

// Offsets returns a group's committed offsets, of one topic if topic is
// not empty.
func (c *Coordinator) Offsets(ctx context.Context, groupID, topic string) (OffsetsResponse, error) {
	s, err := c.shardFor(ctx, groupID)
	if err != nil {
		return OffsetsResponse{}, err
	}
	defer s.mu.Unlock()
	list := s.offsets.Group(groupID)
	if len(list) == 0 {
		e, err := c.loadGroup(ctx, s, groupID, false)
		if err != nil {
			return OffsetsResponse{}, err
		}
		if e == nil {
			return OffsetsResponse{}, fmt.Errorf("%w: %q", group.ErrUnknownGroup, groupID)
		}
	}
	out := OffsetsResponse{Group: groupID, Offsets: []Committed{}}
	for _, po := range list {
		if topic != "" && po.Topic != topic {
			continue
		}
		out.Offsets = append(out.Offsets, Committed{Topic: po.Topic, Partition: po.TopicPartition.Partition,
			Offset: po.Committed.Offset, Metadata: po.Committed.Metadata, CommitTimeMS: po.Committed.CommitTime.UnixMilli()})
	}
	return out, nil
}

// Reset commits offsets of every partition of a topic for a group that
// owns none of them.
func (c *Coordinator) Reset(ctx context.Context, groupID string, req ResetRequest) (ResetResponse, error) {
	n := c.cfg.Host.Partitions(req.Topic)
	if n == 0 {
		return ResetResponse{}, fmt.Errorf("%w: no topic %q", ErrUnknownTopic, req.Topic)
	}
	var fixed int64 = -1
	if req.To != "earliest" && req.To != "latest" {
		v, err := strconv.ParseInt(req.To, 10, 64)
		if err != nil || v < 0 {
			return ResetResponse{}, fmt.Errorf("%w: to %q: earliest, latest or an offset", ErrInvalidRequest, req.To)
		}
		fixed = v
	}
	tps := make([]group.TopicPartition, n)
	for p := range n {
		tps[p] = group.TopicPartition{Topic: req.Topic, Partition: p}
	}
	// The first partition whose positions cannot be had fails the reset:
	// the others are not asked for then (each could take a leader's call
	// timeout), and an answer that was not asked for is not the failure.
	askCtx, stopAsking := context.WithCancel(ctx)
	defer stopAsking()
	all := c.positionsOf(askCtx, tps, stopAsking)
	for p, pos := range all {
		if pos.err != nil && (ctx.Err() != nil || !errors.Is(pos.err, context.Canceled)) {
			return ResetResponse{}, fmt.Errorf("%w: positions of %v: %v", ErrUnavailable, tps[p], pos.err)
		}
	}
	targets := make([]int64, n)
	for p, pos := range all {
		switch {
		case req.To == "earliest":
			targets[p] = pos.logStart
		case req.To == "latest":
			targets[p] = pos.hw
		default:
			// An offset outside a partition's log is clamped into it, as
			// kafka-consumer-groups does.
			targets[p] = min(max(fixed, pos.logStart), pos.hw)
		}
	}
	s, err := c.shardFor(ctx, groupID)
	if err != nil {
		return ResetResponse{}, err
	}
	// Checked again as the records are queued: no member may have taken a
	// partition (nor a classic member joined) in between.
	resettable := func(e *entry) error {
		if ce := s.classic[groupID]; ce != nil && ce.g.Members() > 0 {
			return fmt.Errorf("%w: group %q has members of Kafka's classic protocol", ErrGroupNotEmpty, groupID)
		}
		if e == nil {
			return fmt.Errorf("%w: group %q was reloaded while the reset waited: reset again", ErrUnavailable, groupID)
		}
		for p := range n {
			if owner, ok := e.g.Owner(group.TopicPartition{Topic: req.Topic, Partition: p}); ok {
				return fmt.Errorf("%w: member %q owns %s/%d", ErrGroupNotEmpty, owner, req.Topic, p)
			}
		}
		return nil
	}
	e, err := c.loadGroup(ctx, s, groupID, true)
	if err == nil {
		err = resettable(e)
	}
	if err != nil {
		s.mu.Unlock()
		return ResetResponse{}, err
	}
	// The group's state is stored, so that it is listed.
	if err := c.save(ctx, s, groupID, e); err != nil {
		s.mu.Unlock()
		return ResetResponse{}, err
	}
	s.mu.Unlock()
	now := c.cfg.Now()
	var records []group.Record
	var out ResetResponse
	for p, off := range targets {
		tp := group.TopicPartition{Topic: req.Topic, Partition: int32(p)}
		r, err := group.OffsetRecord(groupID, tp, group.Committed{Offset: off, CommitTime: now})
		if err != nil {
			return ResetResponse{}, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
		}
		records = append(records, r)
		out.Offsets = append(out.Offsets, Committed{Topic: req.Topic, Partition: int32(p), Offset: off})
	}
	if err := c.checkCommitSize(len(records), records); err != nil {
		return ResetResponse{}, err
	}
	if err := s.commit(ctx, c, records, func() error {
		if err := resettable(s.groups[groupID]); err != nil {
			return err
		}
		s.active[groupID] = c.cfg.Now()
		return nil
	}); err != nil {
		return ResetResponse{}, err
	}
	c.log.Info("offsets reset", "group", groupID, "topic", req.Topic, "to", req.To)
	return out, nil
}

// Delete deletes a group that has no members, as Kafka's DeleteGroups
// does: its stored state, with a CAS on the index this coordinator holds,
// and its committed offsets, by a group tombstone appended with acks=all
// through the shard's flusher, which every rebuild applies as it applies
// commits. A group with members of either protocol is ErrGroupNotEmpty; one
// with neither a stored state, a classic entry nor committed offsets is
// ErrUnknownGroup.
//
// Both happen in one hold of the shard's lock, as the tombstone is queued
// (shard.commit's allowed): a join after it creates a new group, whose
// commits the log takes after the tombstone, and commits of the deleted
// group queued before it land before it, so the tombstone deletes them
// too. A CAS that fails (another coordinator wrote the group since: a
// member joined there) changes nothing and is ErrUnavailable, as a failed
// save: the group is forgotten here, and the retry finds it with members.
// An append that fails after the state was deleted leaves the offsets as
// the log has them; a retry finds the group through them and appends the
// tombstone again, or, if the first one landed, answers ErrUnknownGroup.
func (c *Coordinator) Delete(ctx context.Context, groupID string) error {
	if _, err := group.GroupTombstone(groupID); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	s, err := c.shardFor(ctx, groupID)
	if err != nil {
		return err
	}
	s.mu.Unlock()
	if err := c.deleteGroup(ctx, s, groupID, nil); err != nil {
		return err
	}
	c.log.Info("group deleted", "group", groupID, "partition", s.p)
	return nil
}

// deleteGroup is Delete's on shard s: check (nil: none) runs first in the
// hold of the lock that deletes the group and queues its tombstone.
func (c *Coordinator) deleteGroup(ctx context.Context, s *shard, groupID string, check func() error) error {
	tomb, err := group.GroupTombstone(groupID)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	return s.commit(ctx, c, []group.Record{tomb}, func() error {
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
		return c.deleteLocked(ctx, s, groupID)
	})
}

// expireGroups deletes the groups of shard s that expiredLocked says are
// past OffsetsRetention at now, as Delete does (Kafka expires an empty
// group's offsets, then the group): those with committed offsets, those
// loaded here, and those of stored (every group with a stored state) that
// hash to s. Each is checked again as its deletion is queued: a commit,
// join or reset since keeps it. It deletes at most budget groups (those
// refused, in use again or not empty, do not count) and returns how many.
func (c *Coordinator) expireGroups(s *shard, stored []string, now time.Time, budget int) int {
	n := c.offsetsPartitions()
	s.mu.Lock()
	ids := map[string]bool{}
	for _, id := range s.offsets.Groups() {
		ids[id] = true
	}
	for id := range s.groups {
		ids[id] = true
	}
	for _, id := range stored {
		if PartitionFor(id, n) == s.p {
			ids[id] = true
		}
	}
	var due []string
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		if c.expiredLocked(s, id, now) {
			due = append(due, id)
		}
	}
	s.mu.Unlock()
	deleted := 0
	for i, id := range due {
		if deleted == budget {
			c.log.Info("more groups past their retention than one check deletes: the rest wait for the next", "partition", s.p, "left", len(due)-i)
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), expiryTimeout)
		err := c.deleteGroup(ctx, s, id, func() error {
			if !c.expiredLocked(s, id, now) {
				return fmt.Errorf("%w: %q", errInUse, id)
			}
			return nil
		})
		cancel()
		switch {
		case err == nil:
			deleted++
			c.log.Info("group expired", "group", id, "partition", s.p, "retention", c.cfg.OffsetsRetention)
		case errors.Is(err, errInUse), errors.Is(err, ErrGroupNotEmpty), errors.Is(err, group.ErrUnknownGroup):
			// Members not loaded here until the delete looked, or gone
			// meanwhile: nothing to expire.
		default:
			c.log.Warn("expiring group failed", "group", id, "partition", s.p, "error", err)
		}
	}
	return deleted
}

// expiredLocked says whether group id is past OffsetsRetention at now: no
// classic group (members or member ids handed out), no members loaded
// here, and its commits, the last time this coordinator saw it in use and
// the shard's load all at least OffsetsRetention before now. A group whose
// stored state has members not loaded yet passes; deleteLocked refuses it.
// Called with s.mu held.
func (c *Coordinator) expiredLocked(s *shard, id string, now time.Time) bool {
	if s.classic[id] != nil {
		return false
	}
	if e := s.groups[id]; e != nil && e.g.Members() > 0 {
		return false
	}
	last := s.loadedAt
	if t := s.active[id]; t.After(last) {
		last = t
	}
	for _, po := range s.offsets.Group(id) {
		if po.CommitTime.After(last) {
			last = po.CommitTime
		}
	}
	return now.Sub(last) >= c.cfg.OffsetsRetention
}

// deleteLocked checks that the group exists and is empty, deletes its
// stored state and forgets it. Called with s.mu held, as Delete's
// tombstone is queued.
func (c *Coordinator) deleteLocked(ctx context.Context, s *shard, groupID string) error {
	ce := s.classic[groupID]
	if ce != nil && ce.g.Members() > 0 {
		return fmt.Errorf("%w: group %q has members of Kafka's classic protocol", ErrGroupNotEmpty, groupID)
	}
	e, err := c.loadGroup(ctx, s, groupID, false)
	if err != nil {
		return err
	}
	if e != nil && e.g.Members() > 0 {
		return fmt.Errorf("%w: group %q has %d members", ErrGroupNotEmpty, groupID, e.g.Members())
	}
	// An entry never saved is a join that failed before it changed
	// anything: not a group.
	stored := e != nil && e.saved != nil
	if !stored && ce == nil && len(s.offsets.Group(groupID)) == 0 {
		return fmt.Errorf("%w: %q", group.ErrUnknownGroup, groupID)
	}
	if stored {
		if err := c.cfg.Store.DeleteGroupState(ctx, groupID, e.index); err != nil {
			delete(s.groups, groupID)
			return fmt.Errorf("%w: delete group %q: %v", ErrUnavailable, groupID, err)
		}
	}
	delete(s.groups, groupID)
	delete(s.classic, groupID)
	delete(s.active, groupID)
	for k := range s.queued {
		if k.group == groupID {
			delete(s.queued, k)
		}
	}
	return nil
}

// Describe describes a group: members, and every partition of the topics
// it subscribes to or committed, with committed offset, HW and lag.
func (c *Coordinator) Describe(ctx context.Context, groupID, self string) (Description, error) {
	s, err := c.shardFor(ctx, groupID)
	if err != nil {
		return Description{}, err
	}
	e, err := c.loadGroup(ctx, s, groupID, false)
	if err != nil {
		s.mu.Unlock()
		return Description{}, err
	}
	committed := s.offsets.Group(groupID)
	if e == nil && len(committed) == 0 {
		s.mu.Unlock()
		return Description{}, fmt.Errorf("%w: %q", group.ErrUnknownGroup, groupID)
	}
	d := Description{Group: groupID, Coordinator: self, Members: []MemberDescription{}, Partitions: []PartitionDescription{}}
	owners := map[group.TopicPartition]string{}
	topics := map[string]bool{}
	if e != nil {
		gd := e.g.Describe()
		d.Epoch = gd.Epoch
		for _, m := range gd.Members {
			md := MemberDescription{MemberID: m.ID, MemberEpoch: m.MemberEpoch, Topics: m.Topics,
				SessionTimeoutMS: m.SessionTimeout.Milliseconds(), Assigned: []Partition{}, Revoking: []Partition{}}
			for _, gr := range m.Assigned {
				md.Assigned = append(md.Assigned, Partition{gr.Topic, gr.Partition})
				owners[gr.TopicPartition] = m.ID
			}
			for _, gr := range m.Revoking {
				md.Revoking = append(md.Revoking, Partition{gr.Topic, gr.Partition})
				owners[gr.TopicPartition] = m.ID
			}
			for _, t := range m.Topics {
				topics[t] = true
			}
			d.Members = append(d.Members, md)
		}
	}
	offsets := map[group.TopicPartition]int64{}
	for _, po := range committed {
		offsets[po.TopicPartition] = po.Committed.Offset
		topics[po.Topic] = true
	}
	s.mu.Unlock()
	var tps []group.TopicPartition
	for _, t := range slices.Sorted(maps.Keys(topics)) {
		for p := range c.cfg.Host.Partitions(t) {
			tps = append(tps, group.TopicPartition{Topic: t, Partition: p})
		}
	}
	for i, pos := range c.positionsOf(ctx, tps, nil) {
		tp := tps[i]
		pd := PartitionDescription{Topic: tp.Topic, Partition: tp.Partition, Owner: owners[tp], Committed: -1, HighWatermark: -1, Lag: -1}
		off, ok := offsets[tp]
		if ok {
			pd.Committed = off
		}
		if pos.err == nil {
			pd.HighWatermark = pos.hw
			if ok {
				pd.Lag = max(pos.hw-off, 0)
			} else {
				pd.Lag = pos.hw - pos.logStart
			}
		}
		d.Partitions = append(d.Partitions, pd)
	}
	return d, nil
}

// positionsConcurrency bounds the partitions whose positions a describe or
// a reset asks for at once: each may be a round trip to the agent that
// leads the partition, and asked one after another a group over 10,000
// partitions took seconds for each millisecond of round trip.
const positionsConcurrency = 32

// positions is a partition's log start and high watermark, or why they
// are not known.
type positions struct {
	logStart, hw int64
	err          error
}

// positionsOf asks the host for the positions of tps, at most
// positionsConcurrency at a time, and returns them in the order of tps;
// failed, if not nil, is called when one cannot be had.
func (c *Coordinator) positionsOf(ctx context.Context, tps []group.TopicPartition, failed func()) []positions {
	out := make([]positions, len(tps))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(positionsConcurrency, len(tps)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(tps); i = int(next.Add(1) - 1) {
				p := &out[i]
				// Once the caller gave up, the rest are not asked for: a
				// leader's client call does not watch ctx.
				if p.err = ctx.Err(); p.err == nil {
					p.logStart, p.hw, p.err = c.cfg.Host.Positions(ctx, tps[i])
					if p.err != nil && failed != nil {
						failed()
					}
				}
			}
		})
	}
	wg.Wait()
	return out
}

// CommittedOffset is a group's committed offset of one partition.
type CommittedOffset struct {
	Group string
	group.TopicPartition
	Offset int64
}

// CommittedOffsets lists the committed offsets of the groups this
// coordinator serves now: those of the offsets partitions it has loaded
// (on a group's first request after taking the lead) and still leads at
// the epoch it loaded them at. The agent's group lag metric reads it at
// every scrape.
func (c *Coordinator) CommittedOffsets() []CommittedOffset {
	c.mu.Lock()
	shards := slices.Collect(maps.Values(c.shards))
	c.mu.Unlock()
	slices.SortFunc(shards, func(x, y *shard) int { return x.p - y.p })
	var out []CommittedOffset
	for _, s := range shards {
		if st, ok := c.cfg.Host.OffsetsLeader(s.p); !ok || st.Epoch != s.epoch {
			continue
		}
		s.mu.Lock()
		if !s.dropped {
			for _, g := range s.offsets.Groups() {
				for _, po := range s.offsets.Group(g) {
					out = append(out, CommittedOffset{Group: g, TopicPartition: po.TopicPartition, Offset: po.Committed.Offset})
				}
			}
		}
		s.mu.Unlock()
	}
	return out
}

// List lists the groups with a stored state.
func List(ctx context.Context, store Store) (ListResponse, error) {
	states, err := store.GroupStateValues(ctx)
	if err != nil {
		return ListResponse{}, fmt.Errorf("%w: list groups: %v", ErrUnavailable, err)
	}
	out := ListResponse{Groups: []GroupSummary{}}
	for _, id := range slices.Sorted(maps.Keys(states)) {
		st, err := decodeState(states[id])
		if err != nil {
			return ListResponse{}, fmt.Errorf("%w: stored state of group %q: %v", ErrUnavailable, id, err)
		}
		out.Groups = append(out.Groups, GroupSummary{Group: id, Epoch: st.Epoch, Members: len(st.Members)})
	}
	return out, nil
}

func checkID(what, id string) error {
	if id == "" || len(id) > group.MaxNameLen {
		return fmt.Errorf("%w: %s %q: 1 to %d bytes", ErrInvalidRequest, what, id, group.MaxNameLen)
	}
	return nil
}

var memberIDEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewMemberID is a new member id: 26 random base32 characters.
func NewMemberID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return memberIDEncoding.EncodeToString(b[:])[:26]
}

// IsRetriable says whether an error of the package is worth retrying
// elsewhere or later.
func IsRetriable(err error) bool {
	return errors.Is(err, ErrNotCoordinator) || errors.Is(err, ErrLoading) || errors.Is(err, ErrUnavailable)
}
