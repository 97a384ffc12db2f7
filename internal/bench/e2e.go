package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/logagent/logagent/client"
)

// EndToEndConfig is an e2e workload: producers at a target rate, and one
// long-polling consumer per partition that reads what they write.
type EndToEndConfig struct {
	// Produce describes the producers; RecordsPerSecond must be set and
	// RecordBytes must hold the stamp (StampBytes).
	Produce ProduceConfig
	// FetchWait is each consumer fetch's long-poll wait (default 1s).
	FetchWait time.Duration
	// Drain is how long the consumers may take, after the producers are
	// done, to read every record that was acknowledged (default 10s).
	Drain time.Duration
}

// StampBytes is the size of the stamp at the start of each e2e record value:
//
//	0        8                     16
//	+--------+---------------------+------------------
//	| run id | due time, ns after  | random padding ...
//	|        | the run's base time |
//	+--------+---------------------+------------------
//
// both big-endian. The run id (random per run) tells this run's records
// from any other writer's. The due time is the request's scheduled time,
// so that a producer that falls behind schedule is charged for it too.
const StampBytes = 16

// drainPoll is how often the drain checks whether the consumers are done.
const drainPoll = 10 * time.Millisecond

// Validate reports a configuration that cannot run, as an error matching
// ErrInvalidConfig.
func (c *EndToEndConfig) Validate() error {
	switch {
	case c.Produce.RecordsPerSecond <= 0:
		return fmt.Errorf("%w: an e2e run needs a target rate", ErrInvalidConfig)
	case c.Produce.RecordBytes < StampBytes:
		return fmt.Errorf("%w: e2e records need at least %d bytes for the stamp, not %d", ErrInvalidConfig, StampBytes, c.Produce.RecordBytes)
	case c.FetchWait < 0 || c.Drain < 0:
		return fmt.Errorf("%w: negative fetch wait or drain", ErrInvalidConfig)
	}
	return c.Produce.Validate()
}

// EndToEnd runs an e2e workload. Result.Latency is the produce request
// latency, as in Produce; Result.EndToEnd is, for each record read back, the
// time from its request's due time to the return of the consumer fetch that
// delivered it; Result.NotConsumed counts acknowledged records never read.
func EndToEnd(ctx context.Context, c *client.Client, cfg EndToEndConfig) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pc := &cfg.Produce
	if cfg.FetchWait == 0 {
		cfg.FetchWait = time.Second
	}
	if cfg.Drain == 0 {
		cfg.Drain = 10 * time.Second
	}
	clock := orSystemClock(pc.Clock)
	info, err := describe(ctx, c, pc.Topic)
	if err != nil {
		return nil, err
	}

	runID := rand.Uint64()
	base := clock.Now()
	stamp := func(value []byte, req Request) {
		binary.BigEndian.PutUint64(value[0:8], runID)
		binary.BigEndian.PutUint64(value[8:16], uint64(req.Intended.Sub(base)))
	}

	consumeCtx, stopConsumers := context.WithCancel(ctx)
	var readersDone sync.WaitGroup
	// On an early return too, no reader outlives the call.
	defer func() {
		stopConsumers()
		readersDone.Wait()
	}()
	var received atomic.Int64
	readers := make([]*e2eReader, 0, len(info.Partitions))
	for _, p := range info.Partitions {
		// Start at the high watermark seen before producing: every
		// record of this run is above it.
		cons, err := c.NewConsumer(pc.Topic, p.Partition, p.HighWatermark, client.WithFetchMaxWait(cfg.FetchWait))
		if err != nil {
			return nil, fmt.Errorf("bench: consumer: %w", err)
		}
		r := &e2eReader{consumer: cons, clock: clock, runID: runID, base: base, received: &received}
		readers = append(readers, r)
		readersDone.Add(1)
		go func() {
			defer readersDone.Done()
			r.read(consumeCtx)
		}()
	}

	res, err := runProducers(ctx, c, pc, len(info.Partitions), stamp)
	if err != nil {
		return nil, err
	}

	drainEnd := clock.Now().Add(cfg.Drain)
	for received.Load() < res.Records && clock.Now().Before(drainEnd) && !allStopped(readers) {
		if clock.SleepUntil(ctx, clock.Now().Add(drainPoll)) != nil {
			break
		}
	}
	stopConsumers()
	readersDone.Wait()

	res.Workload = "e2e"
	res.Config = pc.settings(len(info.Partitions))
	res.Config["fetch_wait"] = cfg.FetchWait.String()
	res.Config["drain"] = cfg.Drain.String()
	res.EndToEnd = &Histogram{}
	for _, r := range readers {
		res.EndToEnd.Merge(&r.stats.latency)
		for kind, n := range r.stats.errors {
			res.addErrors("consume_"+kind, n, r.stats.examples[kind])
		}
	}
	res.NotConsumed = max(res.Records-received.Load(), 0)
	return res, nil
}

// e2eReader reads one partition and times this run's records.
type e2eReader struct {
	consumer *client.Consumer
	clock    Clock
	runID    uint64
	base     time.Time
	received *atomic.Int64
	stats    workerStats
	stopped  atomic.Bool
}

// read consumes until ctx ends or a fetch fails for good (the consumer has
// retried what may pass), which is counted as an error.
func (r *e2eReader) read(ctx context.Context) {
	defer r.stopped.Store(true)
	for {
		records, err := r.consumer.Poll(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			r.stats.fail(err)
			return
		}
		now := r.clock.Now()
		for _, rec := range records {
			v := rec.Value
			if len(v) < StampBytes || binary.BigEndian.Uint64(v[0:8]) != r.runID {
				continue
			}
			due := r.base.Add(time.Duration(binary.BigEndian.Uint64(v[8:16])))
			r.stats.latency.Record(now.Sub(due))
			r.received.Add(1)
		}
	}
}

func allStopped(readers []*e2eReader) bool {
	for _, r := range readers {
		if !r.stopped.Load() {
			return false
		}
	}
	return true
}
