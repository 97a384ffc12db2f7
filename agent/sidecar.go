package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/groups"
	"github.com/logagent/logagent/agent/kafkabroker"
	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/groupcoord"
	"github.com/logagent/logagent/kafka"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"
	"github.com/logagent/logagent/wire"
)

// What the agent gives the Kafka listener's broker (agent/kafkabroker):
// the sidecar service's operations, which the HTTP handlers call too.

// newKafkaBroker returns the broker of the Kafka listener; Run waits for
// its long polls when it stops.
func (a *Agent) newKafkaBroker() *kafkabroker.Broker {
	return kafkabroker.New(kafkabroker.Config{
		Sidecar:           sidecarService{a},
		Coordinator:       a.coord,
		NodeID:            a.cfg.NodeID,
		Stopping:          a.stopping,
		Decoders:          &a.logDecoders,
		ProduceTimeout:    defaultProduceTimeout,
		MaxProduceTimeout: maxProduceTimeout,
		ObserveProduce: func(acks int16, err error, d time.Duration) {
			a.metrics.ObserveProduce(kafkaAcksLabel(acks), errorOutcome(err), d)
		},
		Produced:     a.metrics.Produced,
		ObserveFetch: a.metrics.ObserveFetch,
		Fetched:      a.metrics.Fetched,
		Now:          a.now,
		Logger:       a.log,
	})
}

// kafkaConfig is the listener's configuration: it advertises
// kafka.advertise_address and names the cluster by its Consul prefix.
func (a *Agent) kafkaConfig(b *kafkabroker.Broker) (kafka.Config, error) {
	host, port, err := net.SplitHostPort(a.cfg.Kafka.AdvertiseAddress)
	if err != nil {
		return kafka.Config{}, fmt.Errorf("agent: kafka.advertise_address: %w", err)
	}
	p, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		return kafka.Config{}, fmt.Errorf("agent: kafka.advertise_address port: %w", err)
	}
	return kafka.Config{
		Broker:          b,
		Groups:          b.Groups(),
		Logger:          a.log, // the server names its own sub-logger "kafka"
		MaxRequestBytes: int32(min(a.cfg.Limits.MaxRequestBytes, 1<<30)),
		NodeID:          kafkabroker.NodeID(a.cfg.NodeID),
		Host:            host,
		Port:            int32(p),
		ClusterID:       strings.TrimSuffix(a.cfg.Consul.Prefix, "/"),
	}, nil
}

// sidecarService is the agent as the Kafka listener's kafkabroker.Sidecar
// and the group routing's groups.Sidecar (agent/groups.go has the methods
// only the latter asks for). It reads the agent's replicas, peer clients
// and coordinators at each call: Run makes them after the listeners open,
// and the group coordinator with the router's Host.
type sidecarService struct{ a *Agent }

var (
	_ kafkabroker.Sidecar = sidecarService{}
	_ groups.Sidecar      = sidecarService{}
)

// Serving is what the listener answers while the agent starts or stops:
// retriable, so clients try again or another broker.
func (s sidecarService) Serving() error {
	if st := s.a.state.Load(); st == stateServing || st == stateHandingOver {
		return nil
	}
	return reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeServiceUnavailable, "agent is not serving", true)
}

func (s sidecarService) LookupTopic(name string) (*election.TopicMeta, bool) {
	return s.a.lookupTopic(name)
}

func (s sidecarService) NoLeaderMessage(topic string, p int) string {
	return s.a.noLeaderMessage(topic, p)
}

func (s sidecarService) Replica(topic string, p int) *partition.Replica {
	return s.a.replicas.Get(topic, p)
}

func (s sidecarService) LookupAgent(node string) (election.AgentInfo, bool) {
	return s.a.agents.lookup(node)
}

func (s sidecarService) TopicConfig(req kafkabroker.CreateTopicRequest, agents int) election.TopicConfig {
	return s.a.topicConfig(req, agents)
}

func (s sidecarService) CreateTopic(req kafkabroker.CreateTopicRequest, storage []byte) error {
	_, _, err := s.a.createTopic(req, storage)
	return err
}

func (s sidecarService) DeleteTopic(name string) error { return s.a.deleteTopic(name) }

func (s sidecarService) AlterTopic(name string, c kafkabroker.TopicChange) error {
	_, err := s.a.alterTopic(name, c)
	return err
}

func (s sidecarService) PlacementNodes(ctx context.Context) ([]string, error) {
	return s.a.placementNodes(ctx)
}

func (s sidecarService) LogOptions() segstore.Options { return s.a.logOptions() }

func (s sidecarService) DecodeBatch(body []byte, acks replicate.Acks) ([]byte, int, error) {
	batch, count, err := s.a.decodeBatch(body)
	if err != nil {
		return nil, 0, err
	}
	if _, err := applyProducerHeaders(batch, producerHeaders{}, true, acks); err != nil {
		return nil, 0, err
	}
	return batch, count, nil
}

func (s sidecarService) ProduceBatch(topic string, p int, batch []byte, count int, acks replicate.Acks, deadline time.Time) (*int64, bool, *reply.APIError) {
	resp, apiErr := s.a.produceBatch(topic, p, batch, count, acks, deadline)
	return resp.BaseOffset, resp.Duplicate, apiErr
}

