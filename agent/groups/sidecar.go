package groups

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/agent/kafkabroker"
	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/groupcoord"
	"github.com/logagent/logagent/replicate"
)

// Sidecar is what the group routing asks of the sidecar service (the
// agent). The agent implements it (agent/groups.go); its group coordinator
// is made with the Router's Host, after the Router, so the Router asks
// for it at each operation.
type Sidecar interface {
	// Coordinator is this agent's group coordinator, which the
	// operations that reach this agent run on.
	Coordinator() *groupcoord.Coordinator
	// Replica is this agent's replica of a partition, nil when it has
	// none.
	Replica(topic string, p int) *partition.Replica
	// AppendLocal hands a batch to r's leader loop at epoch and waits for
	// its answer, as a produce does; it answers the batch's base offset.
	AppendLocal(r *partition.Replica, topic string, p int, batch []byte, count int, acks replicate.Acks, epoch int32, timeout time.Duration) (*int64, *reply.APIError)
	// NoLeaderMessage says that a partition has no leader, and why this
	// agent's replica cannot take the lead when it is offline.
	NoLeaderMessage(topic string, p int) string
	// LookupAgent finds a registered agent in the agent's directory.
	LookupAgent(node string) (election.AgentInfo, bool)
	// TopicConfig is the config a creation of req would store with agents
	// registered: the cluster's defaults for what req leaves out.
	TopicConfig(req kafkabroker.CreateTopicRequest, agents int) election.TopicConfig
	// WaitTopic waits until the metadata shows the topic incarnation id.
	WaitTopic(ctx context.Context, name, id string) error
}

// Coordinator is the part of the agent's Consul client (agent.Coordinator)
// the group routing uses.
type Coordinator interface {
	// Metadata is the latest metadata snapshot.
	Metadata() *election.Snapshot
	// SyncMetadata returns a snapshot at least as new as Consul's data now.
	SyncMetadata(ctx context.Context) (*election.Snapshot, error)
	// CreateTopic stores a new topic.
	CreateTopic(ctx context.Context, tc election.TopicConfig, assignment [][]string) error
	// Agents lists the agents Consul reports alive, each marked
	// passing every check or not (election.Client.Agents).
	Agents(ctx context.Context) ([]election.AgentInfo, error)
}

// Config is what a Router is made of.
type Config struct {
	Sidecar     Sidecar
	Coordinator Coordinator
	// NodeID is this agent's node id.
	NodeID string
	// OffsetsPartitions and OffsetsReplicationFactor are the offsets
	// topic's (groups.offsets_partitions,
	// groups.offsets_replication_factor).
	OffsetsPartitions, OffsetsReplicationFactor int
	// Peers sends group operations to other agents' coordinators;
	// ClientAPIs asks leaders' client APIs for positions.
	Peers, ClientAPIs *peer.Clients
	// Stopping is closed when the agent stops: the routing stops
	// retrying.
	Stopping <-chan struct{}
	Now      func() time.Time
	Logger   hclog.Logger
}

// Router routes the sidecar's group operations to their coordinators and
// runs those that reach this agent's.
type Router struct {
	s   Sidecar
	cfg Config
}

// New returns the Router of cfg.
func New(cfg Config) *Router {
	return &Router{s: cfg.Sidecar, cfg: cfg}
}
