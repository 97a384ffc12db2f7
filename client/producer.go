package client

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/wire"
)

// BatchContentType is the media type of one binary batch (docs/design.md §4) in a
// produce request, and of back-to-back batches in a fetch answer.
const BatchContentType = wire.ContentTypeBatch

// ErrInvalidOption is returned for an option or argument out of its range.
var ErrInvalidOption = errors.New("client: invalid option")

// Acks is how much of the write the agent confirms before answering.
type Acks int

const (
	// AcksAll waits until every in-sync replica has the records (the high
	// watermark passed them). The default.
	AcksAll Acks = iota
	// AcksLeader waits until the leader appended the records.
	AcksLeader
	// AcksNone answers once the agent has the request; no offsets.
	AcksNone
)

// String is the value of the acks query parameter: all, 1 or 0.
func (a Acks) String() string {
	switch a {
	case AcksAll:
		return "all"
	case AcksLeader:
		return "1"
	case AcksNone:
		return "0"
	}
	return "acks(" + strconv.Itoa(int(a)) + ")"
}

// ParseAcks parses "all" (or "-1"), "1" or "0".
func ParseAcks(s string) (Acks, error) {
	switch s {
	case "all", "-1":
		return AcksAll, nil
	case "1":
		return AcksLeader, nil
	case "0":
		return AcksNone, nil
	}
	return 0, fmt.Errorf("%w: acks %q: want all, 1 or 0", ErrInvalidOption, s)
}

// Message is a record to produce.
type Message struct {
	// Topic is the topic to write to; empty means the producer's
	// WithDefaultTopic.
	Topic string
	// Key may be nil (no key) or empty (a key of no bytes, which is hashed
	// like any other).
	Key     []byte
	Value   []byte
	Headers []Header
	// Time is the record's timestamp, stored in milliseconds; zero means
	// the producer's clock at Produce.
	Time time.Time
	// Partition, when not nil, is the partition to write to; see the
	// package documentation for what is used otherwise.
	Partition *int
}

// Header is one application header of a record: a key and an optional
// (nil) value.
type Header struct {
	Key   string
	Value []byte
}

// ToPartition returns a Message.Partition that names partition p.
func ToPartition(p int) *int { return &p }

// Result is where a record was written.
type Result struct {
	Partition int
	// Offset is the record's offset; -1 with AcksNone.
	Offset int64
	// Epoch is the leader epoch that appended the record; -1 with
	// AcksNone.
	Epoch int32
}

type producerConfig struct {
	defaultTopic     string
	acks             Acks
	linger           time.Duration
	maxBatchBytes    int
	maxBufferedBytes int
	ackTimeout       time.Duration
	deliveryTimeout  time.Duration
	backoffMin       time.Duration
	backoffMax       time.Duration
	codec            record.Codec
	idempotence      *bool // as WithIdempotence said; nil: not said
	maxInFlight      int
	idempotent       bool // the outcome of idempotence and acks
}

// ProducerOption configures a Producer.
type ProducerOption func(*producerConfig)

// WithDefaultTopic is the topic of the records whose Message.Topic is
// empty. Without it every Message names its topic.
func WithDefaultTopic(topic string) ProducerOption {
	return func(c *producerConfig) { c.defaultTopic = topic }
}

// WithAcks sets the acknowledgement level (default AcksAll).
func WithAcks(a Acks) ProducerOption { return func(c *producerConfig) { c.acks = a } }

// WithLinger sets how long a partition's batch waits for more records
// before it may be sent (default 5ms). With 0 a batch may be sent at once,
// and records that arrive while the partition's previous request is in
// flight still accumulate into the next batch.
func WithLinger(d time.Duration) ProducerOption { return func(c *producerConfig) { c.linger = d } }

// WithMaxBatchBytes caps the size of one batch, uncompressed, header
// included (default 1 MiB, the agents' default producer.max_batch_bytes). A
// single record bigger than this is sent alone.
func WithMaxBatchBytes(n int) ProducerOption {
	return func(c *producerConfig) { c.maxBatchBytes = n }
}

// WithMaxBufferedBytes caps the records that are queued or in flight
// (default 32 MiB); Produce and Send block while the buffer is full, and
// the batches waiting for their linger are sent at once then.
func WithMaxBufferedBytes(n int) ProducerOption {
	return func(c *producerConfig) { c.maxBufferedBytes = n }
}

// WithAckTimeout is how long the agent may wait for replicas before it
// answers ack_timeout, sent as the timeout parameter (default 5s, at most
// 30s, the agent's bound). The client waits that long plus a grace period
// for an answer.
func WithAckTimeout(d time.Duration) ProducerOption {
	return func(c *producerConfig) { c.ackTimeout = d }
}

// WithDeliveryTimeout bounds the retries of one batch, counted from its
// first attempt (default 2 minutes). Without idempotence, each record's
// context bounds them too.
func WithDeliveryTimeout(d time.Duration) ProducerOption {
	return func(c *producerConfig) { c.deliveryTimeout = d }
}

// WithRetryBackoff sets the first and the largest delay between attempts
// (default 50ms and 1s); see the package documentation for the jitter.
func WithRetryBackoff(first, largest time.Duration) ProducerOption {
	return func(c *producerConfig) { c.backoffMin, c.backoffMax = first, largest }
}

// Compression is the codec a producer compresses each batch with.
type Compression int8

// The compressions, with the ids of Kafka's batch attributes (those of
// package record, which a test checks).
const (
	CompressionNone   Compression = 0
	CompressionGzip   Compression = 1
	CompressionSnappy Compression = 2
	CompressionLZ4    Compression = 3
	CompressionZstd   Compression = 4
)

// String is the compression's name as ParseCompression accepts it.
func (c Compression) String() string { return record.Codec(c).String() }

// ParseCompression returns the compression named none, gzip, snappy, lz4
// or zstd.
func ParseCompression(name string) (Compression, error) {
	codec, err := record.ParseCodec(name)
	if err != nil {
		return 0, fmt.Errorf("%w: compression %q: want none, gzip, snappy, lz4 or zstd", ErrInvalidOption, name)
	}
	return Compression(codec), nil
}

// WithCompression compresses each batch with c (default CompressionNone).
func WithCompression(c Compression) ProducerOption {
	return func(cfg *producerConfig) { cfg.codec = record.Codec(c) }
}

