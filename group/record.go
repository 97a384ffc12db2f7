package group

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"
)

// The records of the internal offsets topic. Each is the key and value of
// one record of an ordinary batch (record.Record), so the topic is
// replicated, fetched and retained like any other; the batch's CRC covers
// them on disk and on the wire, and each carries a CRC-32C of its own as
// well, so that a record damaged or misplaced anywhere between the encoder
// and Apply is refused, never applied with wrong fields.
//
// Key, big-endian:
//
//	off size field        notes
//	0   1    version      1
//	1   1    kind         1 = offset commit, 2 = group
//	2   1    group_len    1..255
//	3   n    group        the group id
//	offset commit only:
//	    1    topic_len    1..255
//	    n    topic
//	    4    partition    int32 >= 0
//	end-4 4  crc          uint32, CRC-32C (Castagnoli) of the key's bytes before it
//
// Value of an offset commit, big-endian:
//
//	off size field        notes
//	0   1    version      1
//	1   8    offset       int64 >= 0, the next offset the group reads
//	9   8    commit_time  int64, milliseconds since the Unix epoch
//	17  2    metadata_len uint16, 0..4096 (MaxMetadataLen)
//	19  n    metadata     the client's string, as given
//	end-4 4  crc          uint32, CRC-32C of the whole key, then of the value's
//	                      bytes before it: a value under another key is refused
//
// A record with no value (null, not empty) is a tombstone: under an offset
// key it deletes that partition's committed offset; under a group key it
// deletes every committed offset of the group (the group was deleted). A
// group key with a value is corrupt: version 1 stores nothing per group.
const (
	recordVersion = 1

	kindOffset = 1
	kindGroup  = 2

	crcSize        = 4
	valueFixedSize = 19
	partitionSize  = 4
)

// MaxMetadataLen is the longest metadata string a commit may carry (Kafka's
// offset.metadata.max.bytes default).
const MaxMetadataLen = 4096

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Record is one record of the offsets topic: a key, and a value that is
// nil for a tombstone.
type Record struct {
	Key, Value []byte
}

// Committed is a partition's committed offset.
type Committed struct {
	// Offset is the next offset the group consumes from the partition.
	Offset int64
	// Metadata is the committing client's string (at most MaxMetadataLen
	// bytes).
	Metadata string
	// CommitTime is when the coordinator accepted the commit, to the
	// millisecond.
	CommitTime time.Time
}

// Entry is a decoded record.
type Entry struct {
	Group string
	// Offset says the record's key is a partition's (an offset commit, or
	// its deletion); otherwise it is the group's (its deletion).
	Offset    bool
	Partition TopicPartition
	// Deleted: a tombstone, with no value.
	Deleted bool
	// Committed is the commit, for an offset record that is not deleted.
	Committed Committed
}

// OffsetRecord encodes the commit of c for tp in group.
func OffsetRecord(group string, tp TopicPartition, c Committed) (Record, error) {
	key, err := offsetKey(group, tp)
	if err != nil {
		return Record{}, err
	}
	if c.Offset < 0 {
		return Record{}, fmt.Errorf("%w: group %q, %v: offset %d", ErrInvalidInput, group, tp, c.Offset)
	}
	if len(c.Metadata) > MaxMetadataLen {
		return Record{}, fmt.Errorf("%w: group %q, %v: %d bytes of metadata, at most %d",
			ErrInvalidInput, group, tp, len(c.Metadata), MaxMetadataLen)
	}
	v := make([]byte, 0, valueFixedSize+len(c.Metadata)+crcSize)
	v = append(v, recordVersion)
	v = binary.BigEndian.AppendUint64(v, uint64(c.Offset))
	v = binary.BigEndian.AppendUint64(v, uint64(c.CommitTime.UnixMilli()))
	v = binary.BigEndian.AppendUint16(v, uint16(len(c.Metadata)))
	v = append(v, c.Metadata...)
	v = binary.BigEndian.AppendUint32(v, crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, v))
	return Record{Key: key, Value: v}, nil
}

// OffsetTombstone encodes the deletion of tp's committed offset in group.
func OffsetTombstone(group string, tp TopicPartition) (Record, error) {
	key, err := offsetKey(group, tp)
	return Record{Key: key}, err
}

// GroupTombstone encodes the deletion of group: every offset it committed.
func GroupTombstone(group string) (Record, error) {
	if err := checkName("group id", group); err != nil {
		return Record{}, err
	}
	k := make([]byte, 0, 3+len(group)+crcSize)
	k = append(k, recordVersion, kindGroup, byte(len(group)))
	k = append(k, group...)
	return Record{Key: binary.BigEndian.AppendUint32(k, crc32.Checksum(k, castagnoli))}, nil
}

