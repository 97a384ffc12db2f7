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

// collector turns Sources into series at every scrape.
type collector struct {
	src Sources

	hw, leo, lso, isr, underMinISR, leader, epoch *prometheus.Desc
	followerLag, groupLag                         *prometheus.Desc
	consulRequests, consulErrors                  *prometheus.Desc
}

func newCollector(src Sources) *collector {
	part := []string{"topic", "partition"}
	return &collector{
		src: src,
		hw: prometheus.NewDesc("logagent_partition_high_watermark",
			"High watermark of this agent's replica: the offset below which records are committed.", part, nil),
		leo: prometheus.NewDesc("logagent_partition_log_end_offset",
			"Log end offset of this agent's replica: the offset its next record gets.", part, nil),
		lso: prometheus.NewDesc("logagent_partition_log_start_offset",
			"Log start offset of this agent's replica: the first offset it keeps.", part, nil),
		isr: prometheus.NewDesc("logagent_partition_isr_size",
			"Replicas in the partition's committed ISR, as the leader sees it on the leader and as Consul says elsewhere.", part, nil),
		underMinISR: prometheus.NewDesc("logagent_partition_under_min_isr",
			"1 while the ISR is smaller than the topic's min_insync_replicas: acks=all writes are refused.", part, nil),
		leader: prometheus.NewDesc("logagent_partition_leader",
			"1 on the agent that leads the partition, 0 on the others that have a replica.", part, nil),
		epoch: prometheus.NewDesc("logagent_partition_leader_epoch",
			"The partition's leader epoch: the one this agent leads at on the leader, Consul's elsewhere.", part, nil),
		followerLag: prometheus.NewDesc("logagent_follower_lag_records",
			"On the leader, per follower: the leader's log end offset minus the follower's last fetch offset.",
			[]string{"topic", "partition", "replica"}, nil),
		groupLag: prometheus.NewDesc("logagent_group_lag_records",
			"High watermark minus the group's committed offset, for the groups this agent coordinates.",
			[]string{"group", "topic", "partition"}, nil),
		consulRequests: prometheus.NewDesc("logagent_consul_requests_total",
			"Requests this agent sent to Consul's HTTP API.", nil, nil),
		consulErrors: prometheus.NewDesc("logagent_consul_request_errors_total",
			"Requests to Consul that got no answer (a caller's cancellation aside) or an answer of 5xx, 401, 403 or 429.", nil, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.hw, c.leo, c.lso, c.isr, c.underMinISR, c.leader, c.epoch,
		c.followerLag, c.groupLag, c.consulRequests, c.consulErrors} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if c.src.Partitions != nil {
		for _, p := range c.src.Partitions() {
			part := strconv.Itoa(p.Partition)
			if !p.Offline {
				gauge(c.hw, float64(p.HighWatermark), p.Topic, part)
				gauge(c.leo, float64(p.LogEndOffset), p.Topic, part)
				gauge(c.lso, float64(p.LogStartOffset), p.Topic, part)
			}
			gauge(c.isr, float64(p.ISR), p.Topic, part)
			gauge(c.underMinISR, bit(p.ISR < p.MinISR), p.Topic, part)
			gauge(c.leader, bit(p.Leader), p.Topic, part)
			gauge(c.epoch, float64(p.LeaderEpoch), p.Topic, part)
			for _, f := range p.FollowerLag {
				gauge(c.followerLag, float64(f.Records), p.Topic, part, f.Replica)
			}
		}
	}
	if c.src.GroupLags != nil {
		for _, g := range c.src.GroupLags() {
			gauge(c.groupLag, float64(g.Records), g.Group, g.Topic, strconv.Itoa(g.Partition))
		}
	}
	if c.src.Consul != nil {
		requests, errors := c.src.Consul()
		ch <- prometheus.MustNewConstMetric(c.consulRequests, prometheus.CounterValue, float64(requests))
		ch <- prometheus.MustNewConstMetric(c.consulErrors, prometheus.CounterValue, float64(errors))
	}
}

func bit(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
