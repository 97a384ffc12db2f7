package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/wire"
)

// Offsets that a Consumer can start from besides a number.
const (
	// OffsetLatest starts at the high watermark as it is when the consumer
	// first fetches: only records committed afterwards are read.
	OffsetLatest int64 = -1
	// OffsetEarliest starts at the log start offset: every record kept.
	OffsetEarliest int64 = -2
)

// Headers of a fetch answer (docs/design.md §8).
const (
	HighWatermarkHeader  = wire.HeaderHighWatermark
	LogStartOffsetHeader = wire.HeaderLogStartOffset
)

// Record is a record read from a partition. Its slices belong to the caller.
type Record struct {
	Topic     string
	Partition int
	Offset    int64
	// Timestamp has millisecond precision.
	Timestamp time.Time
	Key       []byte // nil when the record has no key
	Value     []byte // nil when the value is null
	Headers   []Header
	// LeaderEpoch is the epoch of the leader that appended the record.
	LeaderEpoch int32
}

type consumerConfig struct {
	maxBytes   int
	maxWait    time.Duration
	reset      int64 // 0: none; else OffsetEarliest or OffsetLatest
	limits     record.Limits
	backoffMin time.Duration
	backoffMax time.Duration
	reuse      bool
}

// ConsumerOption configures a Consumer.
type ConsumerOption func(*consumerConfig)

// DefaultFetchMaxBytes is a consumer's max_bytes per fetch unless
// WithFetchMaxBytes says otherwise.
const DefaultFetchMaxBytes = 1 << 20

// WithFetchMaxBytes is the max_bytes of each fetch (default
// DefaultFetchMaxBytes). An answer holds whole batches, at least one even
// when it is bigger. The records a Poll decompresses stop at the larger of
// this and FetchLimits.MaxDecompressedBytes, past the batch that crosses
// it; the rest of the answer is fetched again by the next Poll.
func WithFetchMaxBytes(n int) ConsumerOption { return func(c *consumerConfig) { c.maxBytes = n } }

// WithFetchMaxWait is how long a fetch may wait on the agent for records
// when there are none yet (the wait parameter; default 5s, at most 30s,
// the agent's bound). 0 asks for an immediate answer, possibly empty.
func WithFetchMaxWait(d time.Duration) ConsumerOption {
	return func(c *consumerConfig) { c.maxWait = d }
}

// WithOffsetReset makes a consumer whose offset is out of range (below the
// log start after retention, or above the high watermark) continue from
// OffsetEarliest or OffsetLatest instead of failing with
// ErrOffsetOutOfRange.
func WithOffsetReset(to int64) ConsumerOption { return func(c *consumerConfig) { c.reset = to } }

// FetchLimits bound what a consumer accepts of a fetched batch; a batch
// over them is corrupt (ErrCorruptBatch).
type FetchLimits struct {
	// MaxBatchBytes bounds a whole batch, header included. Required.
	MaxBatchBytes int
	// MaxRecordBytes bounds one record's length; 0 means only its batch
	// bounds it.
	MaxRecordBytes int
	// MaxDecompressedBytes bounds the records of a compressed batch once
	// decompressed; 0 means DefaultMaxDecompressedBytes.
	MaxDecompressedBytes int
}

// DefaultMaxDecompressedBytes is FetchLimits.MaxDecompressedBytes when 0
// (package record's default, which a test checks).
const DefaultMaxDecompressedBytes = 64 << 20

// WithFetchLimits bounds what decoding accepts (default: batches up to 16
// MiB, the agents' default limits.max_request_bytes; decompressed records
// up to DefaultMaxDecompressedBytes). An answer is read only up to max
// bytes plus one batch.
func WithFetchLimits(l FetchLimits) ConsumerOption {
	return func(c *consumerConfig) {
		c.limits = record.Limits{MaxBatchBytes: l.MaxBatchBytes, MaxRecordBytes: l.MaxRecordBytes, MaxDecompressedBytes: l.MaxDecompressedBytes}
	}
}

// WithFetchBackoff sets the first and the largest delay between retries of
// a failed fetch (default 50ms and 1s).
func WithFetchBackoff(first, largest time.Duration) ConsumerOption {
	return func(c *consumerConfig) { c.backoffMin, c.backoffMax = first, largest }
}

