package record

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/klauspost/compress/gzip"
)

// zstdFrameNoFCS is a zstd frame that declares no content size, a window of
// 1 MiB, and holds n RLE blocks of 128 KiB each (4 bytes apiece).
func zstdFrameNoFCS(n int) []byte {
	f := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x50} // magic, FHD (no FCS), window 2^20
	for i := range n {
		last := uint32(0)
		if i == n-1 {
			last = 1
		}
		h := uint32(128<<10)<<3 | 1<<1 | last // RLE block of 128 KiB
		f = append(f, byte(h), byte(h>>8), byte(h>>16), 'x')
	}
	return f
}

// TestDecompressedLimitIsTheMostAllocated: Limits.MaxDecompressedBytes
// "is also the most a Decoder allocates" for the records of a compressed
// batch, found "after at most limit (plus one codec block) bytes". A decoder
// whose buffer already holds limit bytes (it decoded a legitimate batch of
// that size) must reject a bomb without allocating more. A zstd section of
// two frames that each declare no content size and decode to exactly the
// limit passes klauspost's per-frame check, so DecodeAll decodes both (2x
// the limit, plus one block) before the total is checked.
func TestDecompressedLimitIsTheMostAllocated(t *testing.T) {
	const limit = 1 << 20
	// A legitimate batch whose records are just under the limit.
	full := []Record{{Value: bytes.Repeat([]byte{'v'}, limit-64)}}

	var gz bytes.Buffer
	for range 2 { // two members of limit bytes each
		w := gzip.NewWriter(&gz)
		w.Write(bytes.Repeat([]byte{'x'}, limit))
		w.Close()
	}
	mk := func(codec Codec, section []byte) []byte {
		b := craftBatch(t, batchSpec{count: 1}, section)
		binary.BigEndian.PutUint16(b[offAttributes:], uint16(codec))
		resum(b)
		return b
	}
	frame := zstdFrameNoFCS(8) // 8 x 128 KiB = exactly the limit
	tests := []struct {
		name  string
		codec Codec
		bomb  []byte
	}{
		{"gzip two members", CodecGzip, mk(CodecGzip, gz.Bytes())},
		{"zstd two frames without content size", CodecZstd, mk(CodecZstd, append(append([]byte{}, frame...), frame...))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder(Limits{MaxDecompressedBytes: limit})
			if _, err := d.Validate(buildBatch(t, tc.codec, nil, full)); err != nil {
				t.Fatalf("legitimate batch under the limit: %v", err)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := d.Validate(tc.bomb)
			runtime.ReadMemStats(&after)
			requireError(t, err, ErrTooLarge)
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("%v; allocated %d bytes (limit %d)", err, allocated, limit)
			// Beyond a buffer of the limit, the one allocation allowed is a
			// zstd window, which is checked against the limit first.
			if allocated > limit+limit/2 {
				t.Fatalf("allocated %d bytes beyond a buffer of the limit (%d) to reject the batch", allocated, limit)
			}
		})
	}
}

// TestZstdStreamStartsNoGoroutines: zstd is decoded as a stream on the
// caller's goroutine (concurrency 1), so a Decoder, which has no Close,
// leaves nothing running after many batches.
func TestZstdStreamStartsNoGoroutines(t *testing.T) {
	d := NewDecoder(Limits{MaxDecompressedBytes: 1 << 20})
	batch := buildBatch(t, CodecZstd, nil, []Record{{Value: bytes.Repeat([]byte{'v'}, 1000)}})
	if _, err := d.Validate(batch); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	for range 100 {
		if _, err := d.Validate(batch); err != nil {
			t.Fatal(err)
		}
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Fatalf("goroutines %d after 100 zstd batches, %d before", after, before)
	}
}
