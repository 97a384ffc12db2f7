package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// fakeSources hands the collector what a test sets, under a lock: a
// scrape reads it from the handler's goroutine.
type fakeSources struct {
	mu               sync.Mutex
	partitions       []Partition
	groups           []GroupLag
	requests, errors uint64
}

func (f *fakeSources) sources() Sources {
	return Sources{
		Partitions: func() []Partition { f.mu.Lock(); defer f.mu.Unlock(); return append([]Partition(nil), f.partitions...) },
		GroupLags:  func() []GroupLag { f.mu.Lock(); defer f.mu.Unlock(); return append([]GroupLag(nil), f.groups...) },
		Consul:     func() (uint64, uint64) { f.mu.Lock(); defer f.mu.Unlock(); return f.requests, f.errors },
	}
}

// scrape serves the registry as Prometheus would scrape it and parses the
// whole body with the reference text parser.
func scrape(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("Content-Type %q, want the text format", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("the text parser refuses the body: %v", err)
	}
	return families
}

// value is the value of the series of family with exactly labels (name,
// value pairs); ok is false when there is no such series.
func value(families map[string]*dto.MetricFamily, family string, labels ...string) (float64, bool) {
	mf := families[family]
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		if !hasLabels(m, labels) {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func hasLabels(m *dto.Metric, labels []string) bool {
	if len(m.GetLabel()) != len(labels)/2 {
		return false
	}
	for i := 0; i < len(labels); i += 2 {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func TestCollectorReadsSourcesAtEveryScrape(t *testing.T) {
	f := &fakeSources{
		partitions: []Partition{
			{Topic: "orders", Partition: 0, HighWatermark: 40, LogEndOffset: 42, LogStartOffset: 3, ISR: 3, MinISR: 2,
				Leader: true, LeaderEpoch: 7, FollowerLag: []FollowerLag{{Replica: "n2", Records: 2}, {Replica: "n3", Records: 0}}},
			{Topic: "orders", Partition: 1, HighWatermark: 10, LogEndOffset: 10, ISR: 1, MinISR: 2, LeaderEpoch: 4},
			{Topic: "orders", Partition: 2, ISR: 2, MinISR: 2, Leader: true},
		},
		groups:   []GroupLag{{Group: "billing", Topic: "orders", Partition: 0, Records: 15}},
		requests: 120, errors: 3,
	}
	m := New(f.sources())
	got := scrape(t, m)

	p0 := []string{"topic", "orders", "partition", "0"}
	p1 := []string{"topic", "orders", "partition", "1"}
	for _, tc := range []struct {
		family string
		labels []string
		want   float64
	}{
		{"logagent_partition_high_watermark", p0, 40},
		{"logagent_partition_log_end_offset", p0, 42},
		{"logagent_partition_log_start_offset", p0, 3},
		{"logagent_partition_isr_size", p0, 3},
		{"logagent_partition_under_min_isr", p0, 0},
		{"logagent_partition_leader", p0, 1},
		{"logagent_partition_leader_epoch", p0, 7},
		{"logagent_follower_lag_records", append(p0, "replica", "n2"), 2},
		{"logagent_follower_lag_records", append(p0, "replica", "n3"), 0},
		{"logagent_partition_high_watermark", p1, 10},
		{"logagent_partition_isr_size", p1, 1},
		{"logagent_partition_under_min_isr", p1, 1},
		{"logagent_partition_leader", p1, 0},
		{"logagent_partition_leader_epoch", p1, 4},
		// Exactly min_insync_replicas is enough.
		{"logagent_partition_under_min_isr", []string{"topic", "orders", "partition", "2"}, 0},
		{"logagent_group_lag_records", []string{"group", "billing", "topic", "orders", "partition", "0"}, 15},
		{"logagent_consul_requests_total", nil, 120},
		{"logagent_consul_request_errors_total", nil, 3},
	} {
		if v, ok := value(got, tc.family, tc.labels...); !ok || v != tc.want {
			t.Errorf("%s%v = %v (present %v), want %v", tc.family, tc.labels, v, ok, tc.want)
		}
	}
	// A follower only shows up under its leader's series.
	if n := len(got["logagent_follower_lag_records"].GetMetric()); n != 2 {
		t.Errorf("%d follower lag series, want 2 (partition 1 is not led here, partition 2 has no follower that fetched)", n)
	}
	for _, family := range []string{"go_goroutines", "go_sched_latencies_seconds", "process_cpu_seconds_total"} {
		if _, ok := got[family]; !ok {
			t.Errorf("no %s: the Go and process collectors are not registered", family)
		}
	}

	// The next scrape reads the sources again: nothing is cached.
	f.mu.Lock()
	f.partitions[0].HighWatermark, f.partitions[0].LogEndOffset, f.partitions[0].ISR = 90, 95, 1
	f.partitions[0].FollowerLag = []FollowerLag{{Replica: "n2", Records: 53}}
	f.partitions = f.partitions[:1]
	f.groups = nil
	f.requests = 121
	f.mu.Unlock()
	got = scrape(t, m)
	for _, tc := range []struct {
		family string
		labels []string
		want   float64
	}{
		{"logagent_partition_high_watermark", p0, 90},
		{"logagent_partition_log_end_offset", p0, 95},
		{"logagent_partition_under_min_isr", p0, 1},
		{"logagent_follower_lag_records", append(p0, "replica", "n2"), 53},
		{"logagent_consul_requests_total", nil, 121},
	} {
		if v, ok := value(got, tc.family, tc.labels...); !ok || v != tc.want {
			t.Errorf("after the change: %s%v = %v (present %v), want %v", tc.family, tc.labels, v, ok, tc.want)
		}
	}
	for _, gone := range []struct {
		family string
		labels []string
	}{
		{"logagent_partition_high_watermark", p1},
		{"logagent_follower_lag_records", append(p0, "replica", "n3")},
		{"logagent_group_lag_records", []string{"group", "billing", "topic", "orders", "partition", "0"}},
	} {
		if v, ok := value(got, gone.family, gone.labels...); ok {
			t.Errorf("%s%v = %v still exported after its source dropped it", gone.family, gone.labels, v)
		}
	}
}

func TestInstruments(t *testing.T) {
	m := New(Sources{})
	m.Produced("orders", 10, 1200)
	m.Produced("orders", 5, 600)
	m.Produced("audit", 1, 90)
	m.ObserveProduce(AcksAll, OutcomeSuccess, 3*time.Millisecond)
	m.ObserveProduce(AcksAll, OutcomeSuccess, 40*time.Millisecond)
	m.ObserveProduce(AcksAll, OutcomeServerError, 5*time.Second)
	m.ObserveProduce(AcksLeader, OutcomeSuccess, time.Millisecond)
	m.ObserveProduce(AcksInvalid, OutcomeClientError, time.Millisecond)
	m.ObserveProduce("bogus", OutcomeSuccess, time.Millisecond)     // not a series of its own
	m.ObserveProduce(AcksAll, "bogus", time.Millisecond)            // nor this
	m.ObserveProduce(AcksInvalid, OutcomeSuccess, time.Millisecond) // nor this: an invalid acks is refused
	m.Fetched("orders", 4096)
	m.ObserveFetch(2 * time.Second)
	m.ObserveFsync(time.Millisecond)
	m.ObserveFsync(2 * time.Millisecond)
	m.ObserveFsync(4 * time.Millisecond)
	m.LeaderElected()
	m.LeaderElected()
	m.ISRChanged()
	m.ReplicaLoopWoke()
	m.ReplicaLoopWoke()
	m.ReplicaFetchServed()
	m.ReplicaFetchServed()
	m.ReplicaFetchServed()
	m.Error("not_leader")
	m.Error("not_leader")
	m.Error("unknown_topic")
	got := scrape(t, m)
	for _, tc := range []struct {
		family string
		labels []string
		want   float64
	}{
		{"logagent_produce_records_total", []string{"topic", "orders"}, 15},
		{"logagent_produce_bytes_total", []string{"topic", "orders"}, 1800},
		{"logagent_produce_records_total", []string{"topic", "audit"}, 1},
		{"logagent_produce_request_duration_seconds", []string{"acks", "all", "outcome", "success"}, 2},
		{"logagent_produce_request_duration_seconds", []string{"acks", "all", "outcome", "server_error"}, 1},
		{"logagent_produce_request_duration_seconds", []string{"acks", "all", "outcome", "client_error"}, 0},
		{"logagent_produce_request_duration_seconds", []string{"acks", "1", "outcome", "success"}, 1},
		{"logagent_produce_request_duration_seconds", []string{"acks", "invalid", "outcome", "client_error"}, 1},
		{"logagent_fetch_bytes_total", []string{"topic", "orders"}, 4096},
		{"logagent_fetch_request_duration_seconds", nil, 1},
		{"logagent_fsync_duration_seconds", nil, 3},
		{"logagent_leader_elections_total", nil, 2},
		{"logagent_isr_changes_total", nil, 1},
		{"logagent_replica_loop_wakes_total", nil, 2},
		{"logagent_replica_fetch_requests_total", nil, 3},
		{"logagent_errors_total", []string{"code", "not_leader"}, 2},
		{"logagent_errors_total", []string{"code", "unknown_topic"}, 1},
	} {
		if v, ok := value(got, tc.family, tc.labels...); !ok || v != tc.want {
			t.Errorf("%s%v = %v (present %v), want %v", tc.family, tc.labels, v, ok, tc.want)
		}
	}
	if n := len(got["logagent_produce_request_duration_seconds"].GetMetric()); n != 10 {
		t.Errorf("%d produce duration series, want 10: each acks value (all, 1, 0) with each outcome, and invalid with client_error", n)
	}
	h := got["logagent_fsync_duration_seconds"].GetMetric()[0].GetHistogram()
	if sum := h.GetSampleSum(); sum < 0.0069 || sum > 0.0071 {
		t.Errorf("fsync duration sum %v s, want 0.007", sum)
	}
	// Every family of a partition is absent without sources, not zero.
	if _, ok := got["logagent_partition_high_watermark"]; ok {
		t.Error("partition series without a partition source")
	}
}

// BenchmarkProduceRequest is what one produce request adds for the
// metrics: its topic's counters and its duration, from as many goroutines
// as the machine runs, as concurrent requests do.
func BenchmarkProduceRequest(b *testing.B) {
	m := New(Sources{})
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Produced("orders", 100, 10_400)
			m.ObserveProduce(AcksAll, OutcomeSuccess, 800*time.Microsecond)
		}
	})
}

// TestTotals: the status page's byte rates come from the produce and fetch
// counters summed over the topics.
func TestTotals(t *testing.T) {
	m := New(Sources{})
	if got := m.Totals(); got != (Totals{}) {
		t.Fatalf("totals of a new registry: %+v, want zeros", got)
	}
	m.Produced("a", 3, 300)
	m.Produced("b", 2, 50)
	m.Produced("a", 1, 100)
	m.Fetched("b", 4096)
	m.Fetched("c", 1)
	want := Totals{ProduceRecords: 6, ProduceBytes: 450, FetchBytes: 4097}
	if got := m.Totals(); got != want {
		t.Fatalf("totals: %+v, want %+v", got, want)
	}
}

// BenchmarkScrape is one GET /metrics of an agent holding a replica of
// 10,000 partitions, leading a third of them with two followers each (the
// cost curves' largest point, docs/benchmarks.md): 73,334 partition series.
func BenchmarkScrape(b *testing.B) {
	parts := make([]Partition, 10_000)
	for i := range parts {
		p := Partition{Topic: "orders", Partition: i, HighWatermark: int64(i) * 1000, LogEndOffset: int64(i)*1000 + 3,
			LogStartOffset: int64(i), ISR: 3, MinISR: 2, Leader: i%3 == 0, LeaderEpoch: 7}
		if p.Leader {
			p.FollowerLag = []FollowerLag{{Replica: "n2", Records: 3}, {Replica: "n3", Records: 0}}
		}
		parts[i] = p
	}
	m := New(Sources{Partitions: func() []Partition { return parts }})
	h := m.Handler()
	for _, encoding := range []string{"identity", "gzip"} {
		b.Run(encoding, func(b *testing.B) {
			for b.Loop() {
				rec := httptest.NewRecorder()
				req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
				req.Header.Set("Accept-Encoding", encoding)
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatal(rec.Code)
				}
				b.ReportMetric(float64(rec.Body.Len()), "bytes/scrape")
			}
		})
	}
}

// TestLabelValuesEscaped: a group id is any string a client sends; the
// text written for it must parse back to the same label value.
func TestLabelValuesEscaped(t *testing.T) {
	const group = "we\"ird\\g\nroup é"
	m := New(Sources{GroupLags: func() []GroupLag { return []GroupLag{{Group: group, Topic: "orders", Partition: 3, Records: 9}} }})
	got := scrape(t, m)
	if v, ok := value(got, "logagent_group_lag_records", "group", group, "topic", "orders", "partition", "3"); !ok || v != 9 {
		t.Fatalf("group lag of %q = %v (present %v), want 9: %v", group, v, ok, got["logagent_group_lag_records"])
	}
}
