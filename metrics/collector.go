package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Sources are what the collector reads at scrape time. A nil function
// leaves its families out.
type Sources struct {
	// Partitions lists the partitions this agent has an open replica of.
	Partitions func() []Partition
	// GroupLags lists the committed offsets' lags of the groups this agent
	// coordinates.
	GroupLags func() []GroupLag
	// Consul counts the requests made to Consul's HTTP API and those that
	// failed.
	Consul func() (requests, errors uint64)
}

// Partition is one partition as this agent's replica of it sees it.
type Partition struct {
	Topic     string
	Partition int
	// The replica's log positions.
	HighWatermark, LogEndOffset, LogStartOffset int64
	// ISR is the size of the committed ISR (the leader's own view on the
	// leader, Consul's elsewhere) and MinISR the topic's
	// min_insync_replicas.
	ISR, MinISR int
	// Leader says this agent leads the partition; LeaderEpoch is the epoch
	// it leads at, or Consul's when it does not lead.
	Leader      bool
	LeaderEpoch int32
	// Offline says this agent's replica could not be opened: it has no
	// positions.
	Offline bool
	// FollowerLag is, on the leader, each follower's distance in records
	// from the leader's log end, for the followers that have fetched in
	// the current epoch.
	FollowerLag []FollowerLag
}

// FollowerLag is one follower's lag as its leader sees it.
type FollowerLag struct {
	Replica string
	Records int64
}

// GroupLag is how far a group's committed offset of a partition is behind
// that partition's high watermark.
type GroupLag struct {
	Group     string
	Topic     string
	Partition int
	Records   int64
}

// The per-partition and per-group families are written straight into the
// text exposition format at every scrape, not made into client_golang
// constant metrics: at 10,000 partitions those were 73,000 series, each
// built, validated, sorted and encoded through the registry's generic
// path, and one scrape cost an agent half a second of CPU
// (BenchmarkScrape, docs/benchmarks.md "What partitions cost"). The few
// families of the instruments still go through the registry.

// family is one gauge family writeSeries writes.
type family struct {
	name, help string
}

var (
	familyFollowerLag = family{"logagent_follower_lag_records",
		"On the leader, per follower: the leader's log end offset minus the follower's last fetch offset."}
	familyGroupLag = family{"logagent_group_lag_records",
		"High watermark minus the group's committed offset, for the groups this agent coordinates."}
)

// partitionGauges are the per-partition families, in the order written;
// offlineToo says the family has a series for a replica that could not be
// opened (one with no positions).
var partitionGauges = []struct {
	family
	offlineToo bool
	value      func(*Partition) int64
}{
	{family{"logagent_partition_high_watermark",
		"High watermark of this agent's replica: the offset below which records are committed."},
		false, func(p *Partition) int64 { return p.HighWatermark }},
	{family{"logagent_partition_log_end_offset",
		"Log end offset of this agent's replica: the offset its next record gets."},
		false, func(p *Partition) int64 { return p.LogEndOffset }},
	{family{"logagent_partition_log_start_offset",
		"Log start offset of this agent's replica: the first offset it keeps."},
		false, func(p *Partition) int64 { return p.LogStartOffset }},
	{family{"logagent_partition_isr_size",
		"Replicas in the partition's committed ISR, as the leader sees it on the leader and as Consul says elsewhere."},
		true, func(p *Partition) int64 { return int64(p.ISR) }},
	{family{"logagent_partition_under_min_isr",
		"1 while the ISR is smaller than the topic's min_insync_replicas: acks=all writes are refused."},
		true, func(p *Partition) int64 { return bit(p.ISR < p.MinISR) }},
	{family{"logagent_partition_leader",
		"1 on the agent that leads the partition, 0 on the others that have a replica."},
		true, func(p *Partition) int64 { return bit(p.Leader) }},
	{family{"logagent_partition_leader_epoch",
		"The partition's leader epoch: the one this agent leads at on the leader, Consul's elsewhere."},
		true, func(p *Partition) int64 { return int64(p.LeaderEpoch) }},
}

