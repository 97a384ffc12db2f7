package group

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkCommit is the coordinator's work for one commit, without the
// append: check it against the group, encode its record, apply the record.
func BenchmarkCommit(b *testing.B) {
	g, err := New("g", Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := g.SetPartitions("t", 12); err != nil {
		b.Fatal(err)
	}
	epochs := map[string]int32{}
	for i := range 3 {
		id := fmt.Sprintf("m%d", i)
		if _, err := g.Join(id, []string{"t"}, 10*time.Second, t0); err != nil {
			b.Fatal(err)
		}
	}
	// Settle: every member heartbeats until it owns its target.
	for range 3 {
		for _, m := range g.Describe().Members {
			r, err := g.Heartbeat(m.ID, m.MemberEpoch, tpsOf(m.Assigned), t0)
			if err != nil {
				b.Fatal(err)
			}
			epochs[m.ID] = r.MemberEpoch
		}
	}
	type owned struct {
		member string
		tp     TopicPartition
	}
	var parts []owned
	for _, m := range g.Describe().Members {
		for _, gr := range m.Assigned {
			parts = append(parts, owned{m.ID, gr.TopicPartition})
		}
	}
	o := NewOffsets()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p := parts[i%len(parts)]
		r, err := Commit(g, CommitRequest{MemberID: p.member, MemberEpoch: epochs[p.member], Partition: p.tp,
			Offset: int64(i), Metadata: "m"}, int64(i), t0)
		if err != nil {
			b.Fatal(err)
		}
		if err := o.Apply(r.Key, r.Value); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRebalance is one member joining and leaving a group of 99
// members on 4096 partitions: two target computations and the joiner's
// first answer.
func BenchmarkRebalance(b *testing.B) {
	g, err := New("g", Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := g.SetPartitions("t", 4096); err != nil {
		b.Fatal(err)
	}
	for i := range 99 {
		if _, err := g.Join(fmt.Sprintf("m%02d", i), []string{"t"}, 10*time.Second, t0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Join("new", []string{"t"}, 10*time.Second, t0); err != nil {
			b.Fatal(err)
		}
		if err := g.Leave("new"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSecondMemberJoins: a member joins a group whose one member holds
// all 10,000 partitions of a topic (config's largest), and leaves again:
// the balance step moves 5,000 partitions, each to be picked among the
// holder's.
func BenchmarkSecondMemberJoins(b *testing.B) {
	g, err := New("g", Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := g.SetPartitions("t", 10_000); err != nil {
		b.Fatal(err)
	}
	if _, err := g.Join("first", []string{"t"}, 10*time.Second, t0); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Join("second", []string{"t"}, 10*time.Second, t0); err != nil {
			b.Fatal(err)
		}
		if err := g.Leave("second"); err != nil {
			b.Fatal(err)
		}
	}
}
