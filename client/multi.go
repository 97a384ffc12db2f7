package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
)

// MultiConsumer reads several partitions, of one topic or several, each in
// offset order, without a group: the partitions are the ones it was made
// with and nothing is committed (a GroupConsumer shares them out and
// commits; both fetch the same way). Each partition is fetched by a
// goroutine of its own, one answer ahead of Poll. Poll and Next are for one
// goroutine; Assigned and Status may be called from others.
type MultiConsumer struct {
	g *GroupConsumer
	// buffered is what Next has not returned of the last Poll.
	buffered []Record
}

// ConsumePartitions returns a MultiConsumer of the given partitions, each
// starting at its offset: OffsetEarliest, OffsetLatest or a number. The
// options are a Consumer's, but WithBufferReuse (records are fetched ahead
// of Poll); WithOffsetReset applies to every partition.
func (c *Client) ConsumePartitions(starts map[TopicPartition]int64, opts ...ConsumerOption) (*MultiConsumer, error) {
	if len(starts) == 0 {
		return nil, fmt.Errorf("%w: a consumer needs a partition", ErrInvalidOption)
	}
	tps := make([]TopicPartition, 0, len(starts))
	for tp, from := range starts {
		if err := ValidateTopicName(tp.Topic); err != nil {
			return nil, err
		}
		if tp.Partition < 0 || from < OffsetEarliest {
			return nil, fmt.Errorf("%w: partition %s from offset %d", ErrInvalidOption, tp, from)
		}
		tps = append(tps, tp)
	}
	slices.SortFunc(tps, func(a, b TopicPartition) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	// A consumer built with the options checks their values.
	probe, err := c.NewConsumer(tps[0].Topic, 0, OffsetEarliest, opts...)
	if err != nil {
		return nil, err
	}
	if probe.cfg.reuse {
		return nil, fmt.Errorf("%w: WithBufferReuse does not apply to a MultiConsumer", ErrInvalidOption)
	}
	runCtx, stop := context.WithCancel(context.Background())
	g := &GroupConsumer{
		client:    c,
		static:    true,
		cfg:       groupConfig{reset: probe.cfg.reset, fetch: slices.Clone(opts)},
		fetchCfg:  probe.cfg,
		clock:     c.clock,
		backoff:   newBackoff(probe.cfg.backoffMin, probe.cfg.backoffMax),
		owned:     map[TopicPartition]*groupPartition{},
		changed:   make(chan struct{}),
		runCtx:    runCtx,
		stopRun:   stop,
		done:      make(chan struct{}),
		closeDone: make(chan struct{}),
	}
	close(g.done) // no heartbeat goroutine
	m := &MultiConsumer{g: g}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, tp := range tps {
		p, err := g.newPartition(tp)
		if err != nil {
			stop()
			return nil, err
		}
		from := starts[tp]
		// SeekTo fails only below OffsetEarliest, checked above.
		_ = p.cons.SeekTo(from)
		if from >= 0 {
			p.position = from
		}
		g.owned[tp] = p
	}
	if err := c.track(m); err != nil {
		stop()
		return nil, err
	}
	for _, p := range g.owned {
		g.startLocked(p)
	}
	return m, nil
}

// ConsumeTopics returns a MultiConsumer of every partition of the topics,
// as DescribeTopic tells them now, each starting at from (OffsetEarliest,
// OffsetLatest or a number). Partitions added to a topic later are not
// read.
func (c *Client) ConsumeTopics(ctx context.Context, topics []string, from int64, opts ...ConsumerOption) (*MultiConsumer, error) {
	if len(topics) == 0 {
		return nil, fmt.Errorf("%w: a consumer needs a topic", ErrInvalidOption)
	}
	starts := map[TopicPartition]int64{}
	for _, t := range topics {
		info, err := c.DescribeTopic(ctx, t)
		if err != nil {
			return nil, err
		}
		for _, p := range info.Partitions {
			starts[TopicPartition{Topic: t, Partition: p.Partition}] = from
		}
	}
	return c.ConsumePartitions(starts, opts...)
}

// Poll returns the records fetched since the last Poll (the ones Next has
// not returned first), from every partition that has some, starting each
// time at the next partition so that none waits behind the others. It
// waits until there are records or a fetch came back empty (its max wait
// passed), so it may return none. A fetch that fails for a reason that
// does not pass (ErrOffsetOutOfRange without WithOffsetReset, a corrupt
// batch) is returned, once; that partition is fetched again, from where it
// stopped, at the next Poll.
func (m *MultiConsumer) Poll(ctx context.Context) ([]Record, error) {
	if len(m.buffered) > 0 {
		out := m.buffered
		m.buffered = nil
		return out, nil
	}
	got, err := m.g.Poll(ctx)
	if err != nil {
		if errors.Is(err, ErrGroupConsumerClosed) {
			err = fmt.Errorf("%w: multi consumer", ErrClosed)
		}
		return nil, err
	}
	out := make([]Record, len(got))
	for i, r := range got {
		out[i] = r.Record
	}
	return out, nil
}

// Next returns the next record of any partition, waiting until there is
// one or ctx ends.
func (m *MultiConsumer) Next(ctx context.Context) (Record, error) {
	for len(m.buffered) == 0 {
		records, err := m.Poll(ctx)
		if err != nil {
			return Record{}, err
		}
		m.buffered = records
	}
	r := m.buffered[0]
	m.buffered[0] = Record{}
	m.buffered = m.buffered[1:]
	return r, nil
}

// Assigned is the partitions the consumer reads, sorted.
func (m *MultiConsumer) Assigned() []TopicPartition { return m.g.Assigned() }

// Status is the position and high watermark of each partition (Committed
// is -1: a MultiConsumer commits nothing). Position counts the records
// Poll returned, Next's not yet returned included.
func (m *MultiConsumer) Status() []PartitionStatus { return m.g.Status() }

// CaughtUp reports whether every partition's position has reached the high
// watermark of its last fetch answer: Poll has returned every record that
// was committed when those answers were made.
func (m *MultiConsumer) CaughtUp() bool {
	for _, s := range m.g.Status() {
		if s.HighWatermark < 0 || s.Position < s.HighWatermark {
			return false
		}
	}
	return len(m.buffered) == 0
}

// Close stops the consumer's goroutines and waits for them. Poll and Next
// fail with ErrClosed afterwards.
func (m *MultiConsumer) Close() error {
	m.g.client.forget(m)
	err := m.g.Close(context.Background())
	if errors.Is(err, ErrGroupConsumerClosed) {
		return nil
	}
	return err
}

// closeFor is Client.Close's.
func (m *MultiConsumer) closeFor(context.Context) error { return m.Close() }
