package client

import (
	"errors"
	"io"
	"sync"
	"testing"
)

func TestBatchBodyRecycledAfterOwnerAndEveryReader(t *testing.T) {
	// Each case releases the producer's reference and closes two readers
	// (a request's body and a rewind of it) in some order; the buffer must
	// be recycled exactly once, at the last of them.
	for _, order := range [][]string{
		{"release", "r1", "r2"},
		{"r1", "release", "r2"},
		{"r1", "r2", "release"},
		{"r2", "r1", "r1", "release"}, // a second Close of r1 drops nothing more
	} {
		data := []byte("batch bytes")
		var recycled [][]byte
		body := newBatchBody(data, func(b []byte) { recycled = append(recycled, b) })
		readers := map[string]io.ReadCloser{"r1": body.reader(), "r2": body.reader()}
		for i, step := range order {
			if len(recycled) != 0 {
				t.Fatalf("%v: recycled before step %d (%s)", order, i, step)
			}
			if step == "release" {
				body.release()
			} else if err := readers[step].Close(); err != nil {
				t.Fatal(err)
			}
		}
		if len(recycled) != 1 || &recycled[0][0] != &data[0] {
			t.Errorf("%v: recycled %d buffers; want the body's, once", order, len(recycled))
		}
	}
}

func TestBatchBodyReader(t *testing.T) {
	body := newBatchBody([]byte("0123456789"), func([]byte) {})
	r := body.reader()
	buf := make([]byte, 4)
	var got []byte
	for {
		n, err := r.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if string(got) != "0123456789" {
		t.Errorf("read %q", got)
	}
	rewound, err := io.ReadAll(body.reader())
	if err != nil || string(rewound) != "0123456789" {
		t.Errorf("a second reader read %q, %v", rewound, err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Read(buf); n != 0 || !errors.Is(err, errBodyClosed) {
		t.Errorf("read after close = %d, %v; want 0, %v", n, err, errBodyClosed)
	}
}

// TestBatchBodyCloseWhileRead has one goroutine read a body while another
// closes it and the buffer, once recycled, is overwritten: under -race a
// read of the recycled buffer is reported, and no read may return bytes
// other than the body's.
func TestBatchBodyCloseWhileRead(t *testing.T) {
	for range 200 {
		data := []byte("abcdefghijklmnopqrstuvwxyz")
		body := newBatchBody(data, func(b []byte) {
			for i := range b {
				b[i] = '!'
			}
		})
		r := body.reader()
		body.release()
		var wg sync.WaitGroup
		wg.Go(func() {
			buf := make([]byte, 3)
			for {
				n, err := r.Read(buf)
				for _, c := range buf[:n] {
					if c == '!' {
						t.Errorf("read %q from a recycled buffer", buf[:n])
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
		wg.Go(func() { _ = r.Close() })
		wg.Wait()
	}
}
