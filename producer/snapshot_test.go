package producer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"strconv"
	"testing"
	"time"
)

func snapshot(t testing.TB, s *State, end int64) []byte {
	t.Helper()
	b, err := s.MarshalSnapshot(nil, end)
	if err != nil {
		t.Fatalf("MarshalSnapshot(%d): %v", end, err)
	}
	return b
}

// sampleState has a producer of each kind: five batches retained out of
// seven, sequences across MaxInt32, an epoch bump, all batches truncated,
// extreme field values.
func sampleState(t testing.TB) (*State, int64) {
	t.Helper()
	s := New(Options{})
	log := cat(
		run(1, 0, 0, 0, 1, 2, 3, 1, 1, 2, 1),
		run(math.MaxInt64, math.MaxInt16, math.MaxInt32-1, 20, 3, 1),
		run(2, 0, 0, 30, 2), run(2, 1, 0, 32, 1),
		run(3, 5, 9, 40, 1, 1),
	)
	log = append(log, Batch{ProducerID: 4, RecordCount: 1, BaseOffset: 50, LastOffset: 60, LeaderEpoch: -1, MaxTimestamp: math.MinInt64})
	for _, b := range log {
		if err := s.Apply(b); err != nil {
			t.Fatalf("Apply(%+v): %v", b, err)
		}
	}
	s.TruncateTo(61)
	s.TruncateTo(41) // producer 3 keeps one batch of two, producer 4 none
	return s, 45
}

// probes are Check calls that tell apart every producer of sampleState.
func probes(s *State) []Decision {
	var ds []Decision
	for _, pid := range []int64{1, 2, 3, 4, 5, math.MaxInt64} {
		for _, epoch := range []int16{0, 1, 5, 6, math.MaxInt16} {
			for _, seq := range []int32{0, 1, 3, 6, 9, 10, 11, 12, math.MaxInt32 - 1, math.MaxInt32, 2} {
				for _, count := range []int32{1, 2, 3} {
					ds = append(ds, s.Check(pid, epoch, seq, count))
				}
			}
		}
	}
	return ds
}

func TestSnapshotRoundTrip(t *testing.T) {
	orig, end := sampleState(t)
	cases := []struct {
		name string
		s    *State
		end  int64
	}{
		{"empty", New(Options{}), 0},
		{"empty at an offset", New(Options{}), 1234},
		{"sample", orig, end},
		{"sample, end beyond the last batch", orig, math.MaxInt64},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prefix := []byte("prefix")
			b, err := tc.s.MarshalSnapshot(bytes.Clone(prefix), tc.end)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(b, prefix) {
				t.Fatal("MarshalSnapshot did not append to dst")
			}
			b = b[len(prefix):]
			got, gotEnd, err := UnmarshalSnapshot(b, Options{})
			if err != nil {
				t.Fatalf("UnmarshalSnapshot: %v", err)
			}
			if gotEnd != tc.end {
				t.Fatalf("end offset %d, want %d", gotEnd, tc.end)
			}
			if got.Len() != tc.s.Len() {
				t.Fatalf("Len %d, want %d", got.Len(), tc.s.Len())
			}
			if again := snapshot(t, got, tc.end); !bytes.Equal(again, b) {
				t.Fatal("the restored state's snapshot differs")
			}
			want, have := probes(tc.s), probes(got)
			for i := range want {
				if want[i] != have[i] {
					t.Fatalf("probe %d: restored state decides %+v, original %+v", i, have[i], want[i])
				}
			}
			// The restored state continues where the snapshot ends.
			if tc.end < math.MaxInt64 {
				if err := got.Apply(Batch{ProducerID: 1, BaseSequence: 11, RecordCount: 1, BaseOffset: tc.end, LastOffset: tc.end}); err != nil {
					t.Fatal(err)
				}
			}
			if err := got.Apply(Batch{ProducerID: 1, BaseSequence: 11, RecordCount: 1, BaseOffset: tc.end - 1, LastOffset: tc.end - 1}); !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("Apply below the snapshot's end offset = %v, want ErrInvalidInput", err)
			}
		})
	}
}

