package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
)

// Batch header layout, big-endian (docs/design.md §4):
//
//	off size field              notes
//	0   8    base_offset        int64, offset of the first record
//	8   4    batch_length       int32, bytes after this field (batch = 12 + batch_length)
//	12  4    leader_epoch       int32, stamped by the leader; NOT covered by the CRC
//	16  1    magic              int8, format version (1)
//	17  4    crc                uint32, CRC-32C (Castagnoli) of bytes [21, end)
//	21  2    attributes         int16, bits 0-2 compression codec
//	23  4    last_offset_delta  int32
//	27  8    first_timestamp    int64 ms
//	35  8    max_timestamp      int64 ms
//	43  8    producer_id        int64, -1 when not idempotent
//	51  2    producer_epoch     int16
//	53  4    base_sequence      int32, -1 when not idempotent
//	57  4    record_count       int32
//	61  ...  records            possibly compressed as a whole
const (
	offBaseOffset      = 0
	offBatchLength     = 8
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21
	offLastOffsetDelta = 23
	offFirstTimestamp  = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offRecordCount     = 57

	// HeaderSize is the size of the fixed batch header; records follow it.
	HeaderSize = 61
	// LengthFieldEnd is where batch_length stops counting from: a batch
	// occupies LengthFieldEnd + batch_length bytes.
	LengthFieldEnd = 12
	// crcStart is the first byte the CRC covers.
	crcStart = 21

	// Magic is the only batch format version this package reads and writes.
	Magic = 1

	// compressionMask selects the codec bits of the attributes.
	compressionMask = 0x07
	// reservedAttributes are the attribute bits this format does not define;
	// they must be zero so that a later format can give them a meaning.
	reservedAttributes = ^int16(compressionMask)
)

// ErrCorrupt is matched (errors.Is) by every error that reports bytes that
// cannot be a valid batch: a bad CRC, an impossible length, an unknown magic.
var ErrCorrupt = errors.New("record: corrupt batch")

// ErrShort reports that the input ends before the batch it starts does. At
// the tail of a log that is a torn write rather than corruption, so it is a
// separate error; it does not match ErrCorrupt.
var ErrShort = errors.New("record: incomplete batch")

// CorruptError describes what made a batch invalid. It matches ErrCorrupt.
type CorruptError struct {
	Reason string
}

func (e *CorruptError) Error() string { return "record: corrupt batch: " + e.Reason }

// Is makes errors.Is(err, ErrCorrupt) true for every CorruptError.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