// WithIdempotence turns idempotence on or off (see the package
// documentation). It is on by default, unless WithAcks asks for less than
// AcksAll: the agent takes idempotent writes only with acks=all, so
// WithIdempotence(true) with other acks is an invalid option.
func WithIdempotence(on bool) ProducerOption {
	return func(c *producerConfig) { c.idempotence = &on }
}

// WithMaxInFlight caps the requests an idempotent producer has in flight
// to one partition (default and largest MaxInFlightIdempotent). A producer
// that is not idempotent sends one request per partition at a time.
func WithMaxInFlight(n int) ProducerOption { return func(c *producerConfig) { c.maxInFlight = n } }

// metadataMaxAge is how long a producer trusts the partition count it
// read; an unknown_topic or unknown_partition answer drops it at once.
const metadataMaxAge = time.Minute

// Producer writes records to any topic, each Message naming its own: one
// buffer and one set of requests for all of them, as a Kafka producer. It
// is safe for concurrent use. See the package documentation for batching,
// partitioning and guarantees.
type Producer struct {
	client  *Client
	cfg     producerConfig
	stats   counters
	clock   Clock
	backoff backoff

	// life ends when Close gives up: in-flight requests and backoff
	// sleeps end with it.
	life    context.Context
	abort   context.CancelFunc
	senders sync.WaitGroup

	// builders encode batches; requests to one partition may be encoded
	// at the same time.
	builders sync.Pool
	// bodies holds the buffers (*[]byte) of batches done with, for the
	// next ones to be encoded into (batchBody).
	bodies sync.Pool
	// session is the producer id every partition of an idempotent
	// producer starts with; a partition whose sequence broke moves to a
	// new one.
	session *producerSession

	// closeDone is closed when the first Close returns: a later (or
	// concurrent) Close waits for it, so that none returns while a
	// goroutine of the producer runs.
	closeDone chan struct{}

	mu         sync.Mutex
	closed     bool
	fenced     error                  // set once the agent answered invalid_producer_epoch
	topics     map[string]*topicState // every topic a record named, validated
	queues     map[TopicPartition]*partitionQueue
	buffered   int           // bytes of records not completed
	spaceFreed chan struct{} // closed when buffered shrinks, if someone waits
	// watches holds a watch per context that records not done were
	// produced under, by its Done channel (contexts that can end only; a
	// context need not be comparable, its channel is, and contexts that
	// share one end together).
	watches map[<-chan struct{}]*ctxWatch
}

// ctxWatch withdraws the queued records of one context when it ends. One
// watch serves every record produced under the context: a
// context.AfterFunc per record, registered and removed under the
// context's lock, was the largest piece of a record's cost in the client
// (docs/benchmarks.md, "The client's per-record work, cut").
type ctxWatch struct {
	records int         // watched records not done
	stop    func() bool // stops the context.AfterFunc
}

// topicState is what a producer knows of one topic.
type topicState struct {
	name string
	path string // of the produce endpoint, escaped
	// meta holds a token while a DescribeTopic of the topic runs: one at a
	// time, and a Produce waiting for it can leave when its context ends
	// (a sync.Mutex cannot be left).
	meta chan struct{}
	// Guarded by Producer.mu.
	partitions int // 0 until known, or after the agent denied it
	metadataAt time.Time
	sticky     int // partition of keyless records (mod partitions)
}

// partitionQueue holds one partition's batches. They move from batches to
// window in order, each delivered by a goroutine of its own. A producer that
// is not idempotent has one batch in its window, so the partition's records
// are written in order; an idempotent producer up to WithMaxInFlight, and
// the leader's sequence check keeps them in order.
type partitionQueue struct {
	topic     string
	partition int
	path      string // of the topic's produce endpoint, escaped
	state     *topicState
	batches   []*batch      // not sent yet; only the last one may be open
	window    []*batch      // sent, oldest first; the oldest is not done
	changed   chan struct{} // closed and replaced when a batch of window is done

	// Idempotent producers only: the id and next sequence new batches are
	// numbered with.
	session *producerSession
	nextSeq int32
	// confirmed: the leader acknowledged a batch of session, and the
	// partition has not been idle since. Otherwise one batch at a time: a
	// leader that does not know the producer id accepts any sequence, so a
	// second batch that overtook the first would be written before it. A
	// leader forgets a producer it knew once the producer has written
	// nothing for producer.id_expiration, or once more than
	// producer.max_per_partition others wrote after it (or, restarted
	// without a usable snapshot, knows only the producers whose batches
	// its log still holds), so each burst after an idle spell starts with
	// one batch, and
	// the leader knows the producer's sequence again before the next one
	// leaves. An attempt that was not written (or not known
	// to be) unsets it too (batch.waitConfirmed).
	confirmed bool
	// broken: a batch of session failed, so the ones after it cannot be
	// written under session. No batch is sent until window drains; then the
	// partition moves to a new producer id.
	broken error
}

type batch struct {
	records []*pending
	bytes   int  // bound of the encoded size
	ready   bool // may be sent: full, linger over, or flushed
	closed  bool // takes no more records: full or in the window
	linger  Timer

	// Set when the batch enters the window.
	deadline time.Time
	done     bool

	// Idempotent producers only. The batch is sent unchanged, same
	// producer id, epoch, sequence and bytes, at every attempt.
	session      *producerSession
	seq          int32
	body         *batchBody
	maybeWritten bool // an attempt's outcome was unknown
	// priorPending: an older batch of the window was not done when the
	// last attempt was sent, so an out_of_order_sequence answer may mean
	// only that this one overtook it.
	priorPending bool
	// waitPrior: resend once every older batch is written.
	waitPrior bool
	// waitConfirmed: an attempt was not written, or not known to be:
	// resend once the leader has acknowledged a batch of the session
	// again, or once every older batch is done. The leader may have lost
	// the producer meanwhile (a new leader after a long failover, at its
	// retention tick), and then appends whichever resend reaches it first.
	waitConfirmed bool
	// olderFailed: an older batch of the window failed; this one cannot be
	// written after it.
	olderFailed error
}

type recordState uint8

const (
	// stateQueued: never sent, or every attempt so far was refused before
	// anything was written. The record can still be withdrawn.
	stateQueued recordState = iota
	// stateInFlight: in a request that has not been answered.
	stateInFlight
	stateDone
)

