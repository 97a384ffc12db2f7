package partition

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/segstore"
)

func TestBroadcastWakesEveryWaiter(t *testing.T) {
	b := newBroadcast()
	waiters := make([]<-chan struct{}, 3)
	for i := range waiters {
		waiters[i] = b.wait()
	}
	later := b.wait()
	b.notify()
	for i, w := range waiters {
		select {
		case <-w:
		default:
			t.Fatalf("waiter %d not woken", i)
		}
	}
	<-later
	select {
	case <-b.wait():
		t.Fatal("a wait after the notify is already woken")
	default:
	}
}

func TestBackoffDelay(t *testing.T) {
	b := backoffDelay{min: 10 * time.Millisecond, max: 50 * time.Millisecond}
	var got []time.Duration
	for range 5 {
		got = append(got, b.next())
	}
	want := []time.Duration{10, 20, 40, 50, 50}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("delays %v", got)
		}
	}
	b.reset()
	if d := b.next(); d != 10*time.Millisecond {
		t.Fatalf("after reset: %s", d)
	}
}

// testLog opens a segstore log over the OS file system in a temporary
// directory, with small segments and index intervals.
func testLog(t *testing.T, dir string) *segstore.Log {
	t.Helper()
	log, _, err := openPartitionLog(segstore.OSFS{}, dir, segstore.Options{SegmentBytes: 1 << 20, IndexIntervalBytes: 256, IndexBytes: 4096, Logger: hclog.NewNullLogger()}, func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	return log
}

func testBatch(t *testing.T, values []string) []byte {
	t.Helper()
	var b record.Builder
	for _, v := range values {
		if err := b.Add(1, nil, []byte(v), nil); err != nil {
			t.Fatal(err)
		}
	}
	batch, err := b.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	return batch
}

func appendLeader(t *testing.T, log *segstore.Log, epoch int32, values ...string) {
	t.Helper()
	if _, _, err := log.AppendLeader(testBatch(t, values), epoch); err != nil {
		t.Fatal(err)
	}
}

func TestEpochCacheAdapter(t *testing.T) {
	log := testLog(t, t.TempDir())
	defer log.Close()
	c := epochCache{log: log}
	if _, ok := c.LatestEpoch(); ok {
		t.Fatal("empty log has an epoch")
	}
	if _, _, ok := c.EndOffsetForEpoch(0); ok {
		t.Fatal("empty log answers an epoch")
	}
	appendLeader(t, log, 2, "a", "b")
	appendLeader(t, log, 5, "c")
	if e, ok := c.LatestEpoch(); !ok || e != 5 {
		t.Fatalf("latest epoch %d %t", e, ok)
	}
	tests := []struct {
		asked, epoch int32
		end          int64
		ok           bool
	}{
		{1, 1, 0, true}, // below every epoch: the asked one, ending where the first starts
		{2, 2, 2, true},
		{4, 2, 2, true},
		{5, 5, 3, true},
		{6, 0, 0, false},
	}
	for _, tc := range tests {
		epoch, end, ok := c.EndOffsetForEpoch(tc.asked)
		if ok != tc.ok || (ok && (epoch != tc.epoch || end != tc.end)) {
			t.Errorf("epoch %d: %d %d %t, want %d %d %t", tc.asked, epoch, end, ok, tc.epoch, tc.end, tc.ok)
		}
	}
}

// TestOpenPartitionLogCutsDataLoss: damage below the recovery point is
// reported as data loss (the replica must not lead) and cut, instead of
// keeping the partition down; the loss is recorded before the cut.
func TestOpenPartitionLogCutsDataLoss(t *testing.T) {
	dir := t.TempDir()
	log := testLog(t, dir)
	for i := range 20 {
		appendLeader(t, log, 1, fmt.Sprintf("value-%d", i))
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	segment := filepath.Join(dir, "00000000000000000000.log")
	b, err := os.ReadFile(segment)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff // the last batch, below the recovery point of a clean close
	if err := os.WriteFile(segment, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// The mark must be durable before the cut: a failure to write it
	// leaves the log as it was.
	if _, _, err := openPartitionLog(segstore.OSFS{}, dir, segstore.Options{Logger: hclog.NewNullLogger()}, func() error {
		return errors.New("disk says no")
	}); err == nil {
		t.Fatal("open succeeded though the data loss could not be recorded")
	}
	if after, err := os.ReadFile(segment); err != nil || len(after) != len(b) {
		t.Fatalf("the log was cut (%d bytes, was %d; %v) without the loss recorded", len(after), len(b), err)
	}
	marked := false
	log, dataLoss, err := openPartitionLog(segstore.OSFS{}, dir, segstore.Options{Logger: hclog.NewNullLogger()}, func() error {
		if after, err := os.ReadFile(segment); err != nil || len(after) != len(b) {
			t.Errorf("the mark was asked for after the cut (%d bytes, was %d; %v)", len(after), len(b), err)
		}
		marked = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	if !marked {
		t.Fatal("the data loss was cut without being recorded first")
	}
	if !dataLoss || !errors.Is(log.DataLoss(), segstore.ErrDataLoss) {
		t.Fatalf("data loss %t %v, want it reported", dataLoss, log.DataLoss())
	}
	if leo := log.LogEndOffset(); leo != 19 {
		t.Fatalf("log end offset %d after the cut, want 19", leo)
	}
}

func TestReplicaFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if _, found, err := readReplicaFile(segstore.OSFS{}, dir); found || err != nil {
		t.Fatalf("empty dir: %t %v", found, err)
	}
	in := replicaFile{Topic: "t-1", Partition: 4, TopicID: "abc", DataLoss: true}
	if err := writeReplicaFile(segstore.OSFS{}, dir, in); err != nil {
		t.Fatal(err)
	}
	out, found, err := readReplicaFile(segstore.OSFS{}, dir)
	if err != nil || !found || out != in {
		t.Fatalf("%+v %t %v", out, found, err)
	}
	if err := os.WriteFile(filepath.Join(dir, replicaFileName), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readReplicaFile(segstore.OSFS{}, dir); err == nil {
		t.Fatal("a broken replica.json was accepted")
	}
}

// TestLeaderToFollow: a leader that announced itself over its fetch session
// is followed while its epoch is above the metadata's, and only then, and
// only if it is a replica of the partition: any announcement was taken and
// kept as the newest, so one of a non-replica at epoch 2^31-1 won over the
// metadata's leader for good.
func TestLeaderToFollow(t *testing.T) {
	meta := func(leader string, epoch int32, session string) replicaMeta {
		return replicaMeta{pm: election.PartitionMeta{State: election.PartitionState{Leader: leader, Epoch: epoch}, LeaderSession: session,
			Replicas: []string{"n1", "n2", "n3"}}}
	}
	tests := []struct {
		name      string
		meta      replicaMeta
		announced followTarget
		want      followTarget
		wantLed   bool
	}{
		{"the metadata's leader", meta("n1", 1, "s1"), followTarget{}, followTarget{"n1", 1}, true},
		{"a leader lost, none announced", meta("n1", 1, ""), followTarget{}, followTarget{"n1", 1}, false},
		{"announced ahead of the metadata", meta("n1", 1, "s1"), followTarget{"n3", 2}, followTarget{"n3", 2}, true},
		{"announced while the key is free", meta("n1", 1, ""), followTarget{"n3", 2}, followTarget{"n3", 2}, true},
		{"an announcement the metadata caught up with", meta("n3", 2, "s3"), followTarget{"n3", 2}, followTarget{"n3", 2}, true},
		{"an announcement the metadata went past", meta("n1", 3, "s1"), followTarget{"n3", 2}, followTarget{"n1", 3}, true},
		{"self is never followed", meta("n1", 1, ""), followTarget{"n2", 2}, followTarget{"n1", 1}, false},
		{"self leads in the metadata", meta("n2", 1, "s2"), followTarget{}, followTarget{"n2", 1}, false},
		{"a non-replica announced", meta("n1", 1, "s1"), followTarget{"n9", math.MaxInt32}, followTarget{"n1", 1}, true},
	}
	for _, tt := range tests {
		r := &Replica{deps: &Deps{Self: "n2"}, meta: tt.meta, announced: tt.announced}
		if got, led := r.leaderToFollow(); got != tt.want || led != tt.wantLed {
			t.Errorf("%s: %+v %t, want %+v %t", tt.name, got, led, tt.want, tt.wantLed)
		}
	}
}
