package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/logagent/logagent/client"
)

// ConsumeConfig is a consume workload: read partitions from their earliest
// offset to the high watermark they had at the start, as fast as fetches
// go, one worker per partition; with Repeat, read them again from the start
// until Duration passes.
type ConsumeConfig struct {
	Topic string
	// Partition is the partition to read, or -1 for all of them.
	Partition int
	// FetchMaxBytes is each fetch's max_bytes (0: the client's default).
	FetchMaxBytes int
	// Duration bounds the run; it ends sooner when every partition is
	// read to its end, unless Repeat.
	Duration time.Duration
	// Repeat starts a partition over from its earliest offset when it is
	// read to its end, so that a run lasts Duration: a steadier figure
	// than one pass over data that takes a fraction of a second to read.
	Repeat   bool
	HardCap  time.Duration
	Clock    Clock
	Progress func(Progress)
}

func (c *ConsumeConfig) plan() Plan {
	return Plan{Duration: c.Duration, HardCap: c.HardCap, Clock: c.Clock, Progress: c.Progress}
}

// Validate reports a configuration that cannot run, as an error matching
// ErrInvalidConfig.
func (c *ConsumeConfig) Validate() error {
	switch {
	case c.Partition < -1:
		return fmt.Errorf("%w: partition %d", ErrInvalidConfig, c.Partition)
	case c.FetchMaxBytes < 0:
		return fmt.Errorf("%w: fetch max bytes %d", ErrInvalidConfig, c.FetchMaxBytes)
	case c.Duration <= 0:
		return fmt.Errorf("%w: a consume run needs a duration", ErrInvalidConfig)
	}
	return c.plan().validate(1)
}

// Consume runs a consume workload. Each request is one fetch (a Poll of a
// client.Consumer that does not wait for new records); its latency runs
// from the call to the decoded answer.
func Consume(ctx context.Context, c *client.Client, cfg ConsumeConfig) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.FetchMaxBytes == 0 {
		cfg.FetchMaxBytes = client.DefaultFetchMaxBytes
	}
	info, err := describe(ctx, c, cfg.Topic)
	if err != nil {
		return nil, err
	}
	var ops []Op
	var total int64
	for _, p := range info.Partitions {
		if cfg.Partition >= 0 && p.Partition != cfg.Partition {
			continue
		}
		// The worker is done with each fetch's records before the next.
		cons, err := c.NewConsumer(cfg.Topic, p.Partition, client.OffsetEarliest,
			client.WithFetchMaxBytes(cfg.FetchMaxBytes), client.WithFetchMaxWait(0), client.WithBufferReuse())
		if err != nil {
			return nil, fmt.Errorf("bench: consumer: %w", err)
		}
		w := &consumeWorker{consumer: cons, start: p.LogStartOffset, end: p.HighWatermark, repeat: cfg.Repeat}
		ops = append(ops, w.do)
		total += p.HighWatermark - p.LogStartOffset
	}
	if len(ops) == 0 {
		return nil, fmt.Errorf("%w: topic %q has no partition %d", ErrInvalidConfig, cfg.Topic, cfg.Partition)
	}
	res, err := Run(ctx, cfg.plan(), ops)
	if err != nil {
		return nil, err
	}
	res.Workload = "consume"
	partition := "all"
	if cfg.Partition >= 0 {
		partition = fmt.Sprint(cfg.Partition)
	}
	res.Config = map[string]any{
		"topic":           cfg.Topic,
		"partition":       partition,
		"fetch_max_bytes": cfg.FetchMaxBytes,
		"duration":        cfg.Duration.String(),
		"repeat":          cfg.Repeat,
		"records_to_read": total,
	}
	return res, nil
}

// consumeWorker reads one partition from start up to end, over and over
// with repeat.
type consumeWorker struct {
	consumer   *client.Consumer
	start, end int64
	repeat     bool
	finished   bool
}

func (w *consumeWorker) do(ctx context.Context, _ Request) (Done, error) {
	if w.finished {
		return Done{}, ErrWorkerDone
	}
	records, err := w.consumer.Poll(ctx)
	if err != nil {
		return Done{}, err
	}
	var done Done
	for _, r := range records {
		if r.Offset >= w.end {
			break
		}
		done.Records++
		done.Bytes += int64(len(r.Key) + len(r.Value))
		for _, h := range r.Headers {
			done.Bytes += int64(len(h.Key) + len(h.Value))
		}
	}
	if w.consumer.Position() >= w.end {
		if !w.repeat || w.end <= w.start {
			w.finished = true
		} else if err := w.consumer.SeekTo(w.start); err != nil {
			return done, err
		}
	}
	return done, nil
}
