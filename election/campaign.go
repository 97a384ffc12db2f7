package election

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

// Leadership is this agent leading one partition at one epoch. It ends
// (Done closes, Err says why) when the session is lost, the lease expires,
// the leader key or state moves on, the topic is deleted, or on Resign,
// Deregister and Close; a new Campaign is needed after that.
type Leadership struct {
	c             *Client
	topic         string
	partition     int
	epoch         int32
	session       string
	acquiredIndex uint64
	// leaderIndex is the leader key's ModifyIndex as the election left
	// it: the key changes only when it is locked or released, so while it
	// holds this index the lock is this leadership's (release).
	leaderIndex uint64
	ctx         context.Context
	cancel      context.CancelCauseFunc

	// replicas and replicasIndex are the partition's replicas, and their
	// key's ModifyIndex, in the snapshot the election was decided on.
	replicas      []string
	replicasIndex uint64

	mu         sync.Mutex
	state      PartitionState
	stateIndex uint64
}

// Topic is the led partition's topic.
func (l *Leadership) Topic() string { return l.topic }

// Partition is the led partition.
func (l *Leadership) Partition() int { return l.partition }

// Epoch is the leader epoch this leadership won: every replica-to-replica
// action carries it.
func (l *Leadership) Epoch() int32 { return l.epoch }

// State is the partition state as last written or read by this leader.
func (l *Leadership) State() PartitionState {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.state
	st.ISR = slices.Clone(st.ISR)
	return st
}

// DecidedReplicas is the partition's replica set in the metadata snapshot
// the election was decided on, and the replicas key's ModifyIndex there:
// the caller's own copy of the metadata may lag it, and Consul's ISR may
// name a replica the older set lacks (one a move just added).
func (l *Leadership) DecidedReplicas() ([]string, uint64) {
	return slices.Clone(l.replicas), l.replicasIndex
}

// Done is closed when the leadership ends.
func (l *Leadership) Done() <-chan struct{} { return l.ctx.Done() }

// Context is cancelled when the leadership ends, with Err as its cause.
func (l *Leadership) Context() context.Context { return l.ctx }

// Err is nil while leading, then why the leadership ended: ErrSessionLost,
// ErrLeaseExpired, ErrLeadershipLost, ErrResigned or ErrClosed (wrapped).
func (l *Leadership) Err() error {
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// Resign stops leading at once and releases the lock; a release, unlike an
// invalidation, has no lock delay, so another in-sync replica can take over
// immediately. Resigning a lost leadership still releases a lock the session
// may hold for it, but never one the session took again for a newer
// leadership of the partition (the release is guarded by the leader key's
// index as this election left it).
func (l *Leadership) Resign(ctx context.Context) error {
	return l.release(ctx, ErrResigned, "")
}

// HandOver is Resign naming a successor, an in-sync replica that holds the
// whole log: the released key's value says so, and the other replicas hold
// back their campaigns for HandoverHold so that it wins the next election
// (docs/design.md §6, controlled shutdown). Nothing else about the election
// changes: the successor campaigns as any replica does, and if it does not
// win within the hold, whoever may lead does.
func (l *Leadership) HandOver(ctx context.Context, successor string) error {
	return l.release(ctx, fmt.Errorf("%w: handed over to %s", ErrResigned, successor), successor)
}

func (l *Leadership) release(ctx context.Context, cause error, successor string) error {
	c := l.c
	pk := partitionKey{topic: l.topic, partition: l.partition}
	c.mu.Lock()
	// Until this release is answered, the key is this release's to free
	// (a handover's names the successor), not the stray-lock loop's.
	c.busyLocked(pk)
	c.loseLocked(l, cause)
	c.mu.Unlock()
	defer c.notBusy(pk)
	key := c.keys.leader(l.topic, l.partition)
	// The same session locks the key again when this agent wins the
	// partition again (a lease that lapsed and was proved, a resignation
	// still on its way while the replica campaigns): an unguarded release
	// would then free the newer leadership's key, and another replica
	// would win the next epoch while that one still leads. Refused (the
	// key moved on, or the session no longer holds it), there is nothing
	// of this leadership's to release.
	ops := api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: key, Index: l.leaderIndex}},
		{KV: &api.KVTxnOp{Verb: api.KVUnlock, Key: key, Session: l.session,
			Value: encodeJSON(leaderValue{Node: c.cfg.NodeID, Epoch: l.epoch, Successor: successor})}},
	}
	if _, _, err := c.txn(ctx, ops, "release "+key, keyRule(c.keys.prefix)); err != nil {
		return err
	}
	return nil
}