// WithBufferReuse makes the consumer read every fetch into the same
// memory: the Key, Value and Headers of the records a Poll or Next returns
// are then valid only until the next fetch (the Poll after, or the Next
// that finds no record left), like bufio.Scanner's Bytes. It saves an
// allocation (and its clearing) of up to max bytes per fetch, for readers
// that are done with each record before they ask for more.
func WithBufferReuse() ConsumerOption { return func(c *consumerConfig) { c.reuse = true } }

// Consumer reads one partition in offset order. It is not safe for
// concurrent use.
type Consumer struct {
	client    *Client
	topic     string
	partition int
	path      string // of the fetch endpoint, escaped
	cfg       consumerConfig
	clock     Clock
	backoff   backoff
	decoder   *record.Decoder
	// member, set for a GroupConsumer's partition, adds the group, member
	// id and member epoch to every fetch's query: the agent then checks
	// that the member owns the partition, and a fetch from OffsetEarliest
	// or OffsetLatest goes without an offset, so that the agent starts it
	// at the group's committed offset, or else where the reset policy says.
	member func(url.Values)
	// resolved, when set, is told the offset that OffsetEarliest or
	// OffsetLatest resolved to, before any record from it is returned.
	resolved func(int64)

	next           int64 // offset to fetch next, or OffsetEarliest/OffsetLatest until resolved
	highWatermark  int64
	logStartOffset int64
	buffered       []Record // fetched, not yet returned by Next
	closed         bool
	// body and records are reused by every fetch WithBufferReuse.
	body    []byte
	records []Record
}

// NewConsumer returns a Consumer of one partition of topic that starts at
// from: OffsetEarliest, OffsetLatest or an offset.
func (c *Client) NewConsumer(topic string, partition int, from int64, opts ...ConsumerOption) (*Consumer, error) {
	if err := ValidateTopicName(topic); err != nil {
		return nil, err
	}
	cfg := consumerConfig{
		maxBytes:   DefaultFetchMaxBytes,
		maxWait:    5 * time.Second,
		limits:     record.Limits{MaxBatchBytes: 16 << 20},
		backoffMin: 50 * time.Millisecond,
		backoffMax: time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case partition < 0:
		return nil, fmt.Errorf("%w: partition %d", ErrInvalidOption, partition)
	case from < OffsetEarliest:
		return nil, fmt.Errorf("%w: start offset %d", ErrInvalidOption, from)
	case cfg.maxBytes <= 0 || cfg.maxWait < 0 || cfg.maxWait > wire.MaxClientWait:
		return nil, fmt.Errorf("%w: fetch max bytes %d, max wait %v (at most the agent's %v)", ErrInvalidOption, cfg.maxBytes, cfg.maxWait, wire.MaxClientWait)
	case cfg.reset != 0 && cfg.reset != OffsetEarliest && cfg.reset != OffsetLatest:
		return nil, fmt.Errorf("%w: offset reset %d: want OffsetEarliest or OffsetLatest", ErrInvalidOption, cfg.reset)
	case cfg.limits.MaxBatchBytes <= 0:
		return nil, fmt.Errorf("%w: fetch limits need MaxBatchBytes", ErrInvalidOption)
	case cfg.backoffMin <= 0 || cfg.backoffMax < cfg.backoffMin:
		return nil, fmt.Errorf("%w: fetch backoff %v to %v", ErrInvalidOption, cfg.backoffMin, cfg.backoffMax)
	}
	return &Consumer{
		client:         c,
		topic:          topic,
		partition:      partition,
		path:           fmt.Sprintf("%s/partitions/%d/records", topicPath(topic), partition),
		cfg:            cfg,
		clock:          c.clock,
		backoff:        newBackoff(cfg.backoffMin, cfg.backoffMax),
		decoder:        record.NewDecoder(cfg.limits),
		next:           from,
		highWatermark:  -1,
		logStartOffset: -1,
	}, nil
}

// Position is the offset of the next record Next or Poll returns; before the
// first fetch from OffsetEarliest or OffsetLatest, that constant.
func (c *Consumer) Position() int64 {
	if len(c.buffered) > 0 {
		return c.buffered[0].Offset
	}
	return c.next
}

// HighWatermark is the partition's high watermark in the last answer, -1
// before the first. Position() >= HighWatermark() means caught up.
func (c *Consumer) HighWatermark() int64 { return c.highWatermark }

