package record

import (
	"encoding/binary"
	"math/bits"
)

// Record is one record of a batch.
//
// A nil Key or Value is a null one (stored with length -1); an empty non-nil
// slice is an empty one (length 0). Decoding keeps the difference.
type Record struct {
	// Offset is the record's position in the partition: the batch's
	// base_offset plus the record's offset_delta.
	Offset int64
	// Timestamp is in milliseconds: the batch's first_timestamp plus the
	// record's timestamp_delta.
	Timestamp int64
	Key       []byte
	Value     []byte
	Headers   []RecordHeader
}

// RecordHeader is one application header of a record. Its key cannot be
// null; its value can (nil).
type RecordHeader struct {
	Key   string
	Value []byte
}

// nullLength is the length stored for a null key or value.
const nullLength = -1

// varintSize is the number of bytes binary.AppendVarint uses for v.
func varintSize(v int64) int {
	zigzag := uint64(v<<1) ^ uint64(v>>63)
	return (bits.Len64(zigzag|1) + 6) / 7
}

// bytesSize is the encoded size of a length-prefixed, nullable byte string.
func bytesSize(b []byte) int {
	if b == nil {
		return varintSize(nullLength)
	}
	return varintSize(int64(len(b))) + len(b)
}

// recordBodySize is the size of a record after its length field.
func recordBodySize(timestampDelta int64, offsetDelta int32, key, value []byte, headers []RecordHeader) int {
	n := 1 + varintSize(timestampDelta) + varintSize(int64(offsetDelta)) +
		bytesSize(key) + bytesSize(value) + varintSize(int64(len(headers)))
	for _, h := range headers {
		n += varintSize(int64(len(h.Key))) + len(h.Key) + bytesSize(h.Value)
	}
	return n
}

func appendBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, nullLength)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}

// appendRecord appends one record; bodySize must be recordBodySize of the
// same arguments. The records section of a batch (after the batch header,
// and after decompressing it) is record_count records back to back, each
//
//	+--------------+-------------+-----------------+--------------+
//	| length       | attributes  | timestamp_delta | offset_delta |
//	| varint       | int8 (0)    | varint          | varint       |
//	+--------------+-------------+-----------------+--------------+
//	| key_len      | key         | value_len       | value        |
//	| varint, -1 = | key_len     | varint, -1 =    | value_len    |
//	| null         | bytes       | null            | bytes        |
//	+--------------+-------------+-----------------+--------------+
//	| header_count | header_count times:                          |
//	| varint       |   key_len varint (>= 0) | key               |
//	|              |   value_len varint (-1 = null) | value      |
//	+--------------+----------------------------------------------+
//
// length counts the bytes after itself. Every varint is a zig-zag signed
// varint (encoding/binary's PutVarint), the same bytes as Kafka's varint and
// varlong for values in range. timestamp_delta is relative to the batch's
// first_timestamp and offset_delta to its base_offset; offset deltas are
// strictly increasing and at most last_offset_delta. The first record of a
// batch with key "k", value "v" and no headers (TestRecordLayoutExample):
//
//	10     00    00    00    02       6b   02         76   00
//	len=8  attr  ts=0  off=0 key_len=1 'k' value_len=1 'v' header_count=0
func appendRecord(dst []byte, bodySize int, timestampDelta int64, offsetDelta int32, key, value []byte, headers []RecordHeader) []byte {
	dst = binary.AppendVarint(dst, int64(bodySize))
	dst = append(dst, 0) // attributes: no record attribute is defined
	dst = binary.AppendVarint(dst, timestampDelta)
	dst = binary.AppendVarint(dst, int64(offsetDelta))
	dst = appendBytes(dst, key)
	dst = appendBytes(dst, value)
	dst = binary.AppendVarint(dst, int64(len(headers)))
	for _, h := range headers {
		dst = binary.AppendVarint(dst, int64(len(h.Key)))
		dst = append(dst, h.Key...)
		dst = appendBytes(dst, h.Value)
	}
	return dst
}

// minHeaderSize is the smallest encoded record header: an empty key and a
// null value take one byte each. It bounds header_count by the bytes left.
const minHeaderSize = 2

// fieldReader reads the fields of one record body. The first malformed field
// sets err (a CorruptError naming the record and the field); every later
// read then returns zero values, so a parser can check once at the end.
type fieldReader struct {
	b     []byte
	index int32 // of the record in its batch, for error messages
	err   error
}

func (r *fieldReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = corruptf("record %d: "+format, append([]any{r.index}, args...)...)
	}
}

func (r *fieldReader) varint(field string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("malformed %s varint", field)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *fieldReader) byte(field string) byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.fail("no room for %s", field)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// bytes reads a byte string prefixed by the length field lengthField; a
// length of -1 gives nil when nullable. Empty strings are non-nil slices of
// the input.
func (r *fieldReader) bytes(lengthField string, nullable bool) []byte {
	n := r.varint(lengthField)
	if r.err != nil {
		return nil
	}
	switch {
	case n == nullLength && nullable:
		return nil
	case n < 0:
		r.fail("%s %d", lengthField, n)
		return nil
	case n > int64(len(r.b)):
		r.fail("%s %d exceeds the %d bytes left", lengthField, n, len(r.b))
		return nil
	}
	b := r.b[:n:n]
	r.b = r.b[n:]
	return b
}
