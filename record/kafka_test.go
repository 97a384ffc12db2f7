package record

import (
	"bytes"
	stdgzip "compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"reflect"
	"strings"
	"testing"

	xerial "github.com/eapache/go-xerial-snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// These tests hold the batch format against implementations of Kafka's
// RecordBatch v2 that logagent's code did not write: franz-go's kmsg (the
// batch and record structs of a Kafka client) and, for snappy's xerial
// framing, eapache/go-xerial-snappy (written for Go's Kafka clients). Decompression uses other code than record's where Go has it
// (compress/gzip, go-xerial-snappy); lz4 and zstd use the same libraries as
// record, since they are the ones Go's Kafka clients use too.

// kafkaRecords have null and empty keys and values, headers with null and
// empty values, and timestamps on both sides of the first one.
var kafkaRecords = []Record{
	{Timestamp: 1700000000000, Key: []byte("user-1"), Value: []byte("hello"),
		Headers: []RecordHeader{{Key: "trace", Value: []byte("abc")}, {Key: "null", Value: nil}, {Key: "", Value: []byte{}}}},
	{Timestamp: 1700000000005, Key: nil, Value: []byte("no key")},
	{Timestamp: 1699999999000, Key: []byte{}, Value: []byte{}},
	{Timestamp: 1700000000010, Key: []byte("user-1"), Value: nil},
	{Timestamp: 1700000000011, Key: []byte("big"), Value: []byte(strings.Repeat("temperature=21.5 humidity=40 ", 3000))},
}

// kafkaCastagnoli is built here rather than shared with record, so that the
// CRC check does not go through record's code.
var kafkaCastagnoli = crc32.MakeTable(crc32.Castagnoli)

// kafkaDecompress decompresses a records section as a Kafka client would.
func kafkaDecompress(t *testing.T, codec Codec, src []byte) []byte {
	t.Helper()
	var out []byte
	var err error
	switch codec {
	case CodecNone:
		return src
	case CodecGzip:
		var r *stdgzip.Reader
		if r, err = stdgzip.NewReader(bytes.NewReader(src)); err == nil {
			out, err = io.ReadAll(r)
		}
	case CodecSnappy:
		out, err = xerial.Decode(src)
	case CodecLZ4:
		out, err = io.ReadAll(lz4.NewReader(bytes.NewReader(src)))
	case CodecZstd:
		var d *zstd.Decoder
		if d, err = zstd.NewReader(nil); err == nil {
			out, err = d.DecodeAll(src, nil)
			d.Close()
		}
	}
	if err != nil {
		t.Fatalf("%s: %v", codec, err)
	}
	return out
}

// kafkaCompress compresses a records section as a Kafka client would.
func kafkaCompress(t *testing.T, codec Codec, src []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	switch codec {
	case CodecNone:
		return src
	case CodecGzip:
		w := stdgzip.NewWriter(&out)
		if _, err := w.Write(src); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	case CodecSnappy:
		return xerial.EncodeStream(nil, src)
	case CodecLZ4:
		w := lz4.NewWriter(&out)
		if _, err := w.Write(src); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	case CodecZstd:
		e, err := zstd.NewWriter(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		return e.EncodeAll(src, nil)
	}
	return out.Bytes()
}

// kafkaRecordsOf splits a decompressed records section with kmsg.Record.
func kafkaRecordsOf(t *testing.T, records []byte) []kmsg.Record {
	t.Helper()
	var out []kmsg.Record
	for len(records) > 0 {
		length, n := binary.Varint(records)
		if n <= 0 || length < 0 || length > int64(len(records)-n) {
			t.Fatalf("record %d: bad length", len(out))
		}
		var r kmsg.Record
		if err := r.ReadFrom(records[:n+int(length)]); err != nil {
			t.Fatalf("record %d: kmsg: %v", len(out), err)
		}
		if int64(r.Length) != length {
			t.Fatalf("record %d: kmsg length %d, want %d", len(out), r.Length, length)
		}
		out = append(out, r)
		records = records[n+int(length):]
	}
	return out
}

// diffKafkaRecord describes how a kmsg record differs from want, the
// index-th record of a batch whose first_timestamp is first.
func diffKafkaRecord(r kmsg.Record, want Record, index int, first int64) string {
	got := Record{Timestamp: first + r.TimestampDelta64, Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		got.Headers = append(got.Headers, RecordHeader{Key: h.Key, Value: h.Value})
	}
	if r.Attributes != 0 || r.OffsetDelta != int32(index) {
		return fmt.Sprintf("attributes %d offset delta %d, want 0 and %d", r.Attributes, r.OffsetDelta, index)
	}
	return diffRecord(got, want)
}

// TestKafkaReadsOurBatches: every codec, an idempotent producer, headers,
// null and empty keys and values; kmsg reads the header fields we wrote, the
// CRC is Kafka's (CRC-32C over attributes to the end), the bytes survive a
// round trip through kmsg's struct, and every record decodes the same.
func TestKafkaReadsOurBatches(t *testing.T) {
	for _, codec := range allCodecs {
		t.Run(codec.String(), func(t *testing.T) {
			batch := buildBatch(t, codec, &producer{id: 42, epoch: 3, sequence: 7}, kafkaRecords)
			SetBaseOffset(batch, 1000)
			SetLeaderEpoch(batch, 5)

			var kb kmsg.RecordBatch
			if err := kb.ReadFrom(batch); err != nil {
				t.Fatalf("kmsg: %v", err)
			}
			want := kmsg.RecordBatch{
				FirstOffset: 1000, Length: int32(len(batch) - 12), PartitionLeaderEpoch: 5, Magic: 2,
				CRC: kb.CRC, Attributes: int16(codec), LastOffsetDelta: int32(len(kafkaRecords) - 1),
				FirstTimestamp: 1700000000000, MaxTimestamp: 1700000000011,
				ProducerID: 42, ProducerEpoch: 3, FirstSequence: 7, NumRecords: int32(len(kafkaRecords)),
			}
			got := kb
			got.Records = nil
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("kmsg read\n%+v\nwant\n%+v", got, want)
			}
			if len(kb.Records) != len(batch)-61 {
				t.Fatalf("kmsg records section of %d bytes, want %d", len(kb.Records), len(batch)-61)
			}
			reencoded := kb.AppendTo(nil)
			if !bytes.Equal(reencoded, batch) {
				t.Fatalf("kmsg re-encodes the batch differently")
			}
			if crc := crc32.Checksum(reencoded[21:], kafkaCastagnoli); crc != uint32(kb.CRC) {
				t.Fatalf("stored crc %08x, CRC-32C of attributes..end %08x", uint32(kb.CRC), crc)
			}

			records := kafkaRecordsOf(t, kafkaDecompress(t, codec, kb.Records))
			ours, err := decodeAll(NewDecoder(Limits{}), batch)
			if err != nil {
				t.Fatal(err)
			}
			checkRecords(t, ours, kafkaRecords, 1000)
			if len(records) != len(kafkaRecords) {
				t.Fatalf("kmsg decoded %d records, want %d", len(records), len(kafkaRecords))
			}
			for i, r := range records {
				if d := diffKafkaRecord(r, kafkaRecords[i], i, kb.FirstTimestamp); d != "" {
					t.Fatalf("kmsg record %d: %s", i, d)
				}
			}
		})
	}
}

// kafkaBatch encodes records with kmsg, compresses them with kafkaCompress
// and wraps them in a kmsg.RecordBatch as a Kafka producer that is not
// idempotent sends it (producer fields and partition leader epoch -1).
func kafkaBatch(t *testing.T, codec Codec, attributes int16, records []Record) []byte {
	t.Helper()
	var raw []byte
	first, maxTimestamp := records[0].Timestamp, records[0].Timestamp
	for i, r := range records {
		kr := kmsg.Record{TimestampDelta64: r.Timestamp - first, OffsetDelta: int32(i), Key: r.Key, Value: r.Value}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kmsg.Header{Key: h.Key, Value: h.Value})
		}
		// Length counts what follows it: encode once with a one-byte
		// length of 0 to measure the rest.
		kr.Length = int32(len(kr.AppendTo(nil)) - 1)
		raw = kr.AppendTo(raw)
		maxTimestamp = max(maxTimestamp, r.Timestamp)
	}
	kb := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, Magic: 2, Attributes: int16(codec) | attributes,
		LastOffsetDelta: int32(len(records) - 1), FirstTimestamp: first, MaxTimestamp: maxTimestamp,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(len(records)),
		Records: kafkaCompress(t, codec, raw),
	}
	kb.Length = int32(49 + len(kb.Records))
	batch := kb.AppendTo(nil)
	binary.BigEndian.PutUint32(batch[17:], crc32.Checksum(batch[21:], kafkaCastagnoli))
	return batch
}