// campaigner decides, from what the watch shows, when a campaign for one
// partition tries to take the lead. It is a plain value driven with
// explicit times.
type campaigner struct {
	self      string
	lockDelay time.Duration
	// freeSince is when the leader key was first seen free; zero while
	// someone else holds it.
	freeSince time.Time
	retryAt   time.Time
	backoff   *backoff
}

func newCampaigner(self string, lockDelay time.Duration) *campaigner {
	return &campaigner{self: self, lockDelay: lockDelay, backoff: newBackoff(20*time.Millisecond, 500*time.Millisecond)}
}

// eligibleStagger is how long each eligible leader replica waits after the
// one before it in the ELR's order (longest log first), so that the longest
// log normally wins and a dead one does not keep the others out for long.
const eligibleStagger = time.Second

// HandoverHold is how long the replicas a handover does not name wait,
// from when they see the leader key free, before they campaign: the named
// successor normally wins within milliseconds, and one that died meanwhile
// keeps the partition without a leader no longer than this. The replica
// that handed over holds its own next campaign as long: its metadata may
// still show the key held by its session, which a campaign re-takes.
const HandoverHold = time.Second

// electionKind is how a replica may take the lead.
type electionKind uint8

const (
	// electClean: the replica is in the ISR.
	electClean electionKind = iota + 1
	// electEligible: the replica is an eligible leader replica (ELR) and no
	// ISR member is alive; it leads with itself as the ISR.
	electEligible
	// electUnclean: the topic allows unclean election and the replica is
	// neither; it may have lost committed records.
	electUnclean
)

func (k electionKind) String() string {
	switch k {
	case electClean:
		return "clean"
	case electEligible:
		return "eligible"
	case electUnclean:
		return "unclean"
	}
	return "none"
}

// decision is what a campaign does next.
type decision struct {
	attempt bool
	// kind is the election the attempt makes.
	kind electionKind
	// wakeAt is when to decide again without a change; zero means only a
	// change of metadata or session.
	wakeAt time.Time
	// watchLiveness: the decision depends on whether the ISR is alive, so a
	// change of the agents' liveness must wake the campaign too. Only an
	// eligible leader replica's does; waking every campaign at each
	// liveness change was a cost that grew with partitions.
	watchLiveness bool
}

// next decides at now. session is the usable session ("" when none);
// isrDead says Consul reports every ISR member dead.
func (cp *campaigner) next(now time.Time, pm PartitionMeta, uncleanAllowed bool, uncleanDelay time.Duration, session string, isrDead bool) decision {
	heldBySelf := session != "" && pm.LeaderSession == session
	if pm.LeaderSession != "" && !heldBySelf {
		cp.freeSince = time.Time{}
		cp.backoff.reset()
		return decision{}
	}
	if pm.LeaderSession == "" && cp.freeSince.IsZero() {
		cp.freeSince = now
	}
	if session == "" {
		return decision{}
	}
	eligibleAt := now
	var kind electionKind
	rank := pm.State.eligibleIndex(cp.self, pm.Replicas)
	inISR := slices.Contains(pm.State.ISR, cp.self)
	watchLiveness := !inISR && rank >= 0
	switch {
	case inISR:
		kind = electClean
	case rank >= 0 && isrDead && !cp.freeSince.IsZero():
		kind, eligibleAt = electEligible, cp.freeSince.Add(time.Duration(rank)*eligibleStagger)
	case uncleanAllowed && !cp.freeSince.IsZero():
		kind, eligibleAt = electUnclean, cp.freeSince.Add(uncleanDelay)
	default:
		return decision{watchLiveness: watchLiveness}
	}
	if pm.LeaderSession == "" && pm.Successor != "" && pm.Successor != cp.self {
		eligibleAt = later(eligibleAt, cp.freeSince.Add(HandoverHold))
	}
	at := later(eligibleAt, cp.retryAt)
	if now.Before(at) {
		return decision{wakeAt: at, watchLiveness: watchLiveness}
	}
	return decision{attempt: true, kind: kind}
}

