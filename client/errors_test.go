package client

import (
	"context"
	"errors"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/logagent/logagent/record"
)

// wireCodes reads every error code that package wire defines, from its
// source, so that a code added there without a sentinel here fails
// TestEveryWireCodeHasASentinel.
func wireCodes(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../wire/wire.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			v := spec.(*ast.ValueSpec)
			for i, name := range v.Names {
				if len(name.Name) > 4 && name.Name[:4] == "Code" && i < len(v.Values) {
					lit, ok := v.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("wire.%s is not a string literal", name.Name)
					}
					codes[name.Name] = constant.StringVal(constant.MakeFromLiteral(lit.Value, lit.Kind, 0))
				}
			}
		}
	}
	if len(codes) < 30 {
		t.Fatalf("found %d codes in wire/wire.go: the parse is wrong", len(codes))
	}
	return codes
}

// TestEveryWireCodeHasASentinel: every code of package wire has a
// sentinel, distinct from the others, that an answer with that code
// matches with errors.Is, through a call's context and, for writes, an
// unknown outcome's wrapping.
func TestEveryWireCodeHasASentinel(t *testing.T) {
	seen := map[error]string{}
	for name, code := range wireCodes(t) {
		s := codeSentinels[code]
		if s == nil {
			t.Errorf("wire.%s (%q) has no sentinel", name, code)
			continue
		}
		if other, dup := seen[s]; dup {
			t.Errorf("%q and %q share the sentinel %v", code, other, s)
		}
		seen[s] = code
	}
	if len(seen) != len(codeSentinels) {
		t.Errorf("%d sentinels for %d wire codes: one names a code wire does not have", len(codeSentinels), len(seen))
	}
	for code, sentinel := range codeSentinels {
		t.Run(code, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				writeFakeError(w, http.StatusServiceUnavailable, code, "m", false, nil)
			}))
			defer srv.Close()
			c, err := New(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.DescribeTopic(context.Background(), "t")
			if !errors.Is(err, sentinel) {
				t.Errorf("describe answered %q: %v does not match %v", code, err, sentinel)
			}
			for other, s := range codeSentinels {
				if other != code && errors.Is(err, s) {
					t.Errorf("%q also matches %v", code, s)
				}
			}
		})
	}
}

// TestWriteErrorsMatchTheirSentinels: the errors a Send returns match the
// code's sentinel, also when the outcome is unknown (ack_timeout) or the
// retries ran out (not_leader).
func TestWriteErrorsMatchTheirSentinels(t *testing.T) {
	cases := []struct {
		code     string
		status   int
		sentinel error
		unknown  bool
	}{
		{CodeAckTimeout, http.StatusGatewayTimeout, ErrAckTimeout, true},
		{CodeNotLeader, http.StatusConflict, ErrNotLeader, false},
		{CodeRequestTooLarge, http.StatusRequestEntityTooLarge, ErrRequestTooLarge, false},
	}
	for _, c := range cases {
		t.Run(c.code, func(t *testing.T) {
			f := newFakeAgent(t)
			f.addTopic("t", 1)
			f.onProduce = func(int, produceCall) *fakeAnswer {
				return &fakeAnswer{status: c.status, code: c.code, retriable: c.code == CodeNotLeader}
			}
			p := mustProducer(t, f.newClient(), "t", WithIdempotence(false), WithLinger(0),
				WithRetryBackoff(time.Millisecond, time.Millisecond), WithDeliveryTimeout(50*time.Millisecond))
			_, err := p.Send(testContext(t), Message{Value: []byte("v"), Partition: ToPartition(0)})
			if !errors.Is(err, c.sentinel) || errors.Is(err, ErrOutcomeUnknown) != c.unknown {
				t.Fatalf("Send answered %s: %v; want %v, outcome unknown %v", c.code, err, c.sentinel, c.unknown)
			}
		})
	}
}

// TestCompressionAndLimitsMatchRecord: the client's own names for
// package record's codecs and default limit hold record's values, and
// ParseCompression takes record's names.
func TestCompressionAndLimitsMatchRecord(t *testing.T) {
	for c, codec := range map[Compression]record.Codec{
		CompressionNone: record.CodecNone, CompressionGzip: record.CodecGzip, CompressionSnappy: record.CodecSnappy,
		CompressionLZ4: record.CodecLZ4, CompressionZstd: record.CodecZstd,
	} {
		if int8(c) != int8(codec) || c.String() != codec.String() {
			t.Errorf("Compression %d (%s) is record's %d (%s)", c, c, codec, codec)
		}
		if got, err := ParseCompression(codec.String()); err != nil || got != c {
			t.Errorf("ParseCompression(%q) = %v, %v", codec.String(), got, err)
		}
	}
	if _, err := ParseCompression("brotli"); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("ParseCompression(brotli): %v", err)
	}
	if DefaultMaxDecompressedBytes != record.DefaultMaxDecompressedBytes {
		t.Errorf("DefaultMaxDecompressedBytes %d, record's %d", DefaultMaxDecompressedBytes, record.DefaultMaxDecompressedBytes)
	}
}
