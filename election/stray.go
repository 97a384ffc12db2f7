package election

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
)

// A leader key can stay locked by this agent's live session with no
// leadership to go with it: the lease lapsed (every leadership ends, and
// the replicas step down without releasing, since the session may be
// gone), and then a renewal proved the session alive after all. Normally
// the replica campaigns again and its campaign takes the key again
// (campaigner.next, heldBySelf). A replica that does not (its log lost
// data, it is retiring, its log is being reopened) left the key locked
// until Deregister: no other replica could win the partition while this
// agent lived, and the partition had no leader.
//
// The stray-lock loop releases such keys: a leader key the snapshot shows
// held by the session, while the lease is valid, with no leadership of its
// partition and no campaign of it nor release of its key running (busy),
// for strayLockGrace without a change, is released with the txn
// [check-index leader key at the index the snapshot showed, unlock with
// the session]. The key changes only when it is locked or released, so
// the check-index keeps the release from freeing a key a newer election of
// this client took again meanwhile; refused, there is nothing stray to
// release. A release has no lock delay: an in-sync replica can win at once.

// strayLockGrace is how long a key must have been stray, on a valid lease
// and at one index, before it is released. A replica whose leadership
// ended with the lease campaigns again within milliseconds, and takes the
// key back at the next epoch as before; the grace leaves room for a loop
// slowed by a burst of thousands of such step-downs, and is short beside a
// crashed agent's failover (check_ttl and more).
const strayLockGrace = 2 * time.Second

// strayPassGap spaces the loop's passes: a pass reads the whole snapshot,
// and the wakes (each snapshot, each leadership or campaign that ends)
// come in bursts.
const strayPassGap = 200 * time.Millisecond

// strayReleasesAtOnce bounds the releases in flight: each is a submission
// of two operations to the batcher, so this many fill one transaction of
// maxOpsPerTxn; the batcher packs them while earlier requests are out,
// within MaxInflight.
const strayReleasesAtOnce = maxOpsPerTxn / 2

// strayLock is a leader key held by the session without a leadership.
type strayLock struct {
	key partitionKey
	// index is the leader key's ModifyIndex as the snapshot showed it.
	index uint64
	// epoch is the state's epoch when the state names this agent leader,
	// for the released key's value (which is for people).
	epoch int32
	// since is when the loop first saw the key stray at index; retryAt
	// when it may try again after an attempt.
	since, retryAt time.Time
}

// wakeStrays asks the stray-lock loop for a pass, without blocking.
func (c *Client) wakeStrays() {
	select {
	case c.strayWake <- struct{}{}:
	default:
	}
}

// busyLocked records a campaign of pk, or a release of its key, under way.
func (c *Client) busyLocked(pk partitionKey) { c.busy[pk]++ }

// notBusy ends what busyLocked recorded: the key may now be stray.
func (c *Client) notBusy(pk partitionKey) {
	c.mu.Lock()
	c.busy[pk]--
	if c.busy[pk] <= 0 {
		delete(c.busy, pk)
	}
	c.mu.Unlock()
	c.wakeStrays()
}

// strayLoop releases stray leader keys until ctx ends (Deregister releases
// every key the session holds after it). It passes when woken (a new
// snapshot, a leadership, campaign or release that ended, the session or
// the lease's validity changing) and when a key's grace runs out, at most
// every strayPassGap.
func (c *Client) strayLoop(ctx context.Context) {
	strays := map[partitionKey]*strayLock{}
	var last time.Time
	for {
		if !last.IsZero() {
			if wait := last.Add(strayPassGap).Sub(c.clock.Now()); wait > 0 && !c.sleep(ctx, wait) {
				return
			}
		}
		now := c.clock.Now()
		last = now
		c.mu.Lock()
		changed := c.sessionChanged
		c.mu.Unlock()
		session, due, next := c.strayPass(now, strays)
		if len(due) > 0 {
			c.releaseStrays(ctx, session, due)
		}
		var timer <-chan time.Time
		if !next.IsZero() {
			timer = c.clock.After(next.Sub(c.clock.Now()))
		}
		select {
		case <-ctx.Done():
			return
		case <-c.strayWake:
		case <-changed:
		case <-timer:
		}
	}
}