// refused records a failed attempt at now: retry after a backoff, but not
// before the lock delay of the previous holder can have run out.
func (cp *campaigner) refused(now time.Time) {
	cp.retryAt = now.Add(cp.backoff.delay())
	if !cp.freeSince.IsZero() {
		cp.retryAt = later(cp.retryAt, cp.freeSince.Add(cp.lockDelay))
	}
}

// Campaign blocks until this agent leads the partition, and returns the
// leadership (the current one if it already leads). Only a replica in the
// partition's ISR campaigns; with the topic's unclean_leader_election, a
// replica outside it may take over once the partition has been without a
// leader for unclean_delay, with itself as the only ISR member. Winning is
// one transaction [lock leader key with the session, cas state to
// {leader: self, epoch: old+1, isr}] after a consistent read of the state,
// so the epoch only grows and only the lock holder writes it; both may
// share a Consul request with other partitions' (txnBatcher), with the
// same outcome as alone. It returns
// ctx.Err(), ErrUnknownPartition, ErrNotReplica, ErrNotRegistered, ErrClosed
// or a *PermissionError; other Consul errors are retried.
func (c *Client) Campaign(ctx context.Context, topic string, partition int) (*Leadership, error) {
	return c.CampaignAs(ctx, topic, partition, Candidate{LogEpoch: NoEpoch})
}

// NoEpoch is a Candidate.LogEpoch for a log that holds no epoch yet.
const NoEpoch int32 = -1

// Candidate is what a replica brings to an election besides its node id.
type Candidate struct {
	// LogEpoch is the latest leader epoch in the candidate's log, NoEpoch
	// for none. The epoch a win takes is above both Consul's and this one:
	// a Consul restored from an old snapshot may hold a lower epoch than
	// the logs do, and an epoch must never be reused (the logs' epoch
	// caches and every fence depend on it).
	LogEpoch int32
	// TopicID is the incarnation of the topic the candidate's log holds
	// (TopicConfig.ID), "" if unknown: deleting a topic and creating it
	// again starts its epochs and ISR afresh, and a replica of the deleted
	// one whose agent had not seen it yet won the new one's first election
	// with the deleted one's records. A campaign refuses a snapshot of
	// another incarnation, and an election also checks that the
	// partition's replicas key is the one of the snapshot it was decided
	// on (a topic created again writes it anew).
	TopicID string
}

