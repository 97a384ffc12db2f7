package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// DefaultMaxDecompressedBytes bounds the decompressed records of one batch
// when Limits.MaxDecompressedBytes is not set.
const DefaultMaxDecompressedBytes = 64 << 20

// ErrTooLarge is matched (errors.Is) by every error that reports a batch, or
// part of one, bigger than the caller's limits allow. It is not corruption:
// it is only reported for content whose CRC matched, so the bytes are what
// their writer meant, and a smaller limit than the writer's is a
// configuration matter. A compressed batch that would expand beyond
// Limits.MaxDecompressedBytes (a "zip bomb") is ErrTooLarge.
var ErrTooLarge = errors.New("record: over the size limit")

// TooLargeError says which part of a batch went over which limit. It matches
// ErrTooLarge.
type TooLargeError struct {
	What  string
	Limit int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("record: %s over the limit of %d bytes", e.What, e.Limit)
}

// Is makes errors.Is(err, ErrTooLarge) true for every TooLargeError.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// Limits bound what decoding accepts and allocates.
type Limits struct {
	// MaxBatchBytes bounds a whole batch as stored, header included; a
	// bigger batch_length is corrupt (see ParseHeader). 0 means no bound
	// beyond int32.
	MaxBatchBytes int
	// MaxRecordBytes bounds one record's length field. 0 means records are
	// bounded only by their batch.
	MaxRecordBytes int
	// MaxDecompressedBytes bounds the records section of a compressed batch
	// after decompression; it is also the most a Decoder allocates for it.
	// 0 means DefaultMaxDecompressedBytes.
	MaxDecompressedBytes int
}

// Decoder verifies batches and iterates over their records. It reuses its
// decompression state and buffer from one batch to the next, so keep one per
// goroutine; it is not safe for concurrent use.
type Decoder struct {
	limits       Limits
	decompressor decompressor
	iter         Iterator
}

// NewDecoder returns a Decoder that enforces limits.
func NewDecoder(limits Limits) *Decoder {
	if limits.MaxDecompressedBytes <= 0 {
		limits.MaxDecompressedBytes = DefaultMaxDecompressedBytes
	}
	d := &Decoder{limits: limits}
	d.decompressor.limit = limits.MaxDecompressedBytes
	return d
}

// Records verifies batch (which must be exactly one batch, as for Verify),
// decompresses it if needed and returns an iterator over its records.
//
// The iterator belongs to d and is reset by the next call to Records or
// Validate. Keys and values alias batch, or for a compressed batch d's
// buffer, which the next call reuses: copy them to keep them longer. Headers
// are allocated for each record that has any.
func (d *Decoder) Records(batch []byte) (*Iterator, error) {
	return d.start(batch, true)
}

// NextBatch is Records for the batch at the start of region (batches back
// to back, as in a fetch answer): it returns that batch, cut to its length
// and capacity as record.NextBatch cuts it, and the iterator over its
// records. The batch's CRC is computed once, where record.NextBatch and then
// Records would compute it twice: on a replay that reads gigabytes, that
// second pass over every byte was a tenth of the consumer's CPU.
//
// A region that ends inside the batch, or is empty, gives ErrShort; anything
// else wrong is what Records reports.
func (d *Decoder) NextBatch(region []byte) ([]byte, *Iterator, error) {
	_, size, err := parseHeader(region, d.limits.MaxBatchBytes)
	if err != nil {
		return nil, nil, err
	}
	if len(region) < size {
		return nil, nil, fmt.Errorf("%w: have %d of %d bytes", ErrShort, len(region), size)
	}
	batch := region[:size:size]
	it, err := d.start(batch, true)
	if err != nil {
		return nil, nil, err
	}
	return batch, it, nil
}

// Validate checks batch as completely as iterating over Records would,
// without building the records' headers, and returns its header. An
// uncompressed batch is validated without allocating.
func (d *Decoder) Validate(batch []byte) (Header, error) {
	h, _, err := d.ValidateTimestamps(batch)
	return h, err
}

// ValidateTimestamps is Validate that also returns the largest of the
// records' timestamps. A record above the header's max_timestamp is corrupt,
// as it is for every reader; a max_timestamp above every record is not (the
// bytes may be on disk already), but a leader rewrites it before it appends
// a produced batch (SetMaxTimestamp), as Kafka's broker does.
func (d *Decoder) ValidateTimestamps(batch []byte) (h Header, largest int64, err error) {
	it, err := d.start(batch, false)
	if err != nil {
		return nil, 0, err
	}
	for it.Next() {
	}
	if err := it.Err(); err != nil {
		return nil, 0, err
	}
	return it.Header(), it.largestTimestamp, nil
}

func (d *Decoder) start(batch []byte, withHeaders bool) (*Iterator, error) {
	h, err := Verify(batch, d.limits.MaxBatchBytes)
	if err != nil {
		return nil, err
	}
	records := batch[HeaderSize:]
	if codec := h.Codec(); codec != CodecNone {
		if records, err = d.decompressor.decompress(codec, records); err != nil {
			return nil, err
		}
	}
	d.iter = Iterator{
		header:           h,
		records:          records,
		left:             h.RecordCount(),
		prevOffsetDelta:  -1,
		maxRecordBytes:   d.limits.MaxRecordBytes,
		withHeaders:      withHeaders,
		largestTimestamp: math.MinInt64,
	}
	return &d.iter, nil
}

