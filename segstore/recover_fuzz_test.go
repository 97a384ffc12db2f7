package segstore

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/record"
)

// FuzzRecover feeds Open a two-segment log whose segment files, indexes
// and checkpoint files are arbitrary bytes (seeded from a log this package
// wrote). Open may refuse; what it opens must only ever be served as whole,
// contiguous batches at the offsets asked, and nothing may panic or hang.
func FuzzRecover(f *testing.F) {
	opts := Options{SegmentBytes: 1500, IndexIntervalBytes: 200, IndexBytes: 256, MaxBatchBytes: 1 << 16,
		Files: NewFileCache(16), Logger: hclog.NewNullLogger()}
	seedDir := f.TempDir()
	l, err := Open(OSFS{}, seedDir, opts)
	if err != nil {
		f.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for i := 0; len(l.segments) < 2 || i < 12; i++ {
		epoch := int32(1 + i/5)
		if _, _, err := l.AppendLeader(makeBatch(rng, batchSpec{epoch: epoch, records: 1 + rng.IntN(3), payload: 100 + rng.IntN(100)}), epoch); err != nil {
			f.Fatal(err)
		}
	}
	if len(l.segments) != 2 {
		f.Fatalf("%d segments", len(l.segments))
	}
	base1 := l.segments[1].base
	if err := l.Close(); err != nil {
		f.Fatal(err)
	}
	read := func(name string) []byte {
		b, _ := os.ReadFile(filepath.Join(seedDir, name))
		return b
	}
	log0, idx0 := read(segmentFileName(0, logSuffix)), read(segmentFileName(0, indexSuffix))
	log1, idx1 := read(segmentFileName(base1, logSuffix)), read(segmentFileName(base1, indexSuffix))
	rp, ep := read(recoveryPointFile), read(epochCheckpointFile)
	f.Add(log0, idx0, log1, idx1, rp, ep)
	f.Add(log0, idx0, log1[:len(log1)-5], idx1, []byte(nil), ep)
	f.Add(log0, []byte{0, 0, 0, 1, 0, 0, 0, 9}, log1, idx1, rp, []byte("0\n1\n1 0\n"))

	f.Fuzz(func(t *testing.T, log0, idx0, log1, idx1, rp, ep []byte) {
		if len(log0)+len(idx0)+len(log1)+len(idx1)+len(rp)+len(ep) > 64<<10 {
			return
		}
		// A hang becomes a crash the fuzzer keeps, with every stack.
		watchdog := time.AfterFunc(10*time.Second, func() {
			buf := make([]byte, 1<<20)
			panic("FuzzRecover input hangs:\n" + string(buf[:runtime.Stack(buf, true)]))
		})
		defer watchdog.Stop()
		dir := t.TempDir()
		write := func(name string, b []byte, present bool) {
			if present {
				if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		write(segmentFileName(0, logSuffix), log0, true)
		write(segmentFileName(0, indexSuffix), idx0, len(idx0) > 0)
		write(segmentFileName(base1, logSuffix), log1, true)
		write(segmentFileName(base1, indexSuffix), idx1, len(idx1) > 0)
		write(recoveryPointFile, rp, len(rp) > 0)
		write(epochCheckpointFile, ep, len(ep) > 0)
		o := opts
		o.Files = NewFileCache(16)
		l, err := Open(OSFS{}, dir, o)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrDataLoss) {
				t.Fatalf("open: %v", err)
			}
			return
		}
		defer l.Close()
		lso, leo := l.LogStartOffset(), l.LogEndOffset()
		if hw := l.HighWatermark(); hw < lso || hw > leo {
			t.Fatalf("HW %d outside [%d, %d]", hw, lso, leo)
		}
		for _, maxBytes := range []int64{1, 300, 1 << 20} {
			for off := lso; off < leo; {
				b, err := l.ReadBytes(off, maxBytes, leo)
				if err != nil {
					// A read refused is not served; only wrong bytes are.
					if !errors.Is(err, ErrCorrupt) {
						t.Fatalf("read %d: %v", off, err)
					}
					// (Skipping one offset could take 2^31 steps in a
					// batch whose last_offset_delta is huge.)
					break
				}
				if len(b) == 0 {
					t.Fatalf("read %d below LEO %d: empty", off, leo)
				}
				first := true
				for len(b) > 0 {
					// Only the structure: below the recovery point Open
					// checks CRCs only after each segment's last index
					// entry (docs/design.md §5), so damage before it is
					// served as it is, by design.
					h, size, err := record.ParseHeader(b, o.MaxBatchBytes)
					if err != nil || size > len(b) {
						t.Fatalf("read %d (max %d): served bytes that are not whole batches: %v (size %d of %d)", off, maxBytes, err, size, len(b))
					}
					rest := b[size:]
					if first && (h.BaseOffset() > off || h.NextOffset() <= off) {
						t.Fatalf("read %d: first batch holds [%d, %d)", off, h.BaseOffset(), h.NextOffset())
					}
					if !first && h.BaseOffset() != off {
						t.Fatalf("read: batch at %d, want %d", h.BaseOffset(), off)
					}
					first = false
					off = h.NextOffset()
					b = rest
				}
			}
		}
	})
}