// CampaignAs is Campaign for a candidate whose log state the election must
// respect (see Candidate).
func (c *Client) CampaignAs(ctx context.Context, topic string, partition int, cand Candidate) (*Leadership, error) {
	key := partitionKey{topic: topic, partition: partition}
	// While it runs, a key its session holds without a leadership is the
	// campaign's to take again (campaigner.next, heldBySelf), not stray.
	c.mu.Lock()
	c.busyLocked(key)
	c.mu.Unlock()
	defer c.notBusy(key)
	cp := newCampaigner(c.cfg.NodeID, c.cfg.LockDelay)
	for {
		c.mu.Lock()
		closed, registered, current := c.closed, c.registration != nil, c.leaderships[key]
		c.mu.Unlock()
		switch {
		case closed:
			return nil, ErrClosed
		case !registered:
			return nil, ErrNotRegistered
		case current != nil:
			return current, nil
		}
		snap, err := c.WaitMetadata(ctx, 1)
		if err != nil {
			return nil, err
		}
		tm, ok := snap.Topic(topic)
		if !ok || partition < 0 || partition >= len(tm.Partitions) {
			// The watch may not have caught up with a topic just created:
			// ask Consul before giving up.
			exists, err := c.partitionExists(ctx, topic, partition)
			if err != nil {
				return nil, err
			}
			if !exists {
				return nil, fmt.Errorf("%w: %s/%d", ErrUnknownPartition, topic, partition)
			}
			if err := c.waitChange(ctx, snap.Changed()); err != nil {
				return nil, err
			}
			continue
		}
		pm := tm.Partitions[partition]
		if tm.Err == nil && !slices.Contains(pm.Replicas, c.cfg.NodeID) {
			return nil, fmt.Errorf("%w: %s is not among the replicas %v of %s/%d", ErrNotReplica, c.cfg.NodeID, pm.Replicas, topic, partition)
		}
		if tm.Err == nil && cand.TopicID != "" && tm.Config.ID != cand.TopicID {
			return nil, fmt.Errorf("%w: %s/%d is of topic id %s, the candidate's log of %s", ErrOtherIncarnation, topic, partition, tm.Config.ID, cand.TopicID)
		}
		session, sessionChanged, failure := c.usableSession()
		if session == "" && failure != nil {
			return nil, failure
		}
		var d decision
		live := c.Liveness()
		// A topic with corrupt metadata is never led: wait for a repair.
		if tm.Err == nil {
			isrDead := len(live.DeadAmong(pm.State.ISR)) == len(pm.State.ISR)
			d = cp.next(c.clock.Now(), pm, tm.Config.UncleanLeaderElection, tm.Config.UncleanDelay, session, isrDead)
		}
		if d.attempt {
			l, err := c.tryLead(ctx, pm, tm.Config.MinInsyncReplicas, session, d.kind, cand)
			switch {
			case l != nil:
				return l, nil
			case errors.Is(err, ErrPermissionDenied):
				return nil, err
			case err != nil && ctx.Err() == nil:
				c.logConsulError("campaign attempt failed", err)
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			cp.refused(c.clock.Now())
			continue
		}
		var timer <-chan time.Time
		if !d.wakeAt.IsZero() {
			timer = c.clock.After(d.wakeAt.Sub(c.clock.Now()))
		}
		var livenessChanged <-chan struct{}
		if d.watchLiveness {
			livenessChanged = live.Changed()
		}
		// Woken by a change of this partition's metadata, not by every new
		// snapshot (metawait.go).
		wait := c.waitPartitionChange(snap, pm)
		select {
		case <-ctx.Done():
		case <-c.ctx.Done():
		case <-wait.changed:
		case <-sessionChanged:
		case <-livenessChanged:
		case <-timer:
		}
		c.stopWaiting(wait)
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case c.ctx.Err() != nil:
			return nil, ErrClosed
		}
	}
}

// partitionExists reads the topic's config consistently: the config is
// written last, so a topic is complete once it exists.
func (c *Client) partitionExists(ctx context.Context, topic string, partition int) (bool, error) {
	if !ValidTopicName(topic) || partition < 0 {
		return false, nil
	}
	key := c.keys.config(topic)
	pair, err := c.readConsistent(ctx, key, "read "+key, keyReadRule(c.keys.prefix))
	if err != nil {
		return false, err
	}
	if pair == nil {
		return false, nil
	}
	tc, err := decodeTopicConfig(key, pair.Value)
	if err != nil {
		return false, err
	}
	return partition < tc.Partitions, nil
}