func TestSnapshotExpirationFromOptions(t *testing.T) {
	s := New(Options{})
	mustApply(t, s, Batch{ProducerID: 1, RecordCount: 1, MaxTimestamp: 0})
	got, _, err := UnmarshalSnapshot(snapshot(t, s, 1), Options{Expiration: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	got.Expire(time.UnixMilli(1))
	if got.Len() != 0 {
		t.Fatal("the restored state does not expire by the Options given")
	}
}

// TestSnapshotDeterministic applies the same batches of many producers to two
// states: map order must not show in the bytes.
func TestSnapshotDeterministic(t *testing.T) {
	var log []Batch
	for i := range 200 {
		pid := int64(i*7919) % 101
		log = append(log, Batch{ProducerID: pid, BaseSequence: int32(i), RecordCount: 1, BaseOffset: int64(i), LastOffset: int64(i), MaxTimestamp: int64(i)})
	}
	a, b := New(Options{}), New(Options{})
	mustApply(t, a, log...)
	mustApply(t, b, log...)
	first := snapshot(t, a, 200)
	for range 10 {
		if !bytes.Equal(snapshot(t, a, 200), first) || !bytes.Equal(snapshot(t, b, 200), first) {
			t.Fatal("the same batches gave different snapshots")
		}
	}
}

func TestMarshalSnapshotBelowAppliedBatch(t *testing.T) {
	s, _ := sampleState(t)
	dst := []byte("x")
	got, err := s.MarshalSnapshot(dst, 40) // producer 2's batch ends at 32, producer 3 was truncated to 41
	if !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("MarshalSnapshot below the applied end = %v, want ErrInvalidInput", err)
	}
	if !bytes.Equal(got, dst) {
		t.Fatal("a refused MarshalSnapshot changed dst")
	}
	if _, err := s.MarshalSnapshot(nil, 41); err != nil {
		t.Fatalf("MarshalSnapshot at the truncation point: %v", err)
	}
}

func requireCorrupt(t *testing.T, b []byte, what string) {
	t.Helper()
	s, _, err := UnmarshalSnapshot(b, Options{})
	if !errors.Is(err, ErrCorruptSnapshot) {
		t.Fatalf("%s: UnmarshalSnapshot = %v, want ErrCorruptSnapshot", what, err)
	}
	if s != nil {
		t.Fatalf("%s: a state with the error", what)
	}
}

// TestUnmarshalSnapshotDamage damages a valid snapshot every way a byte can
// be damaged: each byte flipped, each truncation, bytes appended.
func TestUnmarshalSnapshotDamage(t *testing.T) {
	s, end := sampleState(t)
	good := snapshot(t, s, end)
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0xff
		requireCorrupt(t, b, "byte "+strconv.Itoa(i)+" flipped")
		b[i] ^= 0x01 ^ 0xff
		requireCorrupt(t, b, "bit 0 of byte "+strconv.Itoa(i)+" flipped")
	}
	for n := range len(good) {
		requireCorrupt(t, good[:n], "truncated to "+strconv.Itoa(n))
	}
	requireCorrupt(t, append(bytes.Clone(good), 0), "a byte appended")
}

// Offsets in the snapshot of fieldState.
const (
	fEnd      = 6
	fCount    = 14
	fP1       = 18 // producer 1, two batches
	fP1Batch0 = fP1 + producerFixedSize
	fP1Batch1 = fP1Batch0 + batchSize
	fP2       = fP1Batch1 + batchSize // producer 2, no batch left
	fCRC      = fP2 + producerFixedSize
)

func fieldState(t *testing.T) []byte {
	t.Helper()
	s := New(Options{})
	mustApply(t, s, run(1, 3, 10, 0, 2, 3)...) // offsets 0-4
	mustApply(t, s, run(2, 0, 0, 5, 1, 1)...)  // offsets 5-6
	s.TruncateTo(5)
	b := snapshot(t, s, 8)
	if len(b) != fCRC+4 {
		t.Fatalf("snapshot of %d bytes, the offsets above expect %d", len(b), fCRC+4)
	}
	return b
}

