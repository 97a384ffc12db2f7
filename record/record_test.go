package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/zstd"

	"github.com/logagent/logagent/internal/testseed"
)

func TestRoundTripRandomBatches(t *testing.T) {
	rng := testseed.Rand(t)
	for _, codec := range allCodecs {
		t.Run(codec.String(), func(t *testing.T) {
			var (
				b       Builder
				region  []byte
				want    [][]Record
				bases   []int64
				nextOff = rng.Int64N(1 << 40)
			)
			if err := b.SetCodec(codec); err != nil {
				t.Fatal(err)
			}
			for i := range 20 {
				records := randomRecords(rng, 1+rng.IntN(40))
				b.Reset()
				if i%2 == 1 {
					b.SetProducer(rng.Int64N(1<<40), int16(rng.IntN(1<<15)), rng.Int32())
				}
				for j, r := range records {
					if err := b.Add(r.Timestamp, r.Key, r.Value, r.Headers); err != nil {
						t.Fatalf("batch %d record %d: %v", i, j, err)
					}
				}
				if b.Len() != len(records) {
					t.Fatalf("Len %d after adding %d records", b.Len(), len(records))
				}
				start := len(region)
				var err error
				if region, err = b.AppendTo(region); err != nil {
					t.Fatal(err)
				}
				if codec == CodecNone && len(region)-start != b.Size() {
					t.Fatalf("uncompressed batch of %d bytes, Size said %d", len(region)-start, b.Size())
				}
				SetBaseOffset(region[start:], nextOff)
				SetLeaderEpoch(region[start:], int32(i))
				want = append(want, records)
				bases = append(bases, nextOff)
				nextOff += int64(len(records))
			}

			batches, err := SplitBatches(region, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(batches) != len(want) {
				t.Fatalf("split %d batches, want %d", len(batches), len(want))
			}
			d := NewDecoder(Limits{})
			for i, batch := range batches {
				h, err := d.Validate(batch)
				if err != nil {
					t.Fatalf("batch %d: %v", i, err)
				}
				if h.Codec() != codec || h.LeaderEpoch() != int32(i) || h.BaseOffset() != bases[i] ||
					h.RecordCount() != int32(len(want[i])) || h.LastOffset() != bases[i]+int64(len(want[i]))-1 {
					t.Fatalf("batch %d: header codec %v epoch %d base %d count %d last %d", i,
						h.Codec(), h.LeaderEpoch(), h.BaseOffset(), h.RecordCount(), h.LastOffset())
				}
				got, err := decodeAll(d, batch)
				if err != nil {
					t.Fatalf("batch %d: %v", i, err)
				}
				checkRecords(t, got, want[i], bases[i])
			}
		})
	}
}

func TestRecordLayoutExample(t *testing.T) {
	batch := buildBatch(t, CodecNone, nil, []Record{{Timestamp: 7, Key: []byte("k"), Value: []byte("v")}})
	want := []byte{0x10, 0x00, 0x00, 0x00, 0x02, 'k', 0x02, 'v', 0x00}
	if got := batch[HeaderSize:]; !bytes.Equal(got, want) {
		t.Fatalf("record bytes % x, want % x", got, want)
	}
}

func TestHeaderFields(t *testing.T) {
	records := []Record{
		{Timestamp: 1000, Value: []byte("a")},
		{Timestamp: 1500, Value: []byte("b")},
		{Timestamp: 900, Value: []byte("c")},
	}
	tests := []struct {
		name         string
		producer     *producer
		wantID       int64
		wantEpoch    int16
		wantSequence int32
		stampBase    int64
		stampEpoch   int32
	}{
		{name: "not idempotent", wantID: -1, wantEpoch: -1, wantSequence: -1},
		{name: "idempotent", producer: &producer{id: 42, epoch: 3, sequence: 7}, wantID: 42, wantEpoch: 3,
			wantSequence: 7, stampBase: 1 << 40, stampEpoch: 9},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			batch := buildBatch(t, CodecNone, tc.producer, records)
			h, err := Verify(batch, 0)
			if err != nil {
				t.Fatal(err)
			}
			if h.BaseOffset() != 0 || h.LeaderEpoch() != 0 || h.Magic() != Magic || h.Size() != len(batch) ||
				h.LastOffsetDelta() != 2 || h.RecordCount() != 3 || h.Attributes() != 0 {
				t.Fatalf("header base %d epoch %d magic %d size %d last delta %d count %d attributes %d",
					h.BaseOffset(), h.LeaderEpoch(), h.Magic(), h.Size(), h.LastOffsetDelta(), h.RecordCount(), h.Attributes())
			}
			if h.FirstTimestamp() != 1000 || h.MaxTimestamp() != 1500 {
				t.Fatalf("timestamps first %d max %d, want 1000 and 1500", h.FirstTimestamp(), h.MaxTimestamp())
			}
			if h.ProducerID() != tc.wantID || h.ProducerEpoch() != tc.wantEpoch || h.BaseSequence() != tc.wantSequence {
				t.Fatalf("producer %d/%d/%d, want %d/%d/%d", h.ProducerID(), h.ProducerEpoch(), h.BaseSequence(),
					tc.wantID, tc.wantEpoch, tc.wantSequence)
			}
			crc := h.CRC()
			SetBaseOffset(batch, tc.stampBase)
			SetLeaderEpoch(batch, tc.stampEpoch)
			h, err = Verify(batch, 0)
			if err != nil {
				t.Fatalf("after stamping: %v", err)
			}
			if h.CRC() != crc || h.BaseOffset() != tc.stampBase || h.LeaderEpoch() != tc.stampEpoch ||
				h.NextOffset() != tc.stampBase+3 {
				t.Fatalf("after stamping: crc %08x (was %08x) base %d epoch %d next %d",
					h.CRC(), crc, h.BaseOffset(), h.LeaderEpoch(), h.NextOffset())
			}
			got, err := decodeAll(NewDecoder(Limits{}), batch)
			if err != nil {
				t.Fatal(err)
			}
			checkRecords(t, got, records, tc.stampBase)
		})
	}
}

