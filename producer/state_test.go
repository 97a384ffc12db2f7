package producer

import (
	"errors"
	"math"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/logagent/logagent/record"
)

// run builds batches of producer pid at epoch, one per count, with
// consecutive sequences from seq and consecutive offsets from offset; each
// batch's MaxTimestamp is its base offset, its leader epoch 7.
func run(pid int64, epoch int16, seq int32, offset int64, counts ...int32) []Batch {
	var bs []Batch
	for _, c := range counts {
		bs = append(bs, Batch{
			ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq, RecordCount: c,
			BaseOffset: offset, LastOffset: offset + int64(c) - 1, LeaderEpoch: 7, MaxTimestamp: offset,
		})
		seq = record.AddSequence(seq, int(c))
		offset += int64(c)
	}
	return bs
}

func cat(runs ...[]Batch) []Batch {
	var all []Batch
	for _, r := range runs {
		all = append(all, r...)
	}
	return all
}

func mustApply(t testing.TB, s *State, bs ...Batch) {
	t.Helper()
	for _, b := range bs {
		if err := s.Apply(b); err != nil {
			t.Fatalf("Apply(%+v): %v", b, err)
		}
	}
}

type check struct {
	pid      int64
	epoch    int16
	seq      int32
	count    int32
	verdict  Verdict
	original Batch // for Duplicate
	expected int32 // for OutOfOrderSequence
}

func (c check) run(t *testing.T, s *State) {
	t.Helper()
	d := s.Check(c.pid, c.epoch, c.seq, c.count)
	if d.Verdict != c.verdict || d.Original != c.original || d.ExpectedSequence != c.expected {
		t.Fatalf("Check(pid %d, epoch %d, seq %d, count %d) = %v original %+v expected seq %d (%s); want %v original %+v expected seq %d",
			c.pid, c.epoch, c.seq, c.count, d.Verdict, d.Original, d.ExpectedSequence, d.Reason, c.verdict, c.original, c.expected)
	}
	if (d.Verdict == Append) != (d.Reason == "") {
		t.Fatalf("verdict %v with reason %q: every refusal, and only a refusal, says why", d.Verdict, d.Reason)
	}
}

