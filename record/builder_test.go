package record

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/logagent/logagent/internal/testseed"
)

func TestBuilderErrors(t *testing.T) {
	t.Run("empty batch", func(t *testing.T) {
		var b Builder
		dst := []byte("prefix")
		out, err := b.AppendTo(dst)
		if !errors.Is(err, ErrEmptyBatch) || string(out) != "prefix" {
			t.Fatalf("got %q, %v; want the prefix and ErrEmptyBatch", out, err)
		}
	})
	t.Run("unknown codec", func(t *testing.T) {
		var b Builder
		if err := b.SetCodec(5); !errors.Is(err, ErrUnknownCodec) {
			t.Fatalf("got %v, want ErrUnknownCodec", err)
		}
	})
	t.Run("timestamp range", func(t *testing.T) {
		var b Builder
		if err := b.Add(math.MinInt64, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
		if err := b.Add(math.MaxInt64, nil, nil, nil); !errors.Is(err, ErrTimestampRange) {
			t.Fatalf("got %v, want ErrTimestampRange", err)
		}
		if b.Len() != 1 {
			t.Fatalf("a refused record was added: Len %d", b.Len())
		}
		if err := b.Add(0, nil, nil, nil); !errors.Is(err, ErrTimestampRange) {
			t.Fatalf("got %v, want ErrTimestampRange", err)
		}
	})
}

func TestBuilderResetDropsProducerKeepsCodec(t *testing.T) {
	var b Builder
	if err := b.SetCodec(CodecSnappy); err != nil {
		t.Fatal(err)
	}
	b.SetProducer(5, 6, 7)
	if err := b.Add(1, nil, []byte("first"), nil); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if b.Len() != 0 || b.Size() != HeaderSize {
		t.Fatalf("after Reset: Len %d Size %d", b.Len(), b.Size())
	}
	if err := b.Add(2, nil, []byte("second"), nil); err != nil {
		t.Fatal(err)
	}
	batch, err := b.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := Verify(batch, 0)
	if err != nil {
		t.Fatal(err)
	}
	if h.Codec() != CodecSnappy || h.ProducerID() != -1 || h.ProducerEpoch() != -1 || h.BaseSequence() != -1 ||
		h.RecordCount() != 1 || h.FirstTimestamp() != 2 {
		t.Fatalf("codec %v producer %d/%d/%d count %d first timestamp %d", h.Codec(),
			h.ProducerID(), h.ProducerEpoch(), h.BaseSequence(), h.RecordCount(), h.FirstTimestamp())
	}
}

func TestCodecNames(t *testing.T) {
	for _, c := range allCodecs {
		got, err := ParseCodec(c.String())
		if err != nil || got != c {
			t.Fatalf("ParseCodec(%q) = %v, %v", c.String(), got, err)
		}
	}
	if _, err := ParseCodec("brotli"); !errors.Is(err, ErrUnknownCodec) {
		t.Fatalf("ParseCodec(brotli): got %v, want ErrUnknownCodec", err)
	}
	if s := Codec(6).String(); s != "codec(6)" {
		t.Fatalf("Codec(6).String() = %q", s)
	}
}

// TestHotPathsDoNotAllocatePerRecord builds and decodes 100-record batches
// with reused buffers and counts allocations per batch.
func TestHotPathsDoNotAllocatePerRecord(t *testing.T) {
	rng := testseed.Rand(t)
	records := randomRecords(rng, 100)
	for i := range records {
		records[i].Headers = nil
	}
	for _, codec := range allCodecs {
		t.Run(codec.String(), func(t *testing.T) {
			var b Builder
			if err := b.SetCodec(codec); err != nil {
				t.Fatal(err)
			}
			var dst []byte
			build := func() {
				b.Reset()
				for _, r := range records {
					if err := b.Add(r.Timestamp, r.Key, r.Value, nil); err != nil {
						t.Fatal(err)
					}
				}
				var err error
				if dst, err = b.AppendTo(dst[:0]); err != nil {
					t.Fatal(err)
				}
			}
			d := NewDecoder(Limits{})
			decode := func() {
				it, err := d.Records(dst)
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for it.Next() {
					n++
				}
				if it.Err() != nil || n != len(records) {
					t.Fatalf("decoded %d records: %v", n, it.Err())
				}
			}
			build()
			decode()
			buildAllocs := testing.AllocsPerRun(20, build)
			decodeAllocs := testing.AllocsPerRun(20, decode)
			t.Logf("per 100-record batch: build %.1f allocs, decode %.1f allocs", buildAllocs, decodeAllocs)
			// A pooled compressor may be dropped by a GC (or, under the
			// race detector, at random) and made again, so compressed paths
			// get some slack; none may grow with the number of records.
			limit := 0.0
			if codec != CodecNone {
				if raceEnabled {
					return
				}
				limit = 2
			}
			if buildAllocs > limit || decodeAllocs > limit {
				t.Fatalf("build %.1f allocs, decode %.1f allocs per batch; want at most %.0f", buildAllocs, decodeAllocs, limit)
			}
		})
	}
}

// TestConcurrentBuilders shares the pooled compressors and the zstd encoder
// between goroutines, for the race detector to check.
func TestConcurrentBuilders(t *testing.T) {
	rng := testseed.Rand(t)
	records := randomRecords(rng, 20)
	var wg sync.WaitGroup
	errs := make(chan error, 4*len(allCodecs))
	for g := range 4 {
		wg.Go(func() {
			d := NewDecoder(Limits{})
			for i := range 10 {
				for _, codec := range allCodecs {
					var b Builder
					if err := b.SetCodec(codec); err != nil {
						errs <- err
						return
					}
					for _, r := range records {
						if err := b.Add(r.Timestamp, r.Key, r.Value, r.Headers); err != nil {
							errs <- err
							return
						}
					}
					batch, err := b.AppendTo(nil)
					if err != nil {
						errs <- err
						return
					}
					got, err := decodeAll(d, batch)
					if err != nil {
						errs <- fmt.Errorf("goroutine %d batch %d %v: %w", g, i, codec, err)
						return
					}
					for j := range got {
						if diff := diffRecord(got[j], records[j]); diff != "" {
							errs <- fmt.Errorf("goroutine %d batch %d %v record %d: %s", g, i, codec, j, diff)
							return
						}
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