func (s sidecarService) FetchReplica(topic string, p int) (*partition.Replica, *reply.APIError) {
	return s.a.fetchReplica(topic, p)
}

func (s sidecarService) ReadLocal(r *partition.Replica, offset int64, lastFetchedEpoch int32, maxBytes int64) (*segstore.Region, kafkabroker.LogPositions, *reply.APIError) {
	return s.a.readLocal(r, offset, lastFetchedEpoch, maxBytes, 0)
}

func (s sidecarService) LeaderFetch(topic string, p int, offset string, lastFetchedEpoch int32, maxBytes int64, wait time.Duration) ([]byte, kafkabroker.LogPositions, error) {
	return s.a.leaderFetch(topic, p, offset, lastFetchedEpoch, maxBytes, wait)
}

func (s sidecarService) EpochEndOffset(peerAddr string, q peer.EpochQuery) (replicate.EpochEndOffset, error) {
	return s.a.forwarder.EpochEndOffset(peerAddr, q)
}

func (s sidecarService) RunGroupOp(ctx context.Context, name, group string, body []byte, wait time.Duration) ([]byte, *reply.APIError) {
	return s.a.groupRouter.Run(ctx, groups.Op{Name: name, Group: group, Body: body}, wait)
}

func (s sidecarService) KnownAgents() []election.AgentInfo { return s.a.agents.all() }

func (s sidecarService) ClassicList() []groupcoord.ClassicSummary { return s.a.groups.ClassicList() }

func (s sidecarService) ClassicListAt(ctx context.Context, peerAddr string, out *[]groupcoord.ClassicSummary) error {
	return s.a.groupRouter.ClassicListAt(ctx, peerAddr, out)
}

// leaderFetch sends a consumer fetch this agent cannot serve to the
// partition's leader's client API, as proxyFetch does for HTTP, and reads
// the answer into memory (at most fetchBodyLimit). maxBytes is lowered to
// proxiedFetchMaxBytes, as proxyFetch lowers it: asked for more, a leader
// with more in the segment answered over the bound, and a Kafka consumer
// whose max bytes were above 16 MiB got leader_not_available at that
// offset every time it asked. A lastFetchedEpoch other than -1 goes with
// it, for the leader to check (readLocal).
func (a *Agent) leaderFetch(topic string, p int, offset string, lastFetchedEpoch int32, maxBytes int64, wait time.Duration) ([]byte, kafkabroker.LogPositions, error) {
	leader, info, ok := a.fetchLeader(topic, p)
	if !ok {
		return nil, kafkabroker.LogPositions{}, kafkabroker.ErrNoLeaderToAsk
	}
	uri := "/v1/topics/" + topic + "/partitions/" + strconv.Itoa(p) + "/records?offset=" + offset + "&max_bytes=" + strconv.FormatInt(min(maxBytes, proxiedFetchMaxBytes(a.cfg)), 10)
	if wait > 0 {
		uri += "&wait=" + wait.String()
	}
	if lastFetchedEpoch >= 0 {
		uri += "&last_fetched_epoch=" + strconv.FormatInt(int64(lastFetchedEpoch), 10)
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	a.clientAPIs.Address(req, info.ClientAddr, uri)
	req.Header.Set(fasthttp.HeaderAccept, wire.ContentTypeBatch)
	req.Header.Set(wire.HeaderProxied, a.cfg.NodeID)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if err := a.clientAPIs.Client(info.ClientAddr).DoTimeout(req, resp, wait+peerCallTimeout); err != nil {
		return nil, kafkabroker.LogPositions{}, reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeLeaderNotAvailable, "leader "+leader+" unreachable: "+err.Error(), true)
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return nil, kafkabroker.LogPositions{}, reply.RelayedError(resp)
	}
	hw, err1 := strconv.ParseInt(string(resp.Header.Peek(wire.HeaderHighWatermark)), 10, 64)
	lso, err2 := strconv.ParseInt(string(resp.Header.Peek(wire.HeaderLogStartOffset)), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return nil, kafkabroker.LogPositions{}, reply.NewAPIError(fasthttp.StatusBadGateway, wire.CodeInternal, "leader "+leader+" answered without positions: "+err.Error(), true)
	}
	pos := kafkabroker.LogPositions{HW: hw, LSO: lso}
	if v := resp.Header.Peek(wire.HeaderDivergingEpoch); len(v) > 0 {
		epoch, err1 := strconv.ParseInt(string(v), 10, 32)
		end, err2 := strconv.ParseInt(string(resp.Header.Peek(wire.HeaderDivergingEndOffset)), 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, kafkabroker.LogPositions{}, reply.NewAPIError(fasthttp.StatusBadGateway, wire.CodeInternal, "leader "+leader+" answered a bad diverging epoch: "+err.Error(), true)
		}
		pos.Diverging = &replicate.EpochEndOffset{Epoch: int32(epoch), EndOffset: end}
		return nil, pos, nil
	}
	return bytes.Clone(resp.Body()), pos, nil
}
