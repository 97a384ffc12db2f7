package producer

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/logagent/logagent/record"
)

// NumBatchesToRetain is how many of a producer's latest batches the state
// remembers to recognise resends (Kafka's NUM_BATCHES_TO_RETAIN). A producer
// must keep at most this many batches in flight per partition, counted as a
// window: it sends a batch only once every batch NumBatchesToRetain or more
// before it has its final answer (a success, or an error that is not an
// unknown outcome). Answers to separate requests can come back in any order,
// so "at most 5 requests unanswered" is not enough. A resend of a batch older
// than the window cannot be told apart from a batch out of order, and
// TruncateTo relies on the window too.
const NumBatchesToRetain = 5

// DefaultExpiration is the Expiration used when Options leaves it zero.
// Kafka's producer.id.expiration.ms defaults to one day (KIP-854); this
// keeps a week, as the topics' default retention, so a producer silent for
// a day and a batch resent after it are still told apart.
const DefaultExpiration = 7 * 24 * time.Hour

// ResendWindow is how long after a producer's batch was applied here
// Expire keeps it whatever MaxProducers says: its client may still resend
// a batch whose outcome it did not learn (the Go client's default delivery
// timeout, and Kafka's, is 2 minutes), and a producer forgotten meanwhile
// had that resend appended again. The bound is exceeded by the producers
// active within it.
const ResendWindow = 2 * time.Minute

// DefaultMaxProducers is the MaxProducers used when Options leaves it
// zero. A producer takes 150 to 165 bytes of memory and 67 of snapshot
// (BenchmarkProducerFootprint): 100,000 of them, 15 MB and 7 MB.
const DefaultMaxProducers = 100_000

// ErrInvalidInput is a call the caller should not have made: a batch no
// idempotent producer can have written, a batch below one already applied
// (the log was truncated without TruncateTo), or a snapshot end offset below
// an applied batch. The state is unchanged.
var ErrInvalidInput = errors.New("producer: invalid input")

// Batch is what the state needs of one appended batch of an idempotent
// producer: the fields of its header (record.Header) and where it landed.
type Batch struct {
	ProducerID    int64
	ProducerEpoch int16
	// BaseSequence is the sequence of the batch's first record.
	BaseSequence int32
	// RecordCount is at least 1. The last record's sequence is
	// BaseSequence+RecordCount-1, wrapping past math.MaxInt32 to 0 (Kafka's
	// DefaultRecordBatch.incrementSequence); see LastSequence.
	RecordCount int32
	// BaseOffset and LastOffset are the offsets of the first and last
	// records; LastOffset-BaseOffset >= RecordCount-1.
	BaseOffset int64
	LastOffset int64
	// LeaderEpoch is the epoch of the leader that appended the batch: a
	// duplicate is answered with it, as with the original's offsets.
	LeaderEpoch int32
	// MaxTimestamp is the batch's max_timestamp in milliseconds. The last
	// batch's drives expiry.
	MaxTimestamp int64
}

// LastSequence is the sequence of the batch's last record.
func (b Batch) LastSequence() int32 { return record.AddSequence(b.BaseSequence, int(b.RecordCount-1)) }

// Options configure a State.
type Options struct {
	// Expiration is how long after its last batch's MaxTimestamp a producer
	// is forgotten by Expire (producer.id_expiration). Zero or less means
	// DefaultExpiration.
	Expiration time.Duration
	// MaxProducers bounds the producers Expire keeps
	// (producer.max_per_partition). Zero or less means
	// DefaultMaxProducers.
	MaxProducers int
}

// State is the producer state of one partition. It is not safe for
// concurrent use: one replica loop owns it.
type State struct {
	expiration   time.Duration
	maxProducers int
	producers    map[int64]*entry
	// end is the offset after the last batch applied (or the offset the
	// state was truncated to, or restored as of): a batch below it is one
	// the log cannot hold next.
	end int64
}

// entry is one producer's state.
type entry struct {
	epoch int16
	// batches are the retained batches of epoch, oldest first: at most
	// NumBatchesToRetain, in offset and sequence order. Empty only after a
	// truncation removed all of them (see TruncateTo).
	batches []Batch
	// next is the base sequence the producer's next batch at epoch must
	// have: the one after the last retained batch, or with none left, the
	// base sequence of the oldest one truncated.
	next int32
	// lastOffset and lastTimestamp are the LastOffset and MaxTimestamp of
	// the last retained batch; with no batch left, lastOffset is below the
	// truncation point and lastTimestamp that of the last truncated batch.
	// lastTimestamp drives Expire's expiration; lastOffset, TruncateTo
	// and the order Expire forgets in beyond MaxProducers.
	lastOffset    int64
	lastTimestamp int64
	// seen is when (ms, the replica's clock) a batch of the producer was
	// last applied here, 0 if unknown: Expire keeps a producer at least
	// Expiration after that too, whatever timestamps its records carry.
	// Not in the snapshot.
	seen int64
}