func TestNullAndEmptyStayDistinct(t *testing.T) {
	records := []Record{
		{Key: nil, Value: nil},
		{Key: []byte{}, Value: []byte{}},
		{Key: []byte("k"), Value: nil, Headers: []RecordHeader{{Key: "null", Value: nil}, {Key: "empty", Value: []byte{}}}},
		{Key: nil, Value: []byte("v"), Headers: []RecordHeader{{Key: "", Value: []byte("x")}}},
	}
	for _, codec := range allCodecs {
		t.Run(codec.String(), func(t *testing.T) {
			got, err := decodeAll(NewDecoder(Limits{}), buildBatch(t, codec, nil, records))
			if err != nil {
				t.Fatal(err)
			}
			checkRecords(t, got, records, 0)
		})
	}
	// The key_len bytes themselves: -1 is zig-zag 0x01, 0 is 0x00.
	null := buildBatch(t, CodecNone, nil, records[:1])
	empty := buildBatch(t, CodecNone, nil, records[1:2])
	if k := null[HeaderSize+4]; k != 0x01 {
		t.Fatalf("null key_len byte %#x, want 0x01", k)
	}
	if k := empty[HeaderSize+4]; k != 0x00 {
		t.Fatalf("empty key_len byte %#x, want 0x00", k)
	}
}

func TestAnyChangeInCRCRangeIsCorrupt(t *testing.T) {
	rng := testseed.Rand(t)
	for _, codec := range []Codec{CodecNone, CodecZstd} {
		t.Run(codec.String(), func(t *testing.T) {
			batch := buildBatch(t, codec, &producer{id: 1, epoch: 2, sequence: 3}, randomRecords(rng, 5))
			for pos := offCRC; pos < len(batch); pos++ {
				for _, mask := range []byte{0x01, 0x80, 0xff, byte(1 + rng.IntN(255))} {
					damaged := bytes.Clone(batch)
					damaged[pos] ^= mask
					_, err := Verify(damaged, 0)
					if !errors.Is(err, ErrCorrupt) {
						t.Fatalf("byte %d ^ %#02x: got %v, want ErrCorrupt", pos, mask, err)
					}
					if _, err := NewDecoder(Limits{}).Validate(damaged); !errors.Is(err, ErrCorrupt) {
						t.Fatalf("byte %d ^ %#02x: decoder got %v, want ErrCorrupt", pos, mask, err)
					}
				}
			}
			// The CRC does not cover the magic, which ParseHeader checks:
			// 1 is the format logagent wrote before Kafka's v2.
			for _, magic := range []byte{0, 1, 3, 0xff} {
				damaged := bytes.Clone(batch)
				damaged[offMagic] = magic
				if _, err := Verify(damaged, 0); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("magic %d: got %v, want ErrCorrupt", int8(magic), err)
				}
			}
		})
	}
}