// tryLead runs one election attempt. It returns a leadership when won, nil
// and nil when refused (lock held or in lock delay, state moved, or this
// replica not eligible under the fresh state). minISR is the topic's
// min_insync_replicas (cleanElectionISR).
func (c *Client) tryLead(ctx context.Context, pm PartitionMeta, minISR int, session string, kind electionKind, cand Candidate) (*Leadership, error) {
	self := c.cfg.NodeID
	stateKey := c.keys.state(pm.Topic, pm.Partition)
	leaderKey := c.keys.leader(pm.Topic, pm.Partition)
	rule := keyRule(c.keys.prefix)

	// Who may lead is decided on a consistent read, never on the watch:
	// batched with other partitions' reads in a read-only transaction.
	pair, err := c.readConsistent(ctx, stateKey, "read "+stateKey, rule)
	if err != nil {
		return nil, err
	}
	if pair == nil {
		return nil, nil
	}
	st, err := decodeState(stateKey, pair.Value)
	if err != nil {
		return nil, err
	}
	// The kind the campaign chose is checked again on the fresh state; an
	// eligible replica also needs every ISR member dead now. Safety does not
	// rest on that liveness: an eligible replica holds every committed
	// record whoever else is alive; it only keeps a live ISR member first.
	var isr []string
	elr := st.ELR
	switch {
	case slices.Contains(st.ISR, self):
		kind = electClean
		isr = st.cleanElectionISR(self, st.Leader != "" && c.Liveness().Dead(st.Leader), minISR)
	case kind == electEligible && st.eligibleIndex(self, pm.Replicas) >= 0 &&
		len(c.Liveness().DeadAmong(st.ISR)) == len(st.ISR):
		isr, elr = []string{self}, st.withoutEligible(self)
	case kind == electUnclean:
		isr, elr = []string{self}, nil
	default:
		return nil, nil
	}
	base := st.Epoch
	if cand.LogEpoch > base {
		c.log.Warn("the log holds a newer epoch than Consul: was Consul's state rolled back? electing above the log's",
			"topic", pm.Topic, "partition", pm.Partition, "consul_epoch", st.Epoch, "log_epoch", cand.LogEpoch)
		base = cand.LogEpoch
	}
	if base >= maxEpoch {
		return nil, fmt.Errorf("%w: %s: epoch %d cannot grow", ErrCorruptMetadata, stateKey, base)
	}
	newState := PartitionState{Leader: self, Epoch: base + 1, ISR: isr, ELR: elr}
	ops := api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVLock, Key: leaderKey, Session: session,
			Value: encodeJSON(leaderValue{Node: self, Epoch: newState.Epoch})}},
		{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: stateKey, Index: pair.ModifyIndex, Value: encodeJSON(newState)}},
	}
	if cand.TopicID != "" {
		// The replicas the election was decided on are still the
		// incarnation the candidate's log holds (Candidate.TopicID).
		ops = append(ops, c.replicasGuard(pm, true)...)
	}
	// Batched with other partitions' elections and ISR changes; the
	// outcome is this election's own (txnBatcher).
	ok, resp, err := c.batchedTxn(ctx, ops, "elect "+leaderKey, rule)
	if err != nil {
		return nil, err
	}
	if !ok {
		reasons := txnErrors(resp)
		if strings.Contains(reasons, "invalid session") {
			// The session died without us hearing yet: find out now.
			c.requestRenewal()
		}
		c.log.Debug("election attempt refused", "topic", pm.Topic, "partition", pm.Partition, "reason", reasons)
		return nil, nil
	}

	ctxLead, cancelLead := context.WithCancelCause(c.ctx)
	l := &Leadership{
		c: c, topic: pm.Topic, partition: pm.Partition, epoch: newState.Epoch, session: session,
		acquiredIndex: resp.Results[1].KV.ModifyIndex, leaderIndex: resp.Results[0].KV.ModifyIndex,
		ctx: ctxLead, cancel: cancelLead,
		state: newState, stateIndex: resp.Results[1].KV.ModifyIndex,
		replicas: slices.Clone(pm.Replicas), replicasIndex: pm.ReplicasIndex,
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.sessionID != session || !c.lease.valid(c.clock.Now()) {
		// The lease ended while the txn ran. The lock stays with the
		// session; a later attempt re-takes it with a new epoch.
		cancelLead(ErrLeaseExpired)
		return nil, nil
	}
	key := partitionKey{topic: pm.Topic, partition: pm.Partition}
	if old := c.leaderships[key]; old != nil {
		// Another campaign of this partition on this client won an
		// earlier epoch while this one ran (both past CampaignAs's check
		// for a current leadership): this election moved the state past
		// it. Replaced in the map without being ended, nothing would end
		// it (not a snapshot, a lapse of the lease or Close).
		c.loseLocked(old, fmt.Errorf("%w: superseded by epoch %d", ErrLeadershipLost, newState.Epoch))
	}
	c.leaderships[key] = l
	c.log.Info("leading", "topic", pm.Topic, "partition", pm.Partition, "epoch", newState.Epoch,
		"isr", newState.ISR, "elr", newState.ELR, "election", kind)
	// A snapshot published while the txn ran was not checked against l.
	c.checkLeadershipLocked(l, c.snapshot.Load())
	if l.ctx.Err() != nil {
		return nil, nil
	}
	return l, nil
}

