package election

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

const (
	// producerIDBlock is how many ids one reservation takes: allocation
	// writes to Consul once per block, not once per producer.
	producerIDBlock = 1000
	// producerCASAttempts bounds the read-CAS rounds of one reservation or
	// bump lost to other agents; past it the caller gets ErrConflict and
	// may retry, rather than an agent looping on a contended key.
	producerCASAttempts = 16
	producerCASRetryMin = 5 * time.Millisecond
	producerCASRetryMax = 200 * time.Millisecond
)

// errEpochsExhausted stops a bump whose id is at epoch math.MaxInt16.
var errEpochsExhausted = errors.New("election: producer epochs exhausted")

// ProducerIDs hands out idempotent-producer ids unique across the cluster
// and bumps their epochs. Ids come from blocks reserved with a CAS on the
// counter key <prefix>producer_ids; epochs are kept under
// <prefix>producer_epochs/<id> (see keys.go). It is safe for concurrent use.
type ProducerIDs struct {
	c *Client
	// reserving holds the one block reservation in flight (capacity 1);
	// callers that find the block used up wait for it and take from the
	// block it brings.
	reserving chan struct{}

	mu sync.Mutex
	// next and end bound the ids of the current block not handed out yet:
	// [next, end).
	next, end int64
}

// NewProducerIDs returns an allocator that talks to Consul through c (its
// configuration, prefix, clock and logger). It does no I/O; it stops with
// c: calls that need Consul after c.Close fail with ErrClosed.
func NewProducerIDs(c *Client) *ProducerIDs {
	return &ProducerIDs{c: c, reserving: make(chan struct{}, 1)}
}

// Allocate returns a new producer id, never handed out before by any agent
// using the same Consul and prefix, with epoch 0. It writes to Consul only
// when this agent's block is used up. Errors: ctx's, ErrClosed,
// ErrConflict (the reservation lost every CAS round: retry),
// ErrCorruptMetadata, a *PermissionError, or the Consul call's error
// (Consul unreachable), each wrapped.
func (p *ProducerIDs) Allocate(ctx context.Context) (int64, int16, error) {
	for {
		if id, ok := p.take(); ok {
			return id, 0, nil
		}
		select {
		case p.reserving <- struct{}{}:
		case <-ctx.Done():
			return 0, 0, fmt.Errorf("election: allocate producer id: %w", ctx.Err())
		case <-p.c.ctx.Done():
			return 0, 0, ErrClosed
		}
		// The reservation that held the slot may have brought a block.
		if id, ok := p.take(); ok {
			<-p.reserving
			return id, 0, nil
		}
		start, err := p.reserveBlock(ctx)
		if err == nil {
			p.mu.Lock()
			p.next, p.end = start, start+producerIDBlock
			p.mu.Unlock()
		}
		<-p.reserving
		if err != nil {
			return 0, 0, err
		}
		// Loop: concurrent callers may already have used up the new block.
	}
}

// take hands out the next id of the current block.
func (p *ProducerIDs) take() (int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next >= p.end {
		return 0, false
	}
	id := p.next
	p.next++
	return id, true
}

// reserveBlock moves the counter up by one block and returns the block's
// first id. The block never starts below the clock in microseconds since
// 1970: a counter that went back (a Consul that lost its data, or an old
// snapshot restored) would otherwise hand out ids again that producers
// already use, and a partition leader would take a new producer's first
// batches for resends of the old one's and answer "duplicate" without
// appending them. Ids handed out before the rewind stay below the clock
// unless the agents' clocks differ by more than the time between the last
// reservation and the rewind, or ids are reserved faster than one block per
// millisecond. The counter still stays below 2^53 (exact in JSON numbers
// read as doubles) until the year 2255.
func (p *ProducerIDs) reserveBlock(ctx context.Context) (int64, error) {
	key := p.c.keys.producerIDs()
	var start int64
	err := p.cas(ctx, "reserve producer ids", key, func(pair *api.KVPair) ([]byte, error) {
		next, err := decodeProducerCounter(pair)
		if err != nil {
			return nil, err
		}
		start = max(next, p.c.clock.Now().UnixMicro())
		if start > math.MaxInt64-producerIDBlock {
			return nil, fmt.Errorf("%w: %s: %d leaves no room for a block of %d ids", ErrCorruptMetadata, key, start, producerIDBlock)
		}
		return []byte(strconv.FormatInt(start+producerIDBlock, 10)), nil
	})
	if err != nil {
		return 0, err
	}
	p.c.log.Info("reserved producer ids", "first", start, "last", start+producerIDBlock-1)
	return start, nil
}

