package producer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/testseed"
	"github.com/logagent/logagent/record"
)

// The property test drives a State and a reference model with the same
// random operations and checks after each one that they decide every
// request alike. The model keeps every batch a producer appended since it
// was last forgotten and applies the contract's rules to that history
// directly; the State keeps five batches. Around them, simulated producers
// behave as the contract asks of them (a window of five batches in flight,
// resends in order with the same sequences, a new instance bumping the
// epoch while the old one may still resend), the log is truncated above its
// high watermark, and the test checks that the log the State lets through
// never holds a record twice, unless Expire forgot its producer in between,
// which the contract allows (retention does not forget producers:
// RemoveBefore).

// modelProducer is one producer in the model.
type modelProducer struct {
	epoch int16
	// hist is every batch of the producer applied since the model last
	// forgot it and not truncated, in log order.
	hist []Batch
	// floor: hist[:floor] are not retained any more, because a truncation
	// cut the window of retained batches down (or to nothing) and the
	// batches it once dropped do not come back.
	floor int
	// tombNext and tombTS stand for the last batch once a truncation has
	// cut every retained one: the producer continues at tombNext, the base
	// sequence of the oldest batch cut; tombTS is the last batch's
	// MaxTimestamp. (Where its batches are does not matter: retention,
	// which removes them from the log's start, does not forget producers.)
	tombNext int32
	tombTS   int64
}

// retained is the model's rule for the batches a resend is a duplicate of:
// the last five of the producer's trailing run of batches at its epoch.
func (m *modelProducer) retained() []Batch {
	i := len(m.hist)
	for i > m.floor && m.hist[i-1].ProducerEpoch == m.epoch {
		i--
	}
	return m.hist[max(i, len(m.hist)-5):]
}

func (m *modelProducer) lastTimestamp() int64 {
	if r := m.retained(); len(r) > 0 {
		return r[len(r)-1].MaxTimestamp
	}
	return m.tombTS
}

type model struct {
	producers map[int64]*modelProducer
	expire    int64 // ms
	cutAll    int   // producers a truncation left without a retained batch
}

// kafkaIncrement is Kafka's DefaultRecordBatch.incrementSequence, written
// as Kafka writes it rather than as the State does.
func kafkaIncrement(seq, inc int32) int32 {
	if seq > math.MaxInt32-inc {
		return inc - (math.MaxInt32 - seq) - 1
	}
	return seq + inc
}

func (md *model) decide(pid int64, epoch int16, seq, count int32) Decision {
	if pid < 0 || epoch < 0 || seq < 0 || count <= 0 {
		return Decision{Verdict: Invalid}
	}
	m := md.producers[pid]
	if m == nil {
		return Decision{Verdict: Append}
	}
	if epoch < m.epoch {
		return Decision{Verdict: InvalidProducerEpoch}
	}
	if epoch > m.epoch {
		if seq == 0 {
			return Decision{Verdict: Append}
		}
		return Decision{Verdict: OutOfOrderSequence, ExpectedSequence: 0}
	}
	r := m.retained()
	last := kafkaIncrement(seq, count-1)
	for _, b := range r {
		if b.BaseSequence == seq && kafkaIncrement(b.BaseSequence, b.RecordCount-1) == last {
			return Decision{Verdict: Duplicate, Original: b}
		}
	}
	next := m.tombNext
	if len(r) > 0 {
		lb := r[len(r)-1]
		next = kafkaIncrement(kafkaIncrement(lb.BaseSequence, lb.RecordCount-1), 1)
	}
	if seq == next {
		return Decision{Verdict: Append}
	}
	return Decision{Verdict: OutOfOrderSequence, ExpectedSequence: next}
}

func (md *model) apply(b Batch) {
	m := md.producers[b.ProducerID]
	if m == nil {
		m = &modelProducer{}
		md.producers[b.ProducerID] = m
	}
	m.epoch = b.ProducerEpoch
	m.hist = append(m.hist, b)
}