// writeSeries appends the partition and group families of one reading of
// src to b in the text format (version 0.0.4), each family's HELP and TYPE
// lines before its series and no family without a series.
func writeSeries(b []byte, src Sources) []byte {
	if src.Partitions != nil {
		parts := src.Partitions()
		for _, g := range partitionGauges {
			started := false
			for i := range parts {
				if parts[i].Offline && !g.offlineToo {
					continue
				}
				if !started {
					b, started = appendHeader(b, g.family), true
				}
				b = appendPartitionSeries(b, g.name, &parts[i], "", g.value(&parts[i]))
			}
		}
		started := false
		for i := range parts {
			for _, f := range parts[i].FollowerLag {
				if !started {
					b, started = appendHeader(b, familyFollowerLag), true
				}
				b = appendPartitionSeries(b, familyFollowerLag.name, &parts[i], f.Replica, f.Records)
			}
		}
	}
	if src.GroupLags != nil {
		for i, g := range src.GroupLags() {
			if i == 0 {
				b = appendHeader(b, familyGroupLag)
			}
			b = append(b, familyGroupLag.name...)
			b = appendLabel(b, '{', "group", g.Group)
			b = append(b, `,partition="`...)
			b = strconv.AppendInt(b, int64(g.Partition), 10)
			b = append(b, '"')
			b = appendLabel(b, ',', "topic", g.Topic)
			b = append(b, "} "...)
			b = strconv.AppendInt(b, g.Records, 10)
			b = append(b, '\n')
		}
	}
	return b
}

func appendHeader(b []byte, f family) []byte {
	b = append(b, "# HELP "...)
	b = append(b, f.name...)
	b = append(b, ' ')
	b = append(b, f.help...) // no backslash or newline in these
	b = append(b, "\n# TYPE "...)
	b = append(b, f.name...)
	return append(b, " gauge\n"...)
}

// appendPartitionSeries appends one series of name for p, with a replica
// label unless replica is empty. Labels come in name order, as the
// registry writes them.
func appendPartitionSeries(b []byte, name string, p *Partition, replica string, v int64) []byte {
	b = append(b, name...)
	b = append(b, `{partition="`...)
	b = strconv.AppendInt(b, int64(p.Partition), 10)
	b = append(b, '"')
	if replica != "" {
		b = appendLabel(b, ',', "replica", replica)
	}
	b = appendLabel(b, ',', "topic", p.Topic)
	b = append(b, "} "...)
	b = strconv.AppendInt(b, v, 10)
	return append(b, '\n')
}

// appendLabel appends sep, name="value" with value escaped as the text
// format wants: a backslash, a double quote and a newline.
func appendLabel(b []byte, sep byte, name, value string) []byte {
	b = append(b, sep)
	b = append(b, name...)
	b = append(b, '=', '"')
	for i := 0; i < len(value); i++ {
		switch c := value[i]; c {
		case '\\':
			b = append(b, '\\', '\\')
		case '"':
			b = append(b, '\\', '"')
		case '\n':
			b = append(b, '\\', 'n')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// consulCollector serves the Consul request counters through the registry.
type consulCollector struct {
	requests func() (requests, errors uint64)

	consulRequests, consulErrors *prometheus.Desc
}

func newConsulCollector(requests func() (uint64, uint64)) *consulCollector {
	return &consulCollector{
		requests: requests,
		consulRequests: prometheus.NewDesc("logagent_consul_requests_total",
			"Requests this agent sent to Consul's HTTP API.", nil, nil),
		consulErrors: prometheus.NewDesc("logagent_consul_request_errors_total",
			"Requests to Consul that got no answer (a caller's cancellation aside) or an answer of 5xx, 401, 403 or 429.", nil, nil),
	}
}

func (c *consulCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.consulRequests
	ch <- c.consulErrors
}

func (c *consulCollector) Collect(ch chan<- prometheus.Metric) {
	requests, errors := c.requests()
	ch <- prometheus.MustNewConstMetric(c.consulRequests, prometheus.CounterValue, float64(requests))
	ch <- prometheus.MustNewConstMetric(c.consulErrors, prometheus.CounterValue, float64(errors))
}

func bit(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
