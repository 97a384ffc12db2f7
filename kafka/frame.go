package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrFrameSize is a request frame whose size is not in (0, MaxRequestBytes],
// or above its API key's limit: the connection is closed without reading
// the frame (past its key).
var ErrFrameSize = errors.New("kafka: request frame size out of range")

// ErrHeader is a request header that does not decode.
var ErrHeader = errors.New("kafka: malformed request header")

// readChunk is how much of a frame is read before the buffer grows: a size
// a client announces allocates only as its bytes arrive.
const readChunk = 64 << 10

// readFrame reads one request frame (a 4-byte big-endian size, then that
// many bytes) into buf, grown as needed, and returns it. A size <= 0 or
// above limit is refused before anything of the frame is read, one above
// keyLimit of the frame's API key (its first two bytes) before more is.
func readFrame(r io.Reader, limit int32, keyLimit func(key int16) int32, buf []byte) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n <= 0 || n > limit {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameSize, n, limit)
	}
	buf = buf[:0]
	if n >= 2 {
		var key [2]byte
		if _, err := io.ReadFull(r, key[:]); err != nil {
			return nil, err
		}
		k := int16(binary.BigEndian.Uint16(key[:]))
		if kl := keyLimit(k); n > kl {
			return nil, fmt.Errorf("%w: %d bytes, limit %d for API key %d", ErrFrameSize, n, kl, k)
		}
		buf = append(buf, key[:]...)
	}
	for remaining := int(n) - len(buf); remaining > 0; {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(remaining, max(len(buf), readChunk)))
		}
		chunk := min(remaining, cap(buf)-len(buf))
		m, err := io.ReadFull(r, buf[len(buf):len(buf)+chunk])
		buf = buf[:len(buf)+m]
		if err != nil {
			return nil, err
		}
		remaining -= m
	}
	return buf, nil
}

// requestHeader is a request's header (v1, or v2 for flexible versions)
// and the body after it.
type requestHeader struct {
	key, version  int16
	correlationID int32
	clientID      *string
	body          []byte
}

// apiVersionsKey is ApiVersions' key, answered even at versions the
// listener does not read.
const apiVersionsKey = 18

// parseHeader reads a frame's request header. Whether the header has a tag
// buffer depends on the request version being flexible; for a key kmsg
// does not know, or a version past kmsg's, the header is read without one
// (only the key, version and correlation id matter for such a request:
// the caller refuses it).
func parseHeader(frame []byte) (requestHeader, error) {
	r := kbin.Reader{Src: frame}
	h := requestHeader{key: r.Int16(), version: r.Int16(), correlationID: r.Int32()}
	if !r.Ok() {
		return h, fmt.Errorf("%w: %d bytes", ErrHeader, len(frame))
	}
	h.clientID = r.NullableString()
	if req := kmsg.RequestForKey(h.key); req != nil && h.version >= 0 && h.version <= req.MaxVersion() {
		req.SetVersion(h.version)
		if req.IsFlexible() {
			kmsg.SkipTags(&r)
		}
	}
	if !r.Ok() {
		return h, fmt.Errorf("%w: key %d version %d, %d bytes", ErrHeader, h.key, h.version, len(frame))
	}
	h.body = r.Src
	return h, nil
}

// reply is a handler's answer, written by the connection loop.
type reply interface {
	// writeTo writes the whole response frame with the correlation id
	// and flushes it.
	writeTo(c *conn, correlationID int32) error
}

// encoded is a response kmsg encodes whole.
type encoded struct{ kmsg.Response }

func (e encoded) writeTo(c *conn, correlationID int32) error {
	buf := append(c.out[:0], 0, 0, 0, 0)
	buf = binary.BigEndian.AppendUint32(buf, uint32(correlationID))
	// The response header is v1 (a tag buffer) for flexible versions,
	// except for ApiVersions, whose response header is always v0: a
	// client reads it before it knows what the broker speaks.
	if e.IsFlexible() && e.Key() != apiVersionsKey {
		buf = append(buf, 0)
	}
	buf = e.AppendTo(buf)
	if len(buf)-4 > math.MaxInt32 {
		return fmt.Errorf("kafka: response of %d bytes", len(buf))
	}
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	if cap(buf) <= reuseLimit {
		c.out = buf[:0]
	} else {
		c.out = nil
	}
	if _, err := c.w.Write(buf); err != nil {
		return err
	}
	return c.w.Flush()
}
