package client

import (
	"errors"
	"io"
	"sync"
)

// errBodyClosed is what a batch body's reader answers once closed; net/http
// does not read a body it has closed, so it is never expected.
var errBodyClosed = errors.New("client: read of a closed request body")

// batchBody is one encoded batch, the body of one or more produce requests
// (an idempotent producer resends a batch unchanged). Its buffer is handed
// to recycle, for the next batch, once the producer is done with the batch
// and every reader of it given to net/http is closed: the transport may
// still read a request's body after the request has returned, and closes
// it once it no longer will. A reader the transport never closes keeps the
// buffer from being recycled; the garbage collector takes it then.
type batchBody struct {
	data    []byte
	recycle func([]byte)

	mu sync.Mutex
	// refs counts the producer's reference (until release) and one per
	// reader not yet closed.
	refs int
}

func newBatchBody(data []byte, recycle func([]byte)) *batchBody {
	return &batchBody{data: data, recycle: recycle, refs: 1}
}

// reader returns a reader of the whole body, for one request or one
// rewind of it (http.Request.GetBody); closing it drops its reference.
func (b *batchBody) reader() io.ReadCloser {
	b.mu.Lock()
	b.refs++
	data := b.data
	b.mu.Unlock()
	return &batchBodyReader{body: b, rest: data}
}

// release drops one reference: the producer's once no request of the batch
// will be made after it, or a reader's when it is closed.
func (b *batchBody) release() {
	b.mu.Lock()
	b.refs--
	var data []byte
	if b.refs == 0 {
		data, b.data = b.data, nil
	}
	b.mu.Unlock()
	if data != nil {
		b.recycle(data)
	}
}

// batchBodyReader reads a batchBody. Read and Close exclude each other, so
// that a transport closing a body from another goroutine while it is still
// being read cannot have the buffer recycled under the read.
type batchBodyReader struct {
	body   *batchBody
	mu     sync.Mutex
	rest   []byte
	closed bool
}

func (r *batchBodyReader) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, errBodyClosed
	}
	if len(r.rest) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.rest)
	r.rest = r.rest[n:]
	return n, nil
}

func (r *batchBodyReader) Close() error {
	r.mu.Lock()
	wasClosed := r.closed
	r.closed, r.rest = true, nil
	r.mu.Unlock()
	if !wasClosed {
		r.body.release()
	}
	return nil
}