// loseLocked ends one leadership.
func (c *Client) loseLocked(l *Leadership, cause error) {
	if c.endLocked(l, cause) {
		c.log.Info("stopped leading", "topic", l.topic, "partition", l.partition, "epoch", l.epoch, "cause", cause)
	}
}

// loseAllLocked ends every leadership at once. Each is logged at debug
// level only: the caller logs the cause once and every replica its own
// end, and a line per leadership, written while holding the mutex that
// the lease's pass results wait for, held it for seconds with thousands.
func (c *Client) loseAllLocked(cause error) {
	for _, l := range c.leaderships {
		if c.endLocked(l, cause) {
			c.log.Debug("stopped leading", "topic", l.topic, "partition", l.partition, "epoch", l.epoch, "cause", cause)
		}
	}
}

// endLocked ends l, reporting whether it was still going.
func (c *Client) endLocked(l *Leadership, cause error) bool {
	key := partitionKey{topic: l.topic, partition: l.partition}
	if c.leaderships[key] == l {
		delete(c.leaderships, key)
	}
	if l.ctx.Err() != nil {
		return false
	}
	l.cancel(cause)
	// The key may now be held without a leadership.
	c.wakeStrays()
	return true
}

// checkLeaderships ends the leaderships that a snapshot shows lost.
func (c *Client) checkLeaderships(snap *Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.leaderships {
		c.checkLeadershipLocked(l, snap)
	}
}

// checkLeadershipLocked ends l if snap, at least as new as l's election,
// shows its partition gone, its leader key held by another session, or its
// state at another epoch or leader.
func (c *Client) checkLeadershipLocked(l *Leadership, snap *Snapshot) {
	if snap.Index < l.acquiredIndex {
		return
	}
	pm, ok := snap.Partition(l.topic, l.partition)
	switch {
	case !ok:
		c.loseLocked(l, fmt.Errorf("%w: %s/%d no longer exists", ErrLeadershipLost, l.topic, l.partition))
	case pm.LeaderSession != l.session:
		c.loseLocked(l, fmt.Errorf("%w: leader key held by session %q, not %q", ErrLeadershipLost, pm.LeaderSession, l.session))
		// Usually the session itself is gone: learn it now, not at the
		// next renewal.
		c.requestRenewal()
	case pm.State.Epoch != l.epoch || pm.State.Leader != c.cfg.NodeID:
		c.loseLocked(l, fmt.Errorf("%w: state is leader %q epoch %d", ErrLeadershipLost, pm.State.Leader, pm.State.Epoch))
	}
}