func TestTruncatedIsShort(t *testing.T) {
	rng := testseed.Rand(t)
	batch := buildBatch(t, CodecNone, nil, randomRecords(rng, 3))
	for n := range len(batch) {
		if _, err := Verify(batch[:n], 0); !errors.Is(err, ErrShort) || errors.Is(err, ErrCorrupt) {
			t.Fatalf("Verify of %d/%d bytes: got %v, want only ErrShort", n, len(batch), err)
		}
		if _, _, err := NextBatch(batch[:n], 0); !errors.Is(err, ErrShort) || errors.Is(err, ErrCorrupt) {
			t.Fatalf("NextBatch of %d/%d bytes: got %v, want only ErrShort", n, len(batch), err)
		}
		if _, err := NewDecoder(Limits{}).Records(batch[:n]); !errors.Is(err, ErrShort) {
			t.Fatalf("Records of %d/%d bytes: got %v, want ErrShort", n, len(batch), err)
		}
	}
	long := append(bytes.Clone(batch), 0)
	if _, err := Verify(long, 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Verify with a byte after the batch: got %v, want ErrCorrupt", err)
	}
}

func TestHeaderChecks(t *testing.T) {
	good := buildBatch(t, CodecNone, nil, []Record{{Value: []byte("v")}})
	tests := []struct {
		name     string
		damage   func(b []byte)
		maxBatch int
		want     error
	}{
		{name: "ok", damage: func([]byte) {}},
		{name: "unknown codec 5", damage: func(b []byte) { b[offAttributes+1] = 5 }, want: ErrCorrupt},
		{name: "unknown codec 6", damage: func(b []byte) { b[offAttributes+1] = 6 }, want: ErrCorrupt},
		{name: "unknown codec 7", damage: func(b []byte) { b[offAttributes+1] = 7 }, want: ErrCorrupt},
		{name: "unused attribute bit 7", damage: func(b []byte) { b[offAttributes+1] = 0x80 }, want: ErrCorrupt},
		{name: "unused attribute bit 8", damage: func(b []byte) { b[offAttributes] = 0x01 }, want: ErrCorrupt},
		{name: "unused attribute bit 15", damage: func(b []byte) { b[offAttributes] = 0x80 }, want: ErrCorrupt},
		{name: "negative base offset", damage: func(b []byte) { SetBaseOffset(b, -1) }, want: ErrCorrupt},
		{name: "last offset overflows", damage: func(b []byte) {
			SetBaseOffset(b, math.MaxInt64)
			binary.BigEndian.PutUint32(b[offLastOffsetDelta:], 1)
		}, want: ErrCorrupt},
		{name: "next offset overflows", damage: func(b []byte) { SetBaseOffset(b, math.MaxInt64) }, want: ErrCorrupt},
		{name: "next offset is the largest", damage: func(b []byte) { SetBaseOffset(b, math.MaxInt64-1) }},
		{name: "negative last offset delta", damage: func(b []byte) {
			binary.BigEndian.PutUint32(b[offLastOffsetDelta:], math.MaxUint32)
		}, want: ErrCorrupt},
		{name: "count beyond last offset delta", damage: func(b []byte) {
			binary.BigEndian.PutUint32(b[offRecordCount:], 2)
		}, want: ErrCorrupt},
		{name: "negative count", damage: func(b []byte) {
			binary.BigEndian.PutUint32(b[offRecordCount:], math.MaxUint32)
		}, want: ErrCorrupt},
		{name: "batch length below a header", damage: func(b []byte) {
			binary.BigEndian.PutUint32(b[offBatchLength:], HeaderSize-LengthFieldEnd-1)
		}, want: ErrCorrupt},
		{name: "negative batch length", damage: func(b []byte) {
			binary.BigEndian.PutUint32(b[offBatchLength:], math.MaxUint32)
		}, want: ErrCorrupt},
		{name: "over max batch bytes", damage: func([]byte) {}, maxBatch: len(good) - 1, want: ErrCorrupt},
		{name: "batch length beyond the input", damage: func(b []byte) {
			binary.BigEndian.PutUint32(b[offBatchLength:], uint32(len(b)))
		}, want: ErrShort},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			batch := bytes.Clone(good)
			tc.damage(batch)
			resum(batch)
			_, err := Verify(batch, tc.maxBatch)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			requireError(t, err, tc.want)
		})
	}
}

