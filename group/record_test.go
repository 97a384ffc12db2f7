package group

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"strings"
	"testing"
	"time"
)

func mustRecord(t testing.TB) func(Record, error) Record {
	return func(r Record, err error) Record {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
}

// sampleRecords are records of every kind, with fields at their limits.
func sampleRecords(t testing.TB) []Record {
	maxName := strings.Repeat("n", MaxNameLen)
	return []Record{
		mustRecord(t)(OffsetRecord("g", TopicPartition{"t", 0}, Committed{Offset: 42, Metadata: "m", CommitTime: t0})),
		mustRecord(t)(OffsetRecord("g", TopicPartition{"t", 3}, Committed{Offset: 0})),
		mustRecord(t)(OffsetRecord(maxName, TopicPartition{maxName, math.MaxInt32},
			Committed{Offset: math.MaxInt64, Metadata: strings.Repeat("x", MaxMetadataLen), CommitTime: time.UnixMilli(-1)})),
		mustRecord(t)(OffsetTombstone("g", TopicPartition{"t", 1})),
		mustRecord(t)(GroupTombstone("g")),
	}
}

func TestRecordRoundTrip(t *testing.T) {
	maxName := strings.Repeat("n", MaxNameLen)
	want := []Entry{
		{Group: "g", Offset: true, Partition: TopicPartition{"t", 0}, Committed: Committed{Offset: 42, Metadata: "m", CommitTime: t0.UTC()}},
		{Group: "g", Offset: true, Partition: TopicPartition{"t", 3}, Committed: Committed{Offset: 0, CommitTime: time.UnixMilli(time.Time{}.UnixMilli()).UTC()}},
		{Group: maxName, Offset: true, Partition: TopicPartition{maxName, math.MaxInt32},
			Committed: Committed{Offset: math.MaxInt64, Metadata: strings.Repeat("x", MaxMetadataLen), CommitTime: time.UnixMilli(-1).UTC()}},
		{Group: "g", Offset: true, Partition: TopicPartition{"t", 1}, Deleted: true},
		{Group: "g", Deleted: true},
	}
	for i, r := range sampleRecords(t) {
		got, err := DecodeRecord(r.Key, r.Value)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want[i]) {
			t.Fatalf("record %d: decoded %+v, want %+v", i, got, want[i])
		}
	}
}

func TestRecordEncodeInvalid(t *testing.T) {
	long := strings.Repeat("n", MaxNameLen+1)
	tests := []struct {
		name string
		err  error
	}{
		{"empty group", errOf(OffsetRecord("", TopicPartition{"t", 0}, Committed{}))},
		{"long group", errOf(OffsetRecord(long, TopicPartition{"t", 0}, Committed{}))},
		{"empty topic", errOf(OffsetRecord("g", TopicPartition{"", 0}, Committed{}))},
		{"long topic", errOf(OffsetTombstone("g", TopicPartition{long, 0}))},
		{"negative partition", errOf(OffsetRecord("g", TopicPartition{"t", -1}, Committed{}))},
		{"negative offset", errOf(OffsetRecord("g", TopicPartition{"t", 0}, Committed{Offset: -1}))},
		{"long metadata", errOf(OffsetRecord("g", TopicPartition{"t", 0}, Committed{Metadata: strings.Repeat("x", MaxMetadataLen+1)}))},
		{"empty group tombstone", errOf(GroupTombstone(""))},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, ErrInvalidInput) {
			t.Errorf("%s: %v, want ErrInvalidInput", tt.name, tt.err)
		}
	}
}

func errOf(_ Record, err error) error { return err }

// TestRecordCorruption: every byte of a record flipped (each bit, and all
// of them), every truncation, a byte added, and a value under another key
// are refused as ErrCorruptRecord.
func TestRecordCorruption(t *testing.T) {
	records := sampleRecords(t)
	refuse := func(what string, key, value []byte) {
		t.Helper()
		if e, err := DecodeRecord(key, value); !errors.Is(err, ErrCorruptRecord) {
			t.Fatalf("%s: decoded %+v, %v; want ErrCorruptRecord", what, e, err)
		}
	}
	for i, r := range records {
		for _, part := range []string{"key", "value"} {
			b := r.Key
			if part == "value" {
				b = r.Value
			}
			if b == nil {
				continue
			}
			with := func(c []byte) (key, value []byte) {
				if part == "key" {
					return c, r.Value
				}
				return r.Key, c
			}
			for j := range b {
				for _, mask := range []byte{1, 2, 4, 8, 16, 32, 64, 128, 0xff} {
					c := bytes.Clone(b)
					c[j] ^= mask
					k, v := with(c)
					refuse(fmt.Sprintf("record %d: %s byte %d ^ %#x", i, part, j, mask), k, v)
				}
			}
			for n := range len(b) {
				k, v := with(bytes.Clone(b[:n]))
				if part == "value" && n == 0 {
					// An empty value is not a tombstone (that is nil).
					k, v = r.Key, []byte{}
				}
				refuse(fmt.Sprintf("record %d: %s cut to %d bytes", i, part, n), k, v)
			}
			k, v := with(append(bytes.Clone(b), 0))
			refuse(fmt.Sprintf("record %d: %s with a byte added", i, part), k, v)
		}
	}
	// A value moved under another key.
	refuse("value under another key", records[1].Key, records[0].Value)
	// A group key with a value.
	refuse("group key with a value", records[4].Key, records[0].Value)
}

