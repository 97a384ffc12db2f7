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
