package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Codec is the compression applied to a batch's records section as a whole,
// stored in attributes bits 0-2. The header stays uncompressed.
//
// The compressed formats, as they appear after the batch header:
//
//	codec   id  format
//	none    0   the records as they are
//	gzip    1   RFC 1952 gzip member(s)
//	snappy  2   written: a xerial stream (snappy-java's SnappyOutputStream,
//	            what Kafka's Java clients write), read: that or one plain
//	            snappy block (see below)
//	lz4     3   LZ4 frame (magic 04 22 4D 18), 64 KiB independent blocks,
//	            content checksum
//	zstd    4   zstd frame(s) (RFC 8878), no dictionary
//
// A xerial stream is a 16-byte header, then blocks until the end:
//
//	82 53 4e 41 50 50 59 00   magic: 0x82 "SNAPPY" 0x00
//	00 00 00 01               int32 version, 1
//	00 00 00 01               int32 minimum compatible version, 1
//	then repeated:
//	nn nn nn nn               int32 big-endian length of the next block
//	...                       one plain snappy block of that length
//
// The writer cuts the input into blocks of 32 KiB (snappy-java's default
// block size, which Kafka's producer uses unless configured otherwise). A
// plain snappy block is a uvarint decoded length and then elements; it is
// what earlier logagent versions wrote and what some clients (franz-go,
// for one) send. The two cannot be confused: the first element of a plain
// block must be a literal, while the byte after a 2-byte length that starts
// with 0x82 would be 'N' (0x4e), a copy. The reader accepts a xerial stream
// of minimum compatible version 1 (any version from 1), with at least the
// header, whose every block length fits what is left; it does not read
// several streams concatenated, which no Kafka producer writes.
type Codec int8

// The codecs; ids 5-7 are unknown and make a batch corrupt.
const (
	CodecNone   Codec = 0
	CodecGzip   Codec = 1
	CodecSnappy Codec = 2
	CodecLZ4    Codec = 3
	CodecZstd   Codec = 4
)

// ErrUnknownCodec is returned when a caller names a codec that does not exist.
// A batch that carries an unknown codec id is corrupt instead (ErrCorrupt).
var ErrUnknownCodec = errors.New("record: unknown compression codec")

var codecNames = [...]string{
	CodecNone:   "none",
	CodecGzip:   "gzip",
	CodecSnappy: "snappy",
	CodecLZ4:    "lz4",
	CodecZstd:   "zstd",
}

func (c Codec) valid() bool { return c >= 0 && int(c) < len(codecNames) }

// String returns the codec's name as ParseCodec accepts it.
func (c Codec) String() string {
	if !c.valid() {
		return fmt.Sprintf("codec(%d)", int8(c))
	}
	return codecNames[c]
}

// ParseCodec returns the codec with the given name: none, gzip, snappy, lz4
// or zstd.
func ParseCodec(name string) (Codec, error) {
	for c, n := range codecNames {
		if n == name {
			return Codec(c), nil
		}
	}
	return 0, fmt.Errorf("%w %q", ErrUnknownCodec, name)
}

// xerialHeader starts every xerial stream: the magic, then version 1 and
// minimum compatible version 1.
var xerialHeader = [...]byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1}

const (
	// xerialMagicLen is the part of xerialHeader that tells a xerial stream
	// from a plain snappy block.
	xerialMagicLen = 8
	// xerialBlockSize is the input each block of a written xerial stream
	// holds (see Codec).
	xerialBlockSize = 32 << 10
)

// appendXerial appends src as a xerial stream to dst.
func appendXerial(dst, src []byte) []byte {
	dst = append(dst, xerialHeader[:]...)
	for len(src) > 0 {
		n := min(len(src), xerialBlockSize)
		start := len(dst)
		dst = slices.Grow(dst, 4+snappy.MaxEncodedLen(n))[:start+4]
		// Encode writes into the capacity it is given, so a buffer that
		// has grown once compresses without allocating.
		encoded := snappy.Encode(dst[start+4:cap(dst)], src[:n])
		binary.BigEndian.PutUint32(dst[start:], uint32(len(encoded)))
		dst = dst[:start+4+len(encoded)]
		src = src[n:]
	}
	return dst
}

// appendWriter is an io.Writer that appends to a slice, so that streaming
// compressors can write straight after the batch header.
type appendWriter struct{ buf []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	return len(p), nil
}

// gzipCompressor and lz4Compressor keep a writer together with the
// appendWriter it writes to, so that pooling one reuses both without an
// allocation per batch.
type gzipCompressor struct {
	out appendWriter
	w   *gzip.Writer
}

type lz4Compressor struct {
	out appendWriter
	w   *lz4.Writer
}