// New returns the state of a partition with an empty log.
func New(opts Options) *State {
	exp := opts.Expiration
	if exp <= 0 {
		exp = DefaultExpiration
	}
	maxProducers := opts.MaxProducers
	if maxProducers <= 0 {
		maxProducers = DefaultMaxProducers
	}
	return &State{expiration: exp, maxProducers: maxProducers, producers: make(map[int64]*entry)}
}

// Verdict is the leader's decision on a produce request of an idempotent
// producer.
type Verdict int

const (
	// Invalid is a request no idempotent producer sends: a negative producer
	// id, epoch or sequence, or no records (the agent answers 400
	// invalid_request). It is also the zero Verdict.
	Invalid Verdict = iota
	// Append: the batch is next in sequence (or from a producer the state
	// does not know, or at a new epoch): append it, then Apply it.
	Append
	// Duplicate: the batch is a resend of one of the producer's retained
	// batches. Append nothing; answer with Decision.Original's offsets and
	// leader epoch, once the original is committed (acks=all), since the
	// original may still be above the high watermark.
	Duplicate
	// OutOfOrderSequence: a gap, or a sequence out of order for the
	// producer's epoch (409 out_of_order_sequence).
	OutOfOrderSequence
	// InvalidProducerEpoch: an epoch older than the producer's current one,
	// from an instance that has been fenced (409 invalid_producer_epoch).
	InvalidProducerEpoch
)

