package agent

import (
	"fmt"
	"sync"
	"time"

	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/replicate"
)

// coalescer combines concurrent produce requests for one partition, with
// the same acks, into one batch: one local append or one forward instead of
// many (docs/design.md §9). A request that finds nothing of its partition in
// flight is sent at once, so an idle sidecar adds no delay; one that finds
// a send in flight starts a group that waits until that send ends, at most
// producer.linger, or until the group reaches producer.max_batch_bytes,
// gathering the requests that arrive meanwhile (group commit).
// Each caller's records stay together and in their order, so a caller's
// offsets are the combined batch's base plus the records of the callers
// before it:
//
//	caller A (3 records) ─┐
//	caller B (1 record)  ─┼─► one batch, offsets 40..45 ─► A 40..42, B 43, C 44..45
//	caller C (2 records) ─┘
//
// A failure answers every caller of the group with the same error.
type coalescer struct {
	linger   time.Duration
	maxBytes int
	// produce sends one batch, combined or not (Agent.produceBatch).
	produce func(key groupKey, batch []byte, count int, deadline time.Time) (produceResponse, *reply.APIError)
	// produceGroup sends the batches of idempotent producers together,
	// each as it is (Agent.produceIdempotentGroup).
	produceGroup func(key groupKey, batches [][]byte, counts []int, deadline time.Time) ([]produceResponse, []*reply.APIError)
	// decoders reads the batches to combine.
	decoders *sync.Pool

	mu      sync.Mutex
	pending map[groupKey]*produceGroup
	// inflight counts the groups of a key being sent; idle is closed when
	// the count drops to zero.
	inflight map[groupKey]*inflight
}

type inflight struct {
	sends int
	idle  chan struct{}
}

type groupKey struct {
	topic     string
	partition int
	acks      replicate.Acks
	// idempotent groups idempotent producers' batches, which are sent
	// side by side rather than combined: a batch has one producer header.
	idempotent bool
}

// produceGroup is the requests waiting to be sent together.
type produceGroup struct {
	key      groupKey
	members  []*groupMember
	bytes    int
	deadline time.Time
	// full is closed when no further request fits.
	full   chan struct{}
	closed bool
}

type groupMember struct {
	batch []byte
	count int
	done  chan struct{}
	resp  produceResponse
	err   *reply.APIError
}

func newCoalescer(linger time.Duration, maxBytes int, decoders *sync.Pool,
	produce func(key groupKey, batch []byte, count int, deadline time.Time) (produceResponse, *reply.APIError)) *coalescer {
	return &coalescer{linger: linger, maxBytes: maxBytes, produce: produce, decoders: decoders,
		pending: map[groupKey]*produceGroup{}, inflight: map[groupKey]*inflight{}}
}

// submit sends one validated batch, alone or with others, and answers
// with this caller's offsets.
func (c *coalescer) submit(key groupKey, batch []byte, count int, deadline time.Time) (produceResponse, *reply.APIError) {
	if record.Header(batch).Codec() != record.CodecNone {
		// Alone, as it came: combined, its records would be stored
		// uncompressed, in a batch that may outgrow the log's limit (a
		// 0.84 MB snappy batch of 17.8 MB of records failed the request
		// it was combined with).
		return c.produce(key, batch, count, deadline)
	}
	m := &groupMember{batch: batch, count: count, done: make(chan struct{})}
	c.mu.Lock()
	g := c.pending[key]
	if g != nil && g.bytes+len(batch) > c.maxBytes {
		c.closeLocked(g)
		g = nil
	}
	founder := g == nil
	if founder {
		g = &produceGroup{key: key, deadline: deadline, full: make(chan struct{})}
		c.pending[key] = g
	}
	g.members = append(g.members, m)
	g.bytes += len(batch)
	g.deadline = minTime(g.deadline, deadline)
	if g.bytes >= c.maxBytes {
		c.closeLocked(g)
	}
	busy := c.inflight[key]
	c.mu.Unlock()
	if !founder {
		<-m.done
		return m.resp, m.err
	}
	if busy != nil {
		linger := time.NewTimer(c.linger)
		select {
		case <-linger.C:
		case <-g.full:
		case <-busy.idle:
		}
		linger.Stop()
	}
	c.mu.Lock()
	c.closeLocked(g)
	f := c.inflight[key]
	if f == nil {
		f = &inflight{idle: make(chan struct{})}
		c.inflight[key] = f
	}
	f.sends++
	c.mu.Unlock()
	c.send(g)
	c.mu.Lock()
	if f.sends--; f.sends == 0 {
		close(f.idle)
		delete(c.inflight, key)
	}
	c.mu.Unlock()
	return m.resp, m.err
}