func TestCheck(t *testing.T) {
	seven := run(1, 0, 0, 0, 1, 2, 3, 1, 1, 2, 1)  // sequences 0, 1-2, 3-5, 6, 7, 8-9, 10
	wrap := run(1, 0, math.MaxInt32-2, 0, 1, 3, 1) // MaxInt32-2, MaxInt32-1..0, 1
	bump := cat(run(1, 0, 0, 0, 2, 2), run(1, 1, 0, 4, 1))
	cases := []struct {
		name    string
		applied []Batch
		check
	}{
		{"unknown producer at any epoch and sequence", nil, check{pid: 5, epoch: 3, seq: 17, count: 2, verdict: Append}},
		{"unknown producer at sequence 0", seven, check{pid: 2, seq: 0, count: 1, verdict: Append}},
		{"negative producer id", nil, check{pid: -1, count: 1, verdict: Invalid}},
		{"negative epoch", nil, check{pid: 1, epoch: -1, count: 1, verdict: Invalid}},
		{"negative sequence", nil, check{pid: 1, seq: -1, count: 1, verdict: Invalid}},
		{"no records", nil, check{pid: 1, count: 0, verdict: Invalid}},
		{"next in sequence", seven, check{pid: 1, seq: 11, count: 4, verdict: Append}},
		{"gap", seven, check{pid: 1, seq: 12, count: 1, verdict: OutOfOrderSequence, expected: 11}},
		{"behind, inside the last batch", seven, check{pid: 1, seq: 9, count: 2, verdict: OutOfOrderSequence, expected: 11}},
		{"duplicate of the last batch", seven, check{pid: 1, seq: 10, count: 1, verdict: Duplicate, original: seven[6]}},
		{"duplicate of the 5th-last batch", seven, check{pid: 1, seq: 3, count: 3, verdict: Duplicate, original: seven[2]}},
		{"resend of the 6th-last batch", seven, check{pid: 1, seq: 1, count: 2, verdict: OutOfOrderSequence, expected: 11}},
		{"same base, fewer records than a retained batch", seven, check{pid: 1, seq: 3, count: 2, verdict: OutOfOrderSequence, expected: 11}},
		{"same base, more records than a retained batch", seven, check{pid: 1, seq: 8, count: 3, verdict: OutOfOrderSequence, expected: 11}},
		{"older epoch, even a retained batch's sequences", bump, check{pid: 1, epoch: 0, seq: 2, count: 2, verdict: InvalidProducerEpoch}},
		{"newer epoch at sequence 0", seven, check{pid: 1, epoch: 1, seq: 0, count: 3, verdict: Append}},
		{"newer epoch not at sequence 0", seven, check{pid: 1, epoch: 1, seq: 11, count: 1, verdict: OutOfOrderSequence, expected: 0}},
		{"after an epoch bump: next", bump, check{pid: 1, epoch: 1, seq: 1, count: 1, verdict: Append}},
		{"after an epoch bump: duplicate of the new epoch's batch", bump, check{pid: 1, epoch: 1, seq: 0, count: 1, verdict: Duplicate, original: bump[2]}},
		{"after an epoch bump: the older epoch's batches are dropped", bump, check{pid: 1, epoch: 1, seq: 0, count: 2, verdict: OutOfOrderSequence, expected: 1}},
		{"wrap: next after a batch ending past MaxInt32", wrap, check{pid: 1, seq: 2, count: 1, verdict: Append}},
		{"wrap: duplicate of a batch spanning MaxInt32", wrap, check{pid: 1, seq: math.MaxInt32 - 1, count: 3, verdict: Duplicate, original: wrap[1]}},
		{"wrap: a prefix of a batch spanning MaxInt32", wrap, check{pid: 1, seq: math.MaxInt32 - 1, count: 2, verdict: OutOfOrderSequence, expected: 2}},
		{"wrap: 0 follows MaxInt32", run(1, 0, math.MaxInt32-1, 0, 2), check{pid: 1, seq: 0, count: 1, verdict: Append}},
		{"wrap: MaxInt32+1 is not 1", run(1, 0, math.MaxInt32-1, 0, 2), check{pid: 1, seq: 1, count: 1, verdict: OutOfOrderSequence, expected: 0}},
		{"wrap: a batch ending exactly at MaxInt32", run(1, 0, 0, 0, 1), check{pid: 1, seq: 1, count: math.MaxInt32, verdict: Append}},
		// A follower follows its log: a batch of an older epoch (in a log
		// an unclean election left) becomes the producer's state.
		{"an applied older epoch is the current one", cat(bump, run(1, 0, 4, 5, 1)), check{pid: 1, epoch: 0, seq: 5, count: 1, verdict: Append}},
		{"an applied gap is followed", cat(run(1, 0, 0, 0, 1), run(1, 0, 9, 1, 1)), check{pid: 1, seq: 10, count: 1, verdict: Append}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Options{})
			mustApply(t, s, tc.applied...)
			tc.check.run(t, s)
		})
	}
}

func TestLastSequence(t *testing.T) {
	cases := []struct {
		base, count, want int32
	}{
		{0, 1, 0},
		{5, 3, 7},
		{math.MaxInt32, 1, math.MaxInt32},
		{math.MaxInt32, 2, 0},
		{math.MaxInt32 - 1, 4, 1},
		{math.MaxInt32, math.MaxInt32, math.MaxInt32 - 2},
	}
	for _, tc := range cases {
		if got := (Batch{BaseSequence: tc.base, RecordCount: tc.count}).LastSequence(); got != tc.want {
			t.Errorf("base %d count %d: last sequence %d, want %d", tc.base, tc.count, got, tc.want)
		}
	}
}

func TestApplyRefusesInvalidInput(t *testing.T) {
	good := Batch{ProducerID: 1, BaseSequence: 0, RecordCount: 2, BaseOffset: 10, LastOffset: 11}
	cases := []struct {
		name   string
		mutate func(*Batch)
	}{
		{"negative producer id", func(b *Batch) { b.ProducerID = -1 }},
		{"negative epoch", func(b *Batch) { b.ProducerEpoch = -1 }},
		{"negative sequence", func(b *Batch) { b.BaseSequence = -1 }},
		{"no records", func(b *Batch) { b.RecordCount = 0 }},
		{"negative offset", func(b *Batch) { b.BaseOffset, b.LastOffset = -2, -1 }},
		{"last offset before base", func(b *Batch) { b.LastOffset = 9 }},
		{"more records than offsets", func(b *Batch) { b.RecordCount = 3 }},
		{"last offset MaxInt64", func(b *Batch) { b.LastOffset = math.MaxInt64 }},
		{"below a batch applied", func(b *Batch) { b.BaseOffset, b.LastOffset = 5, 6 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Options{})
			mustApply(t, s, run(2, 0, 0, 0, 4, 3)...) // offsets 0-6
			before := snapshot(t, s, 7)
			b := good
			tc.mutate(&b)
			if err := s.Apply(b); !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("Apply(%+v) = %v, want ErrInvalidInput", b, err)
			}
			if after := snapshot(t, s, 7); string(after) != string(before) {
				t.Fatal("a refused Apply changed the state")
			}
		})
	}
	s := New(Options{})
	mustApply(t, s, good)
}

