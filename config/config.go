package config

import (
	"crypto/sha256"
	"time"

	"github.com/hashicorp/consul/api"
)

// Config is the validated runtime configuration of an agent. Every field
// holds a usable value: defaults have been applied and checked.
type Config struct {
	NodeID   string
	DataDir  string
	LogLevel string
	LogJSON  bool

	Client        Client
	Kafka         Kafka
	Peer          Peer
	Consul        Consul
	Storage       Storage
	Replication   Replication
	Producer      Producer
	Groups        Groups
	Limits        Limits
	TopicDefaults TopicDefaults
	Cluster       Cluster

	// Sources lists the files merged to make this configuration, in order.
	Sources []string

	// startFileDigests holds a digest of each file the agent reads only at
	// start (digestStartFiles), by its key, for Changed.
	startFileDigests map[string][sha256.Size]byte
}

// Client is the listener applications use (the sidecar API).
type Client struct {
	Address string
	// Pprof serves Go's runtime profiles (net/http/pprof) under
	// /debug/pprof/ on the client address.
	Pprof bool
	// TLS, when not nil, serves the client API over TLS; with a CAFile,
	// clients must present a certificate it signed.
	TLS *TLS
	// TokenFile, when set, holds the bearer token every client API request
	// but GET /v1/health must carry.
	TokenFile string
}

// Kafka is the sidecar's Kafka wire-protocol listener (docs/kafka.md).
type Kafka struct {
	// Address is where it listens; "" turns it off.
	Address string
	// AdvertiseAddress is the broker address Metadata and FindCoordinator
	// answer with, the one clients dial after their seed: Address itself
	// unless Address listens on every interface.
	AdvertiseAddress string
}

// Peer is the listener other agents use.
type Peer struct {
	Address string
	// AdvertiseAddress is what other agents dial; it defaults to Address
	// when Address names a specific host.
	AdvertiseAddress string
	TokenFile        string
	// TLS, when not nil, is mutual TLS between agents: the listener and the
	// peer clients present CertFile and accept only certificates CAFile
	// signed.
	TLS *TLS
}

// Consul says how to reach Consul and how the agent uses it.
type Consul struct {
	// API is the Consul client configuration: CONSUL_* environment
	// variables first, overridden by keys set in the consul block.
	API        *api.Config
	Prefix     string
	SessionTTL time.Duration
	CheckTTL   time.Duration
	LockDelay  time.Duration
}

// Durability is when a replica's appended bytes count toward the high
// watermark.
type Durability string

const (
	// DurabilityFsync counts bytes only once they are fsynced: an
	// acknowledged write survives every host losing power at once.
	DurabilityFsync Durability = "fsync"
	// DurabilityReplicated counts bytes once they are in the replica's page
	// cache: an acknowledged write survives the loss of all but one in-sync
	// replica, not a simultaneous power loss.
	DurabilityReplicated Durability = "replicated"
)

// Storage configures partition logs on disk.
type Storage struct {
	SegmentBytes       int64
	SegmentAge         time.Duration
	IndexIntervalBytes int64
	Durability         Durability
	// Retention is the age after which a segment may be deleted; 0 keeps
	// segments regardless of age.
	Retention time.Duration
	// RetentionBytes bounds a partition's size; 0 means no bound.
	RetentionBytes int64
}

// Replication configures the follower fetch protocol and ISR management,
// and where leaderships go back to after failovers.
type Replication struct {
	LagTimeMax    time.Duration
	FetchMaxWait  time.Duration
	FetchMaxBytes int64
	// AutoLeaderRebalance moves each partition's leadership back to its
	// preferred replica (the first of its replica list) once that replica
	// has been in the ISR for LeaderRebalanceDelay, with the graceful
	// handover (Kafka's auto.leader.rebalance.enable).
	AutoLeaderRebalance  bool
	LeaderRebalanceDelay time.Duration
	// ReassignMaxBytesPerSecond bounds the leader's answers to the fetches
	// of replicas a reassignment adds (docs/design.md §7.6), summed over
	// the agent's partitions; 0 is no bound.
	ReassignMaxBytesPerSecond int64
}

// Producer configures how the sidecar coalesces produce requests, and how
// long a partition remembers an idempotent producer it has not heard from.
type Producer struct {
	Linger        time.Duration
	MaxBatchBytes int64
	IDExpiration  time.Duration
	// MaxPerPartition bounds the idempotent producers a partition
	// remembers (producer.Options.MaxProducers).
	MaxPerPartition int
	// SidecarIdempotence sends plain acks=all requests with the sidecar's
	// own producer ids, so that one whose outcome is unknown is resent.
	SidecarIdempotence bool
}

// Cluster holds what the agents do for the cluster as a whole.
type Cluster struct {
	// ReplaceDeadAfter is how long an agent must have been dead (its
	// Consul check critical or its registration gone) before the leaders
	// of the partitions it holds move its replicas to live agents
	// (docs/design.md §7.7); 0 turns self-healing off.
	ReplaceDeadAfter time.Duration
}

// Groups configures the consumer groups' offsets topic, created on the
// first use of a group (docs/design.md §7.3), and how long a group without
// members is kept.
type Groups struct {
	OffsetsPartitions        int
	OffsetsReplicationFactor int
	// OffsetsRetention: a group that has had no member and no commit for
	// this long is deleted, its committed offsets with it (Kafka's
	// offsets.retention.minutes); 0 keeps groups until they are deleted.
	OffsetsRetention time.Duration
}

// Limits bound what a client may send.
type Limits struct {
	MaxRecordBytes  int64
	MaxRequestBytes int64
}

// TopicDefaults apply to topics created without the setting.
type TopicDefaults struct {
	Partitions            int
	ReplicationFactor     int
	MinInsyncReplicas     int
	UncleanLeaderElection bool
}
