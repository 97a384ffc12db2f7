package agent

import (
	"context"
	"errors"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/group"
	"github.com/logagent/logagent/kafka"
	"github.com/logagent/logagent/metrics"
	"github.com/logagent/logagent/replicate"
)

// scrapeTimeout bounds what one scrape waits for the leaders' loops asked
// for their followers' progress, and how long it goes on asking other
// agents for the high watermarks of group lags (each question has its own
// bound, peerCallTimeout). What is not known by then is left out of that
// scrape.
const scrapeTimeout = time.Second

// metricsHandler serves GET /metrics: the registry in the Prometheus text
// format, through the client library's net/http handler (a scrape is
// rare and small; nothing of it is on a hot path).
func (a *Agent) metricsHandler() fasthttp.RequestHandler {
	return fasthttpadaptor.NewFastHTTPHandler(a.metrics.Handler())
}

// metricsSources is what the metrics' collector reads at scrape time.
func (a *Agent) metricsSources() metrics.Sources {
	src := metrics.Sources{Partitions: a.metricsPartitions, GroupLags: a.groupLags}
	// The election client counts its requests; a Coordinator of a test
	// may not.
	if c, ok := a.coord.(interface{ ConsulRequests() (uint64, uint64) }); ok {
		src.Consul = c.ConsulRequests
	}
	return src
}

// metricsPartitions are the partitions this agent has an open replica of,
// as GET /v1/status shows them, with the lag of each follower on the
// leader.
func (a *Agent) metricsPartitions() []metrics.Partition {
	if a.state.Load() == stateStarting {
		return nil // the replicas do not exist yet
	}
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	snap := a.coord.Metadata()
	var out []metrics.Partition
	for _, topic := range snap.Topics() {
		tm, _ := snap.Topic(topic)
		for _, pm := range tm.Partitions {
			sp, r, ok := a.replicaStatus(topic, pm)
			if !ok {
				continue
			}
			p := metrics.Partition{Topic: topic, Partition: pm.Partition,
				ISR: len(sp.ISR), MinISR: tm.Config.MinInsyncReplicas,
				Leader: sp.Role == roleLeader.String(), LeaderEpoch: sp.Epoch}
			if r == nil {
				// Offline here: no positions, but the partition's
				// leader, ISR and epoch as Consul has them, so that a
				// partition nobody can lead is not left unreported.
				p.Offline = true
				out = append(out, p)
				continue
			}
			p.HighWatermark, p.LogEndOffset, p.LogStartOffset = *sp.HighWatermark, *sp.LogEndOffset, *sp.LogStartOffset
			if p.Leader {
				p.FollowerLag = followerLags(a.cfg.NodeID, r.Progress(ctx))
			}
			out = append(out, p)
		}
	}
	return out
}

// followerLags is each follower's distance from the leader's log end, of
// the followers that fetched in the leader's epoch (a log end offset of
// -1 is one that did not: its position is unknown, not zero).
func followerLags(self string, progress []replicate.ReplicaStatus) []metrics.FollowerLag {
	var leo int64 = -1
	for _, s := range progress {
		if s.ID == self {
			leo = s.LogEndOffset
		}
	}
	if leo < 0 {
		return nil
	}
	var out []metrics.FollowerLag
	for _, s := range progress {
		if s.ID == self || s.LogEndOffset < 0 {
			continue
		}
		out = append(out, metrics.FollowerLag{Replica: s.ID, Records: max(leo-s.LogEndOffset, 0)})
	}
	return out
}

// groupLags are the lags of the offsets committed by the groups this agent
// coordinates. A partition's high watermark is this agent's replica's when
// it may serve reads (the leader, or a follower in the ISR, whose high
// watermark trails the leader's by one fetch round trip), else its
// leader's, asked as a group's describe asks it, until the scrape's time
// is up.
func (a *Agent) groupLags() []metrics.GroupLag {
	if a.state.Load() == stateStarting {
		return nil
	}
	committed := a.groups.CommittedOffsets()
	if len(committed) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	type known struct {
		hw int64
		ok bool
	}
	hws := map[group.TopicPartition]known{}
	var out []metrics.GroupLag
	for _, c := range committed {
		k, seen := hws[c.TopicPartition]
		if !seen {
			k.hw, k.ok = a.highWatermark(ctx, c.TopicPartition)
			hws[c.TopicPartition] = k
		}
		if k.ok {
			out = append(out, metrics.GroupLag{Group: c.Group, Topic: c.Topic, Partition: int(c.Partition), Records: max(k.hw-c.Offset, 0)})
		}
	}
	return out
}

func (a *Agent) highWatermark(ctx context.Context, tp group.TopicPartition) (int64, bool) {
	if r := a.replicas.Get(tp.Topic, int(tp.Partition)); r != nil {
		if v := r.CurrentView(); !v.DataLoss && (v.Role == roleLeader || (v.Role == roleFollower && v.InSync(a.cfg.NodeID))) {
			return r.CurrentLog().HighWatermark(), true
		}
	}
	if ctx.Err() != nil {
		return 0, false
	}
	_, hw, err := a.groupRouter.Host().Positions(ctx, tp)
	return hw, err == nil
}

// kafkaAcksLabel is the produce duration's acks label of a Kafka produce's
// acks: as the HTTP produce's of the same meaning.
func kafkaAcksLabel(acks int16) string {
	switch acks {
	case -1:
		return metrics.AcksAll
	case 1:
		return metrics.AcksLeader
	case 0:
		return metrics.AcksNone
	}
	return metrics.AcksInvalid
}

// errorOutcome is the produce duration's outcome label of a Kafka
// produce's error: by the HTTP status the client API answers it with; a
// Kafka protocol error (an invalid acks) is the client's.
func errorOutcome(err error) string {
	var apiErr *reply.APIError
	var kafkaErr *kafka.Error
	switch {
	case err == nil:
		return metrics.OutcomeSuccess
	case errors.As(err, &apiErr):
		return metrics.OutcomeOf(apiErr.Status)
	case errors.As(err, &kafkaErr):
		return metrics.OutcomeClientError
	}
	return metrics.OutcomeServerError
}
