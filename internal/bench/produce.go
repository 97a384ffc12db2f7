package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/logagent/logagent/client"
	"github.com/logagent/logagent/record"
)

// ProduceConfig is a produce workload: each request is one batch of
// BatchRecords records to one partition, sent with the given acks.
type ProduceConfig struct {
	Topic string
	// Concurrency is the number of workers, each with its own
	// client.Producer and so at most one request in flight.
	Concurrency int
	// RecordBytes is the size of each record's value.
	RecordBytes int
	// BatchRecords is the number of records per request.
	BatchRecords int
	Acks         client.Acks
	// Idempotent makes the producers idempotent (the client's default);
	// it needs Acks of client.AcksAll.
	Idempotent bool
	// Keys is the number of distinct keys; 0 sends records without keys
	// to the partitions in turn.
	Keys int
	// RecordsPerSecond is the target rate (an open loop of
	// RecordsPerSecond/BatchRecords requests per second); 0 runs a closed
	// loop.
	RecordsPerSecond float64
	// Duration and Requests bound the run as Plan.Duration and Plan.Count.
	Duration time.Duration
	Requests int64
	HardCap  time.Duration
	// Seed drives the record values and the choice of keys.
	Seed     uint64
	Clock    Clock
	Progress func(Progress)
}

// Validate reports a configuration that cannot run, as an error matching
// ErrInvalidConfig.
func (c *ProduceConfig) Validate() error {
	switch {
	case c.Concurrency <= 0:
		return fmt.Errorf("%w: concurrency %d must be positive", ErrInvalidConfig, c.Concurrency)
	case c.RecordBytes < 0:
		return fmt.Errorf("%w: record size %d is negative", ErrInvalidConfig, c.RecordBytes)
	case c.BatchRecords <= 0:
		return fmt.Errorf("%w: records per request %d must be positive", ErrInvalidConfig, c.BatchRecords)
	case c.Acks < client.AcksAll || c.Acks > client.AcksNone:
		return fmt.Errorf("%w: acks %d", ErrInvalidConfig, c.Acks)
	case c.Idempotent && c.Acks != client.AcksAll:
		return fmt.Errorf("%w: idempotent producers need acks=all, not %s", ErrInvalidConfig, c.Acks)
	case c.Keys < 0:
		return fmt.Errorf("%w: keys %d is negative", ErrInvalidConfig, c.Keys)
	case math.IsNaN(c.RecordsPerSecond) || math.IsInf(c.RecordsPerSecond, 0) || c.RecordsPerSecond < 0:
		return fmt.Errorf("%w: rate %v records/s", ErrInvalidConfig, c.RecordsPerSecond)
	}
	return c.plan().validate(c.Concurrency)
}

func (c *ProduceConfig) plan() Plan {
	return Plan{
		Rate:     c.RecordsPerSecond / float64(c.BatchRecords),
		Duration: c.Duration,
		Count:    c.Requests,
		HardCap:  c.HardCap,
		Clock:    c.Clock,
		Progress: c.Progress,
	}
}

func (c *ProduceConfig) settings(partitions int) map[string]any {
	rate := "closed loop"
	if c.RecordsPerSecond > 0 {
		rate = strconv.FormatFloat(c.RecordsPerSecond, 'f', -1, 64) + " records/s"
	}
	return map[string]any{
		"topic":               c.Topic,
		"partitions":          partitions,
		"concurrency":         c.Concurrency,
		"record_bytes":        c.RecordBytes,
		"records_per_request": c.BatchRecords,
		"acks":                c.Acks.String(),
		"idempotent":          c.Idempotent,
		"keys":                c.Keys,
		"rate":                rate,
		"duration":            c.Duration.String(),
		"max_requests":        c.Requests,
		"seed":                c.Seed,
	}
}

// Produce runs a produce workload against the topic, which must exist.
// Request latency runs from the request's due time (open loop) or start
// (closed loop) to the agent's answer for its batch at the chosen acks.
func Produce(ctx context.Context, c *client.Client, cfg ProduceConfig) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	info, err := describe(ctx, c, cfg.Topic)
	if err != nil {
		return nil, err
	}
	res, err := runProducers(ctx, c, &cfg, len(info.Partitions), nil)
	if err != nil {
		return nil, err
	}
	res.Workload, res.Config = "produce", cfg.settings(len(info.Partitions))
	return res, nil
}

// produceWorker sends one request at a time through its own Producer.
type produceWorker struct {
	producer   *client.Producer
	partitions int
	batch      int
	keys       *keySet // nil without keys
	rng        *rand.Rand
	value      []byte
	futures    []*client.Future
	// stamp, when set, writes the request into the value before it is
	// sent (e2e).
	stamp func(value []byte, req Request)
}

// lingerUntilFlush keeps the Producer from sending a batch on its own: each
// request's records go out as one batch when the worker flushes them.
const lingerUntilFlush = 24 * time.Hour

// retryFor bounds the Producer's retries of a request that the agent
// refused before writing anything (not_leader, not_enough_replicas, ...):
// after it the request fails with the agent's last error, so a run against
// a partition that cannot take writes says why instead of waiting for the
// hard cap.
const retryFor = 10 * time.Second

