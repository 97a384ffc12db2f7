package testcluster

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/logagent/logagent/groupcoord"
)

// scrape is one agent's GET /metrics, parsed whole by Prometheus's own
// text parser.
type scrape map[string]*dto.MetricFamily

func scrapeAgent(t *testing.T, a *Agent) scrape {
	t.Helper()
	resp, err := a.c.http.Get("http://" + a.ClientAddr + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", a.NodeID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("scrape %s: %d %s", a.NodeID, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape %s: the text parser refuses the body: %v", a.NodeID, err)
	}
	return families
}

// value is the gauge's or counter's value of the series of family with
// exactly labels (name, value pairs); ok is false without such a series.
func (s scrape) value(family string, labels ...string) (float64, bool) {
	for _, m := range s[family].GetMetric() {
		if len(m.GetLabel()) != len(labels)/2 {
			continue
		}
		match := true
		for i := 0; i < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				found = found || (lp.GetName() == labels[i] && lp.GetValue() == labels[i+1])
			}
			match = match && found
		}
		if !match {
			continue
		}
		if m.Gauge != nil {
			return m.Gauge.GetValue(), true
		}
		return m.Counter.GetValue(), true
	}
	return 0, false
}

// must is value for a series that has to be there.
func (s scrape) must(t *testing.T, family string, labels ...string) float64 {
	t.Helper()
	v, ok := s.value(family, labels...)
	if !ok {
		t.Fatalf("no series %s%v", family, labels)
	}
	return v
}