// LogStartOffset is the partition's first kept offset in the last answer,
// -1 before the first.
func (c *Consumer) LogStartOffset() int64 { return c.logStartOffset }

// SeekTo makes the next fetch start at offset (or OffsetEarliest or
// OffsetLatest), dropping records fetched but not yet returned.
func (c *Consumer) SeekTo(offset int64) error {
	if offset < OffsetEarliest {
		return fmt.Errorf("%w: seek to %d", ErrInvalidOption, offset)
	}
	c.next, c.buffered = offset, nil
	return nil
}

// Next returns the next record, long-polling until there is one or ctx
// ends.
func (c *Consumer) Next(ctx context.Context) (Record, error) {
	for len(c.buffered) == 0 {
		records, err := c.poll(ctx)
		if err != nil {
			return Record{}, err
		}
		c.buffered = records
	}
	r := c.buffered[0]
	c.buffered[0] = Record{}
	c.buffered = c.buffered[1:]
	c.client.stats.recordsConsumed.Add(1)
	c.client.stats.bytesConsumed.Add(recordBytes(&r))
	return r, nil
}

// Close makes Next and Poll fail with ErrClosed. A Consumer holds no
// goroutine and no connection of its own (its Client's are shared), so
// there is nothing else to stop.
func (c *Consumer) Close() error {
	c.closed, c.buffered = true, nil
	return nil
}

// Poll returns the records Next has not returned yet, or else fetches once:
// it may return no records when the fetch's wait passed without new ones.
// Failures that may pass (the agent says retriable, the connection failed)
// are retried with backoff until ctx ends; others are returned, such as
// ErrOffsetOutOfRange (an *Error with the partition's bounds, unless
// WithOffsetReset) or a corrupt batch (ErrCorruptBatch).
func (c *Consumer) Poll(ctx context.Context) ([]Record, error) {
	records, err := c.poll(ctx)
	c.client.stats.consumed(records)
	return records, err
}

// poll is Poll without counting the records as consumed: a GroupConsumer
// fetches ahead of its own Poll, which counts them.
func (c *Consumer) poll(ctx context.Context) ([]Record, error) {
	if c.closed {
		return nil, fmt.Errorf("consumer of %s/%d: %w", c.topic, c.partition, ErrClosed)
	}
	if len(c.buffered) > 0 {
		out := c.buffered
		c.buffered = nil
		return out, nil
	}
	reset := false
	var last error
	for attempt := 0; ; {
		records, err := c.fetch(ctx)
		if err == nil {
			return records, nil
		}
		c.client.stats.fetchErrors.Add(1)
		if ctx.Err() != nil {
			// Time ran out during an attempt: the cause worth telling is
			// the one that was being retried, as when it runs out between
			// attempts.
			if last != nil {
				return nil, fmt.Errorf("%w (last attempt: %w)", err, last)
			}
			return nil, err
		}
		var e *Error
		if errors.As(err, &e) && e.Code == CodeOffsetOutOfRange && c.cfg.reset != 0 && !reset {
			// One reset per Poll: an agent that keeps refusing its own
			// bounds gets its error returned instead of a busy loop.
			reset = true
			c.next = c.resetOffset(e)
			if c.next >= 0 && c.resolved != nil {
				c.resolved(c.next)
			}
			continue
		}
		if !fetchRetriable(err) {
			return nil, err
		}
		var retryAfter time.Duration
		if e != nil {
			retryAfter = e.RetryAfter
		}
		if serr := sleep(ctx, c.clock, c.backoff.delay(attempt, retryAfter)); serr != nil {
			return nil, fmt.Errorf("%w (last attempt: %w)", serr, err)
		}
		last = err
		c.client.stats.fetchRetries.Add(1)
		attempt++
	}
}

// resetOffset is where a consumer whose offset is out of range goes on. A
// member takes the bound from the agent's answer: without an offset its
// fetch would start at the committed offset that is out of range.
func (c *Consumer) resetOffset(e *Error) int64 {
	switch {
	case c.member != nil && c.cfg.reset == OffsetEarliest && e.LogStartOffset >= 0:
		return e.LogStartOffset
	case c.member != nil && c.cfg.reset == OffsetLatest && e.HighWatermark >= 0:
		return e.HighWatermark
	}
	return c.cfg.reset
}