// strayPass brings strays up to date at now with the current snapshot and
// returns the session, the keys due for release, and when the next one
// falls due (zero for none). Without a valid lease nothing is stray: the
// session may be gone, and the grace starts again once a renewal proves it.
func (c *Client) strayPass(now time.Time, strays map[partitionKey]*strayLock) (session string, due []*strayLock, next time.Time) {
	c.mu.Lock()
	if c.lease.valid(now) {
		session = c.sessionID
	}
	c.mu.Unlock()
	if session == "" {
		clear(strays)
		return "", nil, time.Time{}
	}
	// Read without the mutex, which the lease's updates wait for: a
	// snapshot older than an election of this client shows an index the
	// election moved past, and the release's check-index refuses it.
	var held []PartitionMeta
	for _, tm := range c.snapshot.Load().topics {
		for _, pm := range tm.Partitions {
			if pm.LeaderSession == session && pm.leaderIndex != 0 {
				held = append(held, pm)
			}
		}
	}
	found := make(map[partitionKey]bool, len(held))
	c.mu.Lock()
	for _, pm := range held {
		pk := partitionKey{topic: pm.Topic, partition: pm.Partition}
		if c.leaderships[pk] != nil || c.busy[pk] > 0 {
			continue
		}
		found[pk] = true
		if s := strays[pk]; s == nil || s.index != pm.leaderIndex {
			s = &strayLock{key: pk, index: pm.leaderIndex, since: now}
			if pm.State.Leader == c.cfg.NodeID {
				s.epoch = pm.State.Epoch
			}
			strays[pk] = s
		}
	}
	c.mu.Unlock()
	for pk, s := range strays {
		if !found[pk] {
			delete(strays, pk)
			continue
		}
		at := later(s.since.Add(strayLockGrace), s.retryAt)
		if !now.Before(at) {
			due = append(due, s)
			// Released, the next snapshot drops it; refused or failed,
			// it waits as long again.
			s.retryAt = now.Add(strayLockGrace)
			at = s.retryAt
		}
		next = earliest(next, at)
	}
	return session, due, next
}

// releaseStrays releases due, at most strayReleasesAtOnce at a time
// through the batcher, and logs what it released.
func (c *Client) releaseStrays(ctx context.Context, session string, due []*strayLock) {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		released []string
		failed   atomic.Int64
	)
	slots := make(chan struct{}, strayReleasesAtOnce)
	for _, s := range due {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			ok, err := c.releaseStray(ctx, session, s)
			switch {
			case err != nil && ctx.Err() == nil:
				failed.Add(1)
				c.logConsulError("release of a stray leader key failed", err)
			case ok:
				mu.Lock()
				released = append(released, c.keys.leader(s.key.topic, s.key.partition))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(released) > 0 {
		slices.Sort(released)
		c.log.Info("released leader keys the session held without a leadership or campaign",
			"released", len(released), "keys", released[:min(len(released), 10)], "failed", failed.Load())
	}
}

// releaseStray releases one stray key if the session still holds it at
// the index its stray was seen at; it reports whether it did.
func (c *Client) releaseStray(ctx context.Context, session string, s *strayLock) (bool, error) {
	key := c.keys.leader(s.key.topic, s.key.partition)
	ops := api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: key, Index: s.index}},
		{KV: &api.KVTxnOp{Verb: api.KVUnlock, Key: key, Session: session,
			Value: encodeJSON(leaderValue{Node: c.cfg.NodeID, Epoch: s.epoch})}},
	}
	ok, resp, err := c.batchedTxn(ctx, ops, "release stray "+key, keyRule(c.keys.prefix))
	if err != nil {
		return false, err
	}
	if !ok {
		c.log.Debug("stray leader key not released: it moved on", "key", key, "index", s.index, "reason", txnErrors(resp))
	}
	return ok, nil
}
