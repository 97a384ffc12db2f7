package kafka

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/logagent/logagent/record"
)

// fakeBroker is an in-memory Broker for the listener's unit tests: each
// partition is a list of stored batches (offsets stamped on append), the
// high watermark is the log end. It counts what it was asked.
type fakeBroker struct {
	mu       sync.Mutex
	topics   map[string]*fakeTopic
	changed  chan struct{} // closed and replaced on every append
	nextPID  int64
	produces int // Produce calls
	// produceDelay delays each Produce of a partition, for ordering tests.
	produceDelay map[int32]time.Duration
	// opened counts Records handed out and closed those closed.
	opened, closed int
	// notServing is what Serving answers (nil: serving).
	notServing error
}

type fakeTopic struct {
	id         [16]byte
	internal   bool
	configs    map[string]string
	partitions [][][]byte // batches per partition
	// epochs are a partition's leader epochs and where each starts, in
	// order; none is epoch 3 (Metadata's) from offset 0.
	epochs map[int32][]fakeEpoch
}

type fakeEpoch struct {
	epoch int32
	start int64
}

// endOffsetFor is where epoch ends in a partition's log whose end is leo,
// as Kafka's leader epoch cache answers: the latest epoch ends at leo, an
// earlier one where the next above it starts (as the largest epoch at
// most the one asked, or that epoch when it is below every one); an epoch
// above the latest is unknown (ok false).
func (t *fakeTopic) endOffsetFor(p, epoch int32, leo int64) (EpochEndOffset, bool) {
	epochs := t.epochs[p]
	if len(epochs) == 0 {
		epochs = []fakeEpoch{{epoch: 3}}
	}
	for i, e := range epochs {
		switch {
		case e.epoch > epoch && i == 0:
			return EpochEndOffset{Epoch: epoch, EndOffset: e.start}, true
		case e.epoch > epoch:
			return EpochEndOffset{Epoch: epochs[i-1].epoch, EndOffset: e.start}, true
		case e.epoch == epoch && i == len(epochs)-1:
			return EpochEndOffset{Epoch: epoch, EndOffset: leo}, true
		}
	}
	return EpochEndOffset{}, false
}

func newFakeBroker() *fakeBroker {
	return &fakeBroker{topics: make(map[string]*fakeTopic), changed: make(chan struct{}), nextPID: 1000}
}

func (b *fakeBroker) Serving() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.notServing
}

func (b *fakeBroker) Topics() []Topic {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.notServing != nil {
		return nil
	}
	var out []Topic
	for name, t := range b.topics {
		tp := Topic{Name: name, ID: t.id, Internal: t.internal}
		for i := range t.partitions {
			tp.Partitions = append(tp.Partitions, Partition{Partition: int32(i), LeaderEpoch: 3, Replicas: 3, ISR: 2})
		}
		out = append(out, tp)
	}
	slices.SortFunc(out, func(a, b Topic) int { return bytes.Compare([]byte(a.Name), []byte(b.Name)) })
	return out
}

func (b *fakeBroker) CreateTopic(_ context.Context, spec TopicSpec) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.topics[spec.Name]; ok {
		return &Error{Code: kerr.TopicAlreadyExists.Code}
	}
	n := spec.Partitions
	if n == 0 {
		n = 1
	}
	if n > 1000 {
		return &Error{Code: kerr.InvalidPartitions.Code, Message: "the fake holds at most 1000"}
	}
	for name := range spec.Configs {
		if name != "retention.ms" {
			return &Error{Code: kerr.InvalidConfig.Code, Message: name}
		}
	}
	if spec.ValidateOnly {
		return nil
	}
	t := &fakeTopic{partitions: make([][][]byte, n), configs: map[string]string{"retention.ms": "604800000"}}
	t.id[0], t.id[15] = byte(len(b.topics)+1), 0x7f
	for k, v := range spec.Configs {
		t.configs[k] = v
	}
	b.topics[spec.Name] = t
	return nil
}