// perRecordBound is more than a record's encoding adds to its key and
// value (attributes, timestamp and offset deltas, lengths, header count),
// so that a Producer never closes a request's batch early.
const perRecordBound = 64

func newProduceWorkers(c *client.Client, cfg *ProduceConfig, partitions int, stamp func([]byte, Request)) ([]*produceWorker, func(), error) {
	keys := newKeySet(cfg.Keys, partitions)
	keyBytes := 0
	if keys != nil {
		keyBytes = len(keys.keys[0])
	}
	batchBound := record.HeaderSize + cfg.BatchRecords*(keyBytes+cfg.RecordBytes+perRecordBound)
	var workers []*produceWorker
	closeAll := func() {
		// Every request has its outcome by now, or was cut off by the
		// hard cap and already counted as canceled; a Close that times out
		// only aborts those.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, w := range workers {
			_ = w.producer.Close(ctx)
		}
	}
	for i := range cfg.Concurrency {
		p, err := c.NewProducer(client.WithDefaultTopic(cfg.Topic), client.WithAcks(cfg.Acks), client.WithIdempotence(cfg.Idempotent),
			client.WithLinger(lingerUntilFlush), client.WithMaxBatchBytes(batchBound),
			client.WithMaxBufferedBytes(max(batchBound, 32<<20)), client.WithDeliveryTimeout(retryFor))
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("bench: producer: %w", err)
		}
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
		value := make([]byte, cfg.RecordBytes)
		for j := range value {
			value[j] = byte(rng.Uint32())
		}
		workers = append(workers, &produceWorker{
			producer:   p,
			partitions: partitions,
			batch:      cfg.BatchRecords,
			keys:       keys,
			rng:        rng,
			value:      value,
			futures:    make([]*client.Future, 0, cfg.BatchRecords),
			stamp:      stamp,
		})
	}
	return workers, closeAll, nil
}

// runProducers runs cfg's plan with one produceWorker per worker and
// closes their Producers.
func runProducers(ctx context.Context, c *client.Client, cfg *ProduceConfig, partitions int, stamp func([]byte, Request)) (*Result, error) {
	workers, closeAll, err := newProduceWorkers(c, cfg, partitions, stamp)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	ops := make([]Op, len(workers))
	for i, w := range workers {
		ops[i] = w.do
	}
	return Run(ctx, cfg.plan(), ops)
}

// do sends the request's records as one batch to one partition: the next
// in turn without keys, else the partition of a key drawn at random, with
// the other records' keys drawn among the keys of that partition.
func (w *produceWorker) do(ctx context.Context, req Request) (Done, error) {
	partition := int(req.Seq % int64(w.partitions))
	first := -1
	if w.keys != nil {
		partition, first = w.keys.draw(w.rng)
	}
	if w.stamp != nil {
		w.stamp(w.value, req)
	}
	m := client.Message{Value: w.value, Partition: client.ToPartition(partition)}
	var done Done
	var produceErr error
	w.futures = w.futures[:0]
	for i := range w.batch {
		if w.keys != nil {
			// The first key is the one drawn, so every key is equally
			// likely overall.
			k := first
			if i > 0 {
				group := w.keys.byPartition[partition]
				k = group[w.rng.IntN(len(group))]
			}
			m.Key = w.keys.keys[k]
		}
		f, err := w.producer.Produce(ctx, m)
		if err != nil {
			produceErr = err
			break
		}
		w.futures = append(w.futures, f)
		done.Records++
		done.Bytes += int64(len(m.Key) + len(m.Value))
	}
	// Flush sends the records as one batch and waits for it; after an
	// early failure it still sends those queued, so that none of them
	// joins the next request's batch.
	if err := w.producer.Flush(ctx); err != nil {
		return Done{}, err
	}
	for _, f := range w.futures {
		if _, err := f.Wait(ctx); err != nil {
			return Done{}, err
		}
	}
	if produceErr != nil {
		return Done{}, produceErr
	}
	return done, nil
}

// keySet holds the keys "key-0" to "key-(n-1)", zero-padded to one length,
// grouped by the partition that client.PartitionForKey gives them, which
// is where the client would send them.
type keySet struct {
	keys        [][]byte
	partitionOf []int
	byPartition [][]int // indexes into keys
}

func newKeySet(n, partitions int) *keySet {
	if n == 0 {
		return nil
	}
	s := &keySet{byPartition: make([][]int, partitions)}
	width := len(strconv.Itoa(n - 1))
	for i := range n {
		key := fmt.Appendf(nil, "key-%0*d", width, i)
		p := client.PartitionForKey(key, partitions)
		s.keys = append(s.keys, key)
		s.partitionOf = append(s.partitionOf, p)
		s.byPartition[p] = append(s.byPartition[p], i)
	}
	return s
}

// draw picks a key uniformly and returns its partition and the key.
func (s *keySet) draw(rng *rand.Rand) (partition, key int) {
	key = rng.IntN(len(s.keys))
	return s.partitionOf[key], key
}
