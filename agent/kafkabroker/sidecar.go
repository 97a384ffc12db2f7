package kafkabroker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/groupcoord"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"
)

// Sidecar is what the broker asks of the sidecar service (the agent): its
// state, and the operations its HTTP handlers call too. The agent
// implements it (agent/sidecar.go); its replicas, peer clients and group
// coordinators are made after the listener opens, so the broker asks for
// them at each request.
type Sidecar interface {
	// Serving is nil while the agent serves, else the retriable error to
	// answer: while it starts or stops, clients try again or another
	// broker.
	Serving() error
	// LookupTopic finds a topic in the metadata, catching the metadata up
	// with Consul before answering that there is none.
	LookupTopic(name string) (*election.TopicMeta, bool)
	// NoLeaderMessage says that a partition has no leader, and why this
	// agent's replica cannot take the lead when it is offline.
	NoLeaderMessage(topic string, p int) string
	// Replica is this agent's replica of a partition, nil when it has
	// none.
	Replica(topic string, p int) *partition.Replica
	// LookupAgent finds a registered agent in the agent's directory.
	LookupAgent(node string) (election.AgentInfo, bool)

	// TopicConfig is the config a creation of req would store with agents
	// registered: the cluster's defaults for what req leaves out.
	TopicConfig(req CreateTopicRequest, agents int) election.TopicConfig
	// CreateTopic creates a topic, as POST /v1/topics does, with the
	// topic's own storage settings (partition.TopicStorage) when not nil.
	CreateTopic(req CreateTopicRequest, storage []byte) error
	// DeleteTopic deletes a topic, as DELETE /v1/topics/{topic} does.
	DeleteTopic(name string) error
	// AlterTopic applies a change to a topic, as PATCH /v1/topics/{topic}
	// does.
	AlterTopic(name string, c TopicChange) error
	// PlacementNodes are the agents new partitions are placed over: live
	// and not being drained.
	PlacementNodes(ctx context.Context) ([]string, error)
	// LogOptions are this agent's storage block, which a topic's own
	// storage settings override (partition.LogOptionsFor).
	LogOptions() segstore.Options

	// DecodeBatch validates and copies a client's batch and checks the
	// producer fields it carries, as an HTTP produce of a binary batch
	// without idempotence headers does; it answers the batch and its
	// record count.
	DecodeBatch(body []byte, acks replicate.Acks) ([]byte, int, error)
	// ProduceBatch appends a batch to a partition through its leader,
	// here or forwarded, on an idempotent producer's lane when it is
	// one's; baseOffset is nil for acks=0, duplicate says an idempotent
	// producer's resend was not appended again.
	ProduceBatch(topic string, p int, batch []byte, count int, acks replicate.Acks, deadline time.Time) (baseOffset *int64, duplicate bool, err *reply.APIError)

	// FetchReplica is the serving decision of a consumer fetch: the local
	// replica, or the error to answer when the fetch cannot go to the
	// leader instead.
	FetchReplica(topic string, p int) (*partition.Replica, *reply.APIError)
	// ReadLocal reads whole batches from offset, at most maxBytes of them
	// but at least one, below the high watermark of a replica
	// FetchReplica chose. The region must be closed. With a
	// lastFetchedEpoch other than -1 the log is checked first (KIP-320):
	// when it diverges from the fetcher's at or before offset, the answer
	// is no region (nil) and LogPositions.Diverging.
	ReadLocal(r *partition.Replica, offset int64, lastFetchedEpoch int32, maxBytes int64) (*segstore.Region, LogPositions, *reply.APIError)
	// LeaderFetch sends a consumer fetch this agent cannot serve to the
	// partition's leader's client API, long-polling up to wait, and
	// reads the answer into memory; ErrNoLeaderToAsk when there is no
	// leader to send it to. A lastFetchedEpoch other than -1 is the
	// leader's to check, as ReadLocal does.
	LeaderFetch(topic string, p int, offset string, lastFetchedEpoch int32, maxBytes int64, wait time.Duration) ([]byte, LogPositions, error)
	// EpochEndOffset asks the leader at peerAddr where an epoch ends in
	// its log, as its followers do.
	EpochEndOffset(peerAddr string, q peer.EpochQuery) (replicate.EpochEndOffset, error)

	// RunGroupOp sends a group operation (its name and JSON body) to the
	// group's coordinator, wherever it is, until it answers, ctx ends (the
	// Kafka request's deadline) or the sidecar's group route timeout (plus
	// wait, what the coordinator may hold it) passes, and returns the
	// answer's JSON.
	RunGroupOp(ctx context.Context, name, group string, body []byte, wait time.Duration) ([]byte, *reply.APIError)
	// KnownAgents are the agents of the agent's directory.
	KnownAgents() []election.AgentInfo
	// ClassicList is this agent's coordinator's list of its classic groups
	// and the groups whose offsets it serves.
	ClassicList() []groupcoord.ClassicSummary
	// ClassicListAt asks the agent at peerAddr for its coordinator's list.
	ClassicListAt(ctx context.Context, peerAddr string, out *[]groupcoord.ClassicSummary) error
}