func (b *fakeBroker) DeleteTopic(_ context.Context, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.topics[name]; !ok {
		return &Error{Code: kerr.UnknownTopicOrPartition.Code}
	}
	delete(b.topics, name)
	return nil
}

func (b *fakeBroker) TopicConfigs(name string) (map[string]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.topics[name]
	if !ok {
		return nil, &Error{Code: kerr.UnknownTopicOrPartition.Code}
	}
	return t.configs, nil
}

func (b *fakeBroker) AddPartitions(_ context.Context, topic string, count int32, validateOnly bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.topics[topic]
	switch {
	case !ok:
		return &Error{Code: kerr.UnknownTopicOrPartition.Code}
	case int(count) <= len(t.partitions) || count > 1000:
		return &Error{Code: kerr.InvalidPartitions.Code}
	case !validateOnly:
		t.partitions = append(t.partitions, make([][][]byte, int(count)-len(t.partitions))...)
	}
	return nil
}

// AlterTopicConfigs knows retention.ms only; a delete puts the default
// back.
func (b *fakeBroker) AlterTopicConfigs(_ context.Context, topic string, changes []ConfigChange, validateOnly bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.topics[topic]
	if !ok {
		return &Error{Code: kerr.UnknownTopicOrPartition.Code}
	}
	for _, c := range changes {
		if c.Name != "retention.ms" {
			return &Error{Code: kerr.InvalidConfig.Code, Message: c.Name}
		}
	}
	for _, c := range changes {
		if !validateOnly {
			t.configs[c.Name] = "604800000"
			if c.Value != nil {
				t.configs[c.Name] = *c.Value
			}
		}
	}
	return nil
}

func (b *fakeBroker) partition(topic string, p int32) (*fakeTopic, error) {
	t, ok := b.topics[topic]
	if !ok || p < 0 || int(p) >= len(t.partitions) {
		return nil, &Error{Code: kerr.UnknownTopicOrPartition.Code}
	}
	return t, nil
}

func endOffset(batches [][]byte) int64 {
	if len(batches) == 0 {
		return 0
	}
	return record.Header(batches[len(batches)-1][:record.HeaderSize]).NextOffset()
}

func (b *fakeBroker) Produce(ctx context.Context, req ProduceRequest) (ProduceResult, error) {
	b.mu.Lock()
	delay := b.produceDelay[req.Partition]
	b.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ProduceResult{}, ctx.Err()
		}
	}
	if _, err := record.Verify(req.Batch, 0); err != nil {
		return ProduceResult{}, fmt.Errorf("the listener passed a batch that does not verify: %w", err)
	}
	if h := record.Header(req.Batch[:record.HeaderSize]); int(h.RecordCount()) != req.Records {
		return ProduceResult{}, fmt.Errorf("records %d, the header says %d", req.Records, h.RecordCount())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.produces++
	t, err := b.partition(req.Topic, req.Partition)
	if err != nil {
		return ProduceResult{}, err
	}
	base := endOffset(t.partitions[req.Partition])
	batch := slices.Clone(req.Batch)
	record.SetBaseOffset(batch, base)
	t.partitions[req.Partition] = append(t.partitions[req.Partition], batch)
	close(b.changed)
	b.changed = make(chan struct{})
	return ProduceResult{BaseOffset: base}, nil
}

func (b *fakeBroker) Fetch(_ context.Context, req FetchRequest) (FetchResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, err := b.partition(req.Topic, req.Partition)
	if err != nil {
		return FetchResult{}, err
	}
	batches := t.partitions[req.Partition]
	end := endOffset(batches)
	if req.LastFetchedEpoch >= 0 {
		e, ok := t.endOffsetFor(req.Partition, req.LastFetchedEpoch, end)
		switch {
		case !ok:
			return FetchResult{}, &Error{Code: kerr.OffsetOutOfRange.Code, Message: "unknown last fetched epoch"}
		case e.Epoch < req.LastFetchedEpoch || e.EndOffset < req.Offset:
			return FetchResult{HighWatermark: end, Diverging: &e}, nil
		}
	}
	if req.Offset < 0 || req.Offset > end {
		return FetchResult{}, &Error{Code: kerr.OffsetOutOfRange.Code}
	}
	var out []byte
	for _, batch := range batches {
		if record.Header(batch[:record.HeaderSize]).NextOffset() <= req.Offset {
			continue
		}
		if len(out) > 0 && len(out)+len(batch) > int(req.MaxBytes) {
			break
		}
		out = append(out, batch...)
	}
	b.opened++
	return FetchResult{HighWatermark: end, LogStartOffset: 0, Records: &memRecords{b: out, broker: b}}, nil
}

