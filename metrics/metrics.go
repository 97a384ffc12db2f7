package metrics

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Acks values, the acks label of the produce duration: what the client
// API's acks parameter means, not how it was spelled (-1 is "all"), or
// AcksInvalid for a request whose acks is none of them (refused).
const (
	AcksAll     = "all"
	AcksLeader  = "1"
	AcksNone    = "0"
	AcksInvalid = "invalid"
)

// Outcome values, the outcome label of the produce duration: how the
// request was answered, by the class of its HTTP status (a Kafka produce's
// error by the status the HTTP API answers it with). Error rates are the
// two error outcomes' share of the count.
const (
	OutcomeSuccess = "success"
	// OutcomeClientError is a 4xx: the request itself (a bad body or
	// parameter, an unknown topic) or a state a retry may get past
	// (not_leader once the sidecar's retries ran out).
	OutcomeClientError = "client_error"
	// OutcomeServerError is a 5xx: the agent or the cluster (no leader,
	// not enough replicas, an ack timeout, a full disk, starting or
	// stopping).
	OutcomeServerError = "server_error"
)

// OutcomeOf is the outcome of an answer with HTTP status code.
func OutcomeOf(status int) string {
	switch {
	case status >= 500:
		return OutcomeServerError
	case status >= 400:
		return OutcomeClientError
	}
	return OutcomeSuccess
}

// The label values of the produce duration, in the order of its children
// (Metrics.produceDuration): each acks with each outcome, but an invalid
// acks, which is always refused, with client_error only: ten series.
var (
	produceAcks     = [...]string{AcksAll, AcksLeader, AcksNone, AcksInvalid}
	produceOutcomes = [...]string{OutcomeSuccess, OutcomeClientError, OutcomeServerError}
)

// Bucket bounds, in seconds. An acks=all write on a healthy cluster takes
// a fraction of a millisecond to a few; a fetch may long-poll up to 30 s
// (its wait parameter); an fsync takes from tens of microseconds (a
// battery-backed cache) to seconds (a struggling disk).
var (
	produceBuckets = prometheus.ExponentialBuckets(0.0001, 2, 18)  // 100 µs .. 13 s
	fetchBuckets   = prometheus.ExponentialBuckets(0.0001, 2, 19)  // 100 µs .. 26 s, then +Inf
	fsyncBuckets   = prometheus.ExponentialBuckets(0.00005, 2, 17) // 50 µs .. 3.3 s
)

// Metrics are one agent's instruments and the registry that serves them
// with the per-partition figures of Sources. Every method is safe for
// concurrent use.
type Metrics struct {
	registry *prometheus.Registry
	// src is read at every scrape for the partition and group families
	// (writeSeries) and the Consul counters.
	src Sources

	produceRecords *prometheus.CounterVec
	produceBytes   *prometheus.CounterVec
	fetchBytes     *prometheus.CounterVec
	// topics caches each topic's counter children (*topicCounters), so
	// that the produce and fetch paths do not hash label values.
	topics sync.Map

	// produceDuration's children, resolved once, by the index of their
	// acks in produceAcks and of their outcome in produceOutcomes; nil for
	// a pair that has no series.
	produceDuration [len(produceAcks)][len(produceOutcomes)]prometheus.Observer

	fetchDuration   prometheus.Histogram
	fsyncDuration   prometheus.Histogram
	leaderElections prometheus.Counter
	isrChanges      prometheus.Counter
	replicaWakes    prometheus.Counter
	replicaFetches  prometheus.Counter
	errors          *prometheus.CounterVec
}

type topicCounters struct {
	produceRecords, produceBytes, fetchBytes prometheus.Counter
}