// pending is a record between Produce and its outcome. Its key, value and
// headers are copies, so the caller may reuse its slices at once.
type pending struct {
	ctx       context.Context
	topic     *topicState
	partition int
	timestamp int64
	key       []byte
	value     []byte
	headers   []record.RecordHeader
	size      int
	payload   int64       // what Stats count: key, value, header keys and values
	state     recordState // guarded by Producer.mu
	// future is the caller's, in the same allocation as the record.
	future Future
}

// Future is the outcome of a record given to Produce.
type Future struct {
	done   chan struct{}
	result Result
	err    error
}

// Done is closed once the outcome is known.
func (f *Future) Done() <-chan struct{} { return f.done }

// Wait returns the record's Result or error once known. If ctx ends first
// it returns ctx.Err() and the record stays in the producer's hands (the
// context given to Produce, not this one, bounds its delivery).
func (f *Future) Wait(ctx context.Context) (*Result, error) {
	select {
	case <-f.done:
		return f.outcome()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *Future) outcome() (*Result, error) {
	if f.err != nil {
		return nil, f.err
	}
	r := f.result
	return &r, nil
}

// NewProducer returns a Producer. Each Message names its topic, or
// WithDefaultTopic does.
func (c *Client) NewProducer(opts ...ProducerOption) (*Producer, error) {
	cfg := producerConfig{
		acks:             AcksAll,
		linger:           5 * time.Millisecond,
		maxBatchBytes:    1 << 20,
		maxBufferedBytes: 32 << 20,
		ackTimeout:       5 * time.Second,
		deliveryTimeout:  2 * time.Minute,
		backoffMin:       50 * time.Millisecond,
		backoffMax:       time.Second,
		maxInFlight:      MaxInFlightIdempotent,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.defaultTopic != "" {
		if err := ValidateTopicName(cfg.defaultTopic); err != nil {
			return nil, err
		}
	}
	cfg.idempotent = cfg.acks == AcksAll && (cfg.idempotence == nil || *cfg.idempotence)
	life, abort := context.WithCancel(context.Background())
	p := &Producer{
		client:    c,
		cfg:       cfg,
		clock:     c.clock,
		backoff:   newBackoff(cfg.backoffMin, cfg.backoffMax),
		life:      life,
		abort:     abort,
		topics:    map[string]*topicState{},
		queues:    map[TopicPartition]*partitionQueue{},
		watches:   map[<-chan struct{}]*ctxWatch{},
		closeDone: make(chan struct{}),
	}
	p.builders.New = func() any {
		b := new(record.Builder)
		// validate accepted the codec.
		_ = b.SetCodec(cfg.codec)
		return b
	}
	if cfg.idempotent {
		p.session = new(producerSession)
	}
	if err := c.track(p); err != nil {
		abort()
		return nil, err
	}
	return p, nil
}

func (c *producerConfig) validate() error {
	var b record.Builder
	switch {
	case c.acks < AcksAll || c.acks > AcksNone:
		return fmt.Errorf("%w: acks %d", ErrInvalidOption, c.acks)
	case c.linger < 0:
		return fmt.Errorf("%w: negative linger %v", ErrInvalidOption, c.linger)
	case c.maxBatchBytes <= record.HeaderSize:
		return fmt.Errorf("%w: max batch bytes %d is not above the batch header's %d", ErrInvalidOption, c.maxBatchBytes, record.HeaderSize)
	case c.maxBufferedBytes < c.maxBatchBytes:
		return fmt.Errorf("%w: max buffered bytes %d is below max batch bytes %d", ErrInvalidOption, c.maxBufferedBytes, c.maxBatchBytes)
	case c.ackTimeout <= 0 || c.deliveryTimeout <= 0:
		return fmt.Errorf("%w: ack timeout %v and delivery timeout %v must be positive", ErrInvalidOption, c.ackTimeout, c.deliveryTimeout)
	case c.ackTimeout > wire.MaxClientWait:
		// The agent refuses it (400): every record would fail.
		return fmt.Errorf("%w: ack timeout %v is above the agent's %v", ErrInvalidOption, c.ackTimeout, wire.MaxClientWait)
	case c.backoffMin <= 0 || c.backoffMax < c.backoffMin:
		return fmt.Errorf("%w: retry backoff %v to %v", ErrInvalidOption, c.backoffMin, c.backoffMax)
	case c.maxInFlight < 1 || c.maxInFlight > MaxInFlightIdempotent:
		return fmt.Errorf("%w: max in flight %d: want 1 to %d", ErrInvalidOption, c.maxInFlight, MaxInFlightIdempotent)
	case c.idempotence != nil && *c.idempotence && c.acks != AcksAll:
		return fmt.Errorf("%w: idempotence needs acks=all, not acks=%v", ErrInvalidOption, c.acks)
	}
	if err := b.SetCodec(c.codec); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	return nil
}

// Produce queues m and returns its Future; it blocks only to learn the
// topic's partition count (once a minute, for records without a partition)
// or while the buffer is full. ctx bounds that wait and the record's
// delivery: see the package documentation.
func (p *Producer) Produce(ctx context.Context, m Message) (*Future, error) {
	r, err := p.enqueue(ctx, m)
	if err != nil {
		return nil, err
	}
	return &r.future, nil
}

// Send produces m and waits for its outcome. If ctx ends before the record
// was sent (or, without idempotence, between attempts), the record is
// withdrawn and Send returns an error matching ctx.Err(): it was not written. If ctx ends while the
// record's request is in flight, Send returns an error matching both
// ErrOutcomeUnknown and ctx.Err().
func (p *Producer) Send(ctx context.Context, m Message) (*Result, error) {
	r, err := p.enqueue(ctx, m)
	if err != nil {
		return nil, err
	}
	select {
	case <-r.future.done:
	case <-ctx.Done():
		p.withdraw(r, ctx.Err())
		select {
		case <-r.future.done:
		default:
			return nil, &OutcomeUnknownError{Cause: fmt.Errorf("stopped waiting for the answer: %w", ctx.Err())}
		}
	}
	return r.future.outcome()
}

// Flush sends every queued record without waiting for linger and waits
// until all records produced before the call have their outcome (not
// necessarily success: check their futures). It returns ctx.Err() if ctx
// ends first.
func (p *Producer) Flush(ctx context.Context) error {
	p.mu.Lock()
	var waits []*Future
	for _, q := range p.queues {
		for _, b := range q.batches {
			waits = appendFutures(waits, b)
		}
		for _, b := range q.window {
			waits = appendFutures(waits, b)
		}
	}
	p.sendLingeringLocked()
	p.mu.Unlock()
	for _, f := range waits {
		select {
		case <-f.done:
		case <-ctx.Done():
			return fmt.Errorf("flush: %w", ctx.Err())
		}
	}
	return nil
}

func appendFutures(dst []*Future, b *batch) []*Future {
	for _, r := range b.records {
		if r.state != stateDone {
			dst = append(dst, &r.future)
		}
	}
	return dst
}

// Close stops accepting records, flushes what is queued and waits for it.
// If ctx ends first it aborts: requests in flight end with an outcome
// unknown, queued records fail with ErrClosed, and Close returns ctx's
// error. Either way no goroutine of the Producer is left when Close returns.
// A Close after the first waits for it (or for ctx), and returns nil.
func (p *Producer) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		select {
		case <-p.closeDone:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("close: waiting for another Close: %w", ctx.Err())
		}
	}
	p.closed = true
	p.releaseLocked(0) // wakes Produce calls waiting for space: they fail
	p.mu.Unlock()
	defer close(p.closeDone)
	err := p.Flush(ctx)
	p.abort()
	p.senders.Wait()
	p.client.forget(p)
	if err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}

