package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

var allCodecs = []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd}

// producer is the idempotence fields of a batch; nil means none.
type producer struct {
	id       int64
	epoch    int16
	sequence int32
}

// buildBatch builds one batch of records (their Offset is ignored).
func buildBatch(t testing.TB, codec Codec, p *producer, records []Record) []byte {
	t.Helper()
	var b Builder
	if err := b.SetCodec(codec); err != nil {
		t.Fatal(err)
	}
	if p != nil {
		b.SetProducer(p.id, p.epoch, p.sequence)
	}
	for i, r := range records {
		if err := b.Add(r.Timestamp, r.Key, r.Value, r.Headers); err != nil {
			t.Fatalf("add record %d: %v", i, err)
		}
	}
	batch, err := b.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	return batch
}

// decodeAll decodes every record of batch, copying them out of the decoder.
func decodeAll(d *Decoder, batch []byte) ([]Record, error) {
	it, err := d.Records(batch)
	if err != nil {
		return nil, err
	}
	var records []Record
	for it.Next() {
		records = append(records, cloneRecord(it.Record()))
	}
	return records, it.Err()
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

func cloneRecord(r Record) Record {
	r.Key, r.Value = cloneBytes(r.Key), cloneBytes(r.Value)
	headers := r.Headers
	r.Headers = nil
	for _, h := range headers {
		r.Headers = append(r.Headers, RecordHeader{Key: h.Key, Value: cloneBytes(h.Value)})
	}
	return r
}

// sameBytes is bytes.Equal that also tells null from empty.
func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

// diffRecord describes how got differs from want, ignoring Offset, or
// returns "" when they match.
func diffRecord(got, want Record) string {
	switch {
	case got.Timestamp != want.Timestamp:
		return fmt.Sprintf("timestamp %d, want %d", got.Timestamp, want.Timestamp)
	case !sameBytes(got.Key, want.Key):
		return fmt.Sprintf("key %q (nil %v), want %q (nil %v)", got.Key, got.Key == nil, want.Key, want.Key == nil)
	case !sameBytes(got.Value, want.Value):
		return fmt.Sprintf("value of %d bytes (nil %v), want %d (nil %v)", len(got.Value), got.Value == nil, len(want.Value), want.Value == nil)
	case len(got.Headers) != len(want.Headers):
		return fmt.Sprintf("%d headers, want %d", len(got.Headers), len(want.Headers))
	}
	for i := range got.Headers {
		g, w := got.Headers[i], want.Headers[i]
		if g.Key != w.Key || !sameBytes(g.Value, w.Value) {
			return fmt.Sprintf("header %d is %q=%q (nil %v), want %q=%q (nil %v)",
				i, g.Key, g.Value, g.Value == nil, w.Key, w.Value, w.Value == nil)
		}
	}
	return ""
}

// checkRecords fails t unless got are want at consecutive offsets from base.
func checkRecords(t testing.TB, got, want []Record, base int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("decoded %d records, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Offset != base+int64(i) {
			t.Fatalf("record %d: offset %d, want %d", i, got[i].Offset, base+int64(i))
		}
		if d := diffRecord(got[i], want[i]); d != "" {
			t.Fatalf("record %d: %s", i, d)
		}
	}
}

// randomBytes returns nil, empty or random bytes of up to maxLen; text is
// drawn from few letters so that the codecs have something to compress.
func randomBytes(rng *rand.Rand, maxLen int) []byte {
	switch rng.IntN(8) {
	case 0:
		return nil
	case 1:
		return []byte{}
	}
	b := make([]byte, rng.IntN(maxLen+1))
	for i := range b {
		b[i] = "abcdefgh \n"[rng.IntN(10)]
	}
	return b
}

func randomRecords(rng *rand.Rand, n int) []Record {
	base := rng.Int64N(1 << 42)
	records := make([]Record, n)
	for i := range records {
		r := Record{
			Timestamp: base + rng.Int64N(4000) - 2000,
			Key:       randomBytes(rng, 40),
			Value:     randomBytes(rng, 3000),
		}
		for range rng.IntN(4) {
			key := randomBytes(rng, 12)
			r.Headers = append(r.Headers, RecordHeader{Key: string(key), Value: randomBytes(rng, 30)})
		}
		records[i] = r
	}
	return records
}

// requireError fails t unless err matches want and, for ErrShort and
// ErrTooLarge, is not also reported as corruption.
func requireError(t testing.TB, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("got error %v, want %v", err, want)
	}
	if want != ErrCorrupt && errors.Is(err, ErrCorrupt) {
		t.Fatalf("error %v also matches ErrCorrupt", err)
	}
}

// A tiny assembler for hand-made records: v is a varint, raw is bytes as
// they are. It lets tests write records that Builder would refuse to.
type v int64
type raw []byte

func asm(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch p := p.(type) {
		case v:
			b = binary.AppendVarint(b, int64(p))
		case raw:
			b = append(b, p...)
		case string:
			b = append(b, p...)
		default:
			panic(fmt.Sprintf("asm: %T", p))
		}
	}
	return b
}

// rec assembles a record body and prefixes it with its length.
func rec(parts ...any) []byte {
	body := asm(parts...)
	return append(binary.AppendVarint(nil, int64(len(body))), body...)
}

// okRecord is a well-formed record with the given offset delta.
func okRecord(offsetDelta int64) []byte {
	return rec(raw{0}, v(0), v(offsetDelta), v(1), "k", v(1), "v", v(0))
}

// batchSpec is the header of a hand-made batch.
type batchSpec struct {
	codec           Codec
	count           int32
	lastOffsetDelta int32
	firstTimestamp  int64
	maxTimestamp    int64
}

// craftBatch writes a batch around records (compressed as spec says) with a
// correct batch_length and CRC, whatever the records hold.
func craftBatch(t testing.TB, spec batchSpec, records []byte) []byte {
	t.Helper()
	batch := make([]byte, HeaderSize)
	batch, err := appendCompressed(batch, spec.codec, records)
	if err != nil {
		t.Fatal(err)
	}
	be := binary.BigEndian
	be.PutUint32(batch[offBatchLength:], uint32(len(batch)-LengthFieldEnd))
	batch[offMagic] = Magic
	be.PutUint16(batch[offAttributes:], uint16(spec.codec))
	be.PutUint32(batch[offLastOffsetDelta:], uint32(spec.lastOffsetDelta))
	be.PutUint64(batch[offFirstTimestamp:], uint64(spec.firstTimestamp))
	be.PutUint64(batch[offMaxTimestamp:], uint64(spec.maxTimestamp))
	be.PutUint64(batch[offProducerID:], ^uint64(0))
	be.PutUint16(batch[offProducerEpoch:], ^uint16(0))
	be.PutUint32(batch[offBaseSequence:], ^uint32(0))
	be.PutUint32(batch[offRecordCount:], uint32(spec.count))
	resum(batch)
	return batch
}

// resum recomputes the CRC after a test changed a batch on purpose.
func resum(batch []byte) { binary.BigEndian.PutUint32(batch[offCRC:], Checksum(batch)) }