var gzipCompressors = sync.Pool{New: func() any {
	c := new(gzipCompressor)
	c.w = gzip.NewWriter(&c.out)
	return c
}}

var lz4Compressors = sync.Pool{New: func() any {
	c := new(lz4Compressor)
	c.w = lz4.NewWriter(&c.out)
	// Options on a fresh writer cannot fail. 64 KiB blocks keep the buffers
	// small (the default is 4 MiB) and match what Kafka producers write.
	_ = c.w.Apply(lz4.BlockSizeOption(lz4.Block64Kb), lz4.ConcurrencyOption(1))
	return c
}}

// zstdEncoder is shared: zstd encoders are expensive to create, and EncodeAll
// is safe for concurrent use.
var zstdEncoder = sync.OnceValues(func() (*zstd.Encoder, error) {
	return zstd.NewWriter(nil)
})

// streamCompressor is a pooled stream writer (gzip, lz4) that can be pointed
// at a new destination.
type streamCompressor interface {
	io.WriteCloser
	Reset(io.Writer)
}

// compressStream appends src compressed by w to dst, through out.
func compressStream(dst, src []byte, w streamCompressor, out *appendWriter, name string) ([]byte, error) {
	out.buf = dst
	w.Reset(out)
	_, err := w.Write(src)
	if err == nil {
		err = w.Close()
	}
	dst, out.buf = out.buf, nil
	if err != nil {
		return nil, fmt.Errorf("record: %s: %w", name, err)
	}
	return dst, nil
}

// appendCompressed appends src compressed with codec to dst.
func appendCompressed(dst []byte, codec Codec, src []byte) ([]byte, error) {
	switch codec {
	case CodecNone:
		return append(dst, src...), nil
	case CodecGzip:
		c := gzipCompressors.Get().(*gzipCompressor)
		defer gzipCompressors.Put(c)
		return compressStream(dst, src, c.w, &c.out, "gzip")
	case CodecSnappy:
		return appendXerial(dst, src), nil
	case CodecLZ4:
		c := lz4Compressors.Get().(*lz4Compressor)
		defer lz4Compressors.Put(c)
		return compressStream(dst, src, c.w, &c.out, "lz4")
	case CodecZstd:
		enc, err := zstdEncoder()
		if err != nil {
			return nil, fmt.Errorf("record: zstd: %w", err)
		}
		return enc.EncodeAll(src, dst), nil
	}
	return nil, fmt.Errorf("%w %d", ErrUnknownCodec, codec)
}

// decompressor turns a compressed records section back into records,
// reusing its readers and output buffer from one batch to the next. Its
// output is bounded by limit: a batch that would expand beyond it is an
// ErrTooLarge, found after at most limit (plus one codec block) bytes.
type decompressor struct {
	limit int
	buf   []byte
	src   bytes.Reader
	gzip  *gzip.Reader
	lz4   *lz4.Reader
	zstd  *zstd.Decoder
}

// decompress returns the decompressed records. The result aliases the
// decompressor's buffer and stays valid until the next call.
func (d *decompressor) decompress(codec Codec, src []byte) ([]byte, error) {
	switch codec {
	case CodecGzip:
		if d.gzip == nil {
			d.gzip = new(gzip.Reader)
		}
		d.src.Reset(src)
		if err := d.gzip.Reset(&d.src); err != nil {
			return nil, corruptf("gzip: %v", err)
		}
		return d.readAll(codec, d.gzip)
	case CodecSnappy:
		if bytes.HasPrefix(src, xerialHeader[:xerialMagicLen]) {
			return d.decodeXerial(src)
		}
		n, err := snappy.DecodedLen(src)
		if err != nil {
			return nil, corruptf("snappy: %v", err)
		}
		if n > d.limit {
			return nil, &TooLargeError{What: fmt.Sprintf("snappy records of %d bytes", n), Limit: d.limit}
		}
		d.buf = slices.Grow(d.buf[:0], n)
		out, err := snappy.Decode(d.buf[:n], src)
		if err != nil {
			return nil, corruptf("snappy: %v", err)
		}
		return out, nil
	case CodecLZ4:
		if d.lz4 == nil {
			d.lz4 = lz4.NewReader(nil)
		}
		d.src.Reset(src)
		d.lz4.Reset(&d.src)
		return d.readAll(codec, d.lz4)
	case CodecZstd:
		if d.zstd == nil {
			// Concurrency 1: the stream is decoded on the caller's
			// goroutine and the decoder starts none of its own, so it needs
			// no Close.
			dec, err := zstd.NewReader(nil,
				zstd.WithDecoderConcurrency(1),
				zstd.WithDecoderMaxMemory(uint64(d.limit)))
			if err != nil {
				return nil, fmt.Errorf("record: zstd: %w", err)
			}
			d.zstd = dec
		}
		// The decoder reports a frame that needs more than the limit as a
		// window error, which it also uses for damaged blocks; a look at the
		// first frame's header tells the two apart.
		var frame zstd.Header
		if frame.Decode(src) == nil && !frame.Skippable &&
			((frame.HasFCS && frame.FrameContentSize > uint64(d.limit)) || frame.WindowSize > uint64(d.limit)) {
			return nil, &TooLargeError{What: "zstd frame", Limit: d.limit}
		}
		// Not DecodeAll: it checks WithDecoderMaxMemory per frame and the
		// total only after each frame, so two frames without a content
		// size decode to twice the limit before it fails. As a stream
		// (concurrency 1: no goroutines), readAll bounds it as it does
		// gzip and lz4.
		d.src.Reset(src)
		if err := d.zstd.Reset(&d.src); err != nil {
			return nil, corruptf("zstd: %v", err)
		}
		return d.readAll(codec, d.zstd)
	}
	return nil, corruptf("unknown compression codec %d", codec)
}