// New registers the agent's instruments, the Consul counters of src, and
// the Go runtime's and the process's collectors on a registry of its own;
// the partition and group families of src are written at each scrape
// (Handler).
func New(src Sources) *Metrics {
	produceDuration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "logagent_produce_request_duration_seconds",
		Help:    "Time from a produce request's arrival at the client API (or the Kafka listener) to its answer, every answer, refusals included, by acks and outcome (success, client_error: 4xx, server_error: 5xx); forwarding to the leader included.",
		Buckets: produceBuckets,
	}, []string{"acks", "outcome"})
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		src:      src,
		produceRecords: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "logagent_produce_records_total",
			Help: "Records of the produce requests this agent's client API answered with success, by topic.",
		}, []string{"topic"}),
		produceBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "logagent_produce_bytes_total",
			Help: "Bytes, as encoded batches, of the produce requests this agent's client API answered with success, by topic.",
		}, []string{"topic"}),
		fetchBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "logagent_fetch_bytes_total",
			Help: "Body bytes (batches, or ndjson lines) of the fetch answers this agent's client API served from its own replicas, by topic; a proxied fetch counts at the agent that served it.",
		}, []string{"topic"}),
		fetchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "logagent_fetch_request_duration_seconds",
			Help:    "Time from a fetch request's arrival at the client API to its answer, a long poll's wait included.",
			Buckets: fetchBuckets,
		}),
		fsyncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "logagent_fsync_duration_seconds",
			Help:    "Duration of each group-commit fsync of a partition log (segments and directory), the one acknowledgements wait for.",
			Buckets: fsyncBuckets,
		}),
		leaderElections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "logagent_leader_elections_total",
			Help: "Partition leaderships this agent won and started leading.",
		}),
		isrChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "logagent_isr_changes_total",
			Help: "ISR changes (shrinks and expansions) this agent proposed as a leader and Consul committed.",
		}),
		replicaWakes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "logagent_replica_loop_wakes_total",
			Help: "Times a replica's loop woke to handle something (a request, a fetch answer, a metadata or liveness change, a timer that came due), a scrape's own reads of the followers' lag left out: an idle partition wakes none.",
		}),
		replicaFetches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "logagent_replica_fetch_requests_total",
			Help: "Replica fetches of followers that this agent's peer API received as a leader (a fetch session's fetch frames and GET /v1/replica/fetch requests), answered or refused: the replication traffic's request rate.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "logagent_errors_total",
			Help: "Error answers of this agent's client API, by error code.",
		}, []string{"code"}),
	}
	for i, acks := range produceAcks {
		for j, outcome := range produceOutcomes {
			if acks != AcksInvalid || outcome == OutcomeClientError {
				m.produceDuration[i][j] = produceDuration.WithLabelValues(acks, outcome)
			}
		}
	}
	m.registry.MustRegister(
		m.produceRecords, m.produceBytes, produceDuration, m.fetchBytes, m.fetchDuration, m.fsyncDuration,
		m.leaderElections, m.isrChanges, m.replicaWakes, m.replicaFetches, m.errors,
		// The scheduler's latencies (go_sched_latencies_seconds): how long
		// runnable goroutines waited to run. The lease's check passes wait
		// like the rest (docs/operations.md, "Alerts").
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsScheduler)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	if src.Consul != nil {
		m.registry.MustRegister(newConsulCollector(src.Consul))
	}
	return m
}

// Registry is the agent's registry, for tests and for serving it.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// Handler serves the registry and the partition and group families of the
// Sources in the Prometheus text format (version 0.0.4, which every
// scraper takes, whatever else it asks for), gzipped when the scraper
// accepts it. A collector that fails leaves its series out rather than
// failing the scrape.
func (m *Metrics) Handler() http.Handler { return http.HandlerFunc(m.serveHTTP) }

// textFormat is the exposition format Handler serves.
var textFormat = expfmt.NewFormat(expfmt.TypeTextPlain)

func (m *Metrics) serveHTTP(w http.ResponseWriter, r *http.Request) {
	families, _ := m.registry.Gather() // on error, what was gathered
	var b, one bytes.Buffer
	for _, mf := range families {
		one.Reset()
		if _, err := expfmt.MetricFamilyToText(&one, mf); err == nil {
			b.Write(one.Bytes()) // a family that does not encode is left out
		}
	}
	body := writeSeries(b.Bytes(), m.src)
	w.Header().Set("Content-Type", string(textFormat))
	if !acceptsGzip(r.Header.Get("Accept-Encoding")) {
		_, _ = w.Write(body)
		return
	}
	w.Header().Set("Content-Encoding", "gzip")
	// BestSpeed: the 5.4 MB of 10,000 partitions compress to 309 KB in
	// about 10 ms; the default level took 34 ms for 5 % less
	// (BenchmarkScrape).
	gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	_, _ = gz.Write(body)
	_ = gz.Close()
}