func TestTruncateTo(t *testing.T) {
	// Producer 1: seven batches at offsets 0-10 (the last five retained:
	// sequences 3-5 at 3-5, 6, 7, 8-9 at 8-9, 10 at 10); producer 2: two
	// batches at 11-12; producer 3 at epoch 0 at offset 13, then epoch 1
	// at 14.
	log := cat(run(1, 0, 0, 0, 1, 2, 3, 1, 1, 2, 1), run(2, 4, 100, 11, 1, 1), run(3, 0, 0, 13, 1), run(3, 1, 0, 14, 1))
	cases := []struct {
		name   string
		offset int64
		checks []check
	}{
		{"at the end: nothing changes", 15, []check{
			{pid: 1, seq: 11, count: 1, verdict: Append},
			{pid: 1, seq: 3, count: 3, verdict: Duplicate, original: log[2]},
			{pid: 2, epoch: 4, seq: 102, count: 1, verdict: Append},
		}},
		{"inside the retained batches", 8, []check{
			{pid: 1, seq: 8, count: 2, verdict: Append}, // the truncated batch, resent
			{pid: 1, seq: 10, count: 1, verdict: OutOfOrderSequence, expected: 8},
			{pid: 1, seq: 7, count: 1, verdict: Duplicate, original: log[4]},
			{pid: 1, seq: 3, count: 3, verdict: Duplicate, original: log[2]},
		}},
		{"inside a batch: it vanishes", 9, []check{
			{pid: 1, seq: 8, count: 2, verdict: Append},
		}},
		// Producer 1's batches at 0-2 are still in the log: it continues
		// with the oldest batch truncated, not with one it sent after it.
		{"below every retained batch: the epoch and the sequence stay", 3, []check{
			{pid: 1, seq: 3, count: 3, verdict: Append},
			{pid: 1, seq: 6, count: 1, verdict: OutOfOrderSequence, expected: 3},
			{pid: 1, seq: 1, count: 2, verdict: OutOfOrderSequence, expected: 3},
			{pid: 1, epoch: 1, seq: 3, count: 1, verdict: OutOfOrderSequence, expected: 0},
			{pid: 1, epoch: 1, seq: 0, count: 1, verdict: Append},
		}},
		// The fenced instance of producer 3 at epoch 0 never had an answer
		// for its batch at offset 13, which is still in the log: had the
		// state forgotten producer 3, the resend would be appended twice.
		{"below a new epoch: the older one stays fenced", 14, []check{
			{pid: 3, epoch: 0, seq: 0, count: 1, verdict: InvalidProducerEpoch},
			{pid: 3, epoch: 1, seq: 0, count: 1, verdict: Append},
			{pid: 3, epoch: 1, seq: 1, count: 1, verdict: OutOfOrderSequence, expected: 0},
			{pid: 3, epoch: 2, seq: 0, count: 1, verdict: Append},
		}},
		{"to 0", 0, []check{
			{pid: 1, seq: 3, count: 1, verdict: Append},
			{pid: 2, epoch: 4, seq: 100, count: 1, verdict: Append},
			{pid: 3, epoch: 0, seq: 0, count: 1, verdict: InvalidProducerEpoch},
		}},
		{"to a negative offset, as to 0", -5, []check{
			{pid: 1, seq: 3, count: 1, verdict: Append},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Options{})
			mustApply(t, s, log...)
			s.TruncateTo(tc.offset)
			for _, c := range tc.checks {
				c.run(t, s)
			}
			if s.Len() != 3 {
				t.Fatalf("Len %d after TruncateTo, want 3: truncation forgets no producer", s.Len())
			}
			// The next batch goes at the truncation point.
			at := max(tc.offset, 0)
			mustApply(t, s, run(9, 0, 0, at, 1)...)
		})
	}
}

