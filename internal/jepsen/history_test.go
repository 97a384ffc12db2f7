package jepsen

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/checker"
	"github.com/logagent/logagent/internal/testcluster"
	"github.com/logagent/logagent/wire"
)

func TestClassify(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, tc := range []struct {
		name   string
		err    error
		want   checker.Outcome
		leader string
	}{
		{"success", nil, checker.OK, ""},
		{"not leader names the leader", &testcluster.APIError{Code: "not_leader", LeaderAddress: "127.0.0.1:9"}, checker.Fail, "127.0.0.1:9"},
		{"refused before append", &testcluster.APIError{Code: "not_enough_replicas"}, checker.Fail, ""},
		{"after append", &testcluster.APIError{Code: "not_enough_replicas_after_append"}, checker.Unknown, ""},
		{"leadership lost after append", &testcluster.APIError{Code: "not_leader_after_append"}, checker.Unknown, ""},
		{"ack timeout", &testcluster.APIError{Code: "ack_timeout"}, checker.Unknown, ""},
		{"undecodable answer", &testcluster.APIError{Code: "undecodable"}, checker.Unknown, ""},
		{"connection refused", fmt.Errorf("post: %w", refused), checker.Fail, ""},
		{"connection reset", fmt.Errorf("post: %w", syscall.ECONNRESET), checker.Unknown, ""},
		{"timeout", errors.New("context deadline exceeded"), checker.Unknown, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, leader := classify(tc.err)
			if got != tc.want || leader != tc.leader {
				t.Fatalf("classify(%v) = %s, %q; want %s, %q", tc.err, got, leader, tc.want, tc.leader)
			}
		})
	}
}

func TestAfterFailure(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		idempotent bool
		want       step
	}{
		{"timeout", errors.New("context deadline exceeded"), true, resend},
		{"acknowledged without an offset", nil, false, resend},
		{"ack timeout", &testcluster.APIError{Status: 504, Code: wire.CodeAckTimeout}, true, resend},
		{"after append", &testcluster.APIError{Status: 503, Code: wire.CodeNotEnoughReplicasAfterAppend, Retriable: true}, false, resend},
		{"not leader", &testcluster.APIError{Status: 409, Code: wire.CodeNotLeader, Retriable: true}, true, resend},
		{"out of order", &testcluster.APIError{Status: 409, Code: wire.CodeOutOfOrderSequence}, true, newEpoch},
		{"fenced epoch", &testcluster.APIError{Status: 409, Code: wire.CodeInvalidProducerEpoch}, true, newEpoch},
		{"idempotence codes mean nothing to a plain producer", &testcluster.APIError{Status: 409, Code: wire.CodeOutOfOrderSequence}, false, giveUp},
		{"invalid request", &testcluster.APIError{Status: 400, Code: wire.CodeInvalidRequest}, true, giveUp},
		{"no such endpoint", &testcluster.APIError{Status: 404, Code: wire.CodeNotFound}, true, giveUp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := afterFailure(tc.err, tc.idempotent); got != tc.want {
				t.Fatalf("afterFailure(%v, %v) = %d, want %d", tc.err, tc.idempotent, got, tc.want)
			}
		})
	}
}

func TestLongestGap(t *testing.T) {
	s := time.Second
	ops := []Op{
		{Partition: 0, Outcome: checker.OK, Invoke: 1 * s, Complete: 2 * s},
		{Partition: 0, Outcome: checker.Unknown, Invoke: 2 * s, Complete: 4 * s},
		{Partition: 1, Outcome: checker.Fail, Invoke: 0, Complete: 1 * s},
		{Partition: 1, Outcome: checker.OK, Invoke: 1 * s, Complete: 3 * s},
		{Partition: 0, Outcome: checker.OK, Invoke: 4 * s, Complete: 7 * s},
		{Partition: 1, Outcome: checker.OK, Invoke: 3 * s, Complete: 4 * s},
	}
	got := LongestGap(ops, 2)
	want := []time.Duration{5 * s, 3 * s}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("LongestGap = %v, want %v", got, want)
	}
}

func TestWindowGap(t *testing.T) {
	s := time.Second
	ops := []Op{
		{Partition: 0, Outcome: checker.OK, Invoke: 0, Complete: 1 * s},
		{Partition: 0, Outcome: checker.OK, Invoke: 1 * s, Complete: 9 * s},
		{Partition: 0, Outcome: checker.Unknown, Invoke: 9 * s, Complete: 11 * s},
		{Partition: 0, Outcome: checker.OK, Invoke: 10 * s, Complete: 12 * s},
		{Partition: 0, Outcome: checker.OK, Invoke: 12 * s, Complete: 13 * s},
		{Partition: 1, Outcome: checker.OK, Invoke: 0, Complete: 2 * s},
		{Partition: 1, Outcome: checker.Fail, Invoke: 2 * s, Complete: 30 * s},
	}
	for _, tc := range []struct {
		name        string
		partition   int
		from, until time.Duration
		want        time.Duration
	}{
		// The stretch from 1s to 9s began before the window: it counts whole.
		{"a stretch open at the window's start", 0, 5 * s, 14 * s, 8 * s},
		{"acknowledgements inside the window", 0, 9 * s, 14 * s, 3 * s},
		{"a stretch open at the window's end", 0, 12 * s, 20 * s, 7 * s},
		{"no acknowledgement in the window", 1, 10 * s, 15 * s, 13 * s},
		{"no acknowledgement ever", 2, 10 * s, 15 * s, 5 * s},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := WindowGap(ops, tc.partition, tc.from, tc.until); got != tc.want {
				t.Fatalf("WindowGap(p%d, %s, %s) = %s, want %s", tc.partition, tc.from, tc.until, got, tc.want)
			}
		})
	}
}

