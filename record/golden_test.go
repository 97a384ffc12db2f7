package record

import (
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden vectors in testdata/")

// goldenCase is one documented batch. Its file testdata/<name>.hex holds the
// batch as hex: lines starting with # are comments, whitespace is ignored.
type goldenCase struct {
	name        string
	codec       Codec
	producer    *producer
	baseOffset  int64 // stamped after building, as a leader would
	leaderEpoch int32
	records     []Record // Offset is base_offset + position
	// frozen vectors hold bytes that an earlier version wrote and that
	// this one must still read; -update leaves their files alone.
	frozen bool
}

// basicRecords has a key, a null key, an empty key and value, a null value
// (a tombstone), headers with null and empty values and an empty header key,
// and a timestamp below the first.
var basicRecords = []Record{
	{Timestamp: 1700000000000, Key: []byte("user-1"), Value: []byte("hello"),
		Headers: []RecordHeader{{Key: "trace", Value: []byte("abc")}}},
	{Timestamp: 1700000000005, Key: nil, Value: []byte("no key")},
	{Timestamp: 1699999999997, Key: []byte{}, Value: []byte{}},
	{Timestamp: 1700000000010, Key: []byte("user-1"), Value: nil,
		Headers: []RecordHeader{{Key: "a", Value: nil}, {Key: "", Value: []byte{}}}},
}

// repetitiveRecords give the codecs something to compress.
var repetitiveRecords = func() []Record {
	records := make([]Record, 8)
	for i := range records {
		records[i] = Record{
			Timestamp: 1700000000000 + int64(i),
			Key:       fmt.Appendf(nil, "sensor-%d", i%2),
			Value:     []byte(strings.Repeat("temperature=21.5 humidity=40 ", 4)),
		}
	}
	return records
}()

var goldenCases = []goldenCase{
	{name: "none-basic", codec: CodecNone, records: basicRecords},
	{name: "none-idempotent-stamped", codec: CodecNone, producer: &producer{id: 42, epoch: 3, sequence: 7},
		baseOffset: 1000, leaderEpoch: 5, records: basicRecords[:2]},
	{name: "none-repetitive", codec: CodecNone, records: repetitiveRecords},
	{name: "gzip", codec: CodecGzip, records: append(basicRecords[:4:4], repetitiveRecords...)},
	{name: "snappy", codec: CodecSnappy, records: append(basicRecords[:4:4], repetitiveRecords...)},
	// The plain snappy block format, as logagent wrote snappy batches
	// before it wrote xerial streams (the vector "snappy" of that version,
	// with its magic byte, which the CRC does not cover, set to 2).
	{name: "snappy-block", codec: CodecSnappy, records: append(basicRecords[:4:4], repetitiveRecords...), frozen: true},
	{name: "lz4", codec: CodecLZ4, records: append(basicRecords[:4:4], repetitiveRecords...)},
	{name: "zstd", codec: CodecZstd, records: append(basicRecords[:4:4], repetitiveRecords...)},
}

func goldenPath(name string) string { return filepath.Join("testdata", name+".hex") }

func buildGolden(t testing.TB, gc goldenCase) []byte {
	batch := buildBatch(t, gc.codec, gc.producer, gc.records)
	SetBaseOffset(batch, gc.baseOffset)
	SetLeaderEpoch(batch, gc.leaderEpoch)
	return batch
}

func formatGolden(gc goldenCase, batch []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# record golden vector %q: codec %s, %d records, base_offset %d, leader_epoch %d.\n",
		gc.name, gc.codec, len(gc.records), gc.baseOffset, gc.leaderEpoch)
	fmt.Fprintf(&b, "# Inputs: goldenCases in golden_test.go. Regenerate: go test ./record -run Golden -update\n")
	for len(batch) > 0 {
		line := batch[:min(16, len(batch))]
		batch = batch[len(line):]
		for i, c := range line {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%02x", c)
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func parseGolden(text []byte) ([]byte, error) {
	var digits strings.Builder
	for line := range strings.SplitSeq(string(text), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		digits.WriteString(strings.Join(strings.Fields(line), ""))
	}
	return hex.DecodeString(digits.String())
}

func readGoldenFiles(t testing.TB) map[string][]byte {
	t.Helper()
	files := make(map[string][]byte)
	for _, gc := range goldenCases {
		text, err := os.ReadFile(goldenPath(gc.name))
		if err != nil {
			t.Fatalf("%v (generate with go test ./record -run Golden -update)", err)
		}
		batch, err := parseGolden(text)
		if err != nil {
			t.Fatalf("%s: %v", goldenPath(gc.name), err)
		}
		files[gc.name] = batch
	}
	return files
}

func TestGolden(t *testing.T) {
	if *update {
		for _, gc := range goldenCases {
			if gc.frozen {
				continue
			}
			if err := os.WriteFile(goldenPath(gc.name), formatGolden(gc, buildGolden(t, gc)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	files := readGoldenFiles(t)
	for _, gc := range goldenCases {
		t.Run(gc.name, func(t *testing.T) {
			golden := files[gc.name]
			built := buildGolden(t, gc)
			// Compressors may change their output between library
			// versions, so only uncompressed batches must match byte for
			// byte; every batch must decode to the documented records.
			if gc.codec == CodecNone && !bytes.Equal(built, golden) {
				t.Fatalf("encoding differs from %s:\nbuilt  % x\ngolden % x", goldenPath(gc.name), built, golden)
			}
			for _, batch := range [][]byte{golden, built} {
				h, err := Verify(batch, 0)
				if err != nil {
					t.Fatal(err)
				}
				if h.Codec() != gc.codec || h.BaseOffset() != gc.baseOffset || h.LeaderEpoch() != gc.leaderEpoch {
					t.Fatalf("header codec %v base %d epoch %d", h.Codec(), h.BaseOffset(), h.LeaderEpoch())
				}
				got, err := decodeAll(NewDecoder(Limits{}), batch)
				if err != nil {
					t.Fatal(err)
				}
				checkRecords(t, got, gc.records, gc.baseOffset)
			}
		})
	}
}
