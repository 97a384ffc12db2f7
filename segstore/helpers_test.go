package segstore

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/record"
)

// Byte offsets of the header fields that record does not export setters for
// (docs/design.md §4, record/header.go).
const (
	hdrBatchLength     = 8
	hdrMagic           = 16
	hdrCRC             = 17
	hdrLastOffsetDelta = 23
	hdrFirstTimestamp  = 27
	hdrMaxTimestamp    = 35
	hdrProducerID      = 43
	hdrProducerEpoch   = 51
	hdrBaseSequence    = 53
	hdrRecordCount     = 57
)

// batchSpec describes a test batch; the payload stands in for records.
type batchSpec struct {
	base      int64
	epoch     int32
	records   int
	payload   int
	timestamp int64
}

// makeBatch builds a valid batch by hand: header fields, payload bytes from
// rng (or zeros when rng is nil), and the CRC.
func makeBatch(rng *rand.Rand, s batchSpec) []byte {
	if s.records < 1 {
		s.records = 1
	}
	b := make([]byte, record.HeaderSize+s.payload)
	binary.BigEndian.PutUint32(b[hdrBatchLength:], uint32(len(b)-record.LengthFieldEnd))
	b[hdrMagic] = record.Magic
	binary.BigEndian.PutUint32(b[hdrLastOffsetDelta:], uint32(s.records-1))
	binary.BigEndian.PutUint64(b[hdrFirstTimestamp:], uint64(s.timestamp))
	binary.BigEndian.PutUint64(b[hdrMaxTimestamp:], uint64(s.timestamp))
	binary.BigEndian.PutUint64(b[hdrProducerID:], ^uint64(0))
	binary.BigEndian.PutUint16(b[hdrProducerEpoch:], ^uint16(0))
	binary.BigEndian.PutUint32(b[hdrBaseSequence:], ^uint32(0))
	binary.BigEndian.PutUint32(b[hdrRecordCount:], uint32(s.records))
	if rng != nil {
		for i := record.HeaderSize; i < len(b); i++ {
			b[i] = byte(rng.Uint32())
		}
	}
	record.SetBaseOffset(b, s.base)
	record.SetLeaderEpoch(b, s.epoch)
	binary.BigEndian.PutUint32(b[hdrCRC:], record.Checksum(b))
	return b
}

// testSeed returns SEGSTORE_SEED if set, else a fresh seed, and logs it so a
// failure can be replayed.
func testSeed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SEGSTORE_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SEGSTORE_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (replay with SEGSTORE_SEED=%d)", seed, seed)
	return seed
}

func envInt(t testing.TB, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return v
}

// testLogger routes log output to t.Log.
func testLogger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Debug, Output: tWriter{t}})
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

// fakeClock is an injected clock tests move by hand.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time          { return c.now }
func (c *fakeClock) Advance(d time.Duration) { c.now = c.now.Add(d) }

func newClock() *fakeClock { return &fakeClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)} }

// smallOptions keeps segments and indexes small so tests roll often, and
// the file cache tiny (SEGSTORE_TEST_MAX_OPEN_FILES, default 3) so that
// every test also closes and reopens segment files all the time.
func smallOptions(t testing.TB, clock *fakeClock) Options {
	return Options{
		Files:              NewFileCache(envInt(t, "SEGSTORE_TEST_MAX_OPEN_FILES", 3)),
		SegmentBytes:       4096,
		IndexIntervalBytes: 256,
		IndexBytes:         512,
		MaxBatchBytes:      1 << 20,
		Logger:             testLogger(t),
		Now:                clock.Now,
	}
}

func openLog(t testing.TB, fsys FS, dir string, opts Options) *Log {
	t.Helper()
	l, err := Open(fsys, dir, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return l
}

// readAll returns every batch from the log start to limit, split.
func readAll(t testing.TB, l *Log, limit int64) [][]byte {
	t.Helper()
	var out [][]byte
	for off := l.LogStartOffset(); off < limit; {
		b, err := l.ReadBytes(off, 1<<20, limit)
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		if len(b) == 0 {
			break
		}
		for len(b) > 0 {
			batch, rest, err := record.NextBatch(b, 0)
			if err != nil {
				t.Fatalf("read at %d: %v", off, err)
			}
			out = append(out, batch)
			off = record.Header(batch).NextOffset()
			b = rest
		}
	}
	return out
}
