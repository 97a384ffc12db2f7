package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"strings"
)

// Batch header layout, big-endian (docs/design.md §4):
//
//	off size field              notes
//	0   8    base_offset        int64, offset of the first record
//	8   4    batch_length       int32, bytes after this field (batch = 12 + batch_length)
//	12  4    leader_epoch       int32, stamped by the leader; NOT covered by the CRC
//	16  1    magic              int8, format version (2)
//	17  4    crc                uint32, CRC-32C (Castagnoli) of bytes [21, end)
//	21  2    attributes         int16, see below
//	23  4    last_offset_delta  int32
//	27  8    first_timestamp    int64 ms
//	35  8    max_timestamp      int64 ms
//	43  8    producer_id        int64, -1 when not idempotent
//	51  2    producer_epoch     int16
//	53  4    base_sequence      int32, -1 when not idempotent
//	57  4    record_count       int32
//	61  ...  records            possibly compressed as a whole
//
// This is Kafka's RecordBatch v2, byte for byte, so the stored bytes can be
// served to Kafka clients as they are. The attributes are Kafka's:
//
//	bits 0-2   compression codec (Codec)
//	bit  3     timestamp type: 0 CreateTime, 1 LogAppendTime
//	bit  4     transactional
//	bit  5     control batch
//	bit  6     has a delete horizon (set by compaction)
//	bits 7-15  unused, must be 0
//
// logagent implements CreateTime batches that are neither transactional nor
// control batches and have no delete horizon: a batch with any of bits 3-6
// set is refused as unsupported (UnsupportedError).
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

	// Magic is the only batch format version this package reads and writes:
	// Kafka's RecordBatch v2.
	Magic = 2

	// compressionMask selects the codec bits of the attributes.
	compressionMask = 0x07
	// The attribute bits Kafka defines that logagent does not implement.
	attrLogAppendTime = 1 << 3
	attrTransactional = 1 << 4
	attrControl       = 1 << 5
	attrDeleteHorizon = 1 << 6
	unsupportedMask   = attrLogAppendTime | attrTransactional | attrControl | attrDeleteHorizon
	// unusedAttributes are the bits Kafka leaves undefined; a batch with one
	// set is corrupt.
	unusedAttributes = ^int16(compressionMask | unsupportedMask)
)

// unsupportedAttributes names each attribute bit of unsupportedMask, in bit
// order, as UnsupportedError says it.
var unsupportedAttributes = [...]struct {
	bit  int16
	name string
}{
	{attrLogAppendTime, "LogAppendTime timestamps"},
	{attrTransactional, "transactional batches"},
	{attrControl, "control batches"},
	{attrDeleteHorizon, "batches with a delete horizon"},
}

// ErrCorrupt is matched (errors.Is) by every error that reports bytes that
// cannot be a valid batch: a bad CRC, an impossible length, an unknown magic;
// and by UnsupportedError, for bytes that logagent cannot accept either.
var ErrCorrupt = errors.New("record: corrupt batch")

// ErrUnsupported is matched (errors.Is) by the error for a batch that uses a
// part of Kafka's format that logagent does not implement (see the
// attributes above). Such a batch also matches ErrCorrupt: whoever stores or
// replicates batches must treat it as bytes it cannot accept, while a
// producer can be told precisely what it sent.
var ErrUnsupported = errors.New("record: unsupported batch")

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

// UnsupportedError names the features of Kafka's format that a batch uses
// and logagent does not implement. It matches ErrUnsupported and ErrCorrupt.
type UnsupportedError struct {
	// Features are what the batch uses, e.g. "transactional batches".
	Features []string
}

func (e *UnsupportedError) Error() string {
	return "record: " + strings.Join(e.Features, " and ") + " are not supported"
}

// Is makes errors.Is true for both ErrUnsupported and ErrCorrupt.
func (e *UnsupportedError) Is(target error) bool {
	return target == ErrUnsupported || target == ErrCorrupt
}

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
// batch (see Verify). If b is shorter than a header, it returns ErrShort. A
// header that uses a feature logagent does not implement is an
// UnsupportedError.
//
// A batch over maxBatchBytes is reported as corrupt, not as ErrTooLarge:
// before the CRC has been checked, a huge batch_length is more likely a
// damaged field than a real size.
func ParseHeader(b []byte, maxBatchBytes int) (Header, int, error) {
	h, size, err := parseHeader(b, maxBatchBytes)
	if err == nil {
		err = h.checkSupported()
	}
	if err != nil {
		return nil, 0, err
	}
	return h, size, nil
}

