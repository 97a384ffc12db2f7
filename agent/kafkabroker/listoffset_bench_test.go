package kafkabroker

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/kafka"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/segstore"
)

// BenchmarkListOffsetScan is the cost of a ListOffsets that scans a
// partition of 1 GiB (LOGAGENT_BENCH_LOG_BYTES to change it) whose
// batches are batchBytes each, in the page cache: by max timestamp, and
// by a timestamp after every record (the longest lookup by timestamp),
// which read the same.
func BenchmarkListOffsetScan(b *testing.B) {
	logBytes := int64(1 << 30)
	if v := os.Getenv("LOGAGENT_BENCH_LOG_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		logBytes = n
	}
	decoders := &sync.Pool{New: func() any { return record.NewDecoder(record.Limits{MaxBatchBytes: 2 << 20}) }}
	for _, batchBytes := range []int{1 << 10, 16 << 10, 256 << 10} {
		b.Run(fmt.Sprintf("batch=%dKiB", batchBytes>>10), func(b *testing.B) {
			l, last := benchLog(b, logBytes, batchBytes)
			br := New(Config{Sidecar: &segstoreSidecar{log: l}, Decoders: decoders})
			for _, lookup := range []struct {
				name string
				ts   int64
				want int64
			}{
				{"max_timestamp", kafka.MaxTimestamp, last},
				{"after_every_record", 1 << 62, -1},
			} {
				b.Run(lookup.name, func(b *testing.B) {
					b.SetBytes(logBytes)
					for b.Loop() {
						at, err := br.ListOffset(context.Background(), "t", 0, -1, lookup.ts)
						if err != nil || at.Offset != lookup.want {
							b.Fatalf("ListOffset(%d) = %+v, %v; want offset %d", lookup.ts, at, err, lookup.want)
						}
					}
				})
			}
		})
	}
}

// benchLog writes a log of about logBytes of batches of batchBytes, records
// of 200 bytes whose timestamps rise by 1 ms, in segments of 256 MiB, all
// committed; last is the offset of the last record.
func benchLog(b *testing.B, logBytes int64, batchBytes int) (*segstore.Log, int64) {
	b.Helper()
	l, err := segstore.Open(segstore.OSFS{}, b.TempDir(), segstore.Options{SegmentBytes: 256 << 20, MaxBatchBytes: 2 << 20, Logger: hclog.NewNullLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	value := make([]byte, 200)
	ts := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	var last int64
	var builder record.Builder
	for written := int64(0); written < logBytes; {
		builder.Reset()
		for builder.Size() < batchBytes-len(value)-16 {
			if err := builder.Add(ts, nil, value, nil); err != nil {
				b.Fatal(err)
			}
			ts++
		}
		batch, err := builder.AppendTo(nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, last, err = l.AppendLeader(batch, 1); err != nil {
			b.Fatal(err)
		}
		written += int64(len(batch))
	}
	if err := l.SetHighWatermark(l.LogEndOffset()); err != nil {
		b.Fatal(err)
	}
	return l, last
}
