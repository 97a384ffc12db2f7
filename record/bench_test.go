package record

import (
	"math/rand/v2"
	"testing"
)

const (
	benchRecords     = 100
	benchRecordBytes = 1 << 10
)

// benchValues are 1 KiB log-like lines: words from a small vocabulary, so the
// codecs see realistic redundancy rather than random or constant bytes.
func benchValues() [][]byte {
	words := []string{"GET", "POST", "/api/v1/orders", "/health", "200", "404", "user=", "id=",
		"latency_ms=", "region=eu-west-1", "ok", "retry", "timeout", "cache=hit", "cache=miss", "bytes="}
	rng := rand.New(rand.NewPCG(1, 2))
	values := make([][]byte, benchRecords)
	for i := range values {
		v := make([]byte, 0, benchRecordBytes)
		for len(v) < benchRecordBytes {
			v = append(v, words[rng.IntN(len(words))]...)
			v = append(v, ' ')
			v = append(v, byte('0'+rng.IntN(10)))
		}
		values[i] = v[:benchRecordBytes]
	}
	return values
}

func BenchmarkEncode(b *testing.B) {
	values := benchValues()
	for _, codec := range allCodecs {
		b.Run(codec.String(), func(b *testing.B) {
			var builder Builder
			if err := builder.SetCodec(codec); err != nil {
				b.Fatal(err)
			}
			var dst []byte
			b.SetBytes(benchRecords * benchRecordBytes)
			b.ReportAllocs()
			for b.Loop() {
				builder.Reset()
				for i, v := range values {
					if err := builder.Add(1700000000000+int64(i), nil, v, nil); err != nil {
						b.Fatal(err)
					}
				}
				var err error
				if dst, err = builder.AppendTo(dst[:0]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(dst)), "batch-bytes")
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	values := benchValues()
	for _, codec := range allCodecs {
		b.Run(codec.String(), func(b *testing.B) {
			records := make([]Record, len(values))
			for i, v := range values {
				records[i] = Record{Timestamp: 1700000000000 + int64(i), Value: v}
			}
			batch := buildBatch(b, codec, nil, records)
			d := NewDecoder(Limits{})
			b.SetBytes(benchRecords * benchRecordBytes)
			b.ReportAllocs()
			for b.Loop() {
				it, err := d.Records(batch)
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for it.Next() {
					n += len(it.Record().Value)
				}
				if it.Err() != nil || n != benchRecords*benchRecordBytes {
					b.Fatalf("decoded %d value bytes: %v", n, it.Err())
				}
			}
		})
	}
}