// closeLocked takes g out of pending, so later requests start a new group.
func (c *coalescer) closeLocked(g *produceGroup) {
	if g.closed {
		return
	}
	g.closed = true
	close(g.full)
	if c.pending[g.key] == g {
		delete(c.pending, g.key)
	}
}

// send sends a closed group and answers its members.
func (c *coalescer) send(g *produceGroup) {
	defer func() {
		for _, m := range g.members {
			close(m.done)
		}
	}()
	if g.key.idempotent && len(g.members) > 1 {
		c.sendSideBySide(g)
		return
	}
	batch, count := g.members[0].batch, g.members[0].count
	if len(g.members) > 1 {
		var err error
		if batch, count, err = c.merge(g.members); err != nil || len(batch) > c.maxBytes {
			// Valid batches that one batch cannot hold together (their
			// timestamps too far apart for its deltas), or only over the
			// bound (deltas from the first member's record take more
			// bytes than from each batch's own, and the bound may be the
			// leader's batch limit): each goes as it came, answered on
			// its own.
			c.sendOneByOne(g)
			return
		}
	}
	resp, e := c.produce(g.key, batch, count, g.deadline)
	if len(g.members) == 1 {
		// Its own answer, duplicate flag included.
		g.members[0].resp, g.members[0].err = resp, e
		return
	}
	next := int64(0)
	for _, m := range g.members {
		m.resp, m.err = produceResponse{Topic: resp.Topic, Partition: resp.Partition, Count: m.count, Epoch: resp.Epoch}, e
		if e == nil && resp.BaseOffset != nil {
			base, last := *resp.BaseOffset+next, *resp.BaseOffset+next+int64(m.count)-1
			m.resp.BaseOffset, m.resp.LastOffset = &base, &last
		}
		next += int64(m.count)
	}
}

// sendSideBySide sends a group of idempotent batches in one go, each
// answered on its own.
func (c *coalescer) sendSideBySide(g *produceGroup) {
	batches, counts := make([][]byte, len(g.members)), make([]int, len(g.members))
	for i, m := range g.members {
		batches[i], counts[i] = m.batch, m.count
	}
	resps, errs := c.produceGroup(g.key, batches, counts, g.deadline)
	for i, m := range g.members {
		m.resp, m.err = resps[i], errs[i]
		m.resp.Count = m.count
	}
}

// sendOneByOne sends each member's batch alone, in arrival order.
func (c *coalescer) sendOneByOne(g *produceGroup) {
	for _, m := range g.members {
		m.resp, m.err = c.produce(g.key, m.batch, m.count, g.deadline)
	}
}

// merge re-encodes the members' records, in member order, as one batch.
func (c *coalescer) merge(members []*groupMember) ([]byte, int, error) {
	d := c.decoders.Get().(*record.Decoder)
	defer c.decoders.Put(d)
	var b record.Builder
	for _, m := range members {
		it, err := d.Records(m.batch)
		if err != nil {
			return nil, 0, fmt.Errorf("agent: coalesce: %w", err)
		}
		for it.Next() {
			r := it.Record()
			if err := b.Add(r.Timestamp, r.Key, r.Value, r.Headers); err != nil {
				return nil, 0, fmt.Errorf("agent: coalesce: %w", err)
			}
		}
		if err := it.Err(); err != nil {
			return nil, 0, fmt.Errorf("agent: coalesce: %w", err)
		}
	}
	batch, err := b.AppendTo(nil)
	if err != nil {
		return nil, 0, fmt.Errorf("agent: coalesce: %w", err)
	}
	return batch, b.Len(), nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