// fetchRetriable: reads are idempotent, so any failure that may pass is
// worth another try.
func fetchRetriable(err error) bool {
	var te *transportError
	if errors.As(err, &te) {
		return true
	}
	var e *Error
	return errors.As(err, &e) && (e.Retriable || retriableBeforeAppendCodes[e.Code])
}

func offsetParam(offset int64) string {
	switch offset {
	case OffsetEarliest:
		return "earliest"
	case OffsetLatest:
		return "latest"
	}
	return strconv.FormatInt(offset, 10)
}

// fetch fetches once from c.next and advances it past what it returns.
func (c *Consumer) fetch(ctx context.Context) ([]Record, error) {
	if c.next == OffsetLatest {
		// "latest" is resolved on its own, without waiting: the answer's
		// first batch may start before the offset the agent resolved, so
		// which of its records to skip is known only from a number.
		a, err := c.get(ctx, OffsetLatest, 0)
		if err != nil {
			return nil, err
		}
		c.highWatermark, c.logStartOffset = a.highWatermark, a.logStartOffset
		c.next = a.highWatermark
		if c.resolved != nil {
			c.resolved(c.next)
		}
	}
	a, err := c.get(ctx, c.next, c.cfg.maxWait)
	if err != nil {
		return nil, err
	}
	c.highWatermark, c.logStartOffset = a.highWatermark, a.logStartOffset
	from := c.next
	if from == OffsetEarliest {
		from = a.logStartOffset
		if c.resolved != nil {
			c.resolved(from)
		}
	}
	records, next, err := c.decode(a.body, from)
	if err != nil {
		return nil, fmt.Errorf("fetch %s/%d at offset %s: %w", c.topic, c.partition, offsetParam(c.next), err)
	}
	c.next = next
	return records, nil
}

// fetchAnswer is a successful fetch: batches back to back and the bounds.
type fetchAnswer struct {
	body           []byte
	highWatermark  int64
	logStartOffset int64
}

func (c *Consumer) get(ctx context.Context, offset int64, wait time.Duration) (*fetchAnswer, error) {
	query := url.Values{"max_bytes": {strconv.Itoa(c.cfg.maxBytes)}}
	switch {
	case c.member == nil:
		query.Set("offset", offsetParam(offset))
	case offset == OffsetLatest:
		c.member(query)
		query.Set("reset", "latest")
	case offset == OffsetEarliest:
		c.member(query)
	default:
		c.member(query)
		query.Set("offset", offsetParam(offset))
	}
	if wait > 0 {
		query.Set("wait", wait.String())
	}
	ctx, cancel := context.WithTimeout(ctx, wait+requestGrace)
	defer cancel()
	fail := func(err error) (*fetchAnswer, error) {
		return nil, fmt.Errorf("fetch %s/%d at offset %s: %w", c.topic, c.partition, offsetParam(offset), err)
	}
	req, err := c.client.newRequest(ctx, http.MethodGet, c.path, query, nil)
	if err != nil {
		return fail(err)
	}
	req.Header.Set("Accept", BatchContentType)
	resp, err := c.client.http.Do(req)
	if err != nil {
		return fail(&transportError{err: err, written: true})
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fail(decodeError(resp))
	}
	a := &fetchAnswer{}
	if a.highWatermark, err = offsetHeader(resp, HighWatermarkHeader); err != nil {
		return fail(err)
	}
	if a.logStartOffset, err = offsetHeader(resp, LogStartOffsetHeader); err != nil {
		return fail(err)
	}
	var scratch []byte
	if c.cfg.reuse {
		scratch = c.body
	}
	if a.body, err = readBody(resp, int64(c.cfg.maxBytes)+int64(c.cfg.limits.MaxBatchBytes), scratch); err != nil {
		return fail(err)
	}
	if c.cfg.reuse && cap(a.body) > cap(c.body) {
		c.body = a.body[:0]
	}
	if len(a.body) > 0 {
		if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != BatchContentType {
			return fail(fmt.Errorf("%w: Content-Type %q, want %s", ErrProtocol, resp.Header.Get("Content-Type"), BatchContentType))
		}
	}
	return a, nil
}

func offsetHeader(resp *http.Response, name string) (int64, error) {
	s := resp.Header.Get(name)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%w: header %s is %q, want an offset", ErrProtocol, name, s)
	}
	return v, nil
}

