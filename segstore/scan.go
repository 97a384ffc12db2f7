package segstore

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/logagent/logagent/record"
)

// batchInfo is what the log keeps from one batch header.
type batchInfo struct {
	pos          int64
	size         int64
	base         int64
	next         int64
	epoch        int32
	maxTimestamp int64
}

func infoOf(h record.Header, pos int64) batchInfo {
	return batchInfo{
		pos:          pos,
		size:         int64(h.Size()),
		base:         h.BaseOffset(),
		next:         h.NextOffset(),
		epoch:        h.LeaderEpoch(),
		maxTimestamp: h.MaxTimestamp(),
	}
}

// errTorn reports a batch that the bytes up to the end of the scanned range
// cannot hold: at the tail of a log, an interrupted write.
var errTorn = fmt.Errorf("segstore: batch cut short: %w", record.ErrShort)

// walker reads the batches stored in [pos, end) of a segment file in order,
// reading a buffer at a time rather than one pread per header.
type walker struct {
	f        io.ReaderAt
	pos      int64
	end      int64
	maxBatch int
	// verify checks every batch's CRC, which needs the whole batch in the
	// buffer; without it only headers are read.
	verify bool
	buf    []byte
	bufPos int64
	bufLen int
}

// next returns the batch at w.pos and moves past it. It returns io.EOF at
// end, errTorn for a batch that does not fit before end, and an error
// matching record.ErrCorrupt for bytes that are not a batch.
func (w *walker) next() (batchInfo, error) {
	if w.pos >= w.end {
		return batchInfo{}, io.EOF
	}
	if w.end-w.pos < record.HeaderSize {
		return batchInfo{}, errTorn
	}
	hb, err := w.bytes(w.pos, record.HeaderSize)
	if err != nil {
		return batchInfo{}, err
	}
	h, size, err := record.ParseHeader(hb, w.maxBatch)
	if err != nil {
		return batchInfo{}, err
	}
	if w.pos+int64(size) > w.end {
		return batchInfo{}, errTorn
	}
	info := infoOf(h, w.pos)
	if w.verify {
		b, err := w.bytes(w.pos, size)
		if err != nil {
			return batchInfo{}, err
		}
		if _, err := record.Verify(b, w.maxBatch); err != nil {
			return batchInfo{}, err
		}
	}
	w.pos += int64(size)
	return info, nil
}

// bytes returns file bytes [pos, pos+n), which the caller knows lie before
// w.end, refilling the buffer with one read when they are not in it.
func (w *walker) bytes(pos int64, n int) ([]byte, error) {
	if pos >= w.bufPos && pos+int64(n) <= w.bufPos+int64(w.bufLen) {
		off := pos - w.bufPos
		return w.buf[off : off+int64(n)], nil
	}
	if n > len(w.buf) {
		w.buf = make([]byte, n)
	}
	want := int(min(int64(len(w.buf)), w.end-pos))
	got, err := w.f.ReadAt(w.buf[:want], pos)
	if got < n {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		w.bufLen = 0
		return nil, fmt.Errorf("segstore: read at %d: %w", pos, err)
	}
	w.bufPos, w.bufLen = pos, got
	return w.buf[:n], nil
}

// lookupBufSize covers an index interval of headers in one read.
const lookupBufSize = 8192

var lookupBufs = sync.Pool{New: func() any {
	b := make([]byte, lookupBufSize)
	return &b
}}