// Bump returns id with its next epoch, which fences the producer instances
// that use an older one. When id's epochs are used up (the last one handed
// out was math.MaxInt16) it returns a new id from Allocate with epoch 0
// instead, as Kafka does: callers use the id returned. An id that was never
// allocated (negative, or at or above the counter) is ErrUnknownProducerID;
// the other errors are Allocate's.
func (p *ProducerIDs) Bump(ctx context.Context, id int64) (int64, int16, error) {
	op := fmt.Sprintf("bump the epoch of producer %d", id)
	if id < 0 {
		return 0, 0, fmt.Errorf("%w: %d", ErrUnknownProducerID, id)
	}
	if p.c.ctx.Err() != nil {
		return 0, 0, ErrClosed
	}
	counter, err := p.c.getConsistent(ctx, p.c.keys.producerIDs(), op, keyRule(p.c.keys.prefix))
	if err != nil {
		return 0, 0, err
	}
	next, err := decodeProducerCounter(counter)
	if err != nil {
		return 0, 0, err
	}
	if id >= next {
		return 0, 0, fmt.Errorf("%w: %d (ids below %d were reserved)", ErrUnknownProducerID, id, next)
	}
	key := p.c.keys.producerEpoch(id)
	var epoch int16
	err = p.cas(ctx, op, key, func(pair *api.KVPair) ([]byte, error) {
		last, err := decodeProducerEpoch(pair)
		if err != nil {
			return nil, err
		}
		if last == math.MaxInt16 {
			return nil, errEpochsExhausted
		}
		epoch = last + 1
		return []byte(strconv.Itoa(int(epoch))), nil
	})
	if errors.Is(err, errEpochsExhausted) {
		newID, _, err := p.Allocate(ctx)
		if err != nil {
			return 0, 0, fmt.Errorf("election: producer %d used up its epochs, a new id: %w", id, err)
		}
		p.c.log.Info("producer used up its epochs: new id", "producer_id", id, "new_producer_id", newID)
		return newID, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	p.c.log.Debug("bumped producer epoch", "producer_id", id, "epoch", epoch)
	return id, epoch, nil
}

// cas reads key consistently, asks update for its new value (pair is nil
// when the key does not exist) and writes it in a transaction guarded by
// the index read, so a concurrent writer makes the write fail instead of
// being overwritten; a lost round is retried with backoff, at most
// producerCASAttempts times. An error from update ends it unwritten.
func (p *ProducerIDs) cas(ctx context.Context, op, key string, update func(pair *api.KVPair) ([]byte, error)) error {
	rule := keyRule(p.c.keys.prefix)
	bo := newBackoff(producerCASRetryMin, producerCASRetryMax)
	for attempt := 1; ; attempt++ {
		if p.c.ctx.Err() != nil {
			return ErrClosed
		}
		pair, err := p.c.getConsistent(ctx, key, op, rule)
		if err != nil {
			return err
		}
		value, err := update(pair)
		if err != nil {
			return err
		}
		// Index 0 writes only if the key still does not exist.
		var index uint64
		if pair != nil {
			index = pair.ModifyIndex
		}
		ok, resp, err := p.c.txn(ctx, api.TxnOps{
			{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: key, Value: value, Index: index}},
		}, op, rule)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if attempt == producerCASAttempts {
			return fmt.Errorf("%w: %s: %s lost %d rounds to other writers (%s)", ErrConflict, op, key, attempt, txnErrors(resp))
		}
		if !p.c.sleep(ctx, bo.delay()) {
			return fmt.Errorf("election: %s: %w", op, ctx.Err())
		}
	}
}

// decodeProducerCounter is the next unreserved id the counter key holds, 0
// when it does not exist.
func decodeProducerCounter(pair *api.KVPair) (int64, error) {
	if pair == nil {
		return 0, nil
	}
	next, err := strconv.ParseInt(string(pair.Value), 10, 64)
	if err != nil || next < 0 {
		return 0, fmt.Errorf("%w: %s: %q is not a producer id counter", ErrCorruptMetadata, pair.Key, pair.Value)
	}
	return next, nil
}

// decodeProducerEpoch is the last epoch handed out that an epoch key holds,
// 0 when it does not exist (Allocate hands out epoch 0 without writing).
func decodeProducerEpoch(pair *api.KVPair) (int16, error) {
	if pair == nil {
		return 0, nil
	}
	epoch, err := strconv.ParseInt(string(pair.Value), 10, 16)
	if err != nil || epoch < 0 {
		return 0, fmt.Errorf("%w: %s: %q is not a producer epoch", ErrCorruptMetadata, pair.Key, pair.Value)
	}
	return int16(epoch), nil
}

// AllocateProducerID is ProducerIDs.Allocate of the client's allocator.
func (c *Client) AllocateProducerID(ctx context.Context) (int64, int16, error) {
	return c.producerIDs.Allocate(ctx)
}

// BumpProducerEpoch is ProducerIDs.Bump of the client's allocator.
func (c *Client) BumpProducerEpoch(ctx context.Context, id int64) (int64, int16, error) {
	return c.producerIDs.Bump(ctx, id)
}