func corruptf(format string, args ...any) error {
	return &CorruptError{Reason: fmt.Sprintf(format, args...)}
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is a zero-allocation view of a batch's fixed header. It does not
// copy: it stays valid only as long as the bytes it was made from.
type Header []byte

// ParseHeader checks that b starts with a plausible batch header and returns
// a view of it, and the total size of the batch. maxBatchBytes bounds the
// size a caller is willing to accept (0 means no bound beyond int32).
//
// It checks every header field that has an impossible value (length, magic,
// offsets, record count, attributes) but not the CRC: that needs the whole
// batch (see Verify). If b is shorter than a header, it returns ErrShort.
//
// A batch over maxBatchBytes is reported as corrupt, not as ErrTooLarge:
// before the CRC has been checked, a huge batch_length is more likely a
// damaged field than a real size.
func ParseHeader(b []byte, maxBatchBytes int) (Header, int, error) {
	if len(b) < HeaderSize {
		return nil, 0, fmt.Errorf("%w: %d bytes, a header needs %d", ErrShort, len(b), HeaderSize)
	}
	h := Header(b[:HeaderSize])
	length := int64(int32(binary.BigEndian.Uint32(b[offBatchLength:])))
	if length < HeaderSize-LengthFieldEnd {
		return nil, 0, corruptf("batch_length %d is below the minimum %d", length, HeaderSize-LengthFieldEnd)
	}
	size := LengthFieldEnd + length
	if maxBatchBytes > 0 && size > int64(maxBatchBytes) {
		return nil, 0, corruptf("batch of %d bytes exceeds the limit of %d", size, maxBatchBytes)
	}
	if h.Magic() != Magic {
		return nil, 0, corruptf("unknown magic %d", h.Magic())
	}
	if h.BaseOffset() < 0 {
		return nil, 0, corruptf("negative base_offset %d", h.BaseOffset())
	}
	if d := h.LastOffsetDelta(); d < 0 {
		return nil, 0, corruptf("negative last_offset_delta %d", d)
	}
	if h.BaseOffset() > math.MaxInt64-int64(h.LastOffsetDelta()) {
		return nil, 0, corruptf("base_offset %d plus last_offset_delta %d overflows", h.BaseOffset(), h.LastOffsetDelta())
	}
	if a := h.Attributes(); a&reservedAttributes != 0 {
		return nil, 0, corruptf("reserved attribute bits set in %#04x", uint16(a))
	}
	if c := h.Codec(); !c.valid() {
		return nil, 0, corruptf("unknown compression codec %d", c)
	}
	if c := h.RecordCount(); c < 0 || (c > 0 && int64(c)-1 > int64(h.LastOffsetDelta())) {
		return nil, 0, corruptf("record_count %d does not fit last_offset_delta %d", c, h.LastOffsetDelta())
	}
	return h, int(size), nil
}

// Verify checks a whole batch: its header (as ParseHeader) and that its CRC
// matches. batch must be exactly one batch: a shorter slice is ErrShort, and
// bytes after the batch_length the header claims are corrupt, since a caller
// that holds several batches splits them with NextBatch.
func Verify(batch []byte, maxBatchBytes int) (Header, error) {
	h, size, err := ParseHeader(batch, maxBatchBytes)
	if err != nil {
		return nil, err
	}
	if len(batch) < size {
		return nil, fmt.Errorf("%w: have %d of %d bytes", ErrShort, len(batch), size)
	}
	if len(batch) > size {
		return nil, corruptf("%d bytes after the end of a batch of %d", len(batch)-size, size)
	}
	if err := checkCRC(h, batch); err != nil {
		return nil, err
	}
	return h, nil
}

// checkCRC checks the CRC of batch, exactly one batch whose header h
// ParseHeader accepted.
func checkCRC(h Header, batch []byte) error {
	if got, want := Checksum(batch), h.CRC(); got != want {
		return corruptf("crc mismatch: stored %08x, computed %08x", want, got)
	}
	return nil
}

// Checksum computes the CRC-32C of a whole batch as stored in its crc field.
func Checksum(batch []byte) uint32 { return crc32.Checksum(batch[crcStart:], castagnoli) }

// BaseOffset is the offset of the first record in the batch.
func (h Header) BaseOffset() int64 { return int64(binary.BigEndian.Uint64(h[offBaseOffset:])) }

// BatchLength is the number of bytes after the batch_length field.
func (h Header) BatchLength() int32 { return int32(binary.BigEndian.Uint32(h[offBatchLength:])) }

// Size is the whole batch's size in bytes.
func (h Header) Size() int { return LengthFieldEnd + int(h.BatchLength()) }

// LeaderEpoch is the epoch of the leader that appended the batch.
func (h Header) LeaderEpoch() int32 { return int32(binary.BigEndian.Uint32(h[offLeaderEpoch:])) }

// Magic is the format version.
func (h Header) Magic() int8 { return int8(h[offMagic]) }

// CRC is the stored checksum.
func (h Header) CRC() uint32 { return binary.BigEndian.Uint32(h[offCRC:]) }

// Attributes holds the compression codec in bits 0-2; bits 3-15 are reserved
// and zero in every batch ParseHeader accepts.
func (h Header) Attributes() int16 { return int16(binary.BigEndian.Uint16(h[offAttributes:])) }

// Codec is the compression codec of the records, from attributes bits 0-2.
func (h Header) Codec() Codec { return Codec(h.Attributes() & compressionMask) }

// LastOffsetDelta is the last record's offset minus BaseOffset.
func (h Header) LastOffsetDelta() int32 {
	return int32(binary.BigEndian.Uint32(h[offLastOffsetDelta:]))
}

// LastOffset is the offset of the batch's last record.
func (h Header) LastOffset() int64 { return h.BaseOffset() + int64(h.LastOffsetDelta()) }

// NextOffset is the offset that follows the batch.
func (h Header) NextOffset() int64 { return h.LastOffset() + 1 }

// FirstTimestamp is the first record's timestamp in milliseconds.
func (h Header) FirstTimestamp() int64 {
	return int64(binary.BigEndian.Uint64(h[offFirstTimestamp:]))
}

// MaxTimestamp is the largest record timestamp in milliseconds.
func (h Header) MaxTimestamp() int64 { return int64(binary.BigEndian.Uint64(h[offMaxTimestamp:])) }

// ProducerID is -1 for a producer that is not idempotent.
func (h Header) ProducerID() int64 { return int64(binary.BigEndian.Uint64(h[offProducerID:])) }

// ProducerEpoch is the idempotent producer's epoch.
func (h Header) ProducerEpoch() int16 { return int16(binary.BigEndian.Uint16(h[offProducerEpoch:])) }

// BaseSequence is -1 for a producer that is not idempotent.
func (h Header) BaseSequence() int32 { return int32(binary.BigEndian.Uint32(h[offBaseSequence:])) }

// RecordCount is the number of records in the batch.
func (h Header) RecordCount() int32 { return int32(binary.BigEndian.Uint32(h[offRecordCount:])) }

// SetBaseOffset rewrites the base offset in place. The base offset is not
// covered by the CRC, so a leader can assign offsets without re-checksumming.
func SetBaseOffset(batch []byte, base int64) {
	binary.BigEndian.PutUint64(batch[offBaseOffset:], uint64(base))
}

// SetLeaderEpoch rewrites the leader epoch in place; it is not covered by the
// CRC either.
func SetLeaderEpoch(batch []byte, epoch int32) {
	binary.BigEndian.PutUint32(batch[offLeaderEpoch:], uint32(epoch))
}