// heldLockKeysLocked lists the leader keys the session holds, by the
// leaderships and by the latest snapshot (a lapsed lease leaves locks held
// without a leadership until a campaign takes them again or the stray-lock
// loop releases them, stray.go).
func (c *Client) heldLockKeysLocked() []string {
	var keys []string
	for _, l := range c.leaderships {
		keys = append(keys, c.keys.leader(l.topic, l.partition))
	}
	if c.sessionID != "" {
		snap := c.snapshot.Load()
		for _, tm := range snap.topics {
			for _, pm := range tm.Partitions {
				if pm.LeaderSession == c.sessionID {
					keys = append(keys, c.keys.leader(pm.Topic, pm.Partition))
				}
			}
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// releaseLocks unlocks keys held by session, in transactions of up to 64
// unlocks; a chunk that rolls back (some key no longer held) is released
// key by key.
func (c *Client) releaseLocks(ctx context.Context, session string, keys []string) error {
	rule := keyRule(c.keys.prefix)
	var errs []error
	for chunk := range slices.Chunk(keys, maxOpsPerTxn) {
		ops := make(api.TxnOps, 0, len(chunk))
		for _, key := range chunk {
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVUnlock, Key: key, Session: session}})
		}
		ok, _, err := c.txn(ctx, ops, "release locks", rule)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			continue
		}
		for _, key := range chunk {
			callCtx, cancel := c.callContext(ctx)
			if _, _, err := c.api.KV().Release(&api.KVPair{Key: key, Session: session}, c.writeOptions(callCtx)); err != nil {
				errs = append(errs, consulError(err, "release "+key, rule))
			}
			cancel()
		}
	}
	return errors.Join(errs...)
}

// ProposeISR changes the ISR of a partition this agent leads at epoch, with
// the guarded transaction [check-session leader key, cas state at the index
// this leader last wrote or read]. ErrNotLeader: this agent does not lead
// at that epoch any more (the leadership is ended): step down. ErrConflict:
// another change won at the same epoch; the leadership's State has been
// re-read: decide again from it.
func (c *Client) ProposeISR(ctx context.Context, topic string, partition int, epoch int32, isr []string, elr []EligibleReplica) error {
	key := partitionKey{topic: topic, partition: partition}
	c.mu.Lock()
	l := c.leaderships[key]
	c.mu.Unlock()
	if l == nil || l.epoch != epoch || l.ctx.Err() != nil {
		return fmt.Errorf("%w: %s/%d epoch %d", ErrNotLeader, topic, partition, epoch)
	}
	pm, known := c.snapshot.Load().Partition(topic, partition)
	if err := validateISR(pm, known, c.cfg.NodeID, topic, partition, isr); err != nil {
		return err
	}
	for _, e := range elr {
		if slices.Contains(isr, e.Node) {
			return fmt.Errorf("%w: eligible replica %q of %s/%d is in the ISR %v", ErrInvalidTopic, e.Node, topic, partition, isr)
		}
	}
	l.mu.Lock()
	base := l.stateIndex
	l.mu.Unlock()
	err := c.casStateWith(ctx, l, base, PartitionState{Leader: c.cfg.NodeID, Epoch: epoch, ISR: slices.Clone(isr), ELR: slices.Clone(elr)}, c.replicasGuard(pm, known))
	if err == nil {
		c.log.Info("isr changed", "topic", topic, "partition", partition, "epoch", epoch, "isr", isr, "elr", elr)
	}
	return err
}

// validateISR checks isr against the replicas of pm, the snapshot's
// partition (when known): no repeats, no stranger, the leader self in it.
func validateISR(pm PartitionMeta, known bool, self, topic string, partition int, isr []string) error {
	seen := map[string]bool{}
	for _, node := range isr {
		if seen[node] || (known && !slices.Contains(pm.Replicas, node)) {
			return fmt.Errorf("%w: isr %v of %s/%d: %q repeated or not a replica", ErrInvalidTopic, isr, topic, partition, node)
		}
		seen[node] = true
	}
	if !seen[self] {
		return fmt.Errorf("%w: isr %v of %s/%d must contain the leader %s", ErrInvalidTopic, isr, topic, partition, self)
	}
	return nil
}