// TestCheckDense: a batch as a producer sends it holds a record for each
// offset of its range; Verify takes sparse ones, CheckDense does not.
func TestCheckDense(t *testing.T) {
	three := buildBatch(t, CodecNone, nil, []Record{{Value: []byte("a")}, {Value: []byte("b")}, {Value: []byte("c")}})
	for _, tc := range []struct {
		name                   string
		lastOffsetDelta, count uint32
		ok                     bool
	}{
		{name: "three records, three offsets", lastOffsetDelta: 2, count: 3, ok: true},
		{name: "no records", lastOffsetDelta: 2, count: 0},
		{name: "no records, one offset", lastOffsetDelta: 0, count: 0},
		{name: "a gap", lastOffsetDelta: 5, count: 3},
		{name: "nearly 2^31 offsets", lastOffsetDelta: math.MaxInt32 - 1, count: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			batch := bytes.Clone(three)
			binary.BigEndian.PutUint32(batch[offLastOffsetDelta:], tc.lastOffsetDelta)
			binary.BigEndian.PutUint32(batch[offRecordCount:], tc.count)
			resum(batch)
			h, err := Verify(batch, 0)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			err = h.CheckDense()
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			requireError(t, err, ErrCorrupt)
		})
	}
}

// TestUnsupportedAttributes: the attribute bits Kafka defines and logagent
// does not implement are refused with an error that says which, matches both
// ErrUnsupported and ErrCorrupt, and is only reported once the CRC matched.
func TestUnsupportedAttributes(t *testing.T) {
	good := buildBatch(t, CodecGzip, nil, []Record{{Value: []byte("v")}})
	tests := []struct {
		name string
		bits uint16
		want string
	}{
		{name: "log append time", bits: 1 << 3, want: "record: LogAppendTime timestamps are not supported"},
		{name: "transactional", bits: 1 << 4, want: "record: transactional batches are not supported"},
		{name: "control", bits: 1 << 5, want: "record: control batches are not supported"},
		{name: "delete horizon", bits: 1 << 6, want: "record: batches with a delete horizon are not supported"},
		{name: "transactional control", bits: 1<<4 | 1<<5,
			want: "record: transactional batches and control batches are not supported"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			batch := bytes.Clone(good)
			attributes := binary.BigEndian.Uint16(batch[offAttributes:]) | tc.bits
			binary.BigEndian.PutUint16(batch[offAttributes:], attributes)
			damaged := bytes.Clone(batch)
			resum(batch)
			_, _, errParse := ParseHeader(batch, 0)
			_, errVerify := Verify(batch, 0)
			_, _, errNext := NextBatch(batch, 0)
			_, errSplit := SplitBatches(batch, 0)
			_, errValidate := NewDecoder(Limits{}).Validate(batch)
			for _, err := range []error{errParse, errVerify, errNext, errSplit, errValidate} {
				if !errors.Is(err, ErrUnsupported) || !errors.Is(err, ErrCorrupt) {
					t.Fatalf("got %v, want an error matching ErrUnsupported and ErrCorrupt", err)
				}
				var ue *UnsupportedError
				if !errors.As(err, &ue) || ue.Error() != tc.want {
					t.Fatalf("error %q, want %q", err, tc.want)
				}
			}
			// Without the CRC ParseHeader cannot tell a damaged attributes
			// field from a meant one; with it, a damaged one is a mismatch.
			if _, _, err := ParseHeader(damaged, 0); !errors.Is(err, ErrUnsupported) {
				t.Fatalf("ParseHeader of the batch with a stale CRC: got %v, want ErrUnsupported", err)
			}
			_, errVerify = Verify(damaged, 0)
			_, _, errNext = NextBatch(damaged, 0)
			for _, err := range []error{errVerify, errNext} {
				if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "crc mismatch") {
					t.Fatalf("batch with a stale CRC: got %v, want only a crc mismatch", err)
				}
			}
		})
	}
}

