package testcluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// lockedBuffer is a bytes.Buffer that a process's stderr copier writes
// while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// kcatMember is a `kcat -G` process (librdkafka's KafkaConsumer in a
// classic group) and what it printed: one "partition offset value" line
// per record.
type kcatMember struct {
	name   string
	cmd    *exec.Cmd
	stderr lockedBuffer
	done   chan struct{} // closed once stdout is read and the process waited for

	mu   sync.Mutex
	read map[string][]int32 // value → the partitions it was read from, once per read
}

// startKcatMember starts kcat as a member of group through addr's
// listener; the test's cleanup kills it if it still runs.
func startKcatMember(t *testing.T, kcat, name, addr, group, topic, assignor string) *kcatMember {
	t.Helper()
	m := &kcatMember{name: name, done: make(chan struct{}), read: map[string][]int32{}}
	m.cmd = exec.Command(kcat, "-b", addr, "-G", group, "-u", "-f", `%p %o %s\n`,
		// A short session so that a killed member's partitions move
		// within the test; earliest, so that a member that did not
		// start at the committed offsets reads records again, which the
		// test counts.
		"-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
		"-X", "auto.commit.interval.ms=200", "-X", "auto.offset.reset=earliest",
		"-X", "partition.assignment.strategy="+assignor, topic)
	m.cmd.Stderr = &m.stderr
	out, err := m.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(m.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.SplitN(sc.Text(), " ", 3)
			p, err := strconv.ParseInt(f[0], 10, 32)
			if len(f) != 3 || err != nil {
				t.Errorf("kcat %s printed %q", name, sc.Text())
				continue
			}
			m.mu.Lock()
			m.read[f[2]] = append(m.read[f[2]], int32(p))
			m.mu.Unlock()
		}
		_ = m.cmd.Wait() // the test decides how it ends; its output is what is checked
	}()
	t.Cleanup(func() {
		_ = m.cmd.Process.Kill() // "process already finished" once it ended
		<-m.done
		if t.Failed() {
			t.Logf("kcat %s's stderr:\n%s", name, m.stderr.String())
		}
	})
	return m
}

// reads returns how often m read value.
func (m *kcatMember) reads(value string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.read[value])
}

// partitions returns the partitions m read records of.
func (m *kcatMember) partitions() []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ps []int32
	for _, got := range m.read {
		for _, p := range got {
			if !slices.Contains(ps, p) {
				ps = append(ps, p)
			}
		}
	}
	slices.Sort(ps)
	return ps
}

// TestKafkaKcatGroup: two `kcat -G` consumers (librdkafka's classic
// protocol with its eager range and roundrobin assignors), each through
// its own agent's listener, split a 4-partition topic, read every record
// once between them and commit it (auto-commit); one is killed with
// SIGKILL (no LeaveGroup, no last commit), and the other takes its
// partitions once its session expired and reads the records written
// since, starting at the committed offsets. Both members run with
// auto.offset.reset=earliest: a member that ignored or did not get the
// committed offsets would read the first records again, one that got
// offsets too high would miss records, and both fail the count of
// exactly one read per record. The dead member is killed only once the
// coordinator answers OffsetFetch with the end of every partition, so
// librdkafka's auto-commit interval leaves nothing it read uncommitted:
// the exact count does not depend on timing. Finally the survivor stops
// with SIGTERM (its close commits and leaves): the group is Empty, its
// committed offsets the partitions' ends.
func TestKafkaKcatGroup(t *testing.T) {
	for _, assignor := range []string{"range", "roundrobin"} {
		t.Run(assignor, func(t *testing.T) { testKcatGroup(t, assignor) })
	}
}

