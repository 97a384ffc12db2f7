package replicate

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// cluster is a synchronous test cluster: replicas with memLogs, driven through
// Leader and Follower the way the agent will drive them, with Consul's state
// (epoch, leader, ISR) kept here. Requests are answered at once; tests choose
// the order of events.
type cluster struct {
	t          testing.TB
	durability Durability
	replicas   []string
	minISR     int
	lagTimeMax time.Duration
	now        time.Time

	nodes    map[string]*testNode
	epoch    int32
	leaderID string
	isr      []string

	nextAck  AckID
	outcomes map[AckID]error
}

type testNode struct {
	id       string
	log      *memLog
	leader   *Leader
	follower *Follower
}

func newCluster(t testing.TB, durability Durability, minISR int, replicas ...string) *cluster {
	c := &cluster{
		t:          t,
		durability: durability,
		replicas:   replicas,
		minISR:     minISR,
		lagTimeMax: 10 * time.Second,
		now:        time.Unix(1_700_000_000, 0),
		nodes:      make(map[string]*testNode),
		isr:        slices.Clone(replicas),
		outcomes:   make(map[AckID]error),
	}
	for _, id := range replicas {
		c.nodes[id] = &testNode{id: id, log: newMemLog()}
	}
	return c
}

// elect makes id the leader of a new epoch, as the election txn does.
func (c *cluster) elect(id string) *Leader {
	c.t.Helper()
	n := c.nodes[id]
	c.epoch++
	c.leaderID = id
	n.follower = nil
	n.log.assignEpoch(c.epoch)
	l, err := NewLeader(LeaderConfig{
		Self:              id,
		Epoch:             c.epoch,
		EpochStartOffset:  n.log.logEnd(),
		Replicas:          c.replicas,
		ISR:               c.isr,
		MinInsyncReplicas: c.minISR,
		LagTimeMax:        c.lagTimeMax,
		Durability:        c.durability,
		LogEndOffset:      n.log.logEnd(),
		SyncedEndOffset:   n.log.synced,
		HighWatermark:     n.log.hw,
		EpochCache:        n.log,
	}, c.now)
	if err != nil {
		c.t.Fatalf("elect %s: %v", id, err)
	}
	n.leader = l
	return l
}

// follow makes id a follower of the current leader.
func (c *cluster) follow(id string) *Follower {
	c.t.Helper()
	n := c.nodes[id]
	n.leader = nil
	f, err := NewFollower(FollowerConfig{
		Self:            id,
		LeaderEpoch:     c.epoch,
		Durability:      c.durability,
		LogEndOffset:    n.log.logEnd(),
		SyncedEndOffset: n.log.synced,
		HighWatermark:   n.log.hw,
		EpochCache:      n.log,
	})
	if err != nil {
		c.t.Fatalf("follow %s: %v", id, err)
	}
	n.follower = f
	return f
}

// crash loses what id did not fsync and forgets its role.
func (c *cluster) crash(id string) {
	n := c.nodes[id]
	n.log.crash()
	n.leader, n.follower = nil, nil
}

func (c *cluster) leader() *testNode { return c.nodes[c.leaderID] }

// produce appends one batch to the leader and registers its ack.
func (c *cluster) produce(acks Acks, values ...string) (AckID, int64) {
	c.t.Helper()
	n := c.leader()
	if err := n.leader.CanAppend(acks); err != nil {
		c.t.Fatalf("produce %v: %v", values, err)
	}
	if err := n.log.append(recordsOf(c.epoch, values...)...); err != nil {
		c.t.Fatal(err)
	}
	last := n.log.logEnd() - 1
	if err := n.leader.Appended(last, c.now); err != nil {
		c.t.Fatal(err)
	}
	c.nextAck++
	if err := n.leader.WaitAck(c.nextAck, last, acks, time.Time{}); err != nil {
		c.t.Fatal(err)
	}
	c.drainLeader()
	return c.nextAck, last
}

// sync fsyncs id's log and reports it.
func (c *cluster) sync(id string) {
	c.t.Helper()
	n := c.nodes[id]
	n.log.sync()
	if n.log.logEnd() == 0 {
		return
	}
	var err error
	switch {
	case n.leader != nil:
		err = n.leader.Synced(n.log.logEnd() - 1)
		c.drainLeader()
	case n.follower != nil:
		err = n.follower.Synced(n.log.logEnd() - 1)
	}
	if err != nil {
		c.t.Fatalf("sync %s: %v", id, err)
	}
}

// drainLeader applies the leader's Ready: it checkpoints the HW, commits ISR
// proposals in "Consul" at once and records ack outcomes.
func (c *cluster) drainLeader() {
	c.t.Helper()
	n := c.leader()
	for n.leader != nil && n.leader.HasReady() {
		rd := n.leader.Ready()
		if rd.HighWatermarkChanged {
			n.log.hw = rd.HighWatermark
		}
		for _, a := range rd.Acks {
			c.outcomes[a.ID] = a.Err
		}
		if p := rd.ISRProposal; p != nil {
			c.isr = slices.Clone(p.ISR)
			if err := n.leader.ISRCommitted(p.ISR, p.ELR, c.now); err != nil {
				c.t.Fatal(err)
			}
		}
	}
}

// step lets follower id do what its Ready asks, answering from the leader:
// one truncation or one fetch (of up to 100 records,
// fsynced at once when syncAfterFetch). It reports whether the follower had
// anything to do.
func (c *cluster) step(id string, syncAfterFetch bool) bool {
	c.t.Helper()
	n, ln := c.nodes[id], c.leader()
	f := n.follower
	rd := f.Ready()
	if rd.HighWatermarkChanged {
		n.log.hw = rd.HighWatermark
	}
	switch {
	case rd.Truncate != nil:
		n.log.truncate(rd.Truncate.Offset)
		if err := f.Truncated(n.log.logEnd()); err != nil {
			c.t.Fatal(err)
		}
	case rd.Fetch != nil:
		res, err := ln.leader.Fetch(*rd.Fetch, c.now)
		if err != nil {
			c.t.Fatalf("%s fetches %+v: %v", id, *rd.Fetch, err)
		}
		if res.Diverging == nil {
			if recs := ln.log.read(rd.Fetch.FetchOffset, 100); len(recs) > 0 {
				if err := n.log.append(recs...); err != nil {
					c.t.Fatal(err)
				}
				if err := f.Appended(n.log.logEnd() - 1); err != nil {
					c.t.Fatal(err)
				}
				if syncAfterFetch {
					n.log.sync()
					if err := f.Synced(n.log.logEnd() - 1); err != nil {
						c.t.Fatal(err)
					}
				}
			}
		}
		if err := f.FetchResponded(res); err != nil {
			c.t.Fatal(err)
		}
		c.drainLeader()
	default:
		return false
	}
	// The HW change, if any, comes out of the next Ready with the next
	// request; checkpoint it now so that a crash in between keeps it.
	n.log.hw = f.HighWatermark()
	return true
}

// replicate runs rounds of one step per follower, fsyncing the leader before
// each round.
func (c *cluster) replicate(rounds int, followers ...string) {
	c.t.Helper()
	for range rounds {
		c.sync(c.leaderID)
		for _, id := range followers {
			c.step(id, true)
		}
	}
}

// outcome is the ack's result: nil for success, errPending while waiting.
func (c *cluster) outcome(id AckID) error {
	err, done := c.outcomes[id]
	if !done {
		return errPending
	}
	return err
}

var errPending = errors.New("still pending")