// TestWeReadKafkaBatches is the other direction: batches built with kmsg and
// compressed by other code than record's decode to the same records.
func TestWeReadKafkaBatches(t *testing.T) {
	for _, codec := range allCodecs {
		t.Run(codec.String(), func(t *testing.T) {
			batch := kafkaBatch(t, codec, 0, kafkaRecords)
			h, err := Verify(batch, 0)
			if err != nil {
				t.Fatal(err)
			}
			if h.Codec() != codec || h.ProducerID() != -1 || h.LeaderEpoch() != -1 || h.RecordCount() != int32(len(kafkaRecords)) {
				t.Fatalf("codec %v producer %d leader epoch %d count %d", h.Codec(), h.ProducerID(), h.LeaderEpoch(), h.RecordCount())
			}
			got, err := decodeAll(NewDecoder(Limits{}), batch)
			if err != nil {
				t.Fatal(err)
			}
			checkRecords(t, got, kafkaRecords, 0)
		})
	}
	t.Run("snappy plain block", func(t *testing.T) {
		// What franz-go sends: one plain snappy block.
		var raw []byte
		for i, r := range kafkaRecords {
			raw = appendRecord(raw, recordBodySize(r.Timestamp-kafkaRecords[0].Timestamp, int32(i), r.Key, r.Value, r.Headers),
				r.Timestamp-kafkaRecords[0].Timestamp, int32(i), r.Key, r.Value, r.Headers)
		}
		batch := craftBatch(t, batchSpec{count: int32(len(kafkaRecords)), lastOffsetDelta: int32(len(kafkaRecords) - 1),
			firstTimestamp: kafkaRecords[0].Timestamp, maxTimestamp: 1700000000011}, xerial.Encode(raw))
		binary.BigEndian.PutUint16(batch[offAttributes:], uint16(CodecSnappy))
		resum(batch)
		got, err := decodeAll(NewDecoder(Limits{}), batch)
		if err != nil {
			t.Fatal(err)
		}
		checkRecords(t, got, kafkaRecords, 0)
	})
	t.Run("transactional", func(t *testing.T) {
		_, err := NewDecoder(Limits{}).Validate(kafkaBatch(t, CodecNone, 1<<4, kafkaRecords))
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "transactional batches are not supported") {
			t.Fatalf("got %v, want ErrUnsupported for a transactional batch", err)
		}
	})
}

// TestXerialMatchesIndependentWriter: our snappy framing is the one another
// xerial writer produces for the same input (the same header and 32 KiB
// blocks), and it reads that writer's streams of several blocks.
func TestXerialMatchesIndependentWriter(t *testing.T) {
	for _, size := range []int{0, 1, xerialBlockSize - 1, xerialBlockSize, xerialBlockSize + 1, 5*xerialBlockSize + 17} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			src := []byte(strings.Repeat("temperature=21.5 humidity=40 ", size/29+1)[:size])
			ours, err := appendCompressed(nil, CodecSnappy, src)
			if err != nil {
				t.Fatal(err)
			}
			theirs := xerial.EncodeStream(nil, src)
			if !bytes.Equal(ours, theirs) {
				t.Fatalf("xerial stream of %d bytes differs:\nours   % x\ntheirs % x", size, ours[:min(len(ours), 64)], theirs[:min(len(theirs), 64)])
			}
			d := decompressor{limit: DefaultMaxDecompressedBytes}
			got, err := d.decompress(CodecSnappy, theirs)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, src) {
				t.Fatalf("decoded %d bytes, want the %d given", len(got), len(src))
			}
		})
	}
}