// TestMetricsMove (issue 16): every agent's /metrics parses as the
// Prometheus text format, and the figures follow what happens: the high
// watermark after a produce, a follower's lag while its link to the
// leader is cut and writes go on, the ISR shrinking and growing back, and
// an election won after the leader is killed.
func TestMetricsMove(t *testing.T) {
	const topic = "metrics"
	c := Start(t, Options{Proxies: true})
	if err := c.Agents[0].CreateTopic(TopicSpec{Name: topic, Partitions: 1, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	leader := c.WaitISR(topic, 0, []string{"n1", "n2", "n3"}, 30*time.Second)
	part := []string{"topic", topic, "partition", "0"}
	lagOf := func(a *Agent) []string { return append(append([]string(nil), part...), "replica", a.NodeID) }
	var followers []*Agent
	for _, a := range c.Agents {
		s := scrapeAgent(t, a)
		want := 0.0
		if a == leader {
			want = 1
		} else {
			followers = append(followers, a)
		}
		if got := s.must(t, "logagent_partition_leader", part...); got != want {
			t.Fatalf("%s: logagent_partition_leader %v, want %v (leader %s)", a.NodeID, got, want, leader.NodeID)
		}
		if hw := s.must(t, "logagent_partition_high_watermark", part...); hw != 0 {
			t.Fatalf("%s: high watermark %v of an empty partition", a.NodeID, hw)
		}
		if r, _ := s.value("logagent_consul_requests_total"); r == 0 {
			t.Fatalf("%s: no Consul request counted", a.NodeID)
		}
	}

	// The high watermark, on the leader at once and on the followers
	// after their next fetch; the produce and fetch counters.
	const n = 10
	if _, err := leader.Produce(topic, 0, ContentTypeNDJSON, []byte(strings.Repeat("{\"v\":1}\n", n)), "all", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	s := scrapeAgent(t, leader)
	for family, want := range map[string]float64{
		"logagent_partition_high_watermark": n, "logagent_partition_log_end_offset": n, "logagent_partition_isr_size": 3,
		"logagent_partition_under_min_isr": 0,
	} {
		if got := s.must(t, family, part...); got != want {
			t.Fatalf("leader %s after %d records: %s %v, want %v", leader.NodeID, n, family, got, want)
		}
	}
	if got := s.must(t, "logagent_produce_records_total", "topic", topic); got != n {
		t.Fatalf("leader: logagent_produce_records_total %v, want %d", got, n)
	}
	for _, f := range followers {
		c.WaitFor(10*time.Second, f.NodeID+"'s high watermark at "+strconv.Itoa(n), func() bool {
			hw, _ := scrapeAgent(t, f).value("logagent_partition_high_watermark", part...)
			return hw == n
		})
	}
	fetched, err := leader.Fetch(topic, 0, 0, 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leader.Produce("no-such-topic", 0, ContentTypeNDJSON, []byte("x\n"), "all", time.Second); err == nil {
		t.Fatal("produce to a missing topic succeeded")
	}
	s = scrapeAgent(t, leader)
	if got := s.must(t, "logagent_fetch_bytes_total", "topic", topic); got != float64(len(fetched.Batches)) {
		t.Fatalf("leader: logagent_fetch_bytes_total %v after one fetch of %d bytes", got, len(fetched.Batches))
	}
	if got := s.must(t, "logagent_errors_total", "code", "unknown_topic"); got != 1 {
		t.Fatalf("leader: logagent_errors_total{code=unknown_topic} %v, want 1", got)
	}
	// Two followers replicated the records: each fetched at least twice
	// (the records, then the high watermark), from the leader only.
	if got := s.must(t, "logagent_replica_fetch_requests_total"); got < 4 {
		t.Fatalf("leader: logagent_replica_fetch_requests_total %v after two followers replicated, want at least 4", got)
	}
	for _, f := range followers {
		if got := scrapeAgent(t, f).must(t, "logagent_replica_fetch_requests_total"); got != 0 {
			t.Fatalf("follower %s: logagent_replica_fetch_requests_total %v, want 0: it leads nothing", f.NodeID, got)
		}
	}
	// Caught up, a follower's lag is 0: its fetch offset is the log end.
	c.WaitFor(10*time.Second, "both followers at lag 0", func() bool {
		s := scrapeAgent(t, leader)
		for _, f := range followers {
			if lag, ok := s.value("logagent_follower_lag_records", lagOf(f)...); !ok || lag != 0 {
				return false
			}
		}
		return true
	})
	isrChanges := s.must(t, "logagent_isr_changes_total")

	// Cut one follower off and keep writing (acks=1: the leader alone
	// acknowledges, so the writes do not wait for the ISR to shrink).
	cut, kept := followers[0], followers[1]
	c.CutLink(cut, leader)
	c.CutLink(leader, cut)
	written := 0
	for _, round := range []int{5, 7} {
		for range round {
			if _, err := leader.Produce(topic, 0, ContentTypeNDJSON, []byte("{\"after\":\"cut\"}\n"), "1", 5*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		written += round
		s := scrapeAgent(t, leader)
		lag := s.must(t, "logagent_follower_lag_records", lagOf(cut)...)
		if lag < float64(written) || lag > float64(n+written) {
			t.Fatalf("%s cut off for %d records: lag %v on leader %s, want %d to %d", cut.NodeID, written, lag, leader.NodeID, written, n+written)
		}
		t.Logf("%d records written since %s was cut off: its lag %v", written, cut.NodeID, lag)
	}
	c.WaitFor(10*time.Second, kept.NodeID+" at lag 0", func() bool {
		lag, ok := scrapeAgent(t, leader).value("logagent_follower_lag_records", lagOf(kept)...)
		return ok && lag == 0
	})
	c.WaitISR(topic, 0, []string{leader.NodeID, kept.NodeID}, 30*time.Second)
	s = scrapeAgent(t, leader)
	if isr, under := s.must(t, "logagent_partition_isr_size", part...), s.must(t, "logagent_partition_under_min_isr", part...); isr != 2 || under != 0 {
		t.Fatalf("ISR shrunk to two of min 2: isr_size %v, under_min_isr %v", isr, under)
	}
	if got := s.must(t, "logagent_isr_changes_total"); got < isrChanges+1 {
		t.Fatalf("logagent_isr_changes_total %v after the shrink, was %v", got, isrChanges)
	}

	// Healed, the follower catches up and comes back.
	leader.PeerProxy.Heal()
	cut.PeerProxy.Heal()
	c.WaitISR(topic, 0, []string{"n1", "n2", "n3"}, 30*time.Second)
	c.WaitFor(10*time.Second, cut.NodeID+" back at lag 0", func() bool {
		lag, ok := scrapeAgent(t, leader).value("logagent_follower_lag_records", lagOf(cut)...)
		return ok && lag == 0
	})

	// The leader dies: a survivor wins the election, and its counter and
	// gauges say so.
	oldEpoch := scrapeAgent(t, leader).must(t, "logagent_partition_leader_epoch", part...)
	elections := map[*Agent]float64{}
	for _, f := range followers {
		elections[f] = scrapeAgent(t, f).must(t, "logagent_leader_elections_total")
	}
	leader.Kill()
	next, epoch := c.WaitLeader(topic, 0, 30*time.Second)
	s = scrapeAgent(t, next)
	if got := s.must(t, "logagent_leader_elections_total"); got < elections[next]+1 {
		t.Fatalf("new leader %s: logagent_leader_elections_total %v, was %v before the kill", next.NodeID, got, elections[next])
	}
	if got := s.must(t, "logagent_partition_leader", part...); got != 1 {
		t.Fatalf("new leader %s: logagent_partition_leader %v", next.NodeID, got)
	}
	if got := s.must(t, "logagent_partition_leader_epoch", part...); got != float64(epoch) || got <= oldEpoch {
		t.Fatalf("new leader %s: logagent_partition_leader_epoch %v, want its epoch %d, above %v", next.NodeID, got, epoch, oldEpoch)
	}
	c.WaitFor(10*time.Second, fmt.Sprintf("%s's high watermark at %d", next.NodeID, n+written), func() bool {
		hw, _ := scrapeAgent(t, next).value("logagent_partition_high_watermark", part...)
		return hw == float64(n+written)
	})
	t.Logf("leader %s killed: %s leads at epoch %d (was %v), its elections counter %v -> %v",
		leader.NodeID, next.NodeID, epoch, oldEpoch, elections[next], s.must(t, "logagent_leader_elections_total"))
}

// TestMetricsGroupLag: the coordinator of a group exports its committed
// offsets' lag behind each partition's high watermark, reading both at
// scrape time; the other agents export none for it.
func TestMetricsGroupLag(t *testing.T) {
	const topic = "lagging"
	c := Start(t, Options{})
	a := c.Agents[0]
	if err := a.CreateTopic(TopicSpec{Name: topic, Partitions: 2, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	for p, n := range []int{10, 20} {
		c.WaitLeader(topic, p, 20*time.Second)
		produceRecords(t, a, topic, p, n)
	}
	m := joinGroup(t, a, "billing", "m1", topic)
	if err := commitOffsets(a, "billing", "m1", m.MemberEpoch, map[int]int64{0: 3, 1: 20}, topic); err != nil {
		t.Fatal(err)
	}
	var d groupcoord.Description
	if err := groupCall(a, http.MethodGet, "/v1/groups/billing", nil, &d); err != nil {
		t.Fatal(err)
	}
	lag := func(p int) []string {
		return []string{"group", "billing", "topic", topic, "partition", strconv.Itoa(p)}
	}
	var coordinator *Agent
	for _, ag := range c.Agents {
		if ag.NodeID == d.Coordinator {
			coordinator = ag
			continue
		}
		if v, ok := scrapeAgent(t, ag).value("logagent_group_lag_records", lag(0)...); ok {
			t.Fatalf("%s, not the coordinator (%s), exports a lag of %v", ag.NodeID, d.Coordinator, v)
		}
	}
	if coordinator == nil {
		t.Fatalf("describe names coordinator %q, no agent of the cluster", d.Coordinator)
	}
	waitLag := func(want map[int]float64) {
		t.Helper()
		c.WaitFor(10*time.Second, fmt.Sprintf("group lag %v on %s", want, coordinator.NodeID), func() bool {
			s := scrapeAgent(t, coordinator)
			for p, w := range want {
				if v, ok := s.value("logagent_group_lag_records", lag(p)...); !ok || v != w {
					return false
				}
			}
			return true
		})
	}
	waitLag(map[int]float64{0: 7, 1: 0})
	// More records: the lag grows with the high watermark; a commit
	// takes it back.
	produceRecords(t, a, topic, 1, 5)
	waitLag(map[int]float64{0: 7, 1: 5})
	if err := commitOffsets(a, "billing", "m1", m.MemberEpoch, map[int]int64{0: 10}, topic); err != nil {
		t.Fatal(err)
	}
	waitLag(map[int]float64{0: 0, 1: 5})
}

// TestIdlePartitionsDoNotWake (issue 19): once writes stop and the last
// checkpoint is written, no replica loop wakes: an idle leader is not
// ticked while every follower is parked at its log end, and a log with
// nothing to checkpoint or to delete arms no timer. Before, each replica
// woke every 5 s to checkpoint and each leader every lag_time_max/10, a
// cost that grew with partitions (3,334 wakes a second per agent at
// 10,000).
func TestIdlePartitionsDoNotWake(t *testing.T) {
	const topic, partitions = "idle", 12
	c := Start(t, Options{})
	if err := c.Agents[0].CreateTopic(TopicSpec{Name: topic, Partitions: partitions, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	for p := range partitions {
		leader := c.WaitISR(topic, p, []string{"n1", "n2", "n3"}, 30*time.Second)
		produceRecords(t, leader, topic, p, 3)
	}
	wakes := func() (total float64) {
		for _, a := range c.Agents {
			total += scrapeAgent(t, a).must(t, "logagent_replica_loop_wakes_total")
		}
		return total
	}
	// The checkpoints come partition.CheckpointInterval (5 s) after the
	// last change, so the loops settle within a few windows. (A scrape
	// wakes each leader of the scraped agent to read its followers' lag;
	// the count leaves those wakes out.) Before, the checkpoint ticker
	// alone woke the 36 replicas 14 times per window, and the idle
	// leaders' ticks (lag_time_max/10) 120 more.
	const window, settle, quiet = 2 * time.Second, 40 * time.Second, 2
	// Quiet must last longer than a checkpoint interval: a periodic
	// timer would show within it.
	const quietWindows = 5
	var seen []float64
	last, run := wakes(), 0
	for start := time.Now(); ; {
		time.Sleep(window)
		now := wakes()
		seen = append(seen, now-last)
		if run++; now-last > quiet {
			run = 0
		}
		if run == quietWindows {
			t.Logf("%d replicas idle: %v wakes in the cluster per %s window", 3*partitions, seen, window)
			return
		}
		if time.Since(start) > settle {
			t.Fatalf("%d replicas woke %v times per %s window in the %s after the last write, want %d windows in a row of at most %d", 3*partitions, seen, window, settle, quietWindows, quiet)
		}
		last = now
	}
}

// countAbove is how many observations of the histogram family, over all
// its series, were above the bucket bound le (one of its bounds).
func (s scrape) countAbove(family string, le float64) (above, total uint64) {
	for _, m := range s[family].GetMetric() {
		h := m.GetHistogram()
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() == le {
				above += h.GetSampleCount() - b.GetCumulativeCount()
				total += h.GetSampleCount()
			}
		}
	}
	return above, total
}
