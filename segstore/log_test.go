package segstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/record"
)

// expectedIndex computes the index the entry rule gives for a segment.
func expectedIndex(t testing.TB, l *Log, s *segment) []indexEntry {
	t.Helper()
	w := walker{f: s.log, end: s.size.Load(), maxBatch: l.opts.MaxBatchBytes, buf: make([]byte, 4096), bufPos: -1}
	var want []indexEntry
	last := int64(0)
	expect := s.base
	for {
		info, err := w.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("segment %d: %v", s.base, err)
		}
		if info.base != expect {
			t.Fatalf("segment %d: batch at %d has base %d, want %d", s.base, info.pos, info.base, expect)
		}
		expect = info.next
		if info.pos > 0 && info.pos-last >= int64(l.opts.IndexIntervalBytes) {
			want = append(want, indexEntry{rel: uint32(info.base - s.base), pos: uint32(info.pos)})
			last = info.pos
		}
	}
	if expect != s.next.Load() {
		t.Fatalf("segment %d: batches end at %d, segment says %d", s.base, expect, s.next.Load())
	}
	return want
}

// checkIndexes verifies every segment's in-memory index: each entry points at
// a batch header with the right base offset, and the index is exactly what
// the entry rule gives.
func checkIndexes(t testing.TB, l *Log) {
	t.Helper()
	l.mu.RLock()
	defer l.mu.RUnlock()
	for i, s := range l.segments {
		if i > 0 && l.segments[i-1].next.Load() != s.base {
			t.Fatalf("segment %d does not continue segment %d (ends %d)", s.base, l.segments[i-1].base, l.segments[i-1].next.Load())
		}
		var got []indexEntry
		for j := 0; j < s.index.entries(); j++ {
			e := s.index.entry(j)
			hdr := make([]byte, record.HeaderSize)
			if _, err := s.log.ReadAt(hdr, int64(e.pos)); err != nil {
				t.Fatalf("segment %d entry %d: %v", s.base, j, err)
			}
			h, _, err := record.ParseHeader(hdr, 0)
			if err != nil || h.BaseOffset() != s.base+int64(e.rel) {
				t.Fatalf("segment %d entry %d (%+v) does not point at its batch: %v", s.base, j, e, err)
			}
			got = append(got, e)
		}
		if want := expectedIndex(t, l, s); !slices.Equal(got, want) {
			t.Fatalf("segment %d index = %v, want %v", s.base, got, want)
		}
	}
}

func appendN(t testing.TB, l *Log, rng *rand.Rand, n int, epoch int32, payload int) [][]byte {
	t.Helper()
	var out [][]byte
	for range n {
		b := makeBatch(rng, batchSpec{epoch: epoch, records: 1 + rng.IntN(3), payload: payload})
		if _, _, err := l.AppendLeader(b, epoch); err != nil {
			t.Fatalf("append: %v", err)
		}
		out = append(out, b)
	}
	return out
}

func TestAppendReadRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 1))
	clock := newClock()
	dir := t.TempDir()
	l := openLog(t, OSFS{}, dir, smallOptions(t, clock))
	defer l.Close()

	var want [][]byte
	for i := range 200 {
		b := makeBatch(rng, batchSpec{epoch: 1, records: 1 + rng.IntN(5), payload: rng.IntN(300)})
		base, last, err := l.AppendLeader(b, 1)
		if err != nil {
			t.Fatal(err)
		}
		h, _, _ := record.ParseHeader(b, 0)
		if base != h.BaseOffset() || last != h.LastOffset() || (i > 0 && base != record.Header(want[i-1]).NextOffset()) {
			t.Fatalf("append %d: base %d last %d, header %d..%d", i, base, last, h.BaseOffset(), h.LastOffset())
		}
		want = append(want, b)
	}
	if got := readAll(t, l, l.LogEndOffset()); !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("read back %d batches, want %d equal ones", len(got), len(want))
	}
	if len(l.segments) < 5 {
		t.Fatalf("only %d segments: rolls did not happen", len(l.segments))
	}
	checkIndexes(t, l)

	// Every offset is served by the batch that holds it.
	for _, b := range want {
		h := record.Header(b)
		for off := h.BaseOffset(); off <= h.LastOffset(); off++ {
			got, err := l.ReadBytes(off, 1, l.LogEndOffset())
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, b) {
				t.Fatalf("read %d: got %d bytes starting at base %d, want the batch at %d", off, len(got), record.Header(got).BaseOffset(), h.BaseOffset())
			}
		}
	}
}