// Coordinator is the part of the agent's Consul client (agent.Coordinator)
// the broker uses.
type Coordinator interface {
	// Metadata is the latest metadata snapshot.
	Metadata() *election.Snapshot
	// Agents lists the agents Consul reports alive, each marked
	// passing every check or not (election.Client.Agents).
	Agents(ctx context.Context) ([]election.AgentInfo, error)
	// AllocateProducerID reserves a new idempotent-producer id, unique in
	// the cluster, at epoch 0.
	AllocateProducerID(ctx context.Context) (int64, int16, error)
	// The consumer groups' stored states, which ListGroups lists.
	groupcoord.Store
}

// Config is what a Broker is made of.
type Config struct {
	Sidecar     Sidecar
	Coordinator Coordinator
	// NodeID is this agent's node id.
	NodeID string
	// Stopping is closed when the agent stops: long polls end.
	Stopping <-chan struct{}
	// Decoders is the agent's pool of *record.Decoder for batches the log
	// holds (bounded by the batch, not limits.max_record_bytes).
	Decoders *sync.Pool
	// ProduceTimeout is a produce's timeout when the request names none,
	// MaxProduceTimeout its bound: the HTTP produce's.
	ProduceTimeout, MaxProduceTimeout time.Duration
	// The request-path instruments (metrics.Metrics's). ObserveProduce is
	// told of every produce answered, with the request's acks as sent
	// (-1, 1, 0 or anything else, refused) and its error, nil for a
	// success, to label as the HTTP produce's.
	ObserveProduce func(acks int16, err error, d time.Duration)
	Produced       func(topic string, records, bytes int)
	ObserveFetch   func(d time.Duration)
	Fetched        func(topic string, bytes int64)
	Now            func() time.Time
	Logger         hclog.Logger
}

// CreateTopicRequest is a topic's creation: the body of POST /v1/topics,
// and what a CreateTopics entry maps to. Absent settings take
// topic_defaults; replication_factor and min_insync_replicas taken from
// the defaults are capped by the number of agents, named ones never are.
type CreateTopicRequest struct {
	Name                  string `json:"name"`
	Partitions            *int   `json:"partitions"`
	ReplicationFactor     *int   `json:"replication_factor"`
	MinInsyncReplicas     *int   `json:"min_insync_replicas"`
	UncleanLeaderElection *bool  `json:"unclean_leader_election"`
}

// TopicChange is an alter request checked and decoded: nil fields stay.
type TopicChange struct {
	Partitions        *int
	MinInsyncReplicas *int
	// Retention and RetentionBytes set the topic's own value, or, when
	// ResetRetention / ResetRetentionBytes, drop it for the agent's.
	Retention           *time.Duration
	RetentionBytes      *int64
	ResetRetention      bool
	ResetRetentionBytes bool
}

// LogPositions are a partition's positions as a fetch answers them: its
// high watermark and log start offset, and, for a fetch that named the
// epoch it fetched last, where the log diverges from the fetcher's
// (KIP-320; nil when it does not).
type LogPositions struct {
	HW, LSO   int64
	Diverging *replicate.EpochEndOffset
}

// ErrNoLeaderToAsk says a fetch cannot go to the leader: there is none
// known, this agent is it, or it is not in the directory.
var ErrNoLeaderToAsk = errors.New("kafkabroker: no leader to ask")