// minRecordBytes is the smallest encoded record: a length, attributes,
// timestamp and offset deltas, key and value lengths and a header count of
// one byte each.
const minRecordBytes = 7

// decode verifies and decodes the batches of body and returns their
// records at or after from, and the offset to fetch next. Every batch must
// start at or after the end of the one before; only the first may hold
// records below from. Once the records copied out of compressed batches
// pass the larger of the fetch's max bytes and the decompressed limit of
// one batch, the batches after are left for the next fetch: max bytes
// bounds compressed bytes, and a 64 KiB fetch of 32 zstd batches of zeros
// held 24 MiB of records.
func (c *Consumer) decode(body []byte, from int64) ([]Record, int64, error) {
	var records []Record
	var headers []Header // the records' headers, allocated a slab at a time
	next, prevEnd := from, int64(-1)
	decompressedLimit := c.cfg.limits.MaxDecompressedBytes
	if decompressedLimit <= 0 {
		decompressedLimit = DefaultMaxDecompressedBytes
	}
	budget, copied := max(c.cfg.maxBytes, decompressedLimit), 0
	for pos := 0; pos < len(body) && copied <= budget; {
		batch, it, err := c.decoder.NextBatch(body[pos:])
		if err != nil {
			return nil, 0, fmt.Errorf("%w at byte %d: %w", ErrCorruptBatch, pos, err)
		}
		h := it.Header()
		if h.BaseOffset() < prevEnd {
			return nil, 0, fmt.Errorf("%w: batch at byte %d starts at offset %d, before the end %d of the one before",
				ErrProtocol, pos, h.BaseOffset(), prevEnd)
		}
		prevEnd = h.NextOffset()
		if records == nil {
			// Room for as many records again in each batch-sized share
			// of the body, bounded by the fewest bytes a record takes.
			want := min(int(h.RecordCount())*(len(body)/len(batch)+1), len(body)/minRecordBytes+1)
			if c.cfg.reuse && cap(c.records) >= want {
				records = c.records[:0]
			} else {
				records = make([]Record, 0, want)
			}
		}
		// Uncompressed records alias body, which is this fetch's own;
		// compressed ones alias the decoder's buffer, reused next batch.
		owned := h.Codec() == record.CodecNone
		for it.Next() {
			r := it.Record()
			if r.Offset < from {
				continue
			}
			records = append(records, c.toRecord(r, h.LeaderEpoch(), owned, &headers))
			if !owned {
				copied += len(r.Key) + len(r.Value)
				for _, rh := range r.Headers {
					copied += len(rh.Value)
				}
			}
		}
		if err := it.Err(); err != nil {
			return nil, 0, fmt.Errorf("%w at byte %d: %w", ErrCorruptBatch, pos, err)
		}
		next = max(next, h.NextOffset())
		pos += len(batch)
	}
	if len(body) > 0 && next == from {
		return nil, 0, fmt.Errorf("%w: the answer holds no batch that reaches offset %d", ErrProtocol, from)
	}
	if c.cfg.reuse && cap(records) > cap(c.records) {
		c.records = records[:0]
	}
	return records, next, nil
}

// headerSlab is how many headers decode allocates at once for the records
// of a fetch.
const headerSlab = 64

// toRecord converts a decoded record; its headers are appended to slab,
// whose spare room is used before anything is allocated.
func (c *Consumer) toRecord(r record.Record, epoch int32, owned bool, slab *[]Header) Record {
	out := Record{
		Topic:       c.topic,
		Partition:   c.partition,
		Offset:      r.Offset,
		Timestamp:   time.UnixMilli(r.Timestamp),
		Key:         r.Key,
		Value:       r.Value,
		LeaderEpoch: epoch,
	}
	if !owned {
		out.Key, out.Value = bytes.Clone(r.Key), bytes.Clone(r.Value)
	}
	if len(r.Headers) > 0 {
		if cap(*slab)-len(*slab) < len(r.Headers) {
			*slab = make([]Header, 0, max(headerSlab, len(r.Headers)))
		}
		start := len(*slab)
		for _, h := range r.Headers {
			v := h.Value
			if !owned {
				v = bytes.Clone(v)
			}
			*slab = append(*slab, Header{Key: h.Key, Value: v})
		}
		out.Headers = (*slab)[start:len(*slab):len(*slab)]
	}
	return out
}