func TestCorruptRecords(t *testing.T) {
	one := batchSpec{count: 1, lastOffsetDelta: 0, maxTimestamp: 100}
	two := batchSpec{count: 2, lastOffsetDelta: 1, maxTimestamp: 100}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tests := []struct {
		name    string
		spec    batchSpec
		records []byte
		reason  string // part of the error message; "" means no error
	}{
		{name: "ok", spec: two, records: cat(okRecord(0), okRecord(1))},
		{name: "ok with offset gap", spec: batchSpec{count: 2, lastOffsetDelta: 5, maxTimestamp: 0},
			records: cat(okRecord(1), okRecord(5))},
		{name: "ok with headers", spec: one,
			records: rec(raw{0}, v(0), v(0), v(-1), v(-1), v(2), v(1), "a", v(-1), v(0), v(0))},
		{name: "fewer records than count", spec: two, records: okRecord(0), reason: "records end after 1 of 2"},
		{name: "more records than count", spec: one, records: cat(okRecord(0), okRecord(1)), reason: "after the last of 1 records"},
		{name: "trailing garbage", spec: one, records: cat(okRecord(0), raw{0}), reason: "1 bytes after the last"},
		{name: "negative length", spec: one, records: asm(v(-3), raw{0, 0, 0}), reason: "length -3"},
		{name: "length beyond records", spec: one, records: asm(v(50), raw{0, 0, 0}), reason: "length 50 exceeds"},
		{name: "malformed length varint", spec: one, records: bytes.Repeat([]byte{0xff}, 11), reason: "malformed length"},
		{name: "truncated length varint", spec: one, records: raw{0x80}, reason: "malformed length"},
		{name: "empty body", spec: one, records: asm(v(0)), reason: "no room for attributes"},
		{name: "record attributes", spec: one, records: rec(raw{1}, v(0), v(0), v(-1), v(-1), v(0)), reason: "attributes 0x01"},
		{name: "truncated timestamp varint", spec: one, records: rec(raw{0}, raw{0x80}), reason: "malformed timestamp_delta"},
		{name: "missing header count", spec: one, records: rec(raw{0}, v(0), v(0), v(-1), v(-1)), reason: "malformed header_count"},
		{name: "duplicate offset delta", spec: two, records: cat(okRecord(0), okRecord(0)), reason: "offset_delta 0 is not in (0, 1]"},
		{name: "decreasing offset delta", spec: batchSpec{count: 2, lastOffsetDelta: 3, maxTimestamp: 0},
			records: cat(okRecord(2), okRecord(1)), reason: "offset_delta 1 is not in (2, 3]"},
		{name: "offset delta beyond last", spec: one, records: okRecord(1), reason: "offset_delta 1 is not in (-1, 0]"},
		{name: "negative offset delta", spec: one, records: okRecord(-1), reason: "offset_delta -1"},
		{name: "key_len -2", spec: one, records: rec(raw{0}, v(0), v(0), v(-2), v(-1), v(0)), reason: "key_len -2"},
		{name: "key beyond record", spec: one, records: rec(raw{0}, v(0), v(0), v(9), "ab"), reason: "key_len 9 exceeds"},
		{name: "value beyond record", spec: one, records: rec(raw{0}, v(0), v(0), v(-1), v(9), "ab"), reason: "value_len 9 exceeds"},
		{name: "negative header count", spec: one, records: rec(raw{0}, v(0), v(0), v(-1), v(-1), v(-1)), reason: "header_count -1"},
		{name: "header count beyond record", spec: one,
			records: rec(raw{0}, v(0), v(0), v(-1), v(-1), v(math.MaxInt64), v(0), v(0)), reason: "header_count 9223372036854775807"},
		{name: "null header key", spec: one, records: rec(raw{0}, v(0), v(0), v(-1), v(-1), v(1), v(-1), v(0)), reason: "header_key_len -1"},
		{name: "header value beyond record", spec: one,
			records: rec(raw{0}, v(0), v(0), v(-1), v(-1), v(1), v(0), v(3), "a"), reason: "header_value_len 3 exceeds"},
		{name: "bytes after the headers", spec: one, records: rec(raw{0}, v(0), v(0), v(-1), v(-1), v(0), raw{7}), reason: "1 bytes after its last field"},
		{name: "timestamp overflow", spec: batchSpec{count: 1, firstTimestamp: math.MaxInt64 - 1, maxTimestamp: math.MaxInt64},
			records: rec(raw{0}, v(5), v(0), v(-1), v(-1), v(0)), reason: "overflows first_timestamp"},
		{name: "timestamp above max", spec: batchSpec{count: 1, firstTimestamp: 10, maxTimestamp: 10},
			records: rec(raw{0}, v(1), v(0), v(-1), v(-1), v(0)), reason: "above max_timestamp 10"},
	}
	for _, codec := range allCodecs {
		for _, tc := range tests {
			t.Run(codec.String()+"/"+tc.name, func(t *testing.T) {
				spec := tc.spec
				spec.codec = codec
				batch := craftBatch(t, spec, tc.records)
				d := NewDecoder(Limits{})
				_, errRecords := decodeAll(d, batch)
				_, errValidate := d.Validate(batch)
				for _, err := range []error{errRecords, errValidate} {
					if tc.reason == "" {
						if err != nil {
							t.Fatal(err)
						}
						continue
					}
					requireError(t, err, ErrCorrupt)
					var ce *CorruptError
					if !errors.As(err, &ce) || !strings.Contains(ce.Reason, tc.reason) {
						t.Fatalf("error %q does not say %q", err, tc.reason)
					}
				}
			})
		}
	}
}

