package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrEmptyBatch is returned when a batch without records is requested: a
// batch must give the leader at least one offset to assign.
var ErrEmptyBatch = errors.New("record: batch has no records")

// ErrTimestampRange reports a record timestamp so far from the batch's first
// one that their difference does not fit timestamp_delta.
var ErrTimestampRange = errors.New("record: timestamp out of range")

// maxRecordsBytes is the largest records section batch_length can count.
const maxRecordsBytes = math.MaxInt32 - (HeaderSize - LengthFieldEnd)

// Builder accumulates records and writes them as one batch. Reuse one Builder
// (Reset between batches) so that adding records does not allocate once its
// buffer has grown. The zero value is ready: an uncompressed batch from a
// producer that is not idempotent.
type Builder struct {
	codec Codec

	idempotent    bool
	producerID    int64
	producerEpoch int16
	baseSequence  int32

	records        []byte // encoded, uncompressed
	count          int32
	firstTimestamp int64
	maxTimestamp   int64
}

// SetCodec chooses the compression of the batch; it may be called at any time
// before AppendTo.
func (b *Builder) SetCodec(codec Codec) error {
	if !codec.valid() {
		return fmt.Errorf("%w %d", ErrUnknownCodec, codec)
	}
	b.codec = codec
	return nil
}

// SetProducer marks the batch as written by an idempotent producer. Without
// it, producer_id, producer_epoch and base_sequence are -1.
func (b *Builder) SetProducer(id int64, epoch int16, baseSequence int32) {
	b.idempotent = true
	b.producerID, b.producerEpoch, b.baseSequence = id, epoch, baseSequence
}

// Reset drops the records and the producer so that the Builder can build the
// next batch; it keeps the codec and the buffer. The producer is dropped
// because a stale base_sequence would make the leader discard the next batch
// as a duplicate.
func (b *Builder) Reset() {
	b.idempotent = false
	b.records = b.records[:0]
	b.count = 0
}

// Len is the number of records added since the last Reset.
func (b *Builder) Len() int { return int(b.count) }

// Size is the size the batch would have uncompressed, header included.
// Producers use it to cap batches before compression.
func (b *Builder) Size() int { return HeaderSize + len(b.records) }

// RecordLen is the length field of the record that Add would append next
// with these arguments: what a Decoder bounds with Limits.MaxRecordBytes.
func (b *Builder) RecordLen(timestamp int64, key, value []byte, headers []RecordHeader) int {
	first := timestamp
	if b.count > 0 {
		first = b.firstTimestamp
	}
	return recordBodySize(timestamp-first, b.count, key, value, headers)
}

// Add appends a record with the given timestamp (milliseconds). Key and
// value may be nil (null) or empty; headers may have nil values. The
// record's offset delta is its position in the batch. Add copies what it
// needs, so the caller may reuse its slices after Add returns.
func (b *Builder) Add(timestamp int64, key, value []byte, headers []RecordHeader) error {
	first := timestamp
	if b.count > 0 {
		first = b.firstTimestamp
	}
	delta := timestamp - first
	if (timestamp >= first) != (delta >= 0) {
		return fmt.Errorf("%w: %d is too far from the batch's first timestamp %d", ErrTimestampRange, timestamp, first)
	}
	// A record takes at least 7 bytes, so the size check below also keeps
	// the record count, and with it the offset delta, within int32.
	bodySize := recordBodySize(delta, b.count, key, value, headers)
	if size := varintSize(int64(bodySize)) + bodySize; size > maxRecordsBytes-len(b.records) {
		return &TooLargeError{
			What:  fmt.Sprintf("batch of %d bytes with this record", HeaderSize+len(b.records)+size),
			Limit: LengthFieldEnd + math.MaxInt32,
		}
	}
	b.records = appendRecord(b.records, bodySize, delta, b.count, key, value, headers)
	if b.count == 0 {
		b.firstTimestamp, b.maxTimestamp = timestamp, timestamp
	}
	b.maxTimestamp = max(b.maxTimestamp, timestamp)
	b.count++
	return nil
}

// AppendTo appends the batch to dst and returns the extended slice. The batch
// has base_offset 0 and leader_epoch 0: the leader stamps both with
// SetBaseOffset and SetLeaderEpoch, which the CRC does not cover. On error
// dst is returned unchanged in length. The Builder keeps its records, so
// AppendTo can be called again (with another codec, say) before Reset.
func (b *Builder) AppendTo(dst []byte) ([]byte, error) {
	if b.count == 0 {
		return dst, ErrEmptyBatch
	}
	start := len(dst)
	dst = append(dst, make([]byte, HeaderSize)...)
	out, err := appendCompressed(dst, b.codec, b.records)
	if err != nil {
		return dst[:start], err
	}
	dst = out
	size := len(dst) - start
	if size-LengthFieldEnd > math.MaxInt32 {
		return dst[:start], &TooLargeError{What: fmt.Sprintf("batch of %d bytes", size), Limit: LengthFieldEnd + math.MaxInt32}
	}
	batch := dst[start:]
	producerID, producerEpoch, baseSequence := int64(-1), int16(-1), int32(-1)
	if b.idempotent {
		producerID, producerEpoch, baseSequence = b.producerID, b.producerEpoch, b.baseSequence
	}
	be := binary.BigEndian
	be.PutUint64(batch[offBaseOffset:], 0)
	be.PutUint32(batch[offBatchLength:], uint32(size-LengthFieldEnd))
	be.PutUint32(batch[offLeaderEpoch:], 0)
	batch[offMagic] = Magic
	be.PutUint16(batch[offAttributes:], uint16(b.codec))
	be.PutUint32(batch[offLastOffsetDelta:], uint32(b.count-1))
	be.PutUint64(batch[offFirstTimestamp:], uint64(b.firstTimestamp))
	be.PutUint64(batch[offMaxTimestamp:], uint64(b.maxTimestamp))
	be.PutUint64(batch[offProducerID:], uint64(producerID))
	be.PutUint16(batch[offProducerEpoch:], uint16(producerEpoch))
	be.PutUint32(batch[offBaseSequence:], uint32(baseSequence))
	be.PutUint32(batch[offRecordCount:], uint32(b.count))
	be.PutUint32(batch[offCRC:], Checksum(batch))
	return dst, nil
}
