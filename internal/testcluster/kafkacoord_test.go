package testcluster

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/logagent/logagent/groupcoord"
)

// TestKafkaGroupSurvivesCoordinatorCrash: two kgo group consumers with
// kgo's defaults (session 45 s, heartbeat 3 s, cooperative-sticky), each
// through the listener of an agent that is not the group's coordinator,
// consume and commit; the coordinator's agent is killed with SIGKILL, at
// the shipped failure detection. Classic membership lives in the
// coordinator's memory only (docs/design.md §7.5), so the new coordinator
// answers the members UNKNOWN_MEMBER_ID and they must join again: the
// group must be Stable with both members at the new coordinator, every
// record produced before the kill, after it and after the rejoin reach a
// member, and the group commit the end of every partition.
func TestKafkaGroupSurvivesCoordinatorCrash(t *testing.T) {
	const topic, groupID, partitions, half = "kcoord", "coordcrash", 4, 200
	c := Start(t, Options{Kafka: true, Timing: TimingShipped})
	groupTopic(t, c, c.Agents[0], topic, partitions)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// A simple commit (no member) gives the group an offsets partition
	// and so a coordinator to ask for.
	probe := kadm.NewClient(kgoClient(t, c.Agents[0]))
	var start kadm.Offsets
	start.AddOffset(topic, 0, 0, -1)
	if resp, err := probe.CommitOffsets(ctx, groupID, start); err != nil || resp.Error() != nil {
		t.Fatalf("simple commit: %v, %v", err, resp.Error())
	}
	var d groupcoord.Description
	if err := groupCall(c.Agents[0], http.MethodGet, "/v1/groups/"+groupID, nil, &d); err != nil {
		t.Fatal(err)
	}
	var coordinator *Agent
	var sidecars []*Agent
	for _, a := range c.Agents {
		if a.NodeID == d.Coordinator {
			coordinator = a
		} else {
			sidecars = append(sidecars, a)
		}
	}
	if coordinator == nil || len(sidecars) != 2 {
		t.Fatalf("describe names coordinator %q: not one agent of the cluster", d.Coordinator)
	}

	type member struct {
		cl       *kgo.Client
		mu       sync.Mutex
		consumed map[string]int
	}
	members := make([]*member, len(sidecars))
	var polls sync.WaitGroup
	pollCtx, stopPolls := context.WithCancel(ctx)
	defer func() { stopPolls(); polls.Wait() }()
	for i, a := range sidecars {
		m := &member{consumed: map[string]int{}}
		m.cl = kgoClient(t, a, kgo.ConsumerGroup(groupID), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		members[i] = m
		polls.Go(func() {
			for pollCtx.Err() == nil {
				recs := m.cl.PollRecords(pollCtx, 20).Records()
				if len(recs) == 0 {
					continue
				}
				m.mu.Lock()
				for _, r := range recs {
					m.consumed[string(r.Value)]++
				}
				m.mu.Unlock()
				if err := m.cl.CommitRecords(pollCtx, recs...); err != nil && pollCtx.Err() == nil {
					t.Logf("member on %s: commit: %v (consumed again after the rebalance)", a.NodeID, err)
				}
			}
		})
	}
	consumed := func(v string) bool {
		for _, m := range members {
			m.mu.Lock()
			n := m.consumed[v]
			m.mu.Unlock()
			if n > 0 {
				return true
			}
		}
		return false
	}
	waitConsumed := func(from, to int, timeout time.Duration, what string) {
		t.Helper()
		c.WaitFor(timeout, what, func() bool {
			for i := from; i < to; i++ {
				if !consumed(fmt.Sprintf("r%d", i)) {
					return false
				}
			}
			return true
		})
	}

	producer := spreadProducer(t, sidecars[0], topic)
	produceEach(ctx, t, producer, "r", 0, half)
	waitConsumed(0, half, time.Minute, "the group consumes the first half")
	adm := kadm.NewClient(kgoClient(t, sidecars[1]))
	c.WaitFor(time.Minute, "both members in the group", func() bool {
		d, err := adm.DescribeGroups(ctx, groupID)
		return err == nil && d[groupID].State == "Stable" && len(d[groupID].Members) == 2
	})
	t.Logf("coordinator %s killed with SIGKILL", coordinator.NodeID)
	killedAt := time.Now()
	coordinator.Kill()

	produceEach(ctx, t, producer, "r", half, 2*half)
	waitConsumed(0, 2*half, 3*time.Minute, "every record consumed after the coordinator's crash")
	// Fetching needs no coordinator: the members may have read those
	// with their old assignment. What shows the group back is its state
	// at the new coordinator, and records read after it.
	c.WaitFor(time.Minute, "both members in the group again, at the new coordinator", func() bool {
		d, err := adm.DescribeGroups(ctx, groupID)
		return err == nil && d[groupID].State == "Stable" && len(d[groupID].Members) == 2
	})
	t.Logf("the group Stable with both members again %v after the kill", time.Since(killedAt).Round(time.Millisecond))
	produceEach(ctx, t, producer, "r", 2*half, 3*half)
	waitConsumed(0, 3*half, time.Minute, "the records produced after the rejoin consumed")
	stopPolls()
	polls.Wait()

	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	c.WaitFor(30*time.Second, "the group's commits of every partition's end", func() bool {
		committed, err := adm.FetchOffsets(ctx, groupID)
		if err != nil {
			return false
		}
		for p := range int32(partitions) {
			end, _ := ends.Lookup(topic, p)
			if got, ok := committed.Lookup(topic, p); !ok || got.At != end.Offset {
				return false
			}
		}
		return true
	})
}