func TestReadBounds(t *testing.T) {
	clock := newClock()
	l := openLog(t, OSFS{}, t.TempDir(), Options{SegmentBytes: 1 << 20, IndexIntervalBytes: 100, Now: clock.Now, Logger: testLogger(t)})
	defer l.Close()
	// Ten batches of three records, 161 bytes each: offsets 0..29.
	var batches [][]byte
	for range 10 {
		b := makeBatch(nil, batchSpec{epoch: 1, records: 3, payload: 100})
		if _, _, err := l.AppendLeader(b, 1); err != nil {
			t.Fatal(err)
		}
		batches = append(batches, b)
	}
	size := int64(len(batches[0]))
	tests := []struct {
		name               string
		offset, max, limit int64
		wantFirst          int64 // base offset of the first batch; -1 for empty
		wantBatches        int64
		wantErr            error
	}{
		{"from start", 0, 1 << 20, 30, 0, 10, nil},
		{"inside a batch starts at its base", 4, 1 << 20, 30, 3, 9, nil},
		{"max bytes cuts at batch boundary", 0, 2*size + 10, 30, 0, 2, nil},
		{"at least one batch", 6, 1, 30, 6, 1, nil},
		{"limit excludes the batch holding it", 0, 1 << 20, 14, 0, 4, nil},
		{"limit at boundary", 0, 1 << 20, 15, 0, 5, nil},
		{"first batch past limit", 12, 1 << 20, 13, -1, 0, nil},
		{"limit above LEO", 27, 1 << 20, 1000, 27, 1, nil},
		{"at LEO", 30, 1 << 20, 30, -1, 0, nil},
		{"at limit", 15, 1 << 20, 15, -1, 0, nil},
		{"above LEO", 31, 1 << 20, 40, -1, 0, ErrOffsetOutOfRange},
		{"negative", -1, 1 << 20, 40, -1, 0, ErrOffsetOutOfRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := l.Read(tt.offset, tt.max, tt.limit)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			defer r.Close()
			got, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(got)) != tt.wantBatches*size || r.Len != int64(len(got)) {
				t.Fatalf("region of %d bytes (Len %d), want %d batches", len(got), r.Len, tt.wantBatches)
			}
			if tt.wantFirst >= 0 {
				first := tt.wantFirst / 3
				if want := slices.Concat(batches[first : first+tt.wantBatches]...); !bytes.Equal(got, want) {
					t.Fatalf("region bytes differ from batches %d..", first)
				}
			}
		})
	}
}

func TestRolls(t *testing.T) {
	tests := []struct {
		name  string
		opts  func(*Options)
		step  func(*fakeClock)
		check func(t *testing.T, l *Log)
	}{
		{
			name: "size",
			opts: func(o *Options) { o.SegmentBytes = 1000 },
			check: func(t *testing.T, l *Log) {
				// Each sealed segment is within the bound, and rolled
				// because the next batch (the next segment's first) did
				// not fit. A fixed slack was wrong: a batch of three
				// records is up to about 540 bytes.
				segs := l.segments
				for i, s := range segs[:len(segs)-1] {
					next := segs[i+1].base
					r, err := l.Read(next, 1, l.LogEndOffset())
					if err != nil {
						t.Fatalf("read the batch at %d: %v", next, err)
					}
					nextBatch := r.Len
					r.Close()
					if sz := s.size.Load(); sz > 1000 || sz+nextBatch <= 1000 {
						t.Errorf("segment %d holds %d bytes and the next batch is %d: it should not have rolled", s.base, sz, nextBatch)
					}
				}
			},
		},
		{
			name: "age",
			opts: func(o *Options) { o.SegmentBytes = 1 << 20; o.SegmentAge = time.Minute },
			step: func(c *fakeClock) { c.Advance(25 * time.Second) },
			check: func(t *testing.T, l *Log) {
				// Three appends 25s apart fit in a minute.
				for _, s := range l.segments[:len(l.segments)-1] {
					if n := s.next.Load() - s.base; n < 3 || n > 3*3 {
						t.Errorf("segment %d holds %d offsets", s.base, n)
					}
				}
			},
		},
		{
			name: "full index",
			opts: func(o *Options) {
				o.SegmentBytes = 1 << 20
				o.IndexIntervalBytes = 1
				o.IndexBytes = 4 * indexEntrySize
			},
			check: func(t *testing.T, l *Log) {
				for _, s := range l.segments[:len(l.segments)-1] {
					if s.index.entries() != 4 {
						t.Errorf("segment %d has %d index entries, want 4", s.base, s.index.entries())
					}
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(testSeed(t), 2))
			clock := newClock()
			opts := smallOptions(t, clock)
			tt.opts(&opts)
			l := openLog(t, OSFS{}, t.TempDir(), opts)
			defer l.Close()
			for range 30 {
				appendN(t, l, rng, 1, 1, 100+rng.IntN(50))
				if tt.step != nil {
					tt.step(clock)
				}
			}
			if len(l.segments) < 3 {
				t.Fatalf("%d segments", len(l.segments))
			}
			tt.check(t, l)
			checkIndexes(t, l)
		})
	}
}