func (md *model) truncate(offset int64) {
	offset = max(offset, 0)
	for _, m := range md.producers {
		before := m.retained()
		start := len(m.hist) - len(before)
		lastTS := int64(0)
		if len(before) > 0 {
			lastTS = before[len(before)-1].MaxTimestamp
		}
		for len(m.hist) > 0 && m.hist[len(m.hist)-1].LastOffset >= offset {
			m.hist = m.hist[:len(m.hist)-1]
		}
		switch {
		case len(before) > 0 && len(m.hist) > start:
			m.floor = start
		case len(before) > 0:
			m.floor, m.tombTS = len(m.hist), lastTS
			m.tombNext = before[0].BaseSequence
			md.cutAll++
		default:
			m.floor = len(m.hist)
		}
	}
}

// forget removes the producers whose last batch's timestamp gone says is
// gone, and returns their ids.
func (md *model) forget(gone func(ts int64) bool) []int64 {
	var ids []int64
	for pid, m := range md.producers {
		if gone(m.lastTimestamp()) {
			delete(md.producers, pid)
			ids = append(ids, pid)
		}
	}
	return ids
}

// instance is one simulated producer instance: an id and epoch, and the
// batches it sent.
type instance struct {
	pid    int64
	epoch  int16
	next   int32 // base sequence of its next new batch
	sent   []*sentBatch
	zombie bool // a newer instance of the same id bumped the epoch
	gen0   int  // generation of the producer id when the instance started
}

type sentBatch struct {
	index      int // the instance's batches are numbered from 0
	seq, count int32
	ts         int64
	gen        int // generation of the producer id when first sent
	final      bool
}

// inflight are the batches without a final answer, oldest first.
func (in *instance) inflight() []*sentBatch {
	var f []*sentBatch
	for _, b := range in.sent {
		if !b.final {
			f = append(f, b)
		}
	}
	return f
}

// canSend is the window rule: the next batch only once every batch five or
// more before it has its final answer.
func (in *instance) canSend() bool {
	f := in.inflight()
	return len(f) == 0 || len(in.sent)-f[0].index < NumBatchesToRetain
}

type logBatch struct {
	Batch
	gen int
}

type recordKey struct {
	pid   int64
	epoch int16
	gen   int
	seq   int32
}

type world struct {
	t     *testing.T
	rng   *rand.Rand
	run   int
	op    int
	trail []string

	st *State
	md *model

	log                  []logBatch // idempotent batches in the log, in offset order
	end, hw, logStart    int64
	nowMs                int64
	leaderEpoch          int32
	instances            []*instance
	nextPID              int64
	gen                  map[int64]int // bumped when a producer id is forgotten
	records              map[recordKey]int
	expiredWithInflight  int
	appended, duplicates int
	fenced               int
}

const simExpiration = 10 * time.Second

func newWorld(t *testing.T, rng *rand.Rand, run int) *world {
	return &world{
		t: t, rng: rng, run: run,
		st:      New(Options{Expiration: simExpiration}),
		md:      &model{producers: make(map[int64]*modelProducer), expire: simExpiration.Milliseconds()},
		nowMs:   1_700_000_000_000,
		gen:     make(map[int64]int),
		records: make(map[recordKey]int),
	}
}

func (w *world) fatalf(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("run %d op %d (repeat with %s=<the seed logged above>): %s\nlast operations:\n  %s",
		w.run, w.op, testseed.Env, fmt.Sprintf(format, args...), strings.Join(w.trail, "\n  "))
}

func (w *world) note(format string, args ...any) {
	w.trail = append(w.trail, fmt.Sprintf("%d: ", w.op)+fmt.Sprintf(format, args...))
	if len(w.trail) > 30 {
		w.trail = w.trail[1:]
	}
}

// check asks both and requires the same decision.
func (w *world) check(pid int64, epoch int16, seq, count int32) Decision {
	w.t.Helper()
	got, want := w.st.Check(pid, epoch, seq, count), w.md.decide(pid, epoch, seq, count)
	if got.Verdict != want.Verdict || got.Original != want.Original || got.ExpectedSequence != want.ExpectedSequence {
		w.fatalf("Check(pid %d, epoch %d, seq %d, count %d): state %v %+v expected %d (%s), model %v %+v expected %d",
			pid, epoch, seq, count, got.Verdict, got.Original, got.ExpectedSequence, got.Reason,
			want.Verdict, want.Original, want.ExpectedSequence)
	}
	return got
}

