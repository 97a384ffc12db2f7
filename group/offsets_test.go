package group

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/testseed"
)

func TestCommit(t *testing.T) {
	// a owns t/0 (granted at epoch 1, now at epoch 2), b owns t/1.
	g := newGroup(t, map[string]int32{"t": 2})
	mustJoin(t, g, "a", "t")
	mustJoin(t, g, "b", "t")
	mustHeartbeat(t, g, "a", 1, tps("t", 0, 1), t0)
	mustHeartbeat(t, g, "a", 1, tps("t", 0), t0)
	mustHeartbeat(t, g, "b", 2, nil, t0)
	req := func(member string, epoch int32, p int32, offset int64, meta string) CommitRequest {
		return CommitRequest{MemberID: member, MemberEpoch: epoch, Partition: TopicPartition{"t", p}, Offset: offset, Metadata: meta}
	}
	tests := []struct {
		name string
		g    *Group
		req  CommitRequest
		hw   int64
		want error
	}{
		{"below the high watermark", g, req("a", 2, 0, 10, "meta"), 20, nil},
		{"at the high watermark", g, req("a", 1, 0, 20, ""), 20, nil},
		{"beyond the high watermark", g, req("a", 2, 0, 21, ""), 20, ErrOffsetBeyondHighWatermark},
		{"unknown group", nil, req("a", 2, 0, 10, ""), 20, ErrUnknownGroup},
		{"unknown member", g, req("z", 2, 0, 10, ""), 20, ErrUnknownMember},
		{"not the owner", g, req("a", 2, 1, 10, ""), 20, ErrNotOwner},
		{"stale epoch", g, req("b", 1, 1, 10, ""), 20, ErrStaleMemberEpoch},
		{"negative offset", g, req("a", 2, 0, -1, ""), 20, ErrInvalidInput},
		{"metadata too long", g, req("a", 2, 0, 1, strings.Repeat("x", MaxMetadataLen+1)), 20, ErrInvalidInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := t0.Add(1500 * time.Millisecond)
			r, err := Commit(tt.g, tt.req, tt.hw, now)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Commit = %v, want %v", err, tt.want)
			}
			if err != nil {
				return
			}
			o := NewOffsets()
			if err := o.Apply(r.Key, r.Value); err != nil {
				t.Fatal(err)
			}
			got, ok := o.Committed("g", tt.req.Partition)
			want := Committed{Offset: tt.req.Offset, Metadata: tt.req.Metadata, CommitTime: now.UTC()}
			if !ok || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("committed %+v, %v; want %+v", got, ok, want)
			}
		})
	}
}

func TestOffsetsApply(t *testing.T) {
	commit := func(group string, p int32, off int64) Record {
		return mustRecord(t)(OffsetRecord(group, TopicPartition{"t", p}, Committed{Offset: off, CommitTime: t0}))
	}
	o := NewOffsets()
	steps := []struct {
		r    Record
		want string
	}{
		{commit("g", 0, 5), "g:[t/0=5]"},
		{commit("g", 1, 7), "g:[t/0=5 t/1=7]"},
		{commit("h", 0, 1), "g:[t/0=5 t/1=7] h:[t/0=1]"},
		{commit("g", 0, 3), "g:[t/0=3 t/1=7] h:[t/0=1]"}, // the later record wins, even lower
		{mustRecord(t)(OffsetTombstone("g", TopicPartition{"t", 1})), "g:[t/0=3] h:[t/0=1]"},
		{mustRecord(t)(OffsetTombstone("g", TopicPartition{"t", 0})), "h:[t/0=1]"},
		{commit("g", 0, 9), "g:[t/0=9] h:[t/0=1]"},
		{mustRecord(t)(GroupTombstone("g")), "h:[t/0=1]"},
		{mustRecord(t)(GroupTombstone("x")), "h:[t/0=1]"},
		{Record{Key: []byte("junk")}, "h:[t/0=1]"},
	}
	for i, s := range steps {
		err := o.Apply(s.r.Key, s.r.Value)
		if i == len(steps)-1 {
			if !errors.Is(err, ErrCorruptRecord) {
				t.Fatalf("junk applied: %v", err)
			}
		} else if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := dump(o); got != s.want {
			t.Fatalf("step %d: %s, want %s", i, got, s.want)
		}
	}
}

func dump(o *Offsets) string {
	var parts []string
	for _, g := range o.Groups() {
		var ps []string
		for _, po := range o.Group(g) {
			ps = append(ps, fmt.Sprintf("%v=%d", po.TopicPartition, po.Offset))
		}
		parts = append(parts, fmt.Sprintf("%s:%v", g, ps))
	}
	return strings.Join(parts, " ")
}

// dumpAll is dump with every field.
func dumpAll(o *Offsets) string {
	var b strings.Builder
	for _, g := range o.Groups() {
		fmt.Fprintf(&b, "%s:%+v\n", g, o.Group(g))
	}
	return b.String()
}

// TestCompact: Applying a compacted run gives the same offsets as Applying
// the whole run, from empty offsets and from offsets an earlier run left;
// it keeps at most one record per key; and it refuses a corrupt record.
func TestCompact(t *testing.T) {
	rng := testseed.Rand(t)
	groups, topics := []string{"g", "h", "i"}, []string{"t", "u"}
	randomRun := func(n int) []Record {
		var run []Record
		for range n {
			g := groups[rng.IntN(len(groups))]
			tp := TopicPartition{topics[rng.IntN(len(topics))], int32(rng.IntN(3))}
			var r Record
			var err error
			switch x := rng.IntN(20); {
			case x == 0:
				r, err = GroupTombstone(g)
			case x < 3:
				r, err = OffsetTombstone(g, tp)
			default:
				r, err = OffsetRecord(g, tp, Committed{Offset: rng.Int64N(1000), Metadata: fmt.Sprint(rng.IntN(5)),
					CommitTime: t0.Add(time.Duration(rng.IntN(1e6)) * time.Millisecond)})
			}
			run = append(run, mustRecord(t)(r, err))
		}
		return run
	}
	applyAll := func(o *Offsets, run []Record) {
		for _, r := range run {
			if err := o.Apply(r.Key, r.Value); err != nil {
				t.Fatal(err)
			}
		}
	}
	for round := range 500 {
		before, run := randomRun(rng.IntN(30)), randomRun(rng.IntN(200))
		compacted, err := Compact(run)
		if err != nil {
			t.Fatal(err)
		}
		keys := map[string]bool{}
		for _, r := range compacted {
			if keys[string(r.Key)] {
				t.Fatalf("round %d: key %x kept twice", round, r.Key)
			}
			keys[string(r.Key)] = true
		}
		full, short := NewOffsets(), NewOffsets()
		applyAll(full, before)
		applyAll(short, before)
		applyAll(full, run)
		applyAll(short, compacted)
		if a, b := dumpAll(full), dumpAll(short); a != b {
			t.Fatalf("round %d: whole run gives\n%s\ncompacted gives\n%s", round, a, b)
		}
		// Compacting again changes nothing.
		again, err := Compact(compacted)
		if err != nil || !slices.EqualFunc(again, compacted, func(a, b Record) bool {
			return string(a.Key) == string(b.Key) && string(a.Value) == string(b.Value) && (a.Value == nil) == (b.Value == nil)
		}) {
			t.Fatalf("round %d: compacting a compacted run changed it (%v)", round, err)
		}
	}
	run := randomRun(5)
	run[2].Key = run[2].Key[:len(run[2].Key)-1]
	if _, err := Compact(run); !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("Compact over a corrupt record: %v", err)
	}
}