func TestCorruptCompressedData(t *testing.T) {
	records := okRecord(0)
	for _, codec := range allCodecs[1:] {
		t.Run(codec.String(), func(t *testing.T) {
			compressed, err := appendCompressed(nil, codec, records)
			if err != nil {
				t.Fatal(err)
			}
			truncated := compressed[:len(compressed)-1]
			tests := map[string][]byte{
				"garbage":        []byte("this is not compressed data at all, nor anything like it"),
				"truncated":      truncated,
				"trailing bytes": append(bytes.Clone(compressed), 0xde, 0xad),
				"empty":          {},
			}
			for name, payload := range tests {
				t.Run(name, func(t *testing.T) {
					// Crafted uncompressed, then labelled with the codec, so
					// that the payload goes in as it is.
					batch := craftBatch(t, batchSpec{count: 1}, payload)
					binary.BigEndian.PutUint16(batch[offAttributes:], uint16(codec))
					resum(batch)
					_, err := NewDecoder(Limits{}).Validate(batch)
					requireError(t, err, ErrCorrupt)
				})
			}
		})
	}
}

// xerialStream assembles a xerial stream: the header, with the given
// version and minimum compatible version, then parts as they are.
func xerialStream(version, compatible uint32, parts ...[]byte) []byte {
	b := append([]byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}, binary.BigEndian.AppendUint32(nil, version)...)
	b = binary.BigEndian.AppendUint32(b, compatible)
	return append(b, bytes.Join(parts, nil)...)
}

// xerialBlock is one block of a xerial stream: its length, then a plain
// snappy block of src.
func xerialBlock(src []byte) []byte {
	block := snappy.Encode(nil, src)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(block))), block...)
}

// TestXerialFraming: hand-made xerial streams, good and bad. Every length in
// the framing is checked against what is left before anything is decoded.
func TestXerialFraming(t *testing.T) {
	record := okRecord(0)
	u32 := func(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }
	tests := []struct {
		name    string
		payload []byte
		reason  string // part of the error message; "" means no error
	}{
		{name: "one block", payload: xerialStream(1, 1, xerialBlock(record))},
		{name: "record split over two blocks", payload: xerialStream(1, 1, xerialBlock(record[:4]), xerialBlock(record[4:]))},
		{name: "later version, compatible with 1", payload: xerialStream(2, 1, xerialBlock(record))},
		{name: "header only", payload: xerialStream(1, 1), reason: "records end after 0 of 1"},
		{name: "header cut short", payload: xerialStream(1, 1)[:12], reason: "xerial header cut short at 12 bytes"},
		{name: "minimum compatible version 2", payload: xerialStream(2, 2, xerialBlock(record)), reason: "minimum compatible version 2"},
		{name: "minimum compatible version 0", payload: xerialStream(1, 0, xerialBlock(record)), reason: "minimum compatible version 0"},
		{name: "version below compatible", payload: xerialStream(0, 1, xerialBlock(record)), reason: "xerial version 0"},
		{name: "block length cut short", payload: xerialStream(1, 1, []byte{0, 0}), reason: "xerial block length cut short at 2 bytes"},
		{name: "bytes after the last block", payload: xerialStream(1, 1, xerialBlock(record), []byte{0}),
			reason: "xerial block length cut short at 1 bytes"},
		{name: "empty block", payload: xerialStream(1, 1, u32(0), xerialBlock(record)), reason: "xerial block of 0 bytes"},
		{name: "block beyond the stream", payload: xerialStream(1, 1, u32(100), make([]byte, 10)), reason: "xerial block of 100 bytes, 10 left"},
		{name: "block length with the sign bit", payload: xerialStream(1, 1, u32(math.MaxUint32), make([]byte, 10)),
			reason: "xerial block of 4294967295 bytes, 10 left"},
		{name: "block that is not snappy", payload: xerialStream(1, 1, xerialBlock(record), u32(3), []byte{0xff, 0xff, 0xff}),
			reason: "xerial block at byte " + strconv.Itoa(16+len(xerialBlock(record)))},
		// The length claims 10 bytes, the block holds a 3-byte literal.
		{name: "block shorter than it claims", payload: xerialStream(1, 1, u32(5), []byte{10, 2 << 2, 'a', 'b', 'c'}),
			reason: "xerial block at byte 16"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			batch := craftBatch(t, batchSpec{count: 1}, tc.payload)
			binary.BigEndian.PutUint16(batch[offAttributes:], uint16(CodecSnappy))
			resum(batch)
			records, err := decodeAll(NewDecoder(Limits{}), batch)
			if tc.reason == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(records) != 1 || string(records[0].Key) != "k" || string(records[0].Value) != "v" {
					t.Fatalf("decoded %+v", records)
				}
				return
			}
			requireError(t, err, ErrCorrupt)
			if !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("error %q does not say %q", err, tc.reason)
			}
		})
	}
}