// appendBatch writes a batch at the log end and applies it to both.
func (w *world) appendBatch(in *instance, sb *sentBatch) {
	w.t.Helper()
	w.end += int64(w.rng.IntN(2)) // sometimes a record of a batch without producer in between
	b := Batch{
		ProducerID: in.pid, ProducerEpoch: in.epoch, BaseSequence: sb.seq, RecordCount: sb.count,
		BaseOffset: w.end, LastOffset: w.end + int64(sb.count) - 1, LeaderEpoch: w.leaderEpoch, MaxTimestamp: sb.ts,
	}
	if err := w.st.Apply(b); err != nil {
		w.fatalf("Apply(%+v): %v", b, err)
	}
	w.md.apply(b)
	w.end = b.LastOffset + 1
	lb := logBatch{b, w.gen[in.pid]}
	w.log = append(w.log, lb)
	for i := range sb.count {
		k := recordKey{in.pid, in.epoch, lb.gen, record.AddSequence(sb.seq, int(i))}
		w.records[k]++
		if w.records[k] > 1 {
			w.fatalf("record %+v is in the log twice: the batch at %d-%d duplicates one the producer sent before", k, b.BaseOffset, b.LastOffset)
		}
	}
	w.appended++
}

func (w *world) dropFromLog(keep func(logBatch) bool) {
	kept := w.log[:0]
	for _, lb := range w.log {
		if keep(lb) {
			kept = append(kept, lb)
			continue
		}
		for i := range lb.RecordCount {
			k := recordKey{lb.ProducerID, lb.ProducerEpoch, lb.gen, record.AddSequence(lb.BaseSequence, int(i))}
			if w.records[k]--; w.records[k] == 0 {
				delete(w.records, k)
			}
		}
	}
	w.log = kept
}

// inLog says where a sent batch is in the log, if it is.
func (w *world) inLog(in *instance, sb *sentBatch) (logBatch, bool) {
	for _, lb := range w.log {
		if lb.ProducerID == in.pid && lb.ProducerEpoch == in.epoch && lb.BaseSequence == sb.seq && lb.RecordCount == sb.count && lb.gen == w.gen[in.pid] {
			return lb, true
		}
	}
	return logBatch{}, false
}

// send sends a batch (new or a resend) and acts on the answer as a
// producer following the contract would.
func (w *world) send(in *instance, sb *sentBatch) {
	w.t.Helper()
	d := w.check(in.pid, in.epoch, sb.seq, sb.count)
	switch d.Verdict {
	case Append:
		w.appendBatch(in, sb)
	case Duplicate:
		w.duplicates++
		if d.Original.LastOffset < w.hw {
			sb.final = true // the original is committed: answered with its offsets
		}
	case InvalidProducerEpoch:
		if !in.zombie {
			w.fatalf("the newest instance of producer %d (epoch %d) is fenced", in.pid, in.epoch)
		}
		w.fenced++
		sb.final = true
	case OutOfOrderSequence:
		// Legitimate only when the instance sent this batch past one that
		// is not in the log (pipelined past a lost batch: it resends them
		// in order later), or when the producer id was forgotten since the
		// instance started (the contract's "any sequence" lets a later
		// batch, or a fenced instance, in first).
		lost := false
		for _, e := range in.inflight() {
			if e.index >= sb.index {
				break
			}
			if _, ok := w.inLog(in, e); !ok {
				lost = true
			}
		}
		switch {
		case lost:
		case in.gen0 != w.gen[in.pid]:
			sb.final = true
		default:
			w.fatalf("batch %d of producer %d epoch %d (seq %d count %d) is out of order, yet every batch before it is in the log",
				sb.index, in.pid, in.epoch, sb.seq, sb.count)
		}
	default:
		w.fatalf("verdict %v for a batch a producer sends", d.Verdict)
	}
}

// dropIdleZombies forgets the fenced instances with nothing left to resend.
func (w *world) dropIdleZombies() {
	kept := w.instances[:0]
	for _, in := range w.instances {
		if !in.zombie || len(in.inflight()) > 0 {
			kept = append(kept, in)
		}
	}
	w.instances = kept
}