// closeFor is Client.Close's.
func (p *Producer) closeFor(ctx context.Context) error { return p.Close(ctx) }

func (p *Producer) enqueue(ctx context.Context, m Message) (*pending, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t, err := p.topic(m.Topic)
	if err != nil {
		return nil, err
	}
	partitions := 0
	if m.Partition != nil {
		if *m.Partition < 0 {
			return nil, fmt.Errorf("%w: partition %d", ErrInvalidOption, *m.Partition)
		}
	} else {
		n, err := p.partitionCount(ctx, t)
		if err != nil {
			return nil, err
		}
		partitions = n
	}
	r := newPending(ctx, m, p.clock.Now())
	r.topic = t
	if err := p.reserve(ctx, r.size); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.fenced != nil {
		p.releaseLocked(r.size)
		if p.fenced != nil {
			return nil, p.fenced
		}
		return nil, ErrClosed
	}
	switch {
	case m.Partition != nil:
		r.partition = *m.Partition
	case m.Key != nil:
		r.partition = PartitionForKey(m.Key, partitions)
	default:
		t.sticky %= partitions
		r.partition = t.sticky
	}
	p.appendLocked(r)
	for _, s := range p.counters() {
		s.inFlight.Add(1)
		s.inFlightBytes.Add(r.payload)
	}
	p.watchLocked(r)
	return r, nil
}

// watchLocked counts r in the watch of its context, starting the watch for
// the context's first record.
func (p *Producer) watchLocked(r *pending) {
	done := r.ctx.Done()
	if done == nil {
		return // a context that never ends
	}
	w := p.watches[done]
	if w == nil {
		ctx := r.ctx
		w = &ctxWatch{stop: context.AfterFunc(ctx, func() { p.withdrawAll(done, ctx.Err()) })}
		p.watches[done] = w
	}
	w.records++
}

// unwatchLocked takes record r, done just now, out of its context's watch
// (every record completed was watched: enqueue watches it in the critical
// section that queues it), stopping the watch after the context's last
// record.
func (p *Producer) unwatchLocked(r *pending) {
	done := r.ctx.Done()
	if done == nil {
		return
	}
	w := p.watches[done]
	if w.records--; w.records == 0 {
		w.stop()
		delete(p.watches, done)
	}
}

// withdrawAll fails the queued records produced under the contexts of done,
// which ended with ctxErr: they were not written and will not be.
func (p *Producer) withdrawAll(done <-chan struct{}, ctxErr error) {
	cause := fmt.Errorf("client: record not sent: %w", ctxErr)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.watches[done] == nil {
		return
	}
	for _, q := range p.queues {
		for _, batches := range [][]*batch{q.batches, q.window} {
			for _, b := range batches {
				for _, r := range b.records {
					if r.state == stateQueued && r.ctx.Done() == done {
						p.completeLocked(r, Result{}, cause)
					}
				}
			}
		}
	}
}

func newPending(ctx context.Context, m Message, now time.Time) *pending {
	ts := m.Time
	if ts.IsZero() {
		ts = now
	}
	n, keys := len(m.Key)+len(m.Value), 0
	for _, h := range m.Headers {
		n += len(h.Value)
		keys += len(h.Key)
	}
	buf := make([]byte, 0, n)
	r := &pending{ctx: ctx, timestamp: ts.UnixMilli(), payload: int64(n + keys), future: Future{done: make(chan struct{})}}
	r.key, buf = appendCopy(buf, m.Key)
	r.value, buf = appendCopy(buf, m.Value)
	if len(m.Headers) > 0 {
		r.headers = make([]record.RecordHeader, len(m.Headers))
		for i, h := range m.Headers {
			r.headers[i].Key = h.Key
			r.headers[i].Value, buf = appendCopy(buf, h.Value)
		}
	}
	r.size = recordSizeBound(r.key, r.value, r.headers)
	return r
}

// appendCopy appends b to buf (which has room) and returns the copy, nil
// for a nil b, and buf.
func appendCopy(buf, b []byte) (copied, rest []byte) {
	if b == nil {
		return nil, buf
	}
	start := len(buf)
	buf = append(buf, b...)
	return buf[start:len(buf):len(buf)], buf
}

// recordSizeBound is at least the size of the record encoded in a batch
// (record's layout): attributes, at most 10 bytes of timestamp_delta and 5
// of length and offset_delta (both int32), then exact lengths.
func recordSizeBound(key, value []byte, headers []record.RecordHeader) int {
	n := 1 + binary.MaxVarintLen64 + 2*binary.MaxVarintLen32 +
		bytesSizeBound(key) + bytesSizeBound(value) + varintLen(int64(len(headers)))
	for _, h := range headers {
		n += varintLen(int64(len(h.Key))) + len(h.Key) + bytesSizeBound(h.Value)
	}
	return n
}

func bytesSizeBound(b []byte) int { return varintLen(int64(len(b))) + len(b) }