func TestAppendValidation(t *testing.T) {
	clock := newClock()
	l := openLog(t, OSFS{}, t.TempDir(), smallOptions(t, clock))
	defer l.Close()
	if _, _, err := l.AppendLeader(makeBatch(nil, batchSpec{records: 2, payload: 10}), 5); err != nil {
		t.Fatal(err)
	}
	corrupt := makeBatch(nil, batchSpec{payload: 10})
	corrupt[len(corrupt)-1] ^= 1
	good := func(base int64, epoch int32) []byte {
		return makeBatch(nil, batchSpec{base: base, epoch: epoch, payload: 10})
	}
	// sparse is a batch whose offset range its records do not fill, as no
	// producer sends one: the leader gave it every offset of the range.
	sparse := func(lastOffsetDelta, records uint32) []byte {
		b := makeBatch(nil, batchSpec{payload: 10})
		binary.BigEndian.PutUint32(b[hdrLastOffsetDelta:], lastOffsetDelta)
		binary.BigEndian.PutUint32(b[hdrRecordCount:], records)
		binary.BigEndian.PutUint32(b[hdrCRC:], record.Checksum(b))
		return b
	}
	tests := []struct {
		name    string
		leader  bool
		batch   []byte
		epoch   int32
		wantErr error
	}{
		{"leader corrupt", true, corrupt, 5, record.ErrCorrupt},
		{"leader no records", true, sparse(math.MaxInt32-1, 0), 5, record.ErrCorrupt},
		{"leader offsets without records", true, sparse(1_000_000, 1), 5, record.ErrCorrupt},
		{"leader short", true, good(0, 5)[:40], 5, record.ErrShort},
		{"leader stale epoch", true, good(0, 4), 4, ErrStaleEpoch},
		{"follower corrupt", false, slices.Concat(good(2, 5), corrupt), 0, record.ErrCorrupt},
		{"follower gap", false, good(3, 5), 0, ErrNotContiguous},
		{"follower overlap", false, good(1, 5), 0, ErrNotContiguous},
		{"follower gap in the middle", false, slices.Concat(good(2, 5), good(4, 5)), 0, ErrNotContiguous},
		{"follower stale epoch", false, good(2, 4), 0, ErrStaleEpoch},
		{"follower trailing partial", false, slices.Concat(good(2, 5), good(3, 5)[:70]), 0, record.ErrShort},
		{"follower epoch ahead of the followed one", false, slices.Concat(good(2, 5), good(3, 8)), 7, ErrEpochAhead},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.leader {
				_, _, err = l.AppendLeader(tt.batch, tt.epoch)
			} else {
				followed := tt.epoch
				if followed == 0 {
					followed = 7
				}
				err = l.AppendFollower(tt.batch, followed)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if l.LogEndOffset() != 2 || l.active.size.Load() != int64(len(good(0, 0)))+0 {
				t.Fatalf("a rejected append wrote: LEO %d, size %d", l.LogEndOffset(), l.active.size.Load())
			}
		})
	}
	if err := l.AppendFollower(slices.Concat(good(2, 5), good(3, 7)), 7); err != nil {
		t.Fatal(err)
	}
	if got := l.EpochEntries(); !slices.Equal(got, []EpochEntry{{5, 0}, {7, 3}}) {
		t.Fatalf("epochs %v", got)
	}
}

// TestAppendFollowerAtMaxOffset: a log restarted at 2^63-1 (a leader's
// log start, as an out of range answer gives it) refuses a batch there: its
// next offset does not fit an int64, and the log end offset wrapped
// negative.
func TestAppendFollowerAtMaxOffset(t *testing.T) {
	l := openLog(t, OSFS{}, t.TempDir(), smallOptions(t, newClock()))
	defer l.Close()
	if err := l.TruncateFully(math.MaxInt64); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendFollower(makeBatch(nil, batchSpec{base: math.MaxInt64, epoch: 1, payload: 4}), 1); !errors.Is(err, record.ErrCorrupt) {
		t.Fatalf("a batch at offset 2^63-1: %v, log end offset %d; want record.ErrCorrupt", err, l.LogEndOffset())
	}
}