func testKcatGroup(t *testing.T, assignor string) {
	const topic, group, partitions, half = "kcatgroup", "kcat-group", 4, 200
	kcat := kcatBinary(t)
	c := Start(t, Options{Kafka: true})
	groupTopic(t, c, c.Agents[0], topic, partitions)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adm := kadm.NewClient(kgoClient(t, c.Agents[0]))
	producer := spreadProducer(t, c.Agents[0], topic)
	produce := func(from, to int) {
		t.Helper()
		var recs []*kgo.Record
		for i := from; i < to; i++ {
			recs = append(recs, &kgo.Record{Value: fmt.Appendf(nil, "k%d", i)})
		}
		if err := producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	// assigned waits until the group is Stable with members members and
	// every partition assigned to one of them, and returns the
	// assignment of each member id.
	assigned := func(members int) map[string][]int32 {
		t.Helper()
		var got map[string][]int32
		c.WaitFor(60*time.Second, fmt.Sprintf("the group Stable with %d members sharing the %d partitions", members, partitions), func() bool {
			d, err := adm.DescribeGroups(ctx, group)
			g := d[group]
			if err != nil || g.Err != nil || g.State != "Stable" || len(g.Members) != members {
				return false
			}
			got = map[string][]int32{}
			var all []int32
			for _, m := range g.Members {
				a, ok := m.Assigned.AsConsumer()
				if !ok {
					return false
				}
				for _, at := range a.Topics {
					if at.Topic == topic {
						got[m.MemberID] = append(got[m.MemberID], at.Partitions...)
						all = append(all, at.Partitions...)
					}
				}
			}
			slices.Sort(all)
			return len(got) == members && slices.Equal(all, []int32{0, 1, 2, 3})
		})
		return got
	}
	waitCommittedEnds := func() {
		t.Helper()
		c.WaitFor(30*time.Second, "the group's committed offsets at the partitions' ends", func() bool {
			ends, err := adm.ListEndOffsets(ctx, topic)
			if err != nil {
				return false
			}
			committed, err := adm.FetchOffsets(ctx, group)
			if err != nil {
				return false
			}
			for p := range int32(partitions) {
				end, _ := ends.Lookup(topic, p)
				got, ok := committed.Lookup(topic, p)
				if !ok || got.At != end.Offset {
					return false
				}
			}
			return true
		})
	}

	dying := startKcatMember(t, kcat, "dying", c.Agents[1].KafkaAddr, group, topic, assignor)
	survivor := startKcatMember(t, kcat, "survivor", c.Agents[2].KafkaAddr, group, topic, assignor)
	split := assigned(2)
	t.Logf("%s assignment: %v", assignor, split)
	produce(0, half)
	c.WaitFor(60*time.Second, "the two members read the first records", func() bool {
		for i := range half {
			if v := fmt.Sprintf("k%d", i); dying.reads(v)+survivor.reads(v) == 0 {
				return false
			}
		}
		return true
	})
	waitCommittedEnds()
	dp, sp := dying.partitions(), survivor.partitions()
	if len(dp) != 2 || len(sp) != 2 || slices.ContainsFunc(dp, func(p int32) bool { return slices.Contains(sp, p) }) {
		t.Fatalf("the members read partitions %v and %v: want two each, disjoint", dp, sp)
	}

	if err := dying.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-dying.done
	killed := time.Now()
	after := assigned(1)
	t.Logf("the survivor holds all partitions %v after %v", after, time.Since(killed).Round(100*time.Millisecond))
	produce(half, 2*half)
	c.WaitFor(60*time.Second, "the survivor reads the records written after the takeover", func() bool {
		for i := half; i < 2*half; i++ {
			if survivor.reads(fmt.Sprintf("k%d", i)) == 0 {
				return false
			}
		}
		return true
	})
	waitCommittedEnds()
	if err := survivor.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-survivor.done:
	case <-ctx.Done():
		t.Fatal("kcat did not exit on SIGTERM")
	}

	for i := range 2 * half {
		v := fmt.Sprintf("k%d", i)
		if n := dying.reads(v) + survivor.reads(v); n != 1 {
			t.Errorf("record %s read %d times (dying %d, survivor %d), want once", v, n, dying.reads(v), survivor.reads(v))
		}
	}
	if got := survivor.partitions(); !slices.Equal(got, []int32{0, 1, 2, 3}) {
		t.Errorf("the survivor read partitions %v, want all four", got)
	}
	waitCommittedEnds()
	d, err := adm.DescribeGroups(ctx, group)
	if err != nil || d[group].State != "Empty" || len(d[group].Members) != 0 {
		t.Errorf("the group after the survivor left: %+v, %v; want Empty", d[group], err)
	}
}