func offsetKey(group string, tp TopicPartition) ([]byte, error) {
	if err := checkName("group id", group); err != nil {
		return nil, err
	}
	if err := checkName("topic", tp.Topic); err != nil {
		return nil, err
	}
	if tp.Partition < 0 {
		return nil, fmt.Errorf("%w: partition %d", ErrInvalidInput, tp.Partition)
	}
	k := make([]byte, 0, 4+len(group)+len(tp.Topic)+partitionSize+crcSize)
	k = append(k, recordVersion, kindOffset, byte(len(group)))
	k = append(k, group...)
	k = append(k, byte(len(tp.Topic)))
	k = append(k, tp.Topic...)
	k = binary.BigEndian.AppendUint32(k, uint32(tp.Partition))
	return binary.BigEndian.AppendUint32(k, crc32.Checksum(k, castagnoli)), nil
}

// DecodeRecord decodes a record of the offsets topic (value nil for a
// tombstone). Nothing in the bytes is trusted: the CRCs are checked before
// any field is read, every length is bounded by the bytes left, and the
// record must end where its fields do. Anything else is ErrCorruptRecord,
// never a panic.
func DecodeRecord(key, value []byte) (Entry, error) {
	if len(key) < 3+1+crcSize {
		return Entry{}, corruptf("key of %d bytes", len(key))
	}
	body := key[:len(key)-crcSize]
	if sum, got := binary.BigEndian.Uint32(key[len(body):]), crc32.Checksum(body, castagnoli); sum != got {
		return Entry{}, corruptf("key crc mismatch: stored %08x, computed %08x", sum, got)
	}
	if body[0] != recordVersion {
		return Entry{}, corruptf("key version %d", body[0])
	}
	kind := body[1]
	group, rest, err := readName("group id", body[2:])
	if err != nil {
		return Entry{}, err
	}
	e := Entry{Group: group, Deleted: value == nil}
	switch kind {
	case kindGroup:
		if len(rest) != 0 {
			return Entry{}, corruptf("group key of %q: %d bytes after the group id", group, len(rest))
		}
		if value != nil {
			return Entry{}, corruptf("group key of %q with a value", group)
		}
		return e, nil
	case kindOffset:
	default:
		return Entry{}, corruptf("key kind %d", kind)
	}
	e.Offset = true
	topic, rest, err := readName("topic", rest)
	if err != nil {
		return Entry{}, err
	}
	if len(rest) != partitionSize {
		return Entry{}, corruptf("offset key of %q: %d bytes for the partition", group, len(rest))
	}
	e.Partition = TopicPartition{topic, int32(binary.BigEndian.Uint32(rest))}
	if e.Partition.Partition < 0 {
		return Entry{}, corruptf("partition %d", e.Partition.Partition)
	}
	if value == nil {
		return e, nil
	}
	if len(value) < valueFixedSize+crcSize {
		return Entry{}, corruptf("value of %d bytes", len(value))
	}
	vbody := value[:len(value)-crcSize]
	sum := binary.BigEndian.Uint32(value[len(vbody):])
	if got := crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, vbody); sum != got {
		return Entry{}, corruptf("value crc mismatch: stored %08x, computed %08x", sum, got)
	}
	if vbody[0] != recordVersion {
		return Entry{}, corruptf("value version %d", vbody[0])
	}
	off := int64(binary.BigEndian.Uint64(vbody[1:]))
	ms := int64(binary.BigEndian.Uint64(vbody[9:]))
	n := int(binary.BigEndian.Uint16(vbody[17:]))
	switch {
	case off < 0:
		return Entry{}, corruptf("offset %d", off)
	case n > MaxMetadataLen:
		return Entry{}, corruptf("%d bytes of metadata, at most %d", n, MaxMetadataLen)
	case n != len(vbody)-valueFixedSize:
		return Entry{}, corruptf("%d bytes of metadata in %d bytes", n, len(vbody)-valueFixedSize)
	}
	e.Committed = Committed{Offset: off, Metadata: string(vbody[valueFixedSize:]), CommitTime: time.UnixMilli(ms).UTC()}
	return e, nil
}

// readName reads a length-prefixed name from b and returns it and the
// bytes after it.
func readName(what string, b []byte) (string, []byte, error) {
	if len(b) < 1 {
		return "", nil, corruptf("no %s length", what)
	}
	n := int(b[0])
	if n == 0 || n > len(b)-1 {
		return "", nil, corruptf("%s of %d bytes in %d", what, n, len(b)-1)
	}
	return string(b[1 : 1+n]), b[1+n:], nil
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorruptRecord, fmt.Sprintf(format, args...))
}