func (v Verdict) String() string {
	switch v {
	case Invalid:
		return "invalid"
	case Append:
		return "append"
	case Duplicate:
		return "duplicate"
	case OutOfOrderSequence:
		return "out_of_order_sequence"
	case InvalidProducerEpoch:
		return "invalid_producer_epoch"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Decision is the outcome of Check.
type Decision struct {
	Verdict Verdict
	// Original is the batch a Duplicate resends.
	Original Batch
	// ExpectedSequence is, for OutOfOrderSequence, the base sequence the
	// producer's next batch must have: 0 for a new epoch.
	ExpectedSequence int32
	// Reason says why, for an error answer; empty for Append.
	Reason string
}

// Check decides on a produce request of count records from producer pid at
// epoch, starting at sequence baseSeq, on the leader before it appends. It
// changes nothing: once the batch is appended, the caller Applies it, before
// it checks the next request (Check sees applied batches only).
//
// The rules (KIP-98, as Kafka's ProducerAppendInfo.checkSequence and
// ProducerStateEntry.findDuplicateBatch apply them):
//   - an unknown producer (never seen, or expired: retention deleting its
//     batches does not forget it, see RemoveBefore) may start at any epoch
//     and sequence;
//   - an epoch below the producer's is InvalidProducerEpoch;
//   - an epoch above it must start at sequence 0, else OutOfOrderSequence;
//   - at the same epoch, a batch with the base and last sequence of a
//     retained batch is a Duplicate of it; one whose base sequence follows
//     the last retained batch's last sequence (wrapping) is appended;
//     anything else is OutOfOrderSequence. A producer whose retained
//     batches were all truncated continues at the base sequence of the
//     oldest of them (TruncateTo).
func (s *State) Check(pid int64, epoch int16, baseSeq, count int32) Decision {
	if pid < 0 || epoch < 0 || baseSeq < 0 || count < 1 {
		return Decision{Verdict: Invalid, Reason: fmt.Sprintf(
			"producer id %d, epoch %d, base sequence %d, record count %d: an idempotent batch has no negative field and at least one record",
			pid, epoch, baseSeq, count)}
	}
	e := s.producers[pid]
	if e == nil {
		return Decision{Verdict: Append}
	}
	switch {
	case epoch < e.epoch:
		return Decision{Verdict: InvalidProducerEpoch, Reason: fmt.Sprintf(
			"producer %d: epoch %d is older than the current epoch %d", pid, epoch, e.epoch)}
	case epoch > e.epoch:
		if baseSeq != 0 {
			return Decision{Verdict: OutOfOrderSequence, ExpectedSequence: 0, Reason: fmt.Sprintf(
				"producer %d: new epoch %d (current %d) must start at sequence 0, not %d", pid, epoch, e.epoch, baseSeq)}
		}
		return Decision{Verdict: Append}
	}
	lastSeq := record.AddSequence(baseSeq, int(count-1))
	for _, b := range e.batches {
		if b.BaseSequence == baseSeq && b.LastSequence() == lastSeq {
			return Decision{Verdict: Duplicate, Original: b, Reason: fmt.Sprintf(
				"producer %d epoch %d: sequences %d-%d were appended at offsets %d-%d",
				pid, epoch, baseSeq, lastSeq, b.BaseOffset, b.LastOffset)}
		}
	}
	if baseSeq != e.next {
		return Decision{Verdict: OutOfOrderSequence, ExpectedSequence: e.next, Reason: fmt.Sprintf(
			"producer %d epoch %d: base sequence %d, expected %d", pid, epoch, baseSeq, e.next)}
	}
	return Decision{Verdict: Append}
}

// Apply records a batch appended to the log: on the leader after the append
// Check allowed, on a follower after appending fetched batches, and while
// rebuilding the state from the log at recovery. It never refuses a batch
// for the rules Check applies: on a follower and at recovery the log is the
// truth, whatever a leader let into it, and a replica's state must follow
// its log. A batch with another epoch than the producer's (older ones too,
// as Kafka's replication path accepts them) replaces the producer's retained
// batches; otherwise it is added and the oldest beyond NumBatchesToRetain is
// dropped.
//
// It returns ErrInvalidInput, changing nothing, for a batch that breaks the
// invariants of Batch or lies below a batch already applied.
func (s *State) Apply(b Batch) error {
	if err := checkBatch(b); err != nil {
		return err
	}
	if b.BaseOffset < s.end {
		return fmt.Errorf("%w: batch at offset %d is below the end %d of the batches applied", ErrInvalidInput, b.BaseOffset, s.end)
	}
	e := s.producers[b.ProducerID]
	if e == nil {
		e = &entry{epoch: b.ProducerEpoch}
		s.producers[b.ProducerID] = e
	}
	if e.epoch != b.ProducerEpoch {
		// Kafka's ProducerStateEntry.maybeUpdateProducerEpoch: the batches
		// of another epoch can no longer be resent (the instance that sent
		// them is fenced), and duplicates are only looked for in the
		// current epoch.
		e.epoch = b.ProducerEpoch
		e.batches = e.batches[:0]
	}
	if len(e.batches) == NumBatchesToRetain {
		copy(e.batches, e.batches[1:])
		e.batches = e.batches[:NumBatchesToRetain-1]
	}
	e.batches = append(e.batches, b)
	e.next = record.AddSequence(b.LastSequence(), int(1))
	e.lastOffset, e.lastTimestamp = b.LastOffset, b.MaxTimestamp
	s.end = b.LastOffset + 1
	return nil
}

// checkBatch checks the invariants of a Batch, those Apply requires and
// UnmarshalSnapshot checks on what it reads.
func checkBatch(b Batch) error {
	switch {
	case b.ProducerID < 0 || b.ProducerEpoch < 0 || b.BaseSequence < 0:
		return fmt.Errorf("%w: producer id %d, epoch %d, base sequence %d: negative",
			ErrInvalidInput, b.ProducerID, b.ProducerEpoch, b.BaseSequence)
	case b.RecordCount < 1:
		return fmt.Errorf("%w: record count %d", ErrInvalidInput, b.RecordCount)
	case b.BaseOffset < 0 || b.LastOffset < b.BaseOffset || b.LastOffset == math.MaxInt64:
		return fmt.Errorf("%w: offsets %d-%d", ErrInvalidInput, b.BaseOffset, b.LastOffset)
	case b.LastOffset-b.BaseOffset < int64(b.RecordCount)-1:
		return fmt.Errorf("%w: %d records do not fit offsets %d-%d", ErrInvalidInput, b.RecordCount, b.BaseOffset, b.LastOffset)
	}
	return nil
}

// TruncateTo records that the log was truncated to offset: every batch with
// a record at or above offset vanished, and the next batch is appended at
// offset. A producer's retained batches at or above offset are dropped, and
// it continues after the last one left, as it would in a state rebuilt from
// the log.
//
// A producer left with no retained batch is not forgotten: it keeps its
// epoch and continues at the base sequence of the oldest batch truncated.
// That is where a state rebuilt from the log would have it continue,
// because a producer keeps at most NumBatchesToRetain batches in flight: a
// batch of its epoch leaves the retained ones only when the
// NumBatchesToRetain-th batch after it is appended, which the producer
// sends only once the older batch has its final answer. Being in the log,
// that answer was a success, so the batch is committed, below the high
// watermark, and a truncation never goes below the high watermark
// (KIP-101). So the producer's batch before the oldest truncated one, if
// it has one at this epoch, is still in the log and ends just before that
// one's base sequence; every later batch is gone and will be resent, the
// oldest first. (After an unclean election cut committed batches, the
// producer may get OutOfOrderSequence: its acknowledged records are lost
// anyway.)
//
// Forgetting the producer instead would accept its next batch at any
// sequence, which breaks both: a batch it sent past the truncated ones
// would be appended before them, leaving a gap, and an older, fenced
// instance of it could resend a batch of the older epoch that is still in
// the log below offset but was never answered, and have it appended twice.
// Kafka, which rebuilds its state from the log on truncation, still sees the
// older epoch and catches that resend as a duplicate; keeping the epoch
// fences it.
//
// A negative offset is taken as 0.
func (s *State) TruncateTo(offset int64) {
	offset = max(offset, 0)
	for _, e := range s.producers {
		n := len(e.batches)
		for n > 0 && e.batches[n-1].LastOffset >= offset {
			n--
		}
		switch {
		case n == len(e.batches) && e.lastOffset < offset:
			// Nothing of the producer's at or above offset.
		case n > 0:
			last := e.batches[n-1]
			e.batches = e.batches[:n]
			e.next = record.AddSequence(last.LastSequence(), int(1))
			e.lastOffset, e.lastTimestamp = last.LastOffset, last.MaxTimestamp
		default:
			if len(e.batches) > 0 {
				e.next = e.batches[0].BaseSequence
				e.batches = e.batches[:0]
			}
			// Batches of older epochs may be left, up to offset-1.
			e.lastOffset = min(e.lastOffset, offset-1)
		}
	}
	s.end = min(s.end, offset)
}

// RemoveBefore records that the log now starts at logStartOffset (retention
// deleted what was below it). Every producer keeps its epoch, next sequence
// and retained batches, also those below it: a resend of one is still a
// duplicate, answered with offsets the log no longer holds, and a batch out
// of order is still refused. Only Expire forgets producers. This is Kafka's
// rule since KIP-360 (ProducerStateManager.onLogStartOffsetIncremented
// leaves the producers alone): retention on a busy partition can delete a
// producer's batches seconds after they were written, by other producers'
// traffic, and a forgotten producer still writing would have its resend
// after an unknown outcome appended twice, and its batches in flight
// accepted at any sequence, out of order.
func (s *State) RemoveBefore(logStartOffset int64) {
	s.end = max(s.end, logStartOffset)
}

// Expire forgets every producer whose last batch's MaxTimestamp is
// Expiration or more before now (Kafka's isProducerExpired), and whose
// last batch this state applied (Seen) that long ago too, so the state
// stays bounded by the producers active within Expiration. The second
// condition keeps a producer whose records carry old timestamps (a
// backfill, a mirror keeping its source's) for as long as one whose
// records are new: forgotten right after its append, its resend of a
// batch whose outcome it did not learn was appended again. A forgotten
// producer's next batch is accepted at any sequence.
//
// Then, beyond MaxProducers, it forgets the least recently active ones,
// those whose last batch is lowest in the log (the lower id first among
// equals), and returns how many. The log's order is the same on every
// replica and after a restart, where Seen is not (it is not in the
// snapshot: a backfill still writing, its timestamps old, was forgotten
// first after one), and is not the clients' clocks (a producer that wrote
// once with its clock an hour ahead was kept over one writing now, which
// was forgotten between its batches). Clients that make a producer
// per request or per process (a script's logagent produce, a serverless
// function) leave one behind each time, and a week of them took memory
// and snapshot bytes without bound (Kafka shortened its expiry to a day
// for the same reason, KIP-854, and has no bound either).
func (s *State) Expire(now time.Time) (overMax int) {
	// Subtracting from now rather than from each timestamp cannot overflow
	// for any batch timestamp, however far in the past a producer put it.
	cutoff := now.UnixMilli() - s.expiration.Milliseconds()
	for pid, e := range s.producers {
		if e.activeAt() <= cutoff {
			delete(s.producers, pid)
		}
	}
	overMax = len(s.producers) - s.maxProducers
	if overMax <= 0 {
		return 0
	}
	resendFrom := now.UnixMilli() - ResendWindow.Milliseconds()
	type last struct {
		pid    int64
		offset int64
	}
	all := make([]last, 0, len(s.producers))
	for pid, e := range s.producers {
		if e.seen == 0 || e.seen < resendFrom {
			all = append(all, last{pid, e.lastOffset})
		}
	}
	slices.SortFunc(all, func(a, b last) int { return cmp.Or(cmp.Compare(a.offset, b.offset), cmp.Compare(a.pid, b.pid)) })
	overMax = min(overMax, len(all))
	for _, a := range all[:overMax] {
		delete(s.producers, a.pid)
	}
	return overMax
}

// activeAt is when (ms) the producer was last active: its last batch's
// MaxTimestamp, or when a batch of it was last applied here if later.
func (e *entry) activeAt() int64 {
	if e.seen != 0 {
		return max(e.lastTimestamp, e.seen)
	}
	return e.lastTimestamp
}

// Seen records that producer pid's latest batch was applied at now.
func (s *State) Seen(pid int64, now time.Time) {
	if e := s.producers[pid]; e != nil {
		e.seen = now.UnixMilli()
	}
}

// Len is the number of producers the state knows.
func (s *State) Len() int { return len(s.producers) }