// parseHeader is ParseHeader without the check for unsupported features,
// which Verify and NextBatch make only once the CRC has matched.
func parseHeader(b []byte, maxBatchBytes int) (Header, int, error) {
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
	if h.BaseOffset() >= math.MaxInt64-int64(h.LastOffsetDelta()) { // NextOffset must fit too
		return nil, 0, corruptf("base_offset %d plus last_offset_delta %d leaves no next offset", h.BaseOffset(), h.LastOffsetDelta())
	}
	if a := h.Attributes(); a&unusedAttributes != 0 {
		return nil, 0, corruptf("unused attribute bits set in %#04x", uint16(a))
	}
	if c := h.Codec(); !c.valid() {
		return nil, 0, corruptf("unknown compression codec %d", c)
	}
	if c := h.RecordCount(); c < 0 || (c > 0 && int64(c)-1 > int64(h.LastOffsetDelta())) {
		return nil, 0, corruptf("record_count %d does not fit last_offset_delta %d", c, h.LastOffsetDelta())
	}
	return h, int(size), nil
}

// checkSupported refuses the attributes logagent does not implement.
func (h Header) checkSupported() error {
	a := h.Attributes()
	if a&unsupportedMask == 0 {
		return nil
	}
	var features []string
	for _, u := range unsupportedAttributes {
		if a&u.bit != 0 {
			features = append(features, u.name)
		}
	}
	return &UnsupportedError{Features: features}
}

// Verify checks a whole batch: its header (as ParseHeader) and that its CRC
// matches. batch must be exactly one batch: a shorter slice is ErrShort, and
// bytes after the batch_length the header claims are corrupt, since a caller
// that holds several batches splits them with NextBatch.
func Verify(batch []byte, maxBatchBytes int) (Header, error) {
	h, size, err := parseHeader(batch, maxBatchBytes)
	if err != nil {
		return nil, err
	}
	if len(batch) < size {
		return nil, fmt.Errorf("%w: have %d of %d bytes", ErrShort, len(batch), size)
	}
	if len(batch) > size {
		return nil, corruptf("%d bytes after the end of a batch of %d", len(batch)-size, size)
	}
	if err := checkBatch(h, batch); err != nil {
		return nil, err
	}
	return h, nil
}

// checkBatch checks the CRC of batch, exactly one batch whose header h
// parseHeader accepted, and then that it uses no unsupported feature. In that
// order, a damaged attributes field is reported as the CRC mismatch it is,
// and UnsupportedError only for what a writer really meant.
func checkBatch(h Header, batch []byte) error {
	if got, want := Checksum(batch), h.CRC(); got != want {
		return corruptf("crc mismatch: stored %08x, computed %08x", want, got)
	}
	return h.checkSupported()
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

// Attributes holds the compression codec in bits 0-2; bits 3-15 are zero in
// every batch ParseHeader accepts.
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

// CheckDense refuses a batch that no producer sends: one without records,
// or whose offset range (last_offset_delta + 1) is not its record count
// (Kafka's "Inconsistent batch offset range and record count"). ParseHeader
// takes both, as a log may hold batches whose records were removed, but a
// leader that appended one would give out offsets that no record holds: up
// to 2^31 of them for a batch of 61 bytes.
func (h Header) CheckDense() error {
	if c := h.RecordCount(); c < 1 || int64(h.LastOffsetDelta()) != int64(c)-1 {
		return corruptf("record_count %d with last_offset_delta %d: a produced batch holds one record or more, one per offset", c, h.LastOffsetDelta())
	}
	return nil
}

// SetBaseOffset rewrites the base offset in place. The base offset is not
// covered by the CRC, so a leader can assign offsets without re-checksumming.
func SetBaseOffset(batch []byte, base int64) {
	binary.BigEndian.PutUint64(batch[offBaseOffset:], uint64(base))
}

// SetMaxTimestamp rewrites the max timestamp in place and then the CRC,
// which covers it. Only for a batch whose CRC was verified: the new CRC
// vouches for every byte it covers.
func SetMaxTimestamp(batch []byte, ts int64) {
	binary.BigEndian.PutUint64(batch[offMaxTimestamp:], uint64(ts))
	binary.BigEndian.PutUint32(batch[offCRC:], Checksum(batch))
}

// SetLeaderEpoch rewrites the leader epoch in place; it is not covered by the
// CRC either.
func SetLeaderEpoch(batch []byte, epoch int32) {
	binary.BigEndian.PutUint32(batch[offLeaderEpoch:], uint32(epoch))
}