func TestTruncate(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 3))
	clock := newClock()
	opts := smallOptions(t, clock)
	dir := t.TempDir()
	l := openLog(t, OSFS{}, dir, opts)
	batches := appendN(t, l, rng, 40, 1, 150)
	if err := l.AssignEpoch(2, l.LogEndOffset()); err != nil {
		t.Fatal(err)
	}
	batches = append(batches, appendN(t, l, rng, 40, 2, 150)...)
	if _, err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := l.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	segsBefore := len(l.segments)

	// Cut inside a batch of an early segment: the whole batch goes.
	target := record.Header(batches[10])
	if err := l.Truncate(target.LastOffset()); err != nil {
		t.Fatal(err)
	}
	if l.LogEndOffset() != target.BaseOffset() {
		t.Fatalf("LEO %d, want %d", l.LogEndOffset(), target.BaseOffset())
	}
	if len(l.segments) >= segsBefore {
		t.Fatalf("segments %d, before %d", len(l.segments), segsBefore)
	}
	if got := l.EpochEntries(); !slices.Equal(got, []EpochEntry{{1, 0}}) {
		t.Fatalf("epochs %v", got)
	}
	if l.SyncedOffset() > l.LogEndOffset() {
		t.Fatalf("synced %d above LEO %d", l.SyncedOffset(), l.LogEndOffset())
	}
	checkIndexes(t, l)
	// Appending continues in the truncated segment, with a new epoch.
	more := appendN(t, l, rng, 30, 3, 150)
	want := slices.Concat(batches[:10], more)
	if got := readAll(t, l, l.LogEndOffset()); !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatal("content after truncate and append differs")
	}
	checkIndexes(t, l)

	// Truncate at the LEO drops an epoch that started there.
	if err := l.AssignEpoch(4, l.LogEndOffset()); err != nil {
		t.Fatal(err)
	}
	if err := l.Truncate(l.LogEndOffset()); err != nil {
		t.Fatal(err)
	}
	if e, _ := l.LatestEpoch(); e.Epoch != 3 {
		t.Fatalf("latest epoch %v after truncating at the LEO", e)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, OSFS{}, dir, opts)
	defer l.Close()
	if got := readAll(t, l, l.LogEndOffset()); !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatal("content after reopen differs")
	}
	checkIndexes(t, l)
	if got := l.EpochEntries(); !slices.Equal(got, []EpochEntry{{1, 0}, {3, record.Header(more[0]).BaseOffset()}}) {
		t.Fatalf("epochs after reopen %v", got)
	}
}

func TestTruncateFully(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 4))
	clock := newClock()
	opts := smallOptions(t, clock)
	for _, newStart := range []int64{0, 5, 1000} {
		dir := t.TempDir()
		l := openLog(t, OSFS{}, dir, opts)
		appendN(t, l, rng, 30, 1, 150)
		if err := l.TruncateFully(newStart); err != nil {
			t.Fatal(err)
		}
		if l.LogStartOffset() != newStart || l.LogEndOffset() != newStart || len(l.EpochEntries()) != 0 {
			t.Fatalf("after TruncateFully(%d): start %d end %d epochs %v", newStart, l.LogStartOffset(), l.LogEndOffset(), l.EpochEntries())
		}
		want := appendN(t, l, rng, 5, 2, 100)
		l.Close()
		l = openLog(t, OSFS{}, dir, opts)
		if l.LogStartOffset() != newStart {
			t.Fatalf("start %d after reopen, want %d", l.LogStartOffset(), newStart)
		}
		if got := readAll(t, l, l.LogEndOffset()); !slices.EqualFunc(got, want, bytes.Equal) {
			t.Fatal("content differs")
		}
		l.Close()
	}
}

func TestRetention(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 5))
	clock := newClock()
	opts := smallOptions(t, clock)
	opts.SegmentBytes = 1000
	opts.Retention = time.Hour
	opts.RetentionBytes = 5000
	dir := t.TempDir()
	l := openLog(t, OSFS{}, dir, opts)
	for i := range 60 {
		ts := clock.Now().Add(time.Duration(i) * time.Minute).UnixMilli()
		b := makeBatch(rng, batchSpec{epoch: 1, payload: 150, timestamp: ts})
		if _, _, err := l.AppendLeader(b, 1); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(30 * time.Minute)
	// Hold a region of the first segment open across its deletion.
	region, err := l.Read(0, 1<<20, l.LogEndOffset())
	if err != nil {
		t.Fatal(err)
	}
	firstBytes, _ := l.ReadBytes(0, 1<<20, l.LogEndOffset())

	// Below the HW 0 nothing may go.
	if n, err := l.ApplyRetention(0); err != nil || n != 0 {
		t.Fatalf("retention below 0: %d, %v", n, err)
	}
	hw := l.LogEndOffset()
	n, err := l.ApplyRetention(hw)
	if err != nil || n == 0 {
		t.Fatalf("retention: %d, %v", n, err)
	}
	var total int64
	for _, s := range l.segments {
		total += s.size.Load()
	}
	if total > 5000+1000 {
		t.Fatalf("%d bytes kept", total)
	}
	lso := l.LogStartOffset()
	if lso != l.segments[0].base || lso == 0 {
		t.Fatalf("log start %d, first segment %d", lso, l.segments[0].base)
	}
	if _, err := l.ReadBytes(0, 100, hw); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read below the start: %v", err)
	}
	got, err := io.ReadAll(region)
	if err != nil || !bytes.Equal(got, firstBytes) {
		t.Fatalf("region of a deleted segment: %d bytes, %v", len(got), err)
	}
	region.Close()

	// Age: with the clock two hours on, everything but the active segment
	// is older than an hour.
	clock.Advance(2 * time.Hour)
	if _, err := l.ApplyRetention(hw); err != nil {
		t.Fatal(err)
	}
	if len(l.segments) != 1 {
		t.Fatalf("%d segments after age retention", len(l.segments))
	}
	if got := l.EpochEntries(); !slices.Equal(got, []EpochEntry{{1, l.LogStartOffset()}}) {
		t.Fatalf("epochs %v, start %d", got, l.LogStartOffset())
	}
	l.Close()
	l = openLog(t, OSFS{}, dir, opts)
	defer l.Close()
	if l.LogStartOffset() != l.segments[0].base || len(l.segments) != 1 {
		t.Fatalf("after reopen: start %d, %d segments", l.LogStartOffset(), len(l.segments))
	}
}

