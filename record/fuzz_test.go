package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
)

// fuzzLimits keep every input's decoding small: a decoder must stay within
// them whatever the input claims.
var fuzzLimits = Limits{MaxBatchBytes: 1 << 20, MaxRecordBytes: 256 << 10, MaxDecompressedBytes: 1 << 20}

// FuzzDecode runs the whole decode path (NextBatch, ParseHeader, Verify,
// decompression, record iteration) over arbitrary bytes. Each input is read
// twice: as a region of batches, and as one batch whose batch_length and CRC
// are rewritten to match, so that mutations get past the CRC into the
// records. Whatever decodes must re-encode to the same records.
func FuzzDecode(f *testing.F) {
	files := readGoldenFiles(f)
	var region []byte
	for _, gc := range goldenCases {
		batch := files[gc.name]
		f.Add(batch)
		f.Add(batch[:len(batch)-1])
		region = append(region, batch...)
	}
	f.Add(region)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		d := NewDecoder(fuzzLimits)
		split, errSplit := SplitBatches(data, fuzzLimits.MaxBatchBytes)
		rest := data
		for i := 0; len(rest) > 0; i++ {
			batch, next, err := NextBatch(rest, fuzzLimits.MaxBatchBytes)
			if err != nil {
				requireKnownError(t, err)
				if want := fmt.Sprintf("record: batch at byte %d: %v", len(data)-len(rest), err); errSplit == nil || errSplit.Error() != want {
					t.Fatalf("NextBatch says %v at byte %d, SplitBatches says %v", err, len(data)-len(rest), errSplit)
				}
				if len(split) != i {
					t.Fatalf("SplitBatches returned %d batches before its error, NextBatch found %d", len(split), i)
				}
				break
			}
			if i >= len(split) || !bytes.Equal(split[i], batch) {
				t.Fatalf("batch %d of SplitBatches differs from NextBatch's", i)
			}
			checkDecodes(t, d, batch)
			rest = next
		}
		if len(rest) == 0 && errSplit != nil {
			t.Fatalf("NextBatch read the whole region, SplitBatches says %v", errSplit)
		}
		if len(data) >= HeaderSize {
			batch := bytes.Clone(data)
			binary.BigEndian.PutUint32(batch[offBatchLength:], uint32(len(batch)-LengthFieldEnd))
			resum(batch)
			checkDecodes(t, d, batch)
		}
	})
}

func requireKnownError(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrShort) && !errors.Is(err, ErrTooLarge) {
		t.Fatalf("error matches none of ErrCorrupt, ErrShort, ErrTooLarge: %v", err)
	}
}

// checkDecodes decodes batch both ways the Decoder offers and, if it is
// valid, rebuilds it and checks that the rebuilt batch holds the same records.
func checkDecodes(t *testing.T, d *Decoder, batch []byte) {
	t.Helper()
	h, errValidate := d.Validate(batch)
	records, errRecords := decodeAll(d, batch)
	if (errValidate == nil) != (errRecords == nil) {
		t.Fatalf("Validate says %v but Records says %v", errValidate, errRecords)
	}
	if errRecords != nil {
		requireKnownError(t, errRecords)
		return
	}
	if len(records) != int(h.RecordCount()) {
		t.Fatalf("decoded %d records, record_count %d", len(records), h.RecordCount())
	}
	if len(records) == 0 {
		return
	}
	var b Builder
	if err := b.SetCodec(h.Codec()); err != nil {
		t.Fatal(err)
	}
	if h.ProducerID() != -1 {
		b.SetProducer(h.ProducerID(), h.ProducerEpoch(), h.BaseSequence())
	}
	for _, r := range records {
		if err := b.Add(r.Timestamp, r.Key, r.Value, r.Headers); err != nil {
			// A batch may hold timestamps on both sides of its
			// first_timestamp that are too far apart for the Builder,
			// which measures from the first record.
			if errors.Is(err, ErrTimestampRange) {
				return
			}
			t.Fatal(err)
		}
	}
	rebuilt, err := b.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	again, err := decodeAll(NewDecoder(Limits{}), rebuilt)
	if err != nil {
		t.Fatalf("rebuilt batch does not decode: %v", err)
	}
	if len(again) != len(records) {
		t.Fatalf("rebuilt batch has %d records, want %d", len(again), len(records))
	}
	for i := range records {
		if diff := diffRecord(again[i], records[i]); diff != "" {
			t.Fatalf("rebuilt record %d: %s", i, diff)
		}
	}
}
