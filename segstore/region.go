package segstore

import (
	"io"
	"os"
)

// Region is a byte range of one segment file that holds whole batches,
// returned by Read. File is a descriptor of its own, positioned at Pos, so
// the region can be sent with sendfile(2): hand the HTTP layer
// &io.LimitedReader{R: r.File, N: r.Len}, or use WriteTo, which does that
// for writers with ReadFrom (a *net.TCPConn). The region stays readable
// after its segment is deleted, until Close.
type Region struct {
	File *os.File // nil for an empty region
	Pos  int64
	Len  int64

	seg  *segment
	left int64
}

// Read reads the region's bytes, then returns io.EOF.
func (r *Region) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.File.Read(p)
	r.left -= int64(n)
	if err == io.EOF && r.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// WriteTo copies the rest of the region to w, with sendfile(2) when w's
// ReadFrom supports it.
func (r *Region) WriteTo(w io.Writer) (int64, error) {
	if r.left <= 0 {
		return 0, nil
	}
	lr := &io.LimitedReader{R: r.File, N: r.left}
	var n int64
	var err error
	if rf, ok := w.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(lr)
	} else {
		n, err = io.Copy(w, lr)
	}
	r.left -= n
	if err == nil && r.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// Close returns the descriptor to its segment's pool and releases the
// segment. It is safe to call more than once.
func (r *Region) Close() error {
	if r.seg == nil {
		return nil
	}
	r.seg.putReader(r.File)
	r.seg.release()
	r.seg, r.File, r.left = nil, nil, 0
	return nil
}