// TestSetRetention: limits changed on an open log (a topic's settings
// altered at run time) take effect at the next ApplyRetention, in both
// directions; zero turns a limit off.
func TestSetRetention(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 7))
	clock := newClock()
	opts := smallOptions(t, clock)
	opts.SegmentBytes = 1000
	l := openLog(t, OSFS{}, t.TempDir(), opts)
	defer l.Close()
	for range 40 {
		b := makeBatch(rng, batchSpec{epoch: 1, payload: 150, timestamp: clock.Now().UnixMilli()})
		if _, _, err := l.AppendLeader(b, 1); err != nil {
			t.Fatal(err)
		}
	}
	hw := l.LogEndOffset()
	size := func() (total int64) {
		for _, s := range l.segments {
			total += s.size.Load()
		}
		return total
	}
	if n, err := l.ApplyRetention(hw); err != nil || n != 0 {
		t.Fatalf("retention without limits: %d, %v", n, err)
	}
	before := size()
	l.SetRetention(0, 3000)
	if n, err := l.ApplyRetention(hw); err != nil || n == 0 || size() > 3000+1000 {
		t.Fatalf("retention_bytes 3000 set on an open log of %d bytes: %d deleted, %v; %d bytes kept", before, n, err, size())
	}
	l.SetRetention(0, 0)
	clock.Advance(time.Hour)
	if n, err := l.ApplyRetention(hw); err != nil || n != 0 {
		t.Fatalf("retention turned off: %d deleted, %v", n, err)
	}
	l.SetRetention(time.Minute, 0)
	if _, err := l.ApplyRetention(hw); err != nil || len(l.segments) != 1 {
		t.Fatalf("retention 1m an hour on: %d segments left, %v", len(l.segments), err)
	}
}

// TestRetentionAgeOfLoadedSegments: a segment loaded without a scan learns
// its newest timestamp from all its batches, not from its tail.
func TestRetentionAgeOfLoadedSegments(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 6))
	clock := newClock()
	opts := smallOptions(t, clock)
	opts.Retention = time.Hour
	dir := t.TempDir()
	l := openLog(t, OSFS{}, dir, opts)
	// 361-byte batches, eleven to a 4096-byte segment. One batch early in
	// the second segment is stamped three hours ahead: that segment must be
	// kept, though its tail is as old as the first segment, which goes.
	for i := range 60 {
		ts := clock.Now().UnixMilli()
		if i == 14 {
			ts = clock.Now().Add(3 * time.Hour).UnixMilli()
		}
		if _, _, err := l.AppendLeader(makeBatch(rng, batchSpec{epoch: 1, payload: 300, timestamp: ts}), 1); err != nil {
			t.Fatal(err)
		}
	}
	exact := map[int64]int64{}
	for _, s := range l.segments {
		exact[s.base] = s.maxTimestamp.Load()
	}
	l.Close()
	l = openLog(t, OSFS{}, dir, opts)
	defer l.Close()
	clock.Advance(2 * time.Hour)
	deadline := clock.Now().Add(-time.Hour).UnixMilli()
	bases := make([]int64, len(l.segments))
	for i, s := range l.segments {
		bases[i] = s.base
	}
	wantDeleted := 0
	for wantDeleted < len(bases)-1 && exact[bases[wantDeleted]] < deadline {
		wantDeleted++
	}
	n, err := l.ApplyRetention(l.LogEndOffset())
	if err != nil {
		t.Fatal(err)
	}
	if n != wantDeleted || wantDeleted != 1 {
		t.Fatalf("deleted %d segments, want %d of %d", n, wantDeleted, len(bases))
	}
	for _, s := range l.segments[:len(l.segments)-1] {
		if got := s.maxTimestamp.Load(); got != unknownTimestamp && got != exact[s.base] {
			t.Fatalf("segment %d: newest timestamp %d, want %d", s.base, got, exact[s.base])
		}
	}
	if got := l.segments[0].maxTimestamp.Load(); got != exact[l.segments[0].base] {
		t.Fatalf("first kept segment: newest timestamp %d, want %d", got, exact[l.segments[0].base])
	}
}

func TestReopenCleanReadsNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 7))
	clock := newClock()
	opts := smallOptions(t, clock)
	dir := t.TempDir()
	l := openLog(t, OSFS{}, dir, opts)
	want := appendN(t, l, rng, 50, 1, 200)
	if err := l.SetHighWatermark(30); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second close: %v", err)
	}
	if _, err := l.Read(0, 1, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
	fsys, err := NewFaultFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	l = openLog(t, fsys, dir, opts)
	defer l.Close()
	if l.openScanned != 0 {
		t.Fatalf("a clean open validated %d bytes", l.openScanned)
	}
	for _, s := range l.segments {
		if n := fsys.SyncCalls(s.logPath) + fsys.SyncCalls(s.indexPath); n != 0 {
			t.Fatalf("a clean open fsynced segment %d", s.base)
		}
	}
	if l.HighWatermark() != 30 {
		t.Fatalf("HW %d", l.HighWatermark())
	}
	if got := readAll(t, l, l.LogEndOffset()); !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatal("content differs")
	}
	checkIndexes(t, l)
}

