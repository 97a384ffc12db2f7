package segstore

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/record"
)

// BenchmarkAppend compares AppendLeader (and Sync) with a plain sequential
// os.File write of the same bytes and the same sync pattern, in
// interleaved blocks within one run, alternating which side goes first. A batch of n records of size s is
// n*s bytes in all, header included. Reported: MB/s of both, and
// ratio = segstore MB/s / baseline MB/s.
func BenchmarkAppend(b *testing.B) {
	for _, recSize := range []int{100, 1024} {
		for _, count := range []int{1, 100, 1000} {
			for _, sync := range []bool{false, true} {
				name := fmt.Sprintf("rec=%d/batch=%d/sync=%v", recSize, count, sync)
				b.Run(name, func(b *testing.B) { benchAppend(b, recSize, count, sync) })
			}
		}
	}
}

func benchAppend(b *testing.B, recSize, count int, sync bool) {
	dir, err := os.MkdirTemp(benchRoot(b), "append")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	batch := makeBatch(rand.New(rand.NewPCG(1, 1)), batchSpec{records: count, payload: count*recSize - record.HeaderSize})
	l, err := Open(OSFS{}, filepath.Join(dir, "log"), Options{MaxBatchBytes: 2 << 20, Logger: hclog.NewNullLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	f, err := os.Create(filepath.Join(dir, "baseline"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()

	appendLog := func(n int) time.Duration {
		start := time.Now()
		for range n {
			if _, _, err := l.AppendLeader(batch, 1); err != nil {
				b.Fatal(err)
			}
			if sync {
				if _, err := l.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		}
		return time.Since(start)
	}
	appendFile := func(n int) time.Duration {
		start := time.Now()
		for range n {
			if _, err := f.Write(batch); err != nil {
				b.Fatal(err)
			}
			if sync {
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		}
		return time.Since(start)
	}
	// Alternate finely so both sides meet the same writeback and fsync
	// conditions: 256 KiB per block, or one batch per block with sync.
	block := max(1, (256<<10)/len(batch))
	if sync {
		block = 1
	}
	var tLog, tFile time.Duration
	b.ResetTimer()
	for done, i := 0, 0; done < b.N; i++ {
		n := min(block, b.N-done)
		if i%2 == 0 {
			tFile += appendFile(n)
			tLog += appendLog(n)
		} else {
			tLog += appendLog(n)
			tFile += appendFile(n)
		}
		done += n
	}
	b.StopTimer()
	mb := float64(b.N) * float64(len(batch)) / 1e6
	b.ReportMetric(mb/tLog.Seconds(), "segstore-MB/s")
	b.ReportMetric(mb/tFile.Seconds(), "baseline-MB/s")
	b.ReportMetric(tFile.Seconds()/tLog.Seconds(), "ratio")
}

// BenchmarkReadLookup measures Read of a random offset (index lookup,
// descriptor, region of up to 64 KiB) in logs of 100 MB, and of 1 GB and
// 4 GB with SEGSTORE_BENCH_BIG=1. Each lookup is timed; percentiles are
// reported in µs. The logs are built once per process, without fsync, and
// deleted at the end.
func BenchmarkReadLookup(b *testing.B) {
	sizes := []int64{100e6}
	if os.Getenv("SEGSTORE_BENCH_BIG") != "" {
		sizes = append(sizes, 1e9, 4e9)
	}
	for _, size := range sizes {
		b.Run(fmt.Sprintf("log=%dMB", size/1e6), func(b *testing.B) {
			l := benchLog(b, size)
			rng := rand.New(rand.NewPCG(7, uint64(b.N)))
			lso, leo := l.LogStartOffset(), l.LogEndOffset()
			lat := make([]time.Duration, b.N)
			b.ResetTimer()
			for i := range b.N {
				off := lso + rng.Int64N(leo-lso)
				start := time.Now()
				r, err := l.Read(off, 64<<10, leo)
				if err != nil {
					b.Fatal(err)
				}
				r.Close()
				lat[i] = time.Since(start)
				if r.Len == 0 {
					b.Fatalf("empty region at %d", off)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) / 1e3 }
			b.ReportMetric(pct(0.50), "p50-µs")
			b.ReportMetric(pct(0.99), "p99-µs")
			b.ReportMetric(pct(0.999), "p99.9-µs")
			b.ReportMetric(float64(len(l.segments)), "segments")
		})
	}
}

var (
	benchMu   sync.Mutex
	benchLogs = map[int64]*Log{}
	benchDir  string
)

// benchRoot is a directory for benchmark files, removed by TestMain.
func benchRoot(b *testing.B) string {
	benchMu.Lock()
	defer benchMu.Unlock()
	if benchDir == "" {
		dir, err := os.MkdirTemp("", "segstore-bench")
		if err != nil {
			b.Fatal(err)
		}
		benchDir = dir
	}
	return benchDir
}

// benchLog builds (once) a log of about size bytes of 1000-byte batches of
// ten records.
func benchLog(b *testing.B, size int64) *Log {
	root := benchRoot(b)
	benchMu.Lock()
	defer benchMu.Unlock()
	if l := benchLogs[size]; l != nil {
		return l
	}
	start := time.Now()
	l, err := Open(OSFS{}, filepath.Join(root, fmt.Sprintf("lookup-%d", size)), Options{Logger: hclog.NewNullLogger()})
	if err != nil {
		b.Fatal(err)
	}
	batch := makeBatch(rand.New(rand.NewPCG(2, 2)), batchSpec{records: 10, payload: 1000 - record.HeaderSize})
	for n := size / int64(len(batch)); n > 0; n-- {
		if _, _, err := l.AppendLeader(batch, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("built a %d MB log in %v", size/1e6, time.Since(start).Round(time.Millisecond))
	benchLogs[size] = l
	return l
}

func closeBenchLogs() {
	benchMu.Lock()
	defer benchMu.Unlock()
	for _, l := range benchLogs {
		l.Close()
	}
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
}