// acceptsGzip says whether an Accept-Encoding header value lists gzip with
// a non-zero quality.
func acceptsGzip(header string) bool {
	for part := range strings.SplitSeq(header, ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			continue
		}
		q, found := strings.CutPrefix(strings.TrimSpace(params), "q=")
		return !found || strings.Trim(q, "0.") != ""
	}
	return false
}

func (m *Metrics) topic(topic string) *topicCounters {
	if tc, ok := m.topics.Load(topic); ok {
		return tc.(*topicCounters)
	}
	tc := &topicCounters{
		produceRecords: m.produceRecords.WithLabelValues(topic),
		produceBytes:   m.produceBytes.WithLabelValues(topic),
		fetchBytes:     m.fetchBytes.WithLabelValues(topic),
	}
	actual, _ := m.topics.LoadOrStore(topic, tc)
	return actual.(*topicCounters)
}

// Produced counts a produce request answered with success: its records
// and the bytes of its batch.
func (m *Metrics) Produced(topic string, records, bytes int) {
	tc := m.topic(topic)
	tc.produceRecords.Add(float64(records))
	tc.produceBytes.Add(float64(bytes))
}

// ObserveProduce records how long a produce request with acks (AcksAll,
// AcksLeader, AcksNone or AcksInvalid) took to answer, and its outcome
// (OutcomeSuccess, OutcomeClientError or OutcomeServerError). Other label
// values make no series of their own.
func (m *Metrics) ObserveProduce(acks, outcome string, d time.Duration) {
	i, j := slices.Index(produceAcks[:], acks), slices.Index(produceOutcomes[:], outcome)
	if i < 0 || j < 0 || m.produceDuration[i][j] == nil {
		return
	}
	m.produceDuration[i][j].Observe(d.Seconds())
}

// Fetched counts the bytes of a fetch answer served from a local replica.
func (m *Metrics) Fetched(topic string, bytes int64) {
	m.topic(topic).fetchBytes.Add(float64(bytes))
}

// Totals are the produce and fetch counters summed over every topic, for
// the status page's rates.
type Totals struct {
	ProduceRecords, ProduceBytes, FetchBytes uint64
}

// Totals reads the produce and fetch counters of every topic.
func (m *Metrics) Totals() Totals {
	var t Totals
	m.topics.Range(func(_, v any) bool {
		tc := v.(*topicCounters)
		t.ProduceRecords += counterValue(tc.produceRecords)
		t.ProduceBytes += counterValue(tc.produceBytes)
		t.FetchBytes += counterValue(tc.fetchBytes)
		return true
	})
	return t
}

func counterValue(c prometheus.Counter) uint64 {
	var d dto.Metric
	if c.Write(&d) != nil {
		return 0
	}
	return uint64(d.GetCounter().GetValue())
}

// ObserveFetch records how long a fetch request took to answer.
func (m *Metrics) ObserveFetch(d time.Duration) { m.fetchDuration.Observe(d.Seconds()) }

// ObserveFsync records one group-commit fsync.
func (m *Metrics) ObserveFsync(d time.Duration) { m.fsyncDuration.Observe(d.Seconds()) }

// LeaderElected counts a leadership this agent won and took up.
func (m *Metrics) LeaderElected() { m.leaderElections.Inc() }

// ISRChanged counts an ISR change this agent committed as a leader.
func (m *Metrics) ISRChanged() { m.isrChanges.Inc() }

// ReplicaLoopWoke counts one wake of a replica's loop.
func (m *Metrics) ReplicaLoopWoke() { m.replicaWakes.Inc() }

// ReplicaFetchServed counts a follower's replica fetch that this agent's
// peer API received: a fetch frame of a session or a GET.
func (m *Metrics) ReplicaFetchServed() { m.replicaFetches.Inc() }

// Error counts an error answer of the client API with its code.
func (m *Metrics) Error(code string) { m.errors.WithLabelValues(code).Inc() }