// TestRestartGaps: each restart's window runs to the next one's SIGTERM,
// across cycles, and the last one's to the end of the run.
func TestRestartGaps(t *testing.T) {
	s := time.Second
	ops := []Op{
		{Partition: 0, Outcome: checker.OK, Invoke: 0, Complete: 1 * s},
		{Partition: 0, Outcome: checker.OK, Invoke: 1 * s, Complete: 4 * s},
		{Partition: 0, Outcome: checker.OK, Invoke: 4 * s, Complete: 5 * s},
		{Partition: 0, Outcome: checker.OK, Invoke: 5 * s, Complete: 20 * s},
	}
	measures := []Measure{
		{Restarts: []Restart{{Agent: "n1", Stopped: 2 * s}, {Agent: "n2", Stopped: 6 * s}}},
		{Restarts: []Restart{{Agent: "n3", Stopped: 10 * s}}},
	}
	restartGaps(measures, ops, 1, 25*s)
	got := []Restart{measures[0].Restarts[0], measures[0].Restarts[1], measures[1].Restarts[0]}
	want := []struct {
		until, gap time.Duration
	}{{6 * s, 3 * s}, {10 * s, 5 * s}, {25 * s, 15 * s}}
	for i, w := range want {
		if got[i].Until != w.until || len(got[i].Gaps) != 1 || got[i].Gaps[0] != w.gap {
			t.Errorf("restart %d (%s): until %s, gaps %v; want until %s, gap %s", i, got[i].Agent, got[i].Until, got[i].Gaps, w.until, w.gap)
		}
	}
}

func TestRecorderHistory(t *testing.T) {
	var now time.Duration
	r := NewRecorder(func() time.Duration { now += time.Millisecond; return now })
	r.Complete(Op{Value: "a", Partition: 1, Outcome: checker.OK, Offset: 7, Attempt: 2})
	r.Consumed(checker.ConsumerRead{Consumer: "c", Partition: 1})
	r.Consumed(checker.ConsumerRead{Consumer: "c", Partition: 1, Entries: []checker.Entry{{Offset: 7, Value: "a"}}})
	h := r.History(nil)
	if len(h.Writes) != 1 || h.Writes[0] != (checker.Write{Value: "a", Partition: 1, Outcome: checker.OK, Offset: 7, Attempt: 2}) {
		t.Fatalf("writes %+v", h.Writes)
	}
	if len(h.Consumers) != 1 {
		t.Fatalf("an empty read must not be recorded: %+v", h.Consumers)
	}
	if ops := r.Ops(); ops[0].Complete != time.Millisecond {
		t.Fatalf("completion stamped %s, want the clock's 1ms", ops[0].Complete)
	}
}

func TestFirstAck(t *testing.T) {
	s := time.Second
	ops := []Op{
		// Invoked before the kill at 10s: never counts.
		{Partition: 0, Outcome: checker.OK, Invoke: 9 * s, Complete: 10*s + 1},
		{Partition: 0, Outcome: checker.Unknown, Invoke: 10 * s, Complete: 12 * s},
		{Partition: 0, Outcome: checker.Fail, Invoke: 11 * s, Complete: 11 * s},
		// Invoked later but completed first: the earliest completion wins.
		{Partition: 0, Outcome: checker.OK, Invoke: 12 * s, Complete: 15 * s},
		{Partition: 0, Outcome: checker.OK, Invoke: 13 * s, Complete: 14 * s},
		{Partition: 1, Outcome: checker.OK, Invoke: 10 * s, Complete: 11 * s},
		// Acknowledged only after the restart at 20s.
		{Partition: 2, Outcome: checker.OK, Invoke: 11 * s, Complete: 21 * s},
	}
	for _, tc := range []struct {
		partition int
		want      time.Duration
		wantOK    bool
	}{
		{0, 4 * s, true},
		{1, 1 * s, true},
		{2, 10 * s, false},
		{3, 10 * s, false},
	} {
		got, ok := FirstAck(ops, tc.partition, 10*s, 20*s)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("FirstAck(p%d) = %s, %v; want %s, %v", tc.partition, got, ok, tc.want, tc.wantOK)
		}
	}
}

func TestQuantile(t *testing.T) {
	ms := time.Millisecond
	var hundred []time.Duration
	for i := 100; i >= 1; i-- {
		hundred = append(hundred, time.Duration(i)*ms)
	}
	for _, tc := range []struct {
		name string
		ds   []time.Duration
		q    float64
		want time.Duration
	}{
		{"none", nil, 0.5, 0},
		{"one", []time.Duration{7 * ms}, 0.99, 7 * ms},
		{"median of an even count is the lower middle", []time.Duration{4 * ms, 1 * ms, 3 * ms, 2 * ms}, 0.5, 2 * ms},
		{"median of an odd count", []time.Duration{5 * ms, 1 * ms, 3 * ms}, 0.5, 3 * ms},
		{"p99 of 100", hundred, 0.99, 99 * ms},
		{"p99 of 20 is the max", hundred[80:], 0.99, 20 * ms},
		{"max", hundred, 1, 100 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Quantile(tc.ds, tc.q); got != tc.want {
				t.Fatalf("Quantile(%v, %v) = %s, want %s", tc.ds, tc.q, got, tc.want)
			}
		})
	}
}