// sealKey appends a key's CRC to body; sealValue a value's.
func sealKey(body []byte) []byte {
	return binary.BigEndian.AppendUint32(bytes.Clone(body), crc32.Checksum(body, castagnoli))
}

func sealValue(key, body []byte) []byte {
	return binary.BigEndian.AppendUint32(bytes.Clone(body), crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, body))
}

// reseal rewrites the CRCs of a key and value (nil stays nil) to match,
// so that damage gets past them into the fields.
func reseal(key, value []byte) ([]byte, []byte) {
	if len(key) >= crcSize {
		key = sealKey(key[:len(key)-crcSize])
	}
	if len(value) >= crcSize {
		value = sealValue(key, value[:len(value)-crcSize])
	}
	return key, value
}

// TestRecordFields: records whose CRCs match but whose fields are not what
// the encoder writes are refused too.
func TestRecordFields(t *testing.T) {
	key := func(b ...byte) []byte { return sealKey(b) }
	goodKey := key(1, kindOffset, 1, 'g', 1, 't', 0, 0, 0, 1)
	value := func(b ...byte) []byte { return sealValue(goodKey, b) }
	fixed := func(version byte, offset int64, n uint16) []byte {
		v := []byte{version}
		v = binary.BigEndian.AppendUint64(v, uint64(offset))
		v = binary.BigEndian.AppendUint64(v, 0)
		return binary.BigEndian.AppendUint16(v, n)
	}
	if _, err := DecodeRecord(goodKey, []byte{}); !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("an empty value (not a tombstone, which is nil): %v", err)
	}
	if e, err := DecodeRecord(goodKey, value(append(fixed(1, 7, 1), 'm')...)); err != nil || e.Committed.Offset != 7 || e.Committed.Metadata != "m" {
		t.Fatalf("the well-formed record: %+v, %v", e, err)
	}
	tests := []struct {
		name       string
		key, value []byte
	}{
		{"key version 2", key(2, kindOffset, 1, 'g', 1, 't', 0, 0, 0, 1), nil},
		{"unknown kind", key(1, 3, 1, 'g'), nil},
		{"no group length", key(1, kindGroup), nil},
		{"empty group id", key(1, kindGroup, 0, 'g'), nil},
		{"group id past the key", key(1, kindGroup, 2, 'g'), nil},
		{"bytes after a group key", key(1, kindGroup, 1, 'g', 0), nil},
		{"no topic length", key(1, kindOffset, 1, 'g'), nil},
		{"empty topic", key(1, kindOffset, 1, 'g', 0, 0, 0, 0, 1), nil},
		{"short partition", key(1, kindOffset, 1, 'g', 1, 't', 0, 0, 1), nil},
		{"long partition", key(1, kindOffset, 1, 'g', 1, 't', 0, 0, 0, 0, 1), nil},
		{"negative partition", key(1, kindOffset, 1, 'g', 1, 't', 0x80, 0, 0, 0), nil},
		{"value version 2", goodKey, value(fixed(2, 7, 0)...)},
		{"negative offset", goodKey, value(fixed(1, -1, 0)...)},
		{"metadata over the limit", goodKey, value(append(fixed(1, 7, MaxMetadataLen+1), make([]byte, MaxMetadataLen+1)...)...)},
		{"metadata past the value", goodKey, value(append(fixed(1, 7, 2), 'm')...)},
		{"bytes after the metadata", goodKey, value(append(fixed(1, 7, 0), 'm')...)},
		{"short value", goodKey, value(fixed(1, 7, 0)[:valueFixedSize-1]...)},
	}
	for _, tt := range tests {
		if e, err := DecodeRecord(tt.key, tt.value); !errors.Is(err, ErrCorruptRecord) {
			t.Errorf("%s: decoded %+v, %v; want ErrCorruptRecord", tt.name, e, err)
		}
	}
}

// FuzzDecodeRecord decodes arbitrary keys and values, as they are and with
// their CRCs rewritten to match. A refusal must be ErrCorruptRecord; an
// accepted record must encode back to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range sampleRecords(f) {
		f.Add(r.Key, r.Value, r.Value == nil)
	}
	f.Add([]byte{}, []byte{}, false)
	f.Fuzz(func(t *testing.T, key, value []byte, tombstone bool) {
		if tombstone {
			value = nil
		}
		checkDecode(t, key, value)
		k, v := reseal(key, value)
		checkDecode(t, k, v)
	})
}

func checkDecode(t *testing.T, key, value []byte) {
	t.Helper()
	e, err := DecodeRecord(key, value)
	if err != nil {
		if !errors.Is(err, ErrCorruptRecord) {
			t.Fatalf("DecodeRecord: %v, not ErrCorruptRecord", err)
		}
		return
	}
	var r Record
	switch {
	case !e.Offset:
		r, err = GroupTombstone(e.Group)
	case e.Deleted:
		r, err = OffsetTombstone(e.Group, e.Partition)
	default:
		r, err = OffsetRecord(e.Group, e.Partition, e.Committed)
	}
	if err != nil {
		t.Fatalf("a decoded record does not encode: %+v: %v", e, err)
	}
	if !bytes.Equal(r.Key, key) || !bytes.Equal(r.Value, value) || (r.Value == nil) != (value == nil) {
		t.Fatalf("%+v encodes to %x / %x, decoded from %x / %x", e, r.Key, r.Value, key, value)
	}
}