func (b *fakeBroker) WaitForData(ctx context.Context, positions []Position, max time.Duration) error {
	timer := time.NewTimer(max)
	defer timer.Stop()
	for {
		b.mu.Lock()
		changed := b.changed
		for _, p := range positions {
			if t, err := b.partition(p.Topic, p.Partition); err == nil && endOffset(t.partitions[p.Partition]) > p.Offset {
				b.mu.Unlock()
				return nil
			}
		}
		b.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (b *fakeBroker) ListOffset(_ context.Context, topic string, partition int32, _ int32, timestamp int64) (OffsetAt, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, err := b.partition(topic, partition)
	if err != nil {
		return OffsetAt{}, err
	}
	batches := t.partitions[partition]
	switch timestamp {
	case EarliestTimestamp, EarliestLocalTimestamp:
		return OffsetAt{Offset: 0, Timestamp: -1, LeaderEpoch: 3}, nil
	case LatestTimestamp:
		return OffsetAt{Offset: endOffset(batches), Timestamp: -1, LeaderEpoch: 3}, nil
	case MaxTimestamp:
		// By batch, as below: the tests that ask send one record a batch.
		found := OffsetAt{Offset: -1, Timestamp: -1, LeaderEpoch: -1}
		for _, batch := range batches {
			if h := record.Header(batch[:record.HeaderSize]); found.Offset < 0 || h.MaxTimestamp() > found.Timestamp {
				found = OffsetAt{Offset: h.BaseOffset(), Timestamp: h.MaxTimestamp(), LeaderEpoch: 3}
			}
		}
		return found, nil
	}
	for _, batch := range batches {
		h := record.Header(batch[:record.HeaderSize])
		if h.MaxTimestamp() >= timestamp {
			return OffsetAt{Offset: h.BaseOffset(), Timestamp: h.MaxTimestamp(), LeaderEpoch: 3}, nil
		}
	}
	return OffsetAt{Offset: -1, Timestamp: -1, LeaderEpoch: -1}, nil
}

func (b *fakeBroker) EndOffsetForEpoch(_ context.Context, topic string, partition int32, _, epoch int32) (int32, int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, err := b.partition(topic, partition)
	if err != nil {
		return 0, 0, err
	}
	return min(epoch, 3), endOffset(t.partitions[partition]), nil
}

func (b *fakeBroker) InitProducerID(context.Context) (int64, int16, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nextPID++
	return b.nextPID, 0, nil
}

func (b *fakeBroker) produceCalls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.produces
}

// waitRecordsClosed waits for every Records handed out to be closed: the
// listener closes them after the answer's last byte, so a client may read
// it a moment before.
func (b *fakeBroker) waitRecordsClosed(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		open := b.opened - b.closed
		b.mu.Unlock()
		if open == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d Records not closed", open)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// memRecords are a fetch answer's batches in memory: the test double of
// the agent's file regions.
type memRecords struct {
	b      []byte
	broker *fakeBroker
	done   bool
}

func (r *memRecords) Len() int64 { return int64(len(r.b)) }

func (r *memRecords) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(r.b)
	return int64(n), err
}

func (r *memRecords) Close() error {
	if r.done {
		return nil
	}
	r.done = true
	if r.broker != nil {
		r.broker.mu.Lock()
		r.broker.closed++
		r.broker.mu.Unlock()
	}
	return nil
}