func TestConcurrentReadsAppendsRetention(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 8))
	clock := newClock()
	opts := smallOptions(t, clock)
	opts.RetentionBytes = 20000
	l := openLog(t, OSFS{}, t.TempDir(), opts)
	defer l.Close()
	const appends = 2000
	var wg sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, 8)
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rr := rand.New(rand.NewPCG(uint64(r), 9))
			for {
				select {
				case <-done:
					return
				default:
				}
				lso, leo := l.LogStartOffset(), l.LogEndOffset()
				if leo == lso {
					continue
				}
				off := lso + rr.Int64N(leo-lso)
				reg, err := l.Read(off, 1000, leo)
				if errors.Is(err, ErrOffsetOutOfRange) {
					continue // retention moved the start meanwhile
				}
				if err != nil {
					errs <- err
					return
				}
				b, err := io.ReadAll(reg)
				reg.Close()
				if err != nil {
					errs <- err
					return
				}
				for len(b) > 0 {
					batch, rest, err := record.NextBatch(b, 0)
					if err != nil {
						errs <- err
						return
					}
					if record.Header(batch).NextOffset() > leo {
						errs <- errors.New("region past the limit")
						return
					}
					b = rest
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := l.Sync(); err != nil {
				errs <- err
				return
			}
			if _, err := l.ApplyRetention(l.LogEndOffset()); err != nil {
				errs <- err
				return
			}
		}
	}()
	for range appends {
		appendN(t, l, rng, 1, 1, rng.IntN(400))
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkIndexes(t, l)
}

func TestGroupCommit(t *testing.T) {
	root := t.TempDir()
	fsys, err := NewFaultFS(root)
	if err != nil {
		t.Fatal(err)
	}
	clock := newClock()
	opts := smallOptions(t, clock)
	opts.SegmentBytes = 1 << 20
	dir := filepath.Join(root, "p0")
	l := openLog(t, fsys, dir, opts)
	defer l.Close()
	logPath := l.active.logPath
	before := fsys.SyncCalls(logPath)
	const writers, each = 8, 50
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				b := makeBatch(nil, batchSpec{epoch: 1, payload: 50 + w})
				_, last, err := l.AppendLeader(b, 1)
				if err == nil {
					var synced int64
					synced, err = l.Sync()
					if err == nil && synced <= last {
						err = errors.New("sync returned before covering the caller's batch")
					}
				}
				if err != nil {
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatal(failures)
	}
	syncs := fsys.SyncCalls(logPath) - before
	t.Logf("%d Sync calls shared %d fsyncs", writers*each, syncs)
	if syncs >= writers*each {
		t.Fatalf("%d fsyncs for %d Sync calls: no sharing", syncs, writers*each)
	}
	if l.SyncedOffset() != l.LogEndOffset() {
		t.Fatalf("synced %d, LEO %d", l.SyncedOffset(), l.LogEndOffset())
	}
}

func TestRegionSendfile(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 10))
	clock := newClock()
	opts := smallOptions(t, clock)
	opts.SegmentBytes = 1 << 20
	opts.IndexBytes = 1 << 12
	l := openLog(t, OSFS{}, t.TempDir(), opts)
	defer l.Close()
	want := slices.Concat(appendN(t, l, rng, 100, 1, 1000)...)
	if len(l.segments) != 1 {
		t.Fatalf("%d segments", len(l.segments))
	}
	region, err := l.Read(0, 1<<30, l.LogEndOffset())
	if err != nil {
		t.Fatal(err)
	}
	defer region.Close()
	got := sendOverLoopback(t, region)
	if !bytes.Equal(got, want) {
		t.Fatalf("received %d bytes, want %d equal ones", len(got), len(want))
	}
}

func TestFileNames(t *testing.T) {
	tests := []struct {
		name   string
		base   int64
		suffix string
		ok     bool
	}{
		{"00000000000000000000.log", 0, logSuffix, true},
		{"00000000000000001234.index", 1234, indexSuffix, true},
		{"0000000000000000123.log", 0, "", false},
		{"0000000000000000123x.log", 0, "", false},
		{"00000000000000000000.log.tmp", 0, "", false},
		{"hw-checkpoint", 0, "", false},
	}
	for _, tt := range tests {
		base, suffix, ok := parseSegmentFileName(tt.name)
		if base != tt.base || suffix != tt.suffix || ok != tt.ok {
			t.Errorf("%s: %d %q %v", tt.name, base, suffix, ok)
		}
		if tt.ok && segmentFileName(tt.base, tt.suffix) != tt.name {
			t.Errorf("%s does not round-trip", tt.name)
		}
	}
}

