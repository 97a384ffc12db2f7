package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/logagent/logagent/client"
	"github.com/logagent/logagent/internal/testseed"
	"github.com/logagent/logagent/record"
)

func TestLoopbackTCP(t *testing.T) {
	res, err := LoopbackTCP(context.Background(), LoopbackConfig{Duration: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loopback TCP: %s in %v, %d writes", throughput(res.BytesPerSecond()), res.Elapsed, res.Ops)
	if res.WriteBytes != 1<<20 || res.Ops <= 0 || res.Bytes != res.Ops*int64(res.WriteBytes) || res.BytesPerSecond() <= 0 ||
		res.OpLatency.Count() != res.Ops {
		t.Errorf("result %+v: want every byte written read back", res)
	}
}

func TestFileWrite(t *testing.T) {
	writeBytes, err := BatchBytes(100, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, fsync := range []bool{false, true} {
		dir := t.TempDir()
		res, err := FileWrite(context.Background(), FileWriteConfig{
			Dir: dir, WriteBytes: writeBytes, Fsync: fsync, Duration: 100 * time.Millisecond,
			// Small segments, so that the run rolls files.
			SegmentBytes: int64(writeBytes) * 4,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s of %d bytes: %s, %d writes, p50 %v", res.Name, res.WriteBytes, throughput(res.BytesPerSecond()),
			res.Ops, res.OpLatency.Quantile(0.5))
		if res.Ops <= 0 || res.Bytes != res.Ops*int64(writeBytes) || res.BytesPerSecond() <= 0 || res.OpLatency.Count() != res.Ops {
			t.Errorf("fsync %v: result %+v", fsync, res)
		}
		if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
			t.Errorf("fsync %v: %d entries left in %s (%v)", fsync, len(entries), dir, err)
		}
	}

	var out bytes.Buffer
	loop := &LimitResult{Name: "loopback TCP", WriteBytes: 1 << 20, Elapsed: time.Second, Bytes: 5.8e9, Ops: 5531}
	file := &LimitResult{Name: "file write + fsync", WriteBytes: 1000, Elapsed: time.Second, Bytes: 250e6, Ops: 250000}
	if err := WriteLimitsTable(&out, []*LimitResult{loop, file}); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "5.80 GB/s") || !strings.Contains(s, "250.0 MB/s") {
		t.Errorf("table:\n%s", s)
	}
	out.Reset()
	if err := WriteLimitsJSON(&out, []*LimitResult{loop}); err != nil {
		t.Fatal(err)
	}
	var js []map[string]any
	if err := json.Unmarshal(out.Bytes(), &js); err != nil || len(js) != 1 || js[0]["mb_per_second"] != 5800.0 {
		t.Errorf("JSON %s (%v)", out.String(), err)
	}
}

// fileCountingClock advances a millisecond on every reading and records the
// most files any directory under dir held at a reading: FileWrite reads the
// clock after every write.
type fileCountingClock struct {
	SystemClock
	t        *testing.T
	dir      string
	now      time.Time
	mostSeen int
}

func (c *fileCountingClock) Now() time.Time {
	subdirs, err := os.ReadDir(c.dir)
	if err != nil {
		c.t.Fatal(err)
	}
	for _, d := range subdirs {
		files, err := os.ReadDir(filepath.Join(c.dir, d.Name()))
		if err != nil {
			c.t.Fatal(err)
		}
		c.mostSeen = max(c.mostSeen, len(files))
	}
	c.now = c.now.Add(time.Millisecond)
	return c.now
}

func TestFileWriteKeepFiles(t *testing.T) {
	const writeBytes = 4096
	for _, tc := range []struct {
		keep     bool
		wantName string
		wantMost int
	}{
		// 40 writes of 4 segments' worth each: 10 files, all kept, or one
		// at a time.
		{keep: true, wantName: "file write, files kept", wantMost: 10},
		{keep: false, wantName: "file write", wantMost: 1},
	} {
		dir := t.TempDir()
		clock := &fileCountingClock{t: t, dir: dir, now: time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)}
		res, err := FileWrite(context.Background(), FileWriteConfig{
			Dir: dir, WriteBytes: writeBytes, Duration: 40 * time.Millisecond,
			SegmentBytes: 4 * writeBytes, KeepFiles: tc.keep, Clock: clock,
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Name != tc.wantName || res.Ops != 40 || clock.mostSeen != tc.wantMost {
			t.Errorf("keep %v: %q, %d writes, at most %d files at once; want %q, 40, %d",
				tc.keep, res.Name, res.Ops, clock.mostSeen, tc.wantName, tc.wantMost)
		}
		if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
			t.Errorf("keep %v: %d entries left in %s (%v)", tc.keep, len(entries), dir, err)
		}
	}
}

func TestLimitsRefuseBadConfig(t *testing.T) {
	ctx := context.Background()
	if _, err := LoopbackTCP(ctx, LoopbackConfig{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("loopback without duration: %v", err)
	}
	if _, err := FileWrite(ctx, FileWriteConfig{Duration: time.Second}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("file write without size: %v", err)
	}
	if _, err := FileWrite(ctx, FileWriteConfig{Duration: time.Second, WriteBytes: 100, SegmentBytes: 10}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("file write with segments smaller than a write: %v", err)
	}
	if _, err := BatchBytes(10, 0); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("batch of no records: %v", err)
	}
}

func TestBatchBytesIsAnEncodedBatch(t *testing.T) {
	for _, c := range []struct{ size, records int }{{0, 1}, {100, 1}, {100, 100}, {1024, 1000}} {
		n, err := BatchBytes(c.size, c.records)
		if err != nil {
			t.Fatal(err)
		}
		if n < record.HeaderSize+c.size*c.records || n > record.HeaderSize+(c.size+16)*c.records {
			t.Errorf("%d records of %d bytes: batch of %d bytes", c.records, c.size, n)
		}
	}
}

func TestKeySetGroupsKeysByTheirPartition(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 2))
	const keys, partitions = 50, 7
	s := newKeySet(keys, partitions)
	seen := map[string]bool{}
	for p, group := range s.byPartition {
		for _, k := range group {
			key := s.keys[k]
			if got := client.PartitionForKey(key, partitions); got != p {
				t.Errorf("key %q listed under partition %d, hashes to %d", key, p, got)
			}
			if len(key) != len(s.keys[0]) || seen[string(key)] {
				t.Errorf("key %q: not of the common width, or repeated", key)
			}
			seen[string(key)] = true
		}
	}
	if len(seen) != keys {
		t.Fatalf("%d keys, want %d", len(seen), keys)
	}
	counts := make([]int, keys)
	const draws = 50000
	for range draws {
		p, k := s.draw(rng)
		if s.partitionOf[k] != p {
			t.Fatalf("drew key %d with partition %d, it belongs to %d", k, p, s.partitionOf[k])
		}
		counts[k]++
	}
	for k, n := range counts {
		// 1000 expected per key; 6 standard deviations is about 190.
		if n < 800 || n > 1200 {
			t.Errorf("key %d drawn %d times of %d, want about %d", k, n, draws, draws/keys)
		}
	}
}