func varintLen(v int64) int {
	var scratch [binary.MaxVarintLen64]byte
	return binary.PutVarint(scratch[:], v)
}

// reserve waits until size bytes fit in the buffer and takes them. A record
// bigger than the whole buffer goes when the buffer is empty.
func (p *Producer) reserve(ctx context.Context, size int) error {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return ErrClosed
		}
		if p.buffered == 0 || p.buffered+size <= p.cfg.maxBufferedBytes {
			p.buffered += size
			p.mu.Unlock()
			return nil
		}
		if p.spaceFreed == nil {
			p.spaceFreed = make(chan struct{})
		}
		// Only answers free space: a batch left to its linger would hold
		// its part of the buffer, and this Produce, until the linger ends
		// (Kafka's accumulator, too, sends every batch while a producer
		// waits for memory).
		p.sendLingeringLocked()
		freed := p.spaceFreed
		p.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for buffer space: %w", ctx.Err())
		}
	}
}

// sendLingeringLocked makes every queued batch ready, as if its linger
// were over.
func (p *Producer) sendLingeringLocked() {
	for _, q := range p.queues {
		for _, b := range q.batches {
			b.ready = true
			stopLinger(b)
		}
		p.kickLocked(q)
	}
}

func (p *Producer) releaseLocked(size int) {
	p.buffered -= size
	if p.spaceFreed != nil {
		close(p.spaceFreed)
		p.spaceFreed = nil
	}
}