func TestCheckpointFiles(t *testing.T) {
	dir := t.TempDir()
	fsys := OSFS{}
	if err := writeEpochCheckpoint(fsys, dir, []EpochEntry{{1, 0}, {4, 100}}); err != nil {
		t.Fatal(err)
	}
	ck := checkpointReader{fs: fsys, dir: dir}
	got, err := ck.epochs()
	if err != nil || !slices.Equal(got, []EpochEntry{{1, 0}, {4, 100}}) {
		t.Fatalf("epochs %v, %v", got, err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, epochCheckpointFile))
	if string(raw) != "1\n2\n1 0\n4 100\ncrc32c e8a11f29\n" {
		t.Fatalf("epoch file %q", raw)
	}
	p := logPosition{offset: 42, segmentBase: 40, pos: 300}
	if err := writeRecoveryPoint(fsys, dir, p); err != nil {
		t.Fatal(err)
	}
	if got, found, err := ck.recoveryPoint(); err != nil || !found || got != p {
		t.Fatalf("recovery point %v %v %v", got, found, err)
	}
	corrupt := []struct{ file, content string }{
		{epochCheckpointFile, "0\n3\n1 0\n4 100\n"},
		{epochCheckpointFile, "0\n2\n4 0\n1 100\n"},
		{epochCheckpointFile, "2\n0\n"},
		{epochCheckpointFile, "0\n1\n1 0"},
		{recoveryPointFile, "0\n42 40\n"},
		{recoveryPointFile, "0\n42 40 0\n"},
		{hwCheckpointFile, "0\n-4\n"},
		{hwCheckpointFile, "0\nx\n"},
		{logStartOffsetFile, ""},
		// Version 1: the checksum line is missing, in another form, or
		// does not match; or the checksum matches a value that cannot be.
		{hwCheckpointFile, "1\n42\n"},
		{hwCheckpointFile, "1\n"},
		{hwCheckpointFile, "1\n42\ncrc32c A31BA5AB\n"},
		{hwCheckpointFile, "1\n42\ncrc32c  a31ba5ab\n"},
		{hwCheckpointFile, "1\n43\ncrc32c a31ba5ab\n"},
		{recoveryPointFile, "1\n42 40 300\ncrc32c c51138a9\n"},
		{logStartOffsetFile, "1\n7\ncrc32c 00000000\n"},
		{epochCheckpointFile, "1\n2\n1 0\n4 100\ncrc32c e8a11f29\ncrc32c e8a11f29\n"},
	}
	for _, c := range corrupt {
		if err := os.WriteFile(filepath.Join(dir, c.file), []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Open(fsys, dir, Options{})
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s = %q: Open error %v, want ErrCorrupt", c.file, c.content, err)
		}
		os.Remove(filepath.Join(dir, c.file))
	}
}