func (w *world) current() []*instance {
	var cs []*instance
	for _, in := range w.instances {
		if !in.zombie {
			cs = append(cs, in)
		}
	}
	return cs
}

func (w *world) pick(ins []*instance) *instance {
	if len(ins) == 0 {
		return nil
	}
	return ins[w.rng.IntN(len(ins))]
}

// step runs one random operation.
func (w *world) step() {
	w.t.Helper()
	switch r := w.rng.IntN(100); {
	case r < 30: // a new batch
		in := w.pick(w.current())
		if in == nil || !in.canSend() {
			return
		}
		sb := &sentBatch{index: len(in.sent), seq: in.next, count: int32(1 + w.rng.IntN(3)), ts: w.nowMs, gen: w.gen[in.pid]}
		in.sent = append(in.sent, sb)
		in.next = record.AddSequence(in.next, int(sb.count))
		w.note("send pid %d epoch %d #%d seq %d count %d", in.pid, in.epoch, sb.index, sb.seq, sb.count)
		w.send(in, sb)
	case r < 45: // resend everything in flight, in order (after an unknown outcome)
		in := w.pick(w.instances)
		if in == nil {
			return
		}
		w.note("resend pid %d epoch %d zombie %v: %d in flight", in.pid, in.epoch, in.zombie, len(in.inflight()))
		for _, sb := range in.inflight() {
			w.send(in, sb)
		}
	case r < 55: // answers for committed batches
		for _, in := range w.instances {
			for _, sb := range in.inflight() {
				if lb, ok := w.inLog(in, sb); ok && lb.LastOffset < w.hw && w.rng.IntN(2) == 0 {
					sb.final = true
				}
			}
		}
		w.note("acks up to hw %d", w.hw)
	case r < 65:
		w.hw += w.rng.Int64N(w.end - w.hw + 1)
		w.note("hw %d", w.hw)
	case r < 71: // a leader change cuts the log above the high watermark
		off := w.hw + w.rng.Int64N(w.end-w.hw+1)
		w.note("truncate to %d (hw %d, end %d)", off, w.hw, w.end)
		w.st.TruncateTo(off)
		w.md.truncate(off)
		w.dropFromLog(func(lb logBatch) bool { return lb.LastOffset < off })
		w.end = off
		w.leaderEpoch++
	case r < 75: // a new producer id, at any epoch and sequence
		if len(w.current()) >= 4 {
			return
		}
		in := &instance{pid: w.nextPID, epoch: int16(w.rng.IntN(3)), gen0: w.gen[w.nextPID]}
		switch w.rng.IntN(3) {
		case 1:
			in.next = math.MaxInt32 - int32(w.rng.IntN(12))
		case 2:
			in.next = w.rng.Int32()
		}
		w.nextPID++
		w.instances = append(w.instances, in)
		w.note("new producer %d epoch %d seq %d", in.pid, in.epoch, in.next)
	case r < 79: // a new instance bumps the epoch; the old one may still resend
		old := w.pick(w.current())
		if old == nil || old.epoch == math.MaxInt16 {
			return
		}
		old.zombie = true
		w.dropIdleZombies()
		in := &instance{pid: old.pid, epoch: old.epoch + 1, gen0: w.gen[old.pid]}
		w.instances = append(w.instances, in)
		w.note("bump producer %d to epoch %d", in.pid, in.epoch)
	case r < 85:
		w.nowMs += w.rng.Int64N(simExpiration.Milliseconds() / 8)
		w.expire()
	case r < 87: // retention: the log loses batches, the producers stay known
		w.logStart += w.rng.Int64N((w.hw-w.logStart)/2 + 1)
		w.note("log start %d", w.logStart)
		w.st.RemoveBefore(w.logStart)
		w.dropFromLog(func(lb logBatch) bool { return lb.BaseOffset >= w.logStart })
	case r < 91:
		b, err := w.st.MarshalSnapshot(nil, w.end)
		if err != nil {
			w.fatalf("MarshalSnapshot(%d): %v", w.end, err)
		}
		st, end, err := UnmarshalSnapshot(b, Options{Expiration: simExpiration})
		if err != nil {
			w.fatalf("UnmarshalSnapshot: %v", err)
		}
		if again, _ := st.MarshalSnapshot(nil, end); end != w.end || string(again) != string(b) {
			w.fatalf("snapshot round trip: end %d, want %d; same bytes %v", end, w.end, string(again) == string(b))
		}
		w.st = st
		w.note("snapshot and restore at %d (%d bytes, %d producers)", end, len(b), st.Len())
	default:
		w.probe()
	}
}