// TestUnmarshalSnapshotInvalidFields rewrites one field at a time, with a
// CRC that matches: a snapshot this package cannot have written is corrupt
// even when its CRC holds.
func TestUnmarshalSnapshotInvalidFields(t *testing.T) {
	u64 := func(off int, v int64) func([]byte) []byte {
		return func(b []byte) []byte { binary.BigEndian.PutUint64(b[off:], uint64(v)); return b }
	}
	u32 := func(off int, v int32) func([]byte) []byte {
		return func(b []byte) []byte { binary.BigEndian.PutUint32(b[off:], uint32(v)); return b }
	}
	u16 := func(off int, v int16) func([]byte) []byte {
		return func(b []byte) []byte { binary.BigEndian.PutUint16(b[off:], uint16(v)); return b }
	}
	u8 := func(off int, v byte) func([]byte) []byte {
		return func(b []byte) []byte { b[off] = v; return b }
	}
	cases := []struct {
		name string
		edit func([]byte) []byte
	}{
		{"magic", u8(0, 'X')},
		{"version 0", u16(4, 0)},
		{"version 2", u16(4, 2)},
		{"negative end offset", u64(fEnd, -1)},
		{"end offset below a batch", u64(fEnd, 3)},
		{"producer count beyond the bytes", u32(fCount, math.MaxInt32)},
		{"producer count 0xffffffff", u32(fCount, -1)},
		{"one producer more than written", u32(fCount, 3)},
		{"one producer fewer than written", u32(fCount, 1)},
		{"no producers but bytes", u32(fCount, 0)},
		{"negative producer id", u64(fP1, -1)},
		{"producer ids not ascending", u64(fP2, 1)},
		{"producer ids descending", u64(fP1, 3)},
		{"negative epoch", u16(fP1+8, -1)},
		{"negative next sequence", u32(fP2+10, -1)},
		{"next sequence not after the last batch", u32(fP1+10, 16)},
		{"last offset not the last batch's", u64(fP1+14, 3)},
		{"last timestamp not the last batch's", u64(fP1+22, 99)},
		{"six batches", u8(fP1+30, 6)},
		{"255 batches", u8(fP1+30, 255)},
		{"three batches, two written", u8(fP1+30, 3)},
		{"one batch, two written", u8(fP1+30, 1)},
		{"negative base sequence", u32(fP1Batch0, -1)},
		{"no records", u32(fP1Batch0+4, 0)},
		{"more records than offsets", u32(fP1Batch0+4, 3)},
		{"negative base offset", u64(fP1Batch0+8, -1)},
		{"last offset below base", u64(fP1Batch1+16, 1)},
		{"batches overlapping", u64(fP1Batch1+8, 1)},
		{"batch ending at the end offset", u64(fEnd, 4)},
		{"truncated producer's last offset below -1", u64(fP2+14, -2)},
		{"truncated producer's last offset at the end offset", u64(fP2+14, 8)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.edit(fieldState(t))
			resum(b)
			requireCorrupt(t, b, tc.name)
		})
	}
	// The fixture itself is valid, as is every value at its limit.
	for _, edit := range []func([]byte) []byte{
		func(b []byte) []byte { return b },
		u64(fEnd, 5),               // just past the last batch
		u64(fP2+14, -1),            // truncated producer with nothing below
		u64(fP2+14, 7),             // truncated producer up to end-1
		u32(fP2+10, math.MaxInt32), // any next sequence without a batch
		u32(fP1Batch0, 0),          // sequences need not be consecutive
		u32(fP1Batch1+24, -5),      // any leader epoch
	} {
		b := edit(fieldState(t))
		resum(b)
		if _, _, err := UnmarshalSnapshot(b, Options{}); err != nil {
			t.Fatalf("valid snapshot refused: %v", err)
		}
	}
}

func resum(b []byte) {
	n := len(b) - snapshotCRCSize
	binary.BigEndian.PutUint32(b[n:], crc32.Checksum(b[:n], castagnoli))
}
