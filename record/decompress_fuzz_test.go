package record

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/klauspost/compress/gzip"
)

// fuzzDecompressLimit is small, so that a bomb is anything that expands
// past it.
const fuzzDecompressLimit = 64 << 10

// fuzzDecompressAlloc bounds what one compressed batch may cost a warm
// Decoder: buffers of the limit, a zstd window (checked against the limit),
// and an lz4 block buffer (4 MiB at most, by the frame format) when the
// codec's pool has none.
const fuzzDecompressAlloc = 8 << 20

// FuzzDecompress puts arbitrary bytes in a batch as the records section of
// each codec, with a correct CRC, so that every input reaches the
// decompressor. However much the section claims or expands to, decoding
// ends with records or an error of the package's, and allocates no more
// than the limit allows.
func FuzzDecompress(f *testing.F) {
	records := bytes.Repeat([]byte("0123456789abcdef"), 64)
	bomb := bytes.Repeat([]byte{'x'}, 4*fuzzDecompressLimit)
	for _, codec := range []Codec{CodecGzip, CodecSnappy, CodecLZ4, CodecZstd} {
		for _, src := range [][]byte{records, bomb} {
			section, err := appendCompressed(nil, codec, src)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(uint8(codec), section)
		}
	}
	// The snappy block format, without the xerial framing.
	f.Add(uint8(CodecSnappy), []byte{0x80, 0x80, 0x04, 0x00, 'x', 0xfe, 0x01, 0x00})
	// Two gzip members and two zstd frames without content size, each
	// under the limit, together over it.
	var gz bytes.Buffer
	for range 2 {
		w := gzip.NewWriter(&gz)
		w.Write(bytes.Repeat([]byte{'x'}, fuzzDecompressLimit))
		w.Close()
	}
	f.Add(uint8(CodecGzip), gz.Bytes())
	f.Add(uint8(CodecZstd), append(zstdFrameNoFCS(1), zstdFrameNoFCS(1)...))

	d := NewDecoder(Limits{MaxDecompressedBytes: fuzzDecompressLimit})
	f.Fuzz(func(t *testing.T, codec uint8, section []byte) {
		batch := craftBatch(t, batchSpec{count: 1, maxTimestamp: 1 << 62}, section)
		binary.BigEndian.PutUint16(batch[offAttributes:], uint16(1+codec%4))
		resum(batch)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, errValidate := d.Validate(batch)
		runtime.ReadMemStats(&after)
		if errValidate != nil {
			requireKnownError(t, errValidate)
		}
		if allocated := after.TotalAlloc - before.TotalAlloc; allocated > fuzzDecompressAlloc {
			t.Fatalf("codec %v: a section of %d bytes allocated %d bytes (limit %d): %v",
				Codec(1+codec%4), len(section), allocated, fuzzDecompressLimit, errValidate)
		}
		records, errRecords := decodeAll(d, batch)
		if (errValidate == nil) != (errRecords == nil) {
			t.Fatalf("Validate says %v but Records says %v", errValidate, errRecords)
		}
		if errRecords == nil && len(records) != 1 {
			t.Fatalf("decoded %d records, record_count 1", len(records))
		}
	})
}
