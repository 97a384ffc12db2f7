package jepsen

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/logagent/logagent/internal/checker"
)

// Op is one produce attempt as a client saw it, with the monotonic times
// (since the run started) of its invocation and completion.
type Op struct {
	Process   string          `json:"process"`
	Via       string          `json:"via"`
	Value     string          `json:"value"`
	Partition int             `json:"partition"`
	Attempt   int             `json:"attempt"`
	Outcome   checker.Outcome `json:"outcome"`
	Offset    int64           `json:"offset,omitempty"`
	Error     string          `json:"error,omitempty"`
	Invoke    time.Duration   `json:"invoke_ns"`
	Complete  time.Duration   `json:"complete_ns"`
	// Duplicate says the leader answered an idempotent resend as a
	// duplicate of a write it had appended: Offset is the original's.
	Duplicate bool `json:"duplicate,omitempty"`
}

// Event is something the nemesis did, at a monotonic time since the run
// started.
type Event struct {
	At     time.Duration `json:"at_ns"`
	What   string        `json:"what"`
	Detail string        `json:"detail,omitempty"`
}

// Recorder collects a run's operations, consumer reads and nemesis events;
// it is safe for concurrent use. Its clock is injected so that times are
// monotonic offsets from the run's start.
type Recorder struct {
	now func() time.Duration

	mu        sync.Mutex
	ops       []Op
	consumers []checker.ConsumerRead
	events    []Event
	corrupt   []string
}

// NewRecorder records with the clock now.
func NewRecorder(now func() time.Duration) *Recorder { return &Recorder{now: now} }

// Now is the recorder's clock.
func (r *Recorder) Now() time.Duration { return r.now() }

// Complete records a finished attempt; op.Invoke must be set, Complete is
// stamped here.
func (r *Recorder) Complete(op Op) {
	op.Complete = r.now()
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// Consumed records one consumer's run of reads of a partition.
func (r *Recorder) Consumed(read checker.ConsumerRead) {
	if len(read.Entries) == 0 {
		return
	}
	r.mu.Lock()
	r.consumers = append(r.consumers, read)
	r.mu.Unlock()
}

// Corrupt records a consumer's fetch answer that did not decode: whole,
// CRC-checked batches are all an agent may serve.
func (r *Recorder) Corrupt(consumer string, partition int, offset int64, err error) {
	r.mu.Lock()
	r.corrupt = append(r.corrupt, fmt.Sprintf("%s p%d offset %d: %v", consumer, partition, offset, err))
	r.mu.Unlock()
}

// CorruptReads returns what Corrupt recorded.
func (r *Recorder) CorruptReads() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.corrupt...)
}

// Event records a nemesis action and returns its time.
func (r *Recorder) Event(what, detail string) time.Duration {
	at := r.now()
	r.mu.Lock()
	r.events = append(r.events, Event{At: at, What: what, Detail: detail})
	r.mu.Unlock()
	return at
}

// Ops returns a copy of the operations recorded so far.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// Events returns a copy of the nemesis events recorded so far.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// History is what the checker needs, with the final replica logs.
func (r *Recorder) History(replicas []checker.ReplicaLog) checker.History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := checker.History{Consumers: append([]checker.ConsumerRead(nil), r.consumers...), Replicas: replicas}
	for _, op := range r.ops {
		h.Writes = append(h.Writes, checker.Write{Value: op.Value, Partition: op.Partition, Outcome: op.Outcome, Offset: op.Offset, Attempt: op.Attempt})
	}
	return h
}

// LongestGap is, per partition, the longest time between two consecutive
// acknowledged writes' completions (or from the first operation to the
// first acknowledgement): how long the partition was unavailable to
// writers at worst.
func LongestGap(ops []Op, partitions int) []time.Duration {
	gaps := make([]time.Duration, partitions)
	last := make([]time.Duration, partitions)
	started := make([]bool, partitions)
	for _, op := range sortedByCompletion(ops) {
		p := op.Partition
		if !started[p] {
			last[p], started[p] = op.Invoke, true
		}
		if op.Outcome != checker.OK {
			continue
		}
		gaps[p] = max(gaps[p], op.Complete-last[p])
		last[p] = op.Complete
	}
	return gaps
}

// WindowGap is the longest stretch without an acknowledged write to the
// partition that overlaps [from, until]: from the last acknowledgement
// completed before from (from itself if there was none), through every
// acknowledgement completed in the window, to until. A stretch that began
// before the window counts whole, since the writers waited that long; one
// still open at until counts up to until.
func WindowGap(ops []Op, partition int, from, until time.Duration) time.Duration {
	prev, gap := from, time.Duration(0)
	for _, op := range sortedByCompletion(ops) {
		switch {
		case op.Partition != partition || op.Outcome != checker.OK:
		case op.Complete <= from:
			prev = op.Complete
		case op.Complete <= until:
			gap = max(gap, op.Complete-prev)
			prev = op.Complete
		}
	}
	return max(gap, until-prev)
}

// FirstAck is the time from from to the earliest completion of an
// acknowledged write to the partition invoked at or after from, and
// completed by until; ok is false when there was none. A write invoked
// before from does not count: it may have been acknowledged by the agent
// the fault then removed.
func FirstAck(ops []Op, partition int, from, until time.Duration) (wait time.Duration, ok bool) {
	for _, op := range ops {
		if op.Partition != partition || op.Outcome != checker.OK || op.Invoke < from || op.Complete > until {
			continue
		}
		if !ok || op.Complete-from < wait {
			wait, ok = op.Complete-from, true
		}
	}
	if !ok {
		return until - from, false
	}
	return wait, true
}

func sortedByCompletion(ops []Op) []Op {
	out := append([]Op(nil), ops...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Complete < out[j].Complete })
	return out
}