// decodeXerial decodes a xerial stream (see Codec). A first pass checks the
// framing and adds up the decoded lengths the blocks claim, so that nothing
// is decoded or allocated for a stream that is malformed or would expand
// beyond the limit; the second decodes the blocks into one buffer.
func (d *decompressor) decodeXerial(src []byte) ([]byte, error) {
	if len(src) < len(xerialHeader) {
		return nil, corruptf("snappy: xerial header cut short at %d bytes", len(src))
	}
	version := int32(binary.BigEndian.Uint32(src[xerialMagicLen:]))
	compatible := int32(binary.BigEndian.Uint32(src[xerialMagicLen+4:]))
	if compatible != 1 || version < compatible {
		return nil, corruptf("snappy: xerial version %d, minimum compatible version %d; only 1 is known", version, compatible)
	}
	blocks := src[len(xerialHeader):]
	total := 0
	for rest := blocks; len(rest) > 0; {
		block, next, err := nextXerialBlock(rest)
		if err != nil {
			return nil, err
		}
		n, err := snappy.DecodedLen(block)
		if err != nil {
			return nil, corruptf("snappy: xerial block at byte %d: %v", len(src)-len(rest), err)
		}
		if n > d.limit-total {
			return nil, &TooLargeError{What: fmt.Sprintf("snappy records of at least %d bytes", total+n), Limit: d.limit}
		}
		total += n
		rest = next
	}
	d.buf = slices.Grow(d.buf[:0], total)
	out := d.buf[:total]
	pos := 0
	for rest := blocks; len(rest) > 0; {
		// The first pass checked every length.
		block, next, _ := nextXerialBlock(rest)
		decoded, err := snappy.Decode(out[pos:], block)
		if err != nil {
			return nil, corruptf("snappy: xerial block at byte %d: %v", len(src)-len(rest), err)
		}
		pos += len(decoded)
		rest = next
	}
	return out, nil
}

// nextXerialBlock splits the block at the start of a xerial stream's blocks
// from the ones after it, checking its length against what is left.
func nextXerialBlock(blocks []byte) (block, rest []byte, err error) {
	if len(blocks) < 4 {
		return nil, nil, corruptf("snappy: xerial block length cut short at %d bytes", len(blocks))
	}
	n := binary.BigEndian.Uint32(blocks)
	blocks = blocks[4:]
	if n == 0 || uint64(n) > uint64(len(blocks)) {
		return nil, nil, corruptf("snappy: xerial block of %d bytes, %d left", n, len(blocks))
	}
	return blocks[:n], blocks[n:], nil
}

// readAll reads a stream decompressor to its end without ever holding more
// than limit+1 bytes. Bytes after the compressed stream need no check here:
// both gzip (multistream) and lz4 try to read them as a next stream and fail
// (TestCorruptCompressedData).
func (d *decompressor) readAll(codec Codec, r io.Reader) ([]byte, error) {
	const firstRead = 4 << 10
	buf := d.buf[:0]
	for {
		if len(buf) == cap(buf) {
			if len(buf) > d.limit {
				d.buf = buf[:0]
				return nil, &TooLargeError{What: codec.String() + " records", Limit: d.limit}
			}
			want := min(max(2*cap(buf), firstRead), d.limit+1)
			buf = slices.Grow(buf, want-len(buf))
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			d.buf = buf[:0]
			return nil, corruptf("%s: %v", codec, err)
		}
	}
	d.buf = buf[:0]
	if len(buf) > d.limit {
		return nil, &TooLargeError{What: codec.String() + " records", Limit: d.limit}
	}
	return buf, nil
}