// replicasGuard is the check-index of the replicas key an ISR change was
// validated against: a reassignment may have changed the replicas since
// the snapshot (docs/design.md §7.6), and an ISR naming a replica the move
// removed must not be written beside replicas that lack it.
func (c *Client) replicasGuard(pm PartitionMeta, known bool) api.TxnOps {
	if !known || pm.ReplicasIndex == 0 {
		return nil
	}
	return api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: c.keys.replicas(pm.Topic, pm.Partition), Index: pm.ReplicasIndex}}}
}

// casState writes newState with the guarded transaction and keeps the
// leadership's view in step with Consul.
func (c *Client) casState(ctx context.Context, l *Leadership, base uint64, newState PartitionState) error {
	return c.casStateWith(ctx, l, base, newState, nil)
}

// casStateWith is casState with more operations in the same transaction,
// after the two guards (a reassignment's completion writes the replicas and
// deletes the move with them). A refusal of any of them is handled as a
// refused cas of the state: re-read, ErrNotLeader or ErrConflict. The
// transaction and the re-read go through the batcher: other partitions'
// ISR changes and elections may share the request, never this partition's
// keys, and the refusal's op indexes are this transaction's own.
func (c *Client) casStateWith(ctx context.Context, l *Leadership, base uint64, newState PartitionState, extra api.TxnOps) error {
	stateKey := c.keys.state(l.topic, l.partition)
	leaderKey := c.keys.leader(l.topic, l.partition)
	rule := keyRule(c.keys.prefix)
	ops := append(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: leaderKey, Session: l.session}},
		{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: stateKey, Index: base, Value: encodeJSON(newState)}},
	}, extra...)
	ok, resp, err := c.batchedTxn(ctx, ops, "write "+stateKey, rule)
	if err != nil {
		return err
	}
	if ok {
		l.mu.Lock()
		if l.stateIndex == base {
			l.state, l.stateIndex = newState, resp.Results[1].KV.ModifyIndex
		}
		l.mu.Unlock()
		return nil
	}
	if len(resp.Errors) > 0 && resp.Errors[0].OpIndex == 0 {
		c.lose(l, fmt.Errorf("%w: %s not held by session %s", ErrLeadershipLost, leaderKey, l.session))
		return fmt.Errorf("%w: %s/%d epoch %d: %s", ErrNotLeader, l.topic, l.partition, l.epoch, txnErrors(resp))
	}
	// The state moved under us: re-read it to tell a lost epoch from a
	// concurrent change at ours.
	pair, err := c.readConsistent(ctx, stateKey, "read "+stateKey, rule)
	if err != nil {
		return err
	}
	if pair == nil {
		c.lose(l, fmt.Errorf("%w: %s deleted", ErrLeadershipLost, stateKey))
		return fmt.Errorf("%w: %s/%d deleted", ErrNotLeader, l.topic, l.partition)
	}
	st, err := decodeState(stateKey, pair.Value)
	if err != nil {
		return err
	}
	if st.Epoch != l.epoch || st.Leader != c.cfg.NodeID {
		c.lose(l, fmt.Errorf("%w: state is leader %q epoch %d", ErrLeadershipLost, st.Leader, st.Epoch))
		return fmt.Errorf("%w: %s/%d: epoch %d, state now leader %q epoch %d", ErrNotLeader, l.topic, l.partition, l.epoch, st.Leader, st.Epoch)
	}
	l.mu.Lock()
	if pair.ModifyIndex > l.stateIndex {
		l.state, l.stateIndex = st, pair.ModifyIndex
	}
	l.mu.Unlock()
	return fmt.Errorf("%w: %s/%d epoch %d: state changed at index %d", ErrConflict, l.topic, l.partition, l.epoch, pair.ModifyIndex)
}

func (c *Client) lose(l *Leadership, cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loseLocked(l, cause)
}