func TestTooLarge(t *testing.T) {
	const limit = 64 << 10
	bombValue := make([]byte, 8<<20)
	bomb := []Record{{Value: bombValue}}

	// A zstd frame that declares neither its size nor a window over the
	// limit, as a streaming encoder with a small window writes it, is only
	// caught while decoding.
	var stream bytes.Buffer
	enc, err := zstd.NewWriter(&stream, zstd.WithWindowSize(limit/2))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := enc.Write(buildBatch(t, CodecNone, nil, bomb)[HeaderSize:]); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	zstdStream := craftBatch(t, batchSpec{count: 1}, stream.Bytes())
	binary.BigEndian.PutUint16(zstdStream[offAttributes:], uint16(CodecZstd))
	resum(zstdStream)

	// A xerial stream of many tiny blocks that each claim 60000 bytes
	// (uvarint e0 d4 03, no elements): refused on the lengths alone.
	claim := []byte{0, 0, 0, 3, 0xe0, 0xd4, 0x03}
	xerialClaims := craftBatch(t, batchSpec{count: 1}, xerialStream(1, 1, bytes.Repeat(claim, 1000)))
	binary.BigEndian.PutUint16(xerialClaims[offAttributes:], uint16(CodecSnappy))
	resum(xerialClaims)

	// The plain block format that earlier versions wrote.
	snappyBlock := craftBatch(t, batchSpec{count: 1}, snappy.Encode(nil, buildBatch(t, CodecNone, nil, bomb)[HeaderSize:]))
	binary.BigEndian.PutUint16(snappyBlock[offAttributes:], uint16(CodecSnappy))
	resum(snappyBlock)

	tests := []struct {
		name   string
		batch  []byte
		limits Limits
	}{
		{name: "record", batch: buildBatch(t, CodecNone, nil, []Record{{Value: make([]byte, 100)}}), limits: Limits{MaxRecordBytes: 99}},
		{name: "gzip bomb", batch: buildBatch(t, CodecGzip, nil, bomb), limits: Limits{MaxDecompressedBytes: limit}},
		{name: "snappy bomb", batch: buildBatch(t, CodecSnappy, nil, bomb), limits: Limits{MaxDecompressedBytes: limit}},
		{name: "snappy block bomb", batch: snappyBlock, limits: Limits{MaxDecompressedBytes: limit}},
		{name: "snappy xerial claims", batch: xerialClaims, limits: Limits{MaxDecompressedBytes: limit}},
		{name: "lz4 bomb", batch: buildBatch(t, CodecLZ4, nil, bomb), limits: Limits{MaxDecompressedBytes: limit}},
		{name: "zstd bomb", batch: buildBatch(t, CodecZstd, nil, bomb), limits: Limits{MaxDecompressedBytes: limit}},
		{name: "zstd stream bomb", batch: zstdStream, limits: Limits{MaxDecompressedBytes: limit}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder(tc.limits)
			// Warm the decoder up so that only the bomb's own allocations
			// are measured.
			small := buildBatch(t, Codec(tc.batch[offAttributes+1]), nil, []Record{{Value: []byte("x")}})
			if _, err := d.Validate(small); err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := d.Validate(tc.batch)
			runtime.ReadMemStats(&after)
			requireError(t, err, ErrTooLarge)
			t.Logf("%v", err)
			if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 1<<20 {
				t.Fatalf("allocated %d bytes to reject the batch", allocated)
			}
			_, err = decodeAll(d, tc.batch)
			requireError(t, err, ErrTooLarge)
		})
	}
}