// topic returns the state of the named topic (the default one when name is
// empty), validating a name the producer has not seen.
func (p *Producer) topic(name string) (*topicState, error) {
	if name == "" {
		name = p.cfg.defaultTopic
	}
	if name == "" {
		return nil, fmt.Errorf("%w: a message without a topic, and no WithDefaultTopic", ErrInvalidOption)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if t := p.topics[name]; t != nil {
		return t, nil
	}
	if err := ValidateTopicName(name); err != nil {
		return nil, err
	}
	t := &topicState{name: name, path: topicPath(name) + "/records", meta: make(chan struct{}, 1)}
	p.topics[name] = t
	return t, nil
}

// partitionCount is the topic's partition count, read with DescribeTopic
// when unknown or older than metadataMaxAge. A failed refresh keeps a count
// that was not denied by the agent.
func (p *Producer) partitionCount(ctx context.Context, t *topicState) (int, error) {
	fresh := func() (int, bool) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return t.partitions, t.partitions > 0 && p.clock.Now().Sub(t.metadataAt) < metadataMaxAge
	}
	if n, ok := fresh(); ok {
		return n, nil
	}
	select {
	case t.meta <- struct{}{}:
	case <-ctx.Done():
		return 0, fmt.Errorf("produce to %q: waiting for the partition count: %w", t.name, ctx.Err())
	}
	defer func() { <-t.meta }()
	n, ok := fresh()
	if ok {
		return n, nil
	}
	info, err := p.client.DescribeTopic(ctx, t.name)
	if err == nil && len(info.Partitions) == 0 {
		err = fmt.Errorf("%w: topic %q has no partitions", ErrProtocol, t.name)
	}
	if err != nil {
		if n > 0 {
			return n, nil
		}
		return 0, fmt.Errorf("produce to %q: partition count: %w", t.name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t.partitions, t.metadataAt = len(info.Partitions), p.clock.Now()
	return t.partitions, nil
}

func (p *Producer) appendLocked(r *pending) {
	tp := TopicPartition{Topic: r.topic.name, Partition: r.partition}
	q := p.queues[tp]
	if q == nil {
		q = &partitionQueue{topic: tp.Topic, partition: tp.Partition, path: r.topic.path, state: r.topic, session: p.session, changed: make(chan struct{})}
		p.queues[tp] = q
	}
	var b *batch
	if n := len(q.batches); n > 0 && !q.batches[n-1].closed {
		b = q.batches[n-1]
	}
	if b != nil && len(b.records) > 0 && b.bytes+r.size > p.cfg.maxBatchBytes {
		p.closeLocked(q, b)
		b = nil
	}
	if b == nil {
		b = &batch{bytes: record.HeaderSize}
		q.batches = append(q.batches, b)
		if p.cfg.linger == 0 {
			b.ready = true
		} else {
			b.linger = p.clock.AfterFunc(p.cfg.linger, func() { p.lingerOver(q, b) })
		}
	}
	b.records = append(b.records, r)
	b.bytes += r.size
	if b.bytes >= p.cfg.maxBatchBytes {
		p.closeLocked(q, b)
	}
	p.kickLocked(q)
}

// closeLocked closes a full batch: it is ready, and keyless records move on
// to the next partition.
func (p *Producer) closeLocked(q *partitionQueue, b *batch) {
	b.closed, b.ready = true, true
	stopLinger(b)
	p.moveStickyLocked(q)
	p.kickLocked(q)
}

func (p *Producer) moveStickyLocked(q *partitionQueue) {
	if q.state.sticky == q.partition {
		q.state.sticky = q.partition + 1
	}
}

func stopLinger(b *batch) {
	if b.linger != nil {
		b.linger.Stop()
		b.linger = nil
	}
}

func (p *Producer) lingerOver(q *partitionQueue, b *batch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b.ready = true
	p.kickLocked(q)
}

// kickLocked moves q's ready batches, oldest first, into its window while
// the window has room, each with a goroutine that delivers it.
func (p *Producer) kickLocked(q *partitionQueue) {
	for len(q.batches) > 0 && q.batches[0].ready && len(q.window) < p.windowLocked(q) {
		if p.cfg.idempotent && (q.broken != nil || p.fenced != nil) {
			return
		}
		b := q.batches[0]
		q.batches[0] = nil
		q.batches = q.batches[1:]
		b.closed = true
		stopLinger(b)
		p.moveStickyLocked(q)
		b.deadline = p.clock.Now().Add(p.cfg.deliveryTimeout)
		if p.cfg.idempotent && !p.numberLocked(q, b) {
			continue
		}
		q.window = append(q.window, b)
		p.senders.Add(1)
		if p.cfg.idempotent {
			go p.deliverIdempotent(q, b)
		} else {
			go p.deliver(q, b)
		}
	}
}

// windowLocked is how many batches q may have in flight.
func (p *Producer) windowLocked(q *partitionQueue) int {
	if p.cfg.idempotent && q.confirmed {
		return p.cfg.maxInFlight
	}
	return 1
}

// numberLocked gives b the partition's next sequence. From now on b's
// records cannot be withdrawn: the batch is sent unchanged until it is
// written or fails. It reports false if every record was withdrawn
// already.
func (p *Producer) numberLocked(q *partitionQueue, b *batch) bool {
	live := b.records[:0]
	for _, r := range b.records {
		if r.state == stateQueued {
			r.state = stateInFlight
			live = append(live, r)
		}
	}
	clear(b.records[len(live):])
	b.records = live
	if len(live) == 0 {
		return false
	}
	b.session, b.seq = q.session, q.nextSeq
	q.nextSeq = record.AddSequence(q.nextSeq, len(live))
	return true
}

// finish takes the done batch b out of q's window (the window keeps a
// done batch until every older one is done too) and sends what may go now.
// A partition whose sequence broke starts a new producer id once no batch
// of the old one is left.
func (p *Producer) finish(q *partitionQueue, b *batch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b.done = true
	n := 0
	for n < len(q.window) && q.window[n].done {
		n++
	}
	q.window = q.window[n:]
	if len(q.window) == 0 && q.broken != nil {
		q.session, q.nextSeq, q.confirmed, q.broken = new(producerSession), 0, false, nil
	}
	if len(q.window) == 0 && (len(q.batches) == 0 || !q.batches[0].ready) {
		// Idle: the leader may forget the producer before its next batch.
		q.confirmed = false
	}
	close(q.changed)
	q.changed = make(chan struct{})
	p.kickLocked(q)
}

// attemptOutcome is what one produce request did.
type attemptOutcome int

const (
	attemptWritten attemptOutcome = iota
	attemptRetry                  // nothing written; worth trying again
	attemptFailed                 // nothing written; do not try again
	attemptUnknown                // may have been written
)

// classifyAttempt decides, from a produce request's error, whether its
// records were written; see the package documentation.
func classifyAttempt(err error) attemptOutcome {
	if err == nil {
		return attemptWritten
	}
	var te *transportError
	if errors.As(err, &te) {
		if te.written {
			return attemptUnknown
		}
		return attemptRetry
	}
	var e *Error
	if errors.As(err, &e) {
		switch {
		case outcomeUnknownCodes[e.Code]:
			return attemptUnknown
		case retriableBeforeAppendCodes[e.Code]:
			return attemptRetry
		case e.Status >= 500:
			return attemptUnknown
		case e.Retriable:
			return attemptRetry
		}
		return attemptFailed
	}
	if errors.Is(err, ErrProtocol) {
		return attemptUnknown
	}
	return attemptFailed
}

// deliver sends batch b of a producer that is not idempotent until it is
// written, fails, or its outcome is unknown. Between attempts nothing of b
// has been written, so records whose context ended meanwhile are dropped
// from the next attempt.
func (p *Producer) deliver(q *partitionQueue, b *batch) {
	defer p.senders.Done()
	defer p.finish(q, b)
	var lastErr error
	for attempt := 0; ; attempt++ {
		p.mu.Lock()
		live := b.records[:0]
		for _, r := range b.records {
			if r.state == stateQueued {
				live = append(live, r)
			}
		}
		clear(b.records[len(live):])
		b.records = live
		var giveUp error
		switch {
		case len(live) == 0:
			p.mu.Unlock()
			return
		case p.life.Err() != nil:
			giveUp = fmt.Errorf("%w before the records were sent", ErrClosed)
			if lastErr != nil {
				giveUp = fmt.Errorf("%w (last attempt: %w)", giveUp, lastErr)
			}
		case attempt > 0 && !p.clock.Now().Before(b.deadline):
			giveUp = fmt.Errorf("delivery timeout of %v: records not written: %w", p.cfg.deliveryTimeout, lastErr)
		}
		if giveUp != nil {
			p.completeAllLocked(live, giveUp)
			p.mu.Unlock()
			return
		}
		for _, r := range live {
			r.state = stateInFlight
		}
		p.mu.Unlock()
		p.countRetry(attempt)

		var answer *produceAnswer
		body, err := p.encode(q, live, nil, 0)
		if err == nil {
			answer, err = p.post(q, body, len(live), nil, 0)
			body.release()
		}

		p.mu.Lock()
		outcome := classifyAttempt(err)
		stillQueued := 0
		switch outcome {
		case attemptWritten:
			p.completeWrittenLocked(q, live, answer)
		case attemptUnknown:
			p.completeAllLocked(live, &OutcomeUnknownError{Cause: err})
		case attemptFailed:
			p.noteRefusalLocked(q, err)
			p.completeAllLocked(live, err)
		case attemptRetry:
			for _, r := range live {
				if cause := r.ctx.Err(); cause != nil {
					p.completeLocked(r, Result{}, fmt.Errorf("client: record not written: %w (last attempt: %w)", cause, err))
				} else {
					r.state = stateQueued
					stillQueued++
				}
			}
		}
		p.mu.Unlock()
		if stillQueued == 0 {
			return
		}
		lastErr = err
		p.backOff(attempt, err)
	}
}

// deliverIdempotent sends batch b of an idempotent producer, unchanged,
// until it is written or cannot be. Unknown outcomes are resent like
// refusals: the leader recognises a batch it already has by its producer
// id, epoch and sequence, and answers its original offsets.
func (p *Producer) deliverIdempotent(q *partitionQueue, b *batch) {
	defer p.senders.Done()
	defer p.finish(q, b)
	defer func() {
		if b.body != nil {
			b.body.release()
		}
	}()
	var lastErr error
	for attempt := 0; ; attempt++ {
		p.mu.Lock()
		if err := p.stopReasonLocked(q, b, attempt, lastErr); err != nil {
			p.failLocked(q, b, err)
			p.mu.Unlock()
			return
		}
		b.priorPending = q.window[0] != b
		p.mu.Unlock()
		p.countRetry(attempt)

		id, err := p.identity(b.session)
		var answer *produceAnswer
		var outcome attemptOutcome
		if err != nil {
			err = initError(fmt.Errorf("produce to %s/%d: %w", q.topic, q.partition, err))
			outcome = classifyInit(err)
		} else {
			if b.body == nil {
				b.body, err = p.encode(q, b.records, &id, b.seq)
			}
			if err == nil {
				answer, err = p.post(q, b.body, len(b.records), &id, b.seq)
			}
			outcome = classifyAttempt(err)
		}

		p.mu.Lock()
		switch {
		case outcome == attemptWritten:
			if b.session == q.session {
				q.confirmed = true
			}
			p.completeWrittenLocked(q, b.records, answer)
			p.mu.Unlock()
			return
		case errors.Is(err, ErrInvalidProducerEpoch):
			p.fenceLocked(fmt.Errorf("produce to %s/%d: %s: fenced by a newer instance: %w", q.topic, q.partition, formatProducer(id, b.seq), err))
			p.failLocked(q, b, p.fenced)
			p.mu.Unlock()
			return
		case errors.Is(err, ErrOutOfOrderSequence):
			// The leader's log does not hold b now, but an earlier attempt
			// whose outcome was unknown may still land (the agent resends
			// a batch itself within its timeout): b.maybeWritten stands,
			// so b's sequence is never given to another batch of this id.
			switch {
			case b.olderFailed != nil:
				p.failLocked(q, b, fmt.Errorf("produce to %s/%d: an older batch failed (%w); last attempt: %w", q.topic, q.partition, b.olderFailed, err))
			case b.priorPending:
				// b overtook an older batch that is not written yet.
				b.waitPrior = true
			default:
				fatal := fmt.Errorf("produce to %s/%d: %s: the partition's pending records fail: %w", q.topic, q.partition, formatProducer(id, b.seq), err)
				// The leader expects another sequence of this id: the
				// partition moves to a new one.
				q.broken = fatal
				p.failLocked(q, b, fatal)
				p.failQueuedLocked(q, fatal)
			}
			done := b.done || !b.waitPrior
			p.mu.Unlock()
			if done {
				return
			}
			lastErr = err
			continue // no backoff: it goes once the older batches are written
		case outcome == attemptFailed:
			p.noteRefusalLocked(q, err)
			p.failLocked(q, b, err)
			p.mu.Unlock()
			return
		case outcome == attemptUnknown:
			b.maybeWritten = true
		}
		// Until the leader acknowledges a batch of the session again, one
		// batch at a time, oldest first: new batches wait for room in the
		// window, resends for waitConfirmed.
		q.confirmed = false
		b.waitConfirmed = true
		p.mu.Unlock()
		lastErr = err
		p.backOff(attempt, err)
	}
}

// stopReasonLocked says why b is not sent again, if it is not; it waits
// first, while b is to be resent after older batches that are not done
// (waitPrior), or after the leader acknowledged the session again
// (waitConfirmed).
func (p *Producer) stopReasonLocked(q *partitionQueue, b *batch, attempt int, lastErr error) error {
	for (b.waitPrior || b.waitConfirmed && !q.confirmed) && q.window[0] != b && b.olderFailed == nil && p.fenced == nil && p.life.Err() == nil {
		changed := q.changed
		p.mu.Unlock()
		select {
		case <-changed:
		case <-p.life.Done():
		}
		p.mu.Lock()
	}
	b.waitPrior, b.waitConfirmed = false, false
	switch {
	case p.fenced != nil:
		return p.fenced
	case b.olderFailed != nil && lastErr == nil:
		return fmt.Errorf("produce to %s/%d: records not sent: an older batch failed: %w", q.topic, q.partition, b.olderFailed)
	case b.olderFailed != nil:
		return fmt.Errorf("produce to %s/%d: an older batch failed (%w); last attempt: %w", q.topic, q.partition, b.olderFailed, lastErr)
	case p.life.Err() != nil:
		if lastErr != nil {
			return fmt.Errorf("%w before the records were written (last attempt: %w)", ErrClosed, lastErr)
		}
		return fmt.Errorf("%w before the records were sent", ErrClosed)
	case attempt > 0 && !p.clock.Now().Before(b.deadline):
		return fmt.Errorf("delivery timeout of %v: %w", p.cfg.deliveryTimeout, lastErr)
	}
	return nil
}

// failLocked fails b's records with err (an unknown outcome if an attempt
// may have written them). The batches numbered after b cannot be written
// under its producer id, unless b was not written and none was numbered
// after it: then the next batch simply takes its sequence.
func (p *Producer) failLocked(q *partitionQueue, b *batch, err error) {
	if b.maybeWritten && !errors.Is(err, ErrOutcomeUnknown) {
		err = &OutcomeUnknownError{Cause: err}
	}
	p.completeAllLocked(b.records, err)
	b.done = true
	if !b.maybeWritten && b.session == q.session && q.broken == nil && q.nextSeq == record.AddSequence(b.seq, len(b.records)) {
		q.nextSeq = b.seq
		return
	}
	if b.session == q.session && q.broken == nil {
		q.broken = err
	}
	older := true
	for _, w := range q.window {
		if w == b {
			older = false
		} else if !older && w.olderFailed == nil {
			w.olderFailed = err
		}
	}
}

// failQueuedLocked fails the records of q that are not sent yet.
func (p *Producer) failQueuedLocked(q *partitionQueue, err error) {
	for _, b := range q.batches {
		stopLinger(b)
		for _, r := range b.records {
			if r.state == stateQueued {
				p.completeLocked(r, Result{}, err)
			}
		}
	}
	clear(q.batches)
	q.batches = q.batches[:0]
}

// fenceLocked ends the producer: another instance took over its id. Every
// record not written yet fails with err, and so does every Produce.
func (p *Producer) fenceLocked(err error) {
	if p.fenced != nil {
		return
	}
	p.fenced = err
	for _, q := range p.queues {
		p.failQueuedLocked(q, err)
		// Wakes the batches waiting for older ones.
		close(q.changed)
		q.changed = make(chan struct{})
	}
}

// noteRefusalLocked forgets the partition count when the agent denies it.
func (p *Producer) noteRefusalLocked(q *partitionQueue, err error) {
	if errors.Is(err, ErrUnknownTopic) || errors.Is(err, ErrUnknownPartition) {
		q.state.partitions = 0
	}
}

// backOff sleeps before attempt+1; an aborted sleep is seen at the top of
// the delivery loop.
func (p *Producer) backOff(attempt int, err error) {
	var retryAfter time.Duration
	if e := (*Error)(nil); errors.As(err, &e) {
		retryAfter = e.RetryAfter
	}
	_ = sleep(p.life, p.clock, p.backoff.delay(attempt, retryAfter))
}

func (p *Producer) completeWrittenLocked(q *partitionQueue, records []*pending, answer *produceAnswer) {
	for i, r := range records {
		res := Result{Partition: q.partition, Offset: -1, Epoch: -1}
		if answer != nil {
			res.Offset, res.Epoch = answer.BaseOffset+int64(i), answer.Epoch
		}
		p.completeLocked(r, res, nil)
	}
}

func (p *Producer) completeAllLocked(records []*pending, err error) {
	for _, r := range records {
		p.completeLocked(r, Result{}, err)
	}
}

func (p *Producer) completeLocked(r *pending, res Result, err error) {
	if r.state == stateDone {
		return
	}
	r.state = stateDone
	for _, s := range p.counters() {
		s.inFlight.Add(-1)
		s.inFlightBytes.Add(-r.payload)
		if err == nil {
			s.recordsProduced.Add(1)
			s.bytesProduced.Add(r.payload)
		} else {
			s.produceErrors.Add(1)
		}
	}
	r.future.result, r.future.err = res, err
	close(r.future.done)
	p.unwatchLocked(r)
	r.key, r.value, r.headers = nil, nil, nil
	p.releaseLocked(r.size)
}

// counters are the producer's and its client's.
func (p *Producer) counters() [2]*counters { return [2]*counters{&p.stats, &p.client.stats} }

// countRetry counts an attempt after the first.
func (p *Producer) countRetry(attempt int) {
	if attempt > 0 {
		for _, s := range p.counters() {
			s.produceRetries.Add(1)
		}
	}
}

// withdraw fails r with cause if it is queued: it was not written and will
// not be.
func (p *Producer) withdraw(r *pending, cause error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.state == stateQueued {
		p.completeLocked(r, Result{}, fmt.Errorf("client: record not sent: %w", cause))
	}
}

// produceAnswer is the body of a successful produce (docs/design.md §8).
type produceAnswer struct {
	Topic      string `json:"topic"`
	Partition  int    `json:"partition"`
	BaseOffset int64  `json:"base_offset"`
	LastOffset int64  `json:"last_offset"`
	Count      int    `json:"count"`
	// An idempotent producer's resend of a batch the leader has already
	// is answered with "duplicate": true and the original offsets and
	// epoch: a success like any other.
	Epoch int32 `json:"epoch"`
}

// encode builds records into one batch, marked with the producer id and
// base sequence when id is not nil, in a buffer of a batch done with when
// there is one large enough. The caller releases the body.
func (p *Producer) encode(q *partitionQueue, records []*pending, id *ProducerID, seq int32) (*batchBody, error) {
	b := p.builders.Get().(*record.Builder)
	defer p.builders.Put(b)
	b.Reset()
	if id != nil {
		b.SetProducer(id.ID, id.Epoch, seq)
	}
	for _, r := range records {
		if err := b.Add(r.timestamp, r.key, r.value, r.headers); err != nil {
			return nil, fmt.Errorf("produce to %s/%d: %w", q.topic, q.partition, err)
		}
	}
	var buf []byte
	if v, ok := p.bodies.Get().(*[]byte); ok && cap(*v) >= b.Size() {
		buf = (*v)[:0]
	} else {
		buf = make([]byte, 0, b.Size())
	}
	data, err := b.AppendTo(buf)
	if err != nil {
		return nil, fmt.Errorf("produce to %s/%d: %w", q.topic, q.partition, err)
	}
	return newBatchBody(data, p.recycleBody), nil
}

// recycleBody keeps a batch's buffer for the next batch to be encoded.
func (p *Producer) recycleBody(data []byte) { p.bodies.Put(&data) }

// post sends body, a batch of count records, to q's partition; with an id,
// as that idempotent producer's batch at sequence seq, which the batch
// header carries too. It returns nil and no error for AcksNone, whose
// answer carries no offsets.
func (p *Producer) post(q *partitionQueue, body *batchBody, count int, id *ProducerID, seq int32) (*produceAnswer, error) {
	query := url.Values{
		"partition": {strconv.Itoa(q.partition)},
		"acks":      {p.cfg.acks.String()},
		"timeout":   {p.cfg.ackTimeout.String()},
	}
	ctx, cancel := context.WithTimeout(p.life, p.cfg.ackTimeout+requestGrace)
	defer cancel()
	// Headers written is the conservative line between "not sent" and
	// "maybe applied": a failure before it cannot have reached the agent.
	var written atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { written.Store(true) }})
	req, err := p.client.newRequest(ctx, http.MethodPost, q.path, query, nil)
	if err != nil {
		return nil, err
	}
	// The transport closes every body it is given, also on errors, and
	// may read one after Do returns (batchBody).
	req.ContentLength = int64(len(body.data))
	req.Body = body.reader()
	req.GetBody = func() (io.ReadCloser, error) { return body.reader(), nil }
	req.Header.Set("Content-Type", BatchContentType)
	req.Header.Set("Accept", "application/json")
	if id != nil {
		req.Header.Set(wire.HeaderProducerID, strconv.FormatInt(id.ID, 10))
		req.Header.Set(wire.HeaderProducerEpoch, strconv.Itoa(int(id.Epoch)))
		req.Header.Set(wire.HeaderSequence, strconv.Itoa(int(seq)))
	}
	resp, err := p.client.http.Do(req)
	if err != nil {
		return nil, &transportError{err: err, written: written.Load()}
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, decodeError(resp)
	}
	if p.cfg.acks == AcksNone {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxJSONBodyBytes))
		return nil, nil
	}
	data, err := readLimited(resp.Body, maxJSONBodyBytes)
	if err != nil {
		return nil, err
	}
	var a produceAnswer
	if err := json.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("%w: produce answer: %v", ErrProtocol, err)
	}
	if a.Partition != q.partition || a.Count != count || a.BaseOffset < 0 ||
		a.LastOffset-a.BaseOffset+1 != int64(count) {
		return nil, fmt.Errorf("%w: produce of %d records to partition %d answered partition %d, offsets %d-%d, count %d",
			ErrProtocol, count, q.partition, a.Partition, a.BaseOffset, a.LastOffset, a.Count)
	}
	return &a, nil
}