// TestTruncateToRepeatedly cuts the same producers again and again: once
// all its batches are gone, a producer's next sequence stays that of the
// oldest one truncated.
func TestTruncateToRepeatedly(t *testing.T) {
	s := New(Options{})
	mustApply(t, s, cat(run(1, 0, 0, 0, 1, 2, 3, 1, 1, 2, 1), run(2, 4, 100, 11, 1, 1))...)
	for _, step := range []struct {
		offset int64
		checks []check
	}{
		{12, []check{{pid: 2, epoch: 4, seq: 101, count: 1, verdict: Append}}},
		{11, []check{
			{pid: 2, epoch: 4, seq: 100, count: 1, verdict: Append},
			{pid: 2, epoch: 4, seq: 101, count: 1, verdict: OutOfOrderSequence, expected: 100},
		}},
		{5, []check{
			{pid: 1, seq: 3, count: 3, verdict: Append},
			{pid: 2, epoch: 4, seq: 100, count: 1, verdict: Append},
		}},
		{1, []check{
			{pid: 1, seq: 3, count: 3, verdict: Append},
			{pid: 1, seq: 1, count: 2, verdict: OutOfOrderSequence, expected: 3},
			{pid: 2, epoch: 4, seq: 100, count: 1, verdict: Append},
		}},
	} {
		s.TruncateTo(step.offset)
		for _, c := range step.checks {
			c.run(t, s)
		}
	}
}

// TestRemoveBeforeKeepsProducers: retention deleting a producer's batches
// (the log start moves past them) does not forget it, as in Kafka since
// KIP-360. Forgotten, its resend of a batch whose outcome it did not learn
// was appended again, and a batch of it sent past a gap was appended out of
// order, since an unknown producer starts at any sequence.
func TestRemoveBeforeKeepsProducers(t *testing.T) {
	p1 := run(1, 0, 0, 0, 1, 1, 1, 1, 1) // sequences 0-4 at offsets 0-4
	s := New(Options{})
	mustApply(t, s, p1...)
	s.RemoveBefore(5)
	checks := []check{
		{pid: 1, seq: 4, count: 1, verdict: Duplicate, original: p1[4]},
		{pid: 1, seq: 0, count: 1, verdict: Duplicate, original: p1[0]},
		{pid: 1, seq: 7, count: 1, verdict: OutOfOrderSequence, expected: 5},
		{pid: 1, seq: 5, count: 1, verdict: Append},
		{pid: 1, epoch: 1, seq: 3, count: 1, verdict: OutOfOrderSequence, expected: 0},
	}
	for _, c := range checks {
		c.run(t, s)
	}
	if s.Len() != 1 {
		t.Fatalf("Len %d after RemoveBefore(5), want 1: retention forgot the producer", s.Len())
	}
	// The snapshot holds it, with every batch below the log start.
	b, err := s.MarshalSnapshot(nil, 5)
	if err != nil {
		t.Fatal(err)
	}
	restored, end, err := UnmarshalSnapshot(b, Options{})
	if err != nil || end != 5 || restored.Len() != 1 {
		t.Fatalf("UnmarshalSnapshot: end %d, %d producers, %v; want 5, 1, nil", end, restored.Len(), err)
	}
	for _, c := range checks {
		c.run(t, restored)
	}

	// The log now starts at 20: the next batch cannot be below it.
	s.RemoveBefore(20)
	if err := s.Apply(run(2, 0, 0, 19, 1)[0]); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("Apply below the log start = %v, want ErrInvalidInput", err)
	}
	mustApply(t, s, run(1, 0, 5, 20, 1)...)
	(check{pid: 1, seq: 6, count: 1, verdict: Append}).run(t, s)

	// A producer whose batches were all truncated keeps its epoch and
	// next sequence when the log start passes the truncation point.
	s = New(Options{})
	mustApply(t, s, run(1, 2, 0, 0, 1, 1)...)
	s.TruncateTo(1)
	s.TruncateTo(0)
	s.RemoveBefore(0)
	s.RemoveBefore(3)
	for _, c := range []check{
		{pid: 1, epoch: 2, seq: 1, count: 1, verdict: OutOfOrderSequence, expected: 0},
		{pid: 1, epoch: 1, seq: 0, count: 1, verdict: InvalidProducerEpoch},
		{pid: 1, epoch: 2, seq: 0, count: 1, verdict: Append},
	} {
		c.run(t, s)
	}

	// Only Expire forgets: a producer retention deleted goes once its last
	// batch is Expiration old.
	s = New(Options{Expiration: time.Hour})
	mustApply(t, s, run(1, 0, 0, 0, 1)...) // MaxTimestamp 0
	s.RemoveBefore(1)
	s.Expire(time.UnixMilli(time.Hour.Milliseconds() - 1))
	if s.Len() != 1 {
		t.Fatalf("Len %d: expired before its Expiration", s.Len())
	}
	s.Expire(time.UnixMilli(time.Hour.Milliseconds()))
	if s.Len() != 0 {
		t.Fatalf("Len %d: not expired at its Expiration", s.Len())
	}
}