func TestSplitBatches(t *testing.T) {
	rng := testseed.Rand(t)
	var region []byte
	var sizes []int
	for i := range 3 {
		batch := buildBatch(t, allCodecs[i], nil, randomRecords(rng, 1+i))
		region = append(region, batch...)
		sizes = append(sizes, len(batch))
	}
	t.Run("whole", func(t *testing.T) {
		batches, err := SplitBatches(region, 0)
		if err != nil || len(batches) != 3 {
			t.Fatalf("got %d batches, %v", len(batches), err)
		}
		for i, b := range batches {
			if len(b) != sizes[i] || cap(b) != len(b) {
				t.Fatalf("batch %d: len %d cap %d, want %d", i, len(b), cap(b), sizes[i])
			}
		}
	})
	t.Run("empty", func(t *testing.T) {
		batches, err := SplitBatches(nil, 0)
		if err != nil || batches != nil {
			t.Fatalf("got %d batches, %v", len(batches), err)
		}
	})
	t.Run("torn tail", func(t *testing.T) {
		for cut := sizes[0] + sizes[1] + 1; cut < len(region); cut++ {
			batches, err := SplitBatches(region[:cut], 0)
			requireError(t, err, ErrShort)
			if len(batches) != 2 {
				t.Fatalf("cut at %d: %d batches before the torn one, want 2", cut, len(batches))
			}
		}
	})
	t.Run("corrupt middle", func(t *testing.T) {
		damaged := bytes.Clone(region)
		damaged[sizes[0]+HeaderSize] ^= 0x10
		batches, err := SplitBatches(damaged, 0)
		requireError(t, err, ErrCorrupt)
		if len(batches) != 1 {
			t.Fatalf("%d batches before the corrupt one, want 1", len(batches))
		}
		if want := "batch at byte " + strconv.Itoa(sizes[0]); !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not say %q", err, want)
		}
	})
	t.Run("next batch", func(t *testing.T) {
		batch, rest, err := NextBatch(region, 0)
		if err != nil || len(batch) != sizes[0] || len(rest) != len(region)-sizes[0] {
			t.Fatalf("batch %d bytes, rest %d, %v", len(batch), len(rest), err)
		}
	})
}

// TestDecoderNextBatch walks a region of batches of every codec with
// Decoder.NextBatch, as a consumer walks a fetch answer: each batch is cut
// to its length and capacity, its records are those built into it, and a
// torn tail, a damaged byte and a batch over the limit are refused as
// record.NextBatch and Records refuse them.
func TestDecoderNextBatch(t *testing.T) {
	rng := testseed.Rand(t)
	var region []byte
	var sizes []int
	var want [][]Record
	for i, codec := range allCodecs {
		records := randomRecords(rng, 1+i)
		batch := buildBatch(t, codec, nil, records)
		region = append(region, batch...)
		sizes = append(sizes, len(batch))
		want = append(want, records)
	}
	t.Run("walk", func(t *testing.T) {
		d := NewDecoder(Limits{})
		pos := 0
		for i := range sizes {
			batch, it, err := d.NextBatch(region[pos:])
			if err != nil {
				t.Fatalf("batch %d at byte %d: %v", i, pos, err)
			}
			if len(batch) != sizes[i] || cap(batch) != len(batch) {
				t.Fatalf("batch %d: len %d cap %d, want %d", i, len(batch), cap(batch), sizes[i])
			}
			var got []Record
			for it.Next() {
				got = append(got, cloneRecord(it.Record()))
			}
			if err := it.Err(); err != nil {
				t.Fatalf("batch %d: %v", i, err)
			}
			checkRecords(t, got, want[i], 0)
			pos += len(batch)
		}
	})
	last := len(region) - sizes[len(sizes)-1]
	tests := []struct {
		name   string
		region func() []byte
		limits Limits
		want   error
	}{
		{"empty", func() []byte { return nil }, Limits{}, ErrShort},
		{"torn header", func() []byte { return region[last : last+HeaderSize-1] }, Limits{}, ErrShort},
		{"torn records", func() []byte { return region[last : len(region)-1] }, Limits{}, ErrShort},
		{"damaged record byte", func() []byte {
			damaged := bytes.Clone(region[last:])
			damaged[HeaderSize] ^= 0x10
			return damaged
		}, Limits{}, ErrCorrupt},
		{"over the batch limit", func() []byte { return region[last:] }, Limits{MaxBatchBytes: sizes[len(sizes)-1] - 1}, ErrCorrupt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			batch, it, err := NewDecoder(tc.limits).NextBatch(tc.region())
			requireError(t, err, tc.want)
			if batch != nil || it != nil {
				t.Fatalf("got a batch of %d bytes and an iterator with the error", len(batch))
			}
		})
	}
}