// Iterator walks the records of one batch:
//
//	for it.Next() {
//		r := it.Record()
//	}
//	if err := it.Err(); err != nil {
//
// A batch whose records do not match its header (fewer or more records than
// record_count, bytes after the last one, offset deltas out of order) ends
// the iteration with an error that matches ErrCorrupt.
type Iterator struct {
	header          Header
	records         []byte // not decoded yet
	left            int32  // records that record_count still promises
	index           int32  // of the next record
	prevOffsetDelta int64
	maxRecordBytes  int
	withHeaders     bool
	record          Record
	err             error
	// largestTimestamp is the largest timestamp of the records decoded so
	// far, math.MinInt64 before the first.
	largestTimestamp int64
}

// Header is the batch's header.
func (it *Iterator) Header() Header { return it.header }

// Record is the record that the last successful Next decoded.
func (it *Iterator) Record() Record { return it.record }

// Err is the error that ended the iteration, if any.
func (it *Iterator) Err() error { return it.err }

// Next decodes the next record. It returns false at the end of the batch or
// on an error (see Err).
func (it *Iterator) Next() bool {
	if it.err != nil {
		return false
	}
	if it.left == 0 {
		if len(it.records) != 0 {
			it.err = corruptf("%d bytes after the last of %d records", len(it.records), it.header.RecordCount())
		}
		return false
	}
	if len(it.records) == 0 {
		it.err = corruptf("records end after %d of %d", it.index, it.header.RecordCount())
		return false
	}
	length, n := binary.Varint(it.records)
	if n <= 0 {
		it.err = corruptf("record %d: malformed length varint", it.index)
		return false
	}
	if length < 0 || length > int64(len(it.records)-n) {
		it.err = corruptf("record %d: length %d exceeds the %d bytes left", it.index, length, len(it.records)-n)
		return false
	}
	if it.maxRecordBytes > 0 && length > int64(it.maxRecordBytes) {
		it.err = &TooLargeError{What: fmt.Sprintf("record %d of %d bytes", it.index, length), Limit: it.maxRecordBytes}
		return false
	}
	end := n + int(length)
	body := it.records[n:end]
	it.records = it.records[end:]
	if it.err = it.decode(body); it.err != nil {
		return false
	}
	it.left--
	it.index++
	return true
}

// decode parses one record body into it.record.
func (it *Iterator) decode(body []byte) error {
	r := fieldReader{b: body, index: it.index}
	if attributes := r.byte("attributes"); attributes != 0 {
		return corruptf("record %d: attributes %#02x, none are defined", it.index, attributes)
	}
	timestampDelta := r.varint("timestamp_delta")
	offsetDelta := r.varint("offset_delta")
	key := r.bytes("key_len", true)
	value := r.bytes("value_len", true)
	headerCount := r.varint("header_count")
	if r.err != nil {
		return r.err
	}
	if offsetDelta <= it.prevOffsetDelta || offsetDelta > int64(it.header.LastOffsetDelta()) {
		return corruptf("record %d: offset_delta %d is not in (%d, %d]",
			it.index, offsetDelta, it.prevOffsetDelta, it.header.LastOffsetDelta())
	}
	first := it.header.FirstTimestamp()
	timestamp := first + timestampDelta
	if (timestampDelta > 0 && timestamp < first) || (timestampDelta < 0 && timestamp > first) {
		return corruptf("record %d: timestamp_delta %d overflows first_timestamp %d", it.index, timestampDelta, first)
	}
	if timestamp > it.header.MaxTimestamp() {
		return corruptf("record %d: timestamp %d is above max_timestamp %d", it.index, timestamp, it.header.MaxTimestamp())
	}
	it.largestTimestamp = max(it.largestTimestamp, timestamp)
	if headerCount < 0 || headerCount > int64(len(r.b)/minHeaderSize) {
		return corruptf("record %d: header_count %d does not fit the %d bytes left", it.index, headerCount, len(r.b))
	}
	var headers []RecordHeader
	if it.withHeaders && headerCount > 0 {
		headers = make([]RecordHeader, headerCount)
	}
	for i := range int(headerCount) {
		key := r.bytes("header_key_len", false)
		value := r.bytes("header_value_len", true)
		if headers != nil && r.err == nil {
			headers[i] = RecordHeader{Key: string(key), Value: value}
		}
	}
	if r.err != nil {
		return r.err
	}
	if len(r.b) != 0 {
		return corruptf("record %d: %d bytes after its last field", it.index, len(r.b))
	}
	it.prevOffsetDelta = offsetDelta
	it.record = Record{
		Offset:    it.header.BaseOffset() + offsetDelta,
		Timestamp: timestamp,
		Key:       key,
		Value:     value,
		Headers:   headers,
	}
	return nil
}