func TestExpire(t *testing.T) {
	const hour = int64(time.Hour / time.Millisecond)
	at := func(ms int64) time.Time { return time.UnixMilli(ms) }
	batch := func(pid int64, offset, ts int64) Batch {
		return Batch{ProducerID: pid, RecordCount: 1, BaseSequence: int32(offset), BaseOffset: offset, LastOffset: offset, MaxTimestamp: ts}
	}
	cases := []struct {
		name    string
		opts    Options
		batches []Batch
		truncTo int64 // TruncateTo before Expire unless 0
		now     int64
		len     int
	}{
		{"just younger than the expiration", Options{Expiration: time.Hour}, []Batch{batch(1, 0, 1000)}, 0, 1000 + hour - 1, 1},
		{"exactly the expiration", Options{Expiration: time.Hour}, []Batch{batch(1, 0, 1000)}, 0, 1000 + hour, 0},
		{"the last batch counts, not the largest timestamp", Options{Expiration: time.Hour},
			[]Batch{batch(1, 0, 5*hour), batch(1, 1, 1000)}, 0, 1000 + hour, 0},
		{"each producer by its own last batch", Options{Expiration: time.Hour},
			[]Batch{batch(1, 0, 0), batch(2, 1, hour)}, 0, hour + 1, 1},
		{"zero expiration is the default", Options{}, []Batch{batch(1, 0, 0)}, 0, 7*24*hour - 1, 1},
		{"default expiration reached", Options{}, []Batch{batch(1, 0, 0)}, 0, 7 * 24 * hour, 0},
		{"no overflow for the smallest timestamp", Options{Expiration: time.Hour}, []Batch{batch(1, 0, math.MinInt64)}, 0, 0, 0},
		{"no overflow for the largest timestamp", Options{Expiration: time.Hour}, []Batch{batch(1, 0, math.MaxInt64)}, 0, math.MaxInt64 / 2, 1},
		{"after a truncation, the last batch left counts", Options{Expiration: time.Hour},
			[]Batch{batch(1, 0, 1000), batch(1, 1, 5*hour)}, 1, 1000 + hour, 0},
		{"with every batch truncated, the last truncated one counts", Options{Expiration: time.Hour},
			[]Batch{batch(1, 5, 1000), batch(1, 6, 5*hour)}, 5, 5*hour + hour - 1, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := New(tc.opts)
			mustApply(t, s, tc.batches...)
			if tc.truncTo != 0 {
				s.TruncateTo(tc.truncTo)
			}
			s.Expire(at(tc.now))
			if s.Len() != tc.len {
				t.Fatalf("Len %d after Expire, want %d", s.Len(), tc.len)
			}
		})
	}
	// A forgotten producer starts again at any sequence.
	s := New(Options{Expiration: time.Hour})
	mustApply(t, s, run(1, 3, 0, 0, 1, 1)...)
	s.Expire(at(2 + hour))
	check{pid: 1, epoch: 0, seq: 99, count: 1, verdict: Append}.run(t, s)
}