func (w *world) expire() {
	w.note("expire at %d", w.nowMs)
	w.st.Expire(time.UnixMilli(w.nowMs))
	cutoff := w.nowMs - w.md.expire
	w.forgotten(w.md.forget(func(ts int64) bool { return ts <= cutoff }))
}

func (w *world) forgotten(ids []int64) {
	for _, pid := range ids {
		for _, in := range w.instances {
			if in.pid == pid && len(in.inflight()) > 0 {
				w.expiredWithInflight++
			}
		}
		w.gen[pid]++
	}
}

// probe asks about requests no well-behaved producer sends: old resends,
// skipped sequences, wrong epochs, invalid fields. Only the decision is
// compared; nothing is appended.
func (w *world) probe() {
	in := w.pick(w.instances)
	if in == nil {
		w.check(w.rng.Int64N(3)-1, int16(w.rng.IntN(3)-1), w.rng.Int32N(5)-1, w.rng.Int32N(4)-1)
		return
	}
	for range 5 {
		switch w.rng.IntN(4) {
		case 0:
			if len(in.sent) > 0 {
				sb := in.sent[w.rng.IntN(len(in.sent))]
				w.check(in.pid, in.epoch, sb.seq, sb.count)
			}
		case 1:
			w.check(in.pid, in.epoch, record.AddSequence(in.next, w.rng.IntN(4)), 1+w.rng.Int32N(3))
		case 2:
			w.check(in.pid, in.epoch+int16(w.rng.IntN(3))-1, w.rng.Int32N(2)*in.next, 1)
		default:
			w.check(in.pid+w.rng.Int64N(3)-1, in.epoch, in.next-w.rng.Int32N(2), w.rng.Int32N(3))
		}
	}
}

// compare checks, after every operation, the decisions on every request a
// producer could send next, resend, or send by mistake.
func (w *world) compare() {
	w.t.Helper()
	if w.st.Len() != len(w.md.producers) {
		w.fatalf("state knows %d producers, model %d", w.st.Len(), len(w.md.producers))
	}
	for _, in := range w.instances {
		w.check(in.pid, in.epoch, in.next, 1)
		w.check(in.pid, in.epoch, record.AddSequence(in.next, 1), 1)
		w.check(in.pid, in.epoch+1, 0, 1)
		w.check(in.pid, in.epoch+1, 1, 1)
		if in.epoch > 0 {
			w.check(in.pid, in.epoch-1, in.next, 1)
		}
		for i := max(0, len(in.sent)-NumBatchesToRetain-2); i < len(in.sent); i++ {
			sb := in.sent[i]
			w.check(in.pid, in.epoch, sb.seq, sb.count)
			w.check(in.pid, in.epoch, sb.seq, sb.count+1)
		}
	}
}

func TestModel(t *testing.T) {
	rng := testseed.Rand(t)
	runs, ops := 60, 1500
	if raceEnabled || testing.Short() {
		runs = 15
	}
	var appended, duplicates, expiredWithInflight, zombieRefusals, cutAll int
	for run := range runs {
		w := newWorld(t, rng, run)
		for w.op = range ops {
			w.step()
			w.compare()
		}
		appended += w.appended
		duplicates += w.duplicates
		expiredWithInflight += w.expiredWithInflight
		cutAll += w.md.cutAll
		zombieRefusals += w.fenced
	}
	t.Logf("%d runs of %d operations: %d batches appended, %d duplicates answered, %d fenced resends refused, "+
		"%d producers left without a batch by a truncation, %d forgotten with batches in flight",
		runs, ops, appended, duplicates, zombieRefusals, cutAll, expiredWithInflight)
	if appended == 0 || duplicates == 0 || zombieRefusals == 0 || cutAll == 0 {
		t.Fatal("the simulation exercised too little: it needs appends, duplicates, fenced resends and producers truncated to nothing")
	}
}