// TestCheckpointPending: a log has a checkpoint pending after each change
// Checkpoint writes (a sync, a new epoch, a new high watermark) and none
// once it is written, so an idle replica arms no checkpoint timer.
func TestCheckpointPending(t *testing.T) {
	l := openLog(t, OSFS{}, t.TempDir(), smallOptions(t, newClock()))
	defer l.Close()
	checkpointed := func(step string) {
		t.Helper()
		if err := l.Checkpoint(); err != nil {
			t.Fatalf("%s: checkpoint: %v", step, err)
		}
		if l.CheckpointPending() {
			t.Fatalf("%s: a checkpoint is still pending after one", step)
		}
	}
	pending := func(step string) {
		t.Helper()
		if !l.CheckpointPending() {
			t.Fatalf("%s: no checkpoint pending", step)
		}
	}
	// A new log's HW is its log start, what it would be without the
	// file: nothing to write until it moves.
	if l.CheckpointPending() {
		t.Fatal("a new log has a checkpoint pending")
	}
	checkpointed("open")
	if err := l.AssignEpoch(1, 0); err != nil {
		t.Fatal(err)
	}
	pending("new epoch")
	checkpointed("new epoch")
	if _, _, err := l.AppendLeader(makeBatch(nil, batchSpec{base: 0, epoch: 1, payload: 20}), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	pending("sync")
	checkpointed("sync")
	if err := l.SetHighWatermark(1); err != nil {
		t.Fatal(err)
	}
	pending("high watermark")
	checkpointed("high watermark")
}

// TestNewLogWritesNoCheckpoints: opening a new log creates its segment and
// index and nothing else: a recovery point, high watermark or epoch file
// there would say what their absence says (every new partition paid a file,
// a rename and two fsyncs for the recovery point). After the first synced
// append a checkpoint writes them, and a reopen without one (a crash before
// the first checkpoint) recovers the appended batch all the same.
func TestNewLogWritesNoCheckpoints(t *testing.T) {
	dir := t.TempDir()
	opts := smallOptions(t, newClock())
	l := openLog(t, OSFS{}, dir, opts)
	names := func() []string {
		t.Helper()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			out = append(out, e.Name())
		}
		return out
	}
	for _, name := range names() {
		if !strings.HasSuffix(name, ".log") && !strings.HasSuffix(name, ".index") {
			t.Errorf("a new log wrote %s", name)
		}
	}
	if l.CheckpointPending() {
		t.Fatal("a new log has a checkpoint pending")
	}
	if err := l.AssignEpoch(1, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.AppendLeader(makeBatch(nil, batchSpec{base: 0, epoch: 1, payload: 20}), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	// Reopen as after a crash: the open log is abandoned without Close.
	again := openLog(t, OSFS{}, dir, opts)
	if got := again.LogEndOffset(); got != 1 {
		t.Fatalf("reopened without a recovery point: log end %d, want 1", got)
	}
	if e, ok := again.LatestEpoch(); !ok || e.Epoch != 1 {
		t.Fatalf("reopened without a recovery point: latest epoch %v %v, want 1", e, ok)
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names(), recoveryPointFile) {
		t.Fatalf("closing a log holding a batch wrote no recovery point: %v", names())
	}
	l.Close()
}

// TestFollowerAppendIntoANewSegmentKeepsOneSegment: a follower catching up
// appends many batches at once into an empty segment; the segment-age rule
// must not count a segment whose first batch is only being written (its age
// was unset, so every batch after the first rolled a segment of its own: a
// wiped replica catching up made thousands of 72-byte segments and ran out
// of descriptors).
func TestFollowerAppendIntoANewSegmentKeepsOneSegment(t *testing.T) {
	clock := newClock()
	opts := smallOptions(t, clock)
	opts.SegmentBytes = 1 << 20
	opts.IndexBytes = 64 << 10
	opts.SegmentAge = 24 * time.Hour
	l := openLog(t, OSFS{}, t.TempDir(), opts)
	defer l.Close()
	var batches [][]byte
	for i := range 50 {
		batches = append(batches, makeBatch(nil, batchSpec{base: int64(i), epoch: 1, payload: 20}))
	}
	if err := l.AppendFollower(slices.Concat(batches...), 1); err != nil {
		t.Fatal(err)
	}
	if n := len(l.segments); n != 1 {
		t.Fatalf("%d segments after one 50-batch append into an empty log, want 1", n)
	}
	// The age rule still rolls once the segment is older than SegmentAge.
	clock.Advance(25 * time.Hour)
	if err := l.AppendFollower(makeBatch(nil, batchSpec{base: 50, epoch: 1, payload: 20}), 1); err != nil {
		t.Fatal(err)
	}
	if n := len(l.segments); n != 2 {
		t.Fatalf("%d segments after a segment_age, want 2", n)
	}
}

// TestDeleteBefore: whole segments below the offset go, never one holding
// the offset or above the high watermark, never the active one, and the
// new log start survives a reopen.
func TestDeleteBefore(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 6))
	opts := smallOptions(t, newClock())
	opts.SegmentBytes = 1000
	dir := t.TempDir()
	l := openLog(t, OSFS{}, dir, opts)
	appendN(t, l, rng, 40, 1, 150)
	if len(l.segments) < 5 {
		t.Fatalf("%d segments, want several", len(l.segments))
	}
	mid := l.segments[3].base + 1
	if err := l.SetHighWatermark(l.segments[2].base); err != nil {
		t.Fatal(err)
	}
	// Above the high watermark: only what lies below it goes.
	if _, err := l.DeleteBefore(mid); err != nil {
		t.Fatal(err)
	}
	if got, want := l.LogStartOffset(), l.segments[0].base; got != want || got > l.HighWatermark() {
		t.Fatalf("log start %d, first segment %d, HW %d", got, want, l.HighWatermark())
	}
	if err := l.SetHighWatermark(l.LogEndOffset()); err != nil {
		t.Fatal(err)
	}
	n, err := l.DeleteBefore(mid)
	if err != nil || n == 0 {
		t.Fatalf("DeleteBefore(%d) = %d, %v", mid, n, err)
	}
	if lso := l.LogStartOffset(); lso > mid || lso != l.segments[0].base {
		t.Fatalf("log start %d after DeleteBefore(%d), first segment %d", lso, mid, l.segments[0].base)
	}
	if _, err := l.ReadBytes(l.LogStartOffset()-1, 100, l.HighWatermark()); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read below the start: %v", err)
	}
	if _, err := l.DeleteBefore(l.LogEndOffset() + 100); err != nil || len(l.segments) != 1 {
		t.Fatalf("DeleteBefore past the end: %v, %d segments left (the active one must stay)", err, len(l.segments))
	}
	lso := l.LogStartOffset()
	l.Close()
	l = openLog(t, OSFS{}, dir, opts)
	defer l.Close()
	if l.LogStartOffset() != lso {
		t.Fatalf("log start %d after reopen, want %d", l.LogStartOffset(), lso)
	}
}