// TestExpireBeyondMaxProducers: past MaxProducers, Expire forgets the
// least recently active producers, those whose last batch is lowest in the
// log (the lower id first among equals), and says how many. A producer per
// request or per process left one entry each for a week, without bound.
// The order is the log's, not the clients' clocks nor Seen: a producer
// that wrote once with its clock an hour ahead was kept over one writing
// now, and after a restart (Seen is not in the snapshot) a backfill still
// writing was forgotten before producers idle since.
func TestExpireBeyondMaxProducers(t *testing.T) {
	type appended struct{ pid, ts int64 }
	cases := []struct {
		name     string
		max      int
		appends  []appended // one batch each, in log order
		truncate int64      // TruncateTo this offset after the appends, if not 0
		restart  bool       // through a snapshot before Expire
		resend   bool       // Expire within ResendWindow of the appends
		forgot   int
		kept     []int64
	}{
		{"under the bound", 5, []appended{{1, 10}, {3, 20}, {5, 30}, {4, 40}, {2, 50}}, 0, false, false, 0, []int64{1, 2, 3, 4, 5}},
		{"the least recently active go", 3, []appended{{1, 10}, {3, 20}, {5, 30}, {4, 40}, {2, 50}}, 0, false, false, 2, []int64{2, 4, 5}},
		{"the last append counts, whatever its timestamp", 3, []appended{{3, 20}, {5, 30}, {4, 40}, {2, 50}, {1, 10}}, 0, false, false, 2, []int64{1, 2, 4}},
		// Now is 2 min in: producer 1 wrote once with its clock an hour ahead,
		// 2 is writing now.
		{"a timestamp ahead of the clock is no activity", 1, []appended{{1, 3_600_100}, {2, 10}}, 0, false, false, 1, []int64{2}},
		// Producer 2 is a backfill (old timestamps) still writing.
		{"the same order after a restart", 1, []appended{{1, 90}, {2, 10}}, 0, true, false, 1, []int64{2}},
		// Every batch at or above offset 1 cut: 2 and 3 continue from
		// the truncation point, as 1 does.
		{"the lower id first among equals", 2, []appended{{1, 10}, {2, 20}, {3, 30}}, 1, false, false, 1, []int64{2, 3}},
		// A producer's client may resend what it appended within
		// ResendWindow: none is forgotten, whatever the bound.
		{"appended within the resend window", 1, []appended{{1, 10}, {2, 20}, {3, 30}}, 0, false, true, 0, []int64{1, 2, 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{Expiration: time.Hour, MaxProducers: tc.max}
			s := New(opts)
			for i, a := range tc.appends {
				mustApply(t, s, Batch{ProducerID: a.pid, RecordCount: 1, BaseOffset: int64(i), LastOffset: int64(i), MaxTimestamp: a.ts})
				s.Seen(a.pid, time.UnixMilli(50+int64(i))) // as the replica does, on its clock
			}
			if tc.truncate != 0 {
				s.TruncateTo(tc.truncate)
			}
			if tc.restart {
				b, err := s.MarshalSnapshot(nil, int64(len(tc.appends)))
				if err != nil {
					t.Fatal(err)
				}
				if s, _, err = UnmarshalSnapshot(b, opts); err != nil {
					t.Fatal(err)
				}
			}
			now := time.UnixMilli(100).Add(ResendWindow)
			if tc.resend {
				now = time.UnixMilli(100)
			}
			if got := s.Expire(now); got != tc.forgot {
				t.Errorf("Expire forgot %d beyond the bound, want %d", got, tc.forgot)
			}
			var kept []int64
			for pid := range int64(len(tc.appends)) + 1 {
				if _, ok := s.producers[pid]; ok {
					kept = append(kept, pid)
				}
			}
			if !slices.Equal(kept, tc.kept) {
				t.Fatalf("kept producers %v, want %v", kept, tc.kept)
			}
		})
	}
	if s := New(Options{}); s.maxProducers != DefaultMaxProducers {
		t.Errorf("zero MaxProducers is %d, want the default %d", s.maxProducers, DefaultMaxProducers)
	}
}

// TestRetainsFiveBatches walks a producer through 20 batches, checking after
// each that exactly its last five are recognised as duplicates.
func TestRetainsFiveBatches(t *testing.T) {
	s := New(Options{})
	bs := run(1, 0, math.MaxInt32-10, 0, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5)
	for i, b := range bs {
		mustApply(t, s, b)
		for j := range i + 1 {
			o := bs[j]
			want := check{pid: 1, seq: o.BaseSequence, count: o.RecordCount, verdict: Duplicate, original: o}
			if j < i+1-NumBatchesToRetain {
				want = check{pid: 1, seq: o.BaseSequence, count: o.RecordCount, verdict: OutOfOrderSequence, expected: record.AddSequence(b.LastSequence(), int(1))}
			}
			want.run(t, s)
		}
	}
}

// BenchmarkProducerFootprint reports what one producer of one batch costs
// the state (heap bytes) and its snapshot (bytes), over 100,000 of them:
// the figures producer.max_per_partition's documentation gives.
func BenchmarkProducerFootprint(b *testing.B) {
	const n = 100_000
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		s := New(Options{MaxProducers: n})
		for i := range int64(n) {
			if err := s.Apply(Batch{ProducerID: i, RecordCount: 1, BaseOffset: i, LastOffset: i, LeaderEpoch: 1, MaxTimestamp: 1}); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		snap, err := s.MarshalSnapshot(nil, n)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/producer")
		b.ReportMetric(float64(len(snap))/n, "snapshot-B/producer")
		runtime.KeepAlive(s)
	}
}
