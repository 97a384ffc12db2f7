package kafka

import (
	"context"
	"io"
	"time"
)

// Broker is what the listener needs of the sidecar for everything but
// consumer groups. Each method is safe for concurrent use. An error a
// method returns is answered with the Kafka error code ErrorCode gives it:
// return an *Error (or wrap one) to choose the code.
type Broker interface {
	// Serving is nil while the broker can answer for the cluster's
	// topics, and says why not while its agent starts or stops.
	Serving() error
	// Topics is every topic of the cluster's metadata, sorted by name,
	// internal ones included (marked); none while Serving is not nil.
	Topics() []Topic
	// CreateTopic creates a topic and returns once this agent's metadata
	// shows it. A zero field of spec takes the cluster's default.
	CreateTopic(ctx context.Context, spec TopicSpec) error
	// DeleteTopic deletes a topic and returns once this agent's metadata
	// no longer shows it.
	DeleteTopic(ctx context.Context, name string) error
	// TopicConfigs are a topic's settings under Kafka's config names
	// (retention.ms, min.insync.replicas, ...), for DescribeConfigs.
	TopicConfigs(name string) (map[string]string, error)
	// AddPartitions raises a topic's partition count to count (partitions
	// are only ever added) and returns once this agent's metadata shows
	// it; with validateOnly it only checks that it could.
	AddPartitions(ctx context.Context, topic string, count int32, validateOnly bool) error
	// AlterTopicConfigs changes a topic's settings under Kafka's config
	// names, for IncrementalAlterConfigs: a nil Value drops the topic's
	// own value for the cluster's default. All of them or none change;
	// with validateOnly it only checks that they could.
	AlterTopicConfigs(ctx context.Context, topic string, changes []ConfigChange, validateOnly bool) error

	// Produce appends one Kafka RecordBatch v2 (magic 2, as the client
	// encoded it; an idempotent producer's batch carries its producer id,
	// epoch and base sequence) to a partition with acks 0, 1 or -1, and
	// returns when acks are satisfied or timeout passed. The batch is the
	// caller's to reuse only after Produce returns.
	Produce(ctx context.Context, req ProduceRequest) (ProduceResult, error)
	// Fetch reads whole batches of a partition from offset, at most
	// maxBytes of them (but at least one batch, however large), below the
	// high watermark, without waiting. The Records of the answer must be
	// closed. A request that names its last fetched epoch is checked
	// first, as Kafka's Partition.readRecords does (KIP-320): when that
	// epoch ends, in the log read, before the offset (or the log does not
	// have it), the answer is Diverging and no records; an epoch the log
	// knows nothing of is OFFSET_OUT_OF_RANGE.
	Fetch(ctx context.Context, req FetchRequest) (FetchResult, error)
	// WaitForData returns when any of the partitions has committed
	// records at or beyond its offset (its high watermark moved past it),
	// when max passed, or when ctx ends; a fetch's long poll.
	WaitForData(ctx context.Context, positions []Position, max time.Duration) error
	// ListOffset is Kafka's ListOffsets for one partition: timestamp is
	// EarliestTimestamp or EarliestLocalTimestamp (the log start offset),
	// LatestTimestamp (the high watermark), MaxTimestamp (the first
	// record with the largest timestamp below the high watermark, with
	// that timestamp; -1 offset when the log has none) or a time in ms
	// (the first offset whose record's timestamp is at or after it; -1
	// offset when none is). currentLeaderEpoch, when not -1, is checked
	// as Fetch's is.
	ListOffset(ctx context.Context, topic string, partition int32, currentLeaderEpoch int32, timestamp int64) (OffsetAt, error)
	// EndOffsetForEpoch is Kafka's OffsetForLeaderEpoch for one partition:
	// the largest epoch not above epoch the leader knows of, and the
	// offset where it ended (the log end offset for the current epoch).
	EndOffsetForEpoch(ctx context.Context, topic string, partition int32, currentLeaderEpoch, epoch int32) (leaderEpoch int32, endOffset int64, err error)
	// InitProducerID returns a new producer id and its epoch 0.
	InitProducerID(ctx context.Context) (int64, int16, error)
}

// Topic is one topic as Metadata shows it. Partitions are in partition
// order, 0 to n-1.
type Topic struct {
	Name       string
	ID         [16]byte // the topic id (Metadata v10+); zero when unknown
	Internal   bool
	Partitions []Partition
}

// Partition is one partition as Metadata shows it: the sidecar presents
// itself as its leader, so only the epoch and the replica counts matter.
type Partition struct {
	Partition   int32
	LeaderEpoch int32
	// Replicas and ISR are the sizes of the replica set and the ISR: the
	// listener reports that many entries (all this broker's id, the only
	// broker a client sees) so tools that check under-replication work.
	Replicas, ISR int
	// Err, when not nil, is answered as the partition's error
	// (LEADER_NOT_AVAILABLE while no leader is elected).
	Err error
}

// TopicSpec is a CreateTopics entry. Zero means the cluster default; Configs
// holds Kafka config names (retention.ms, retention.bytes,
// min.insync.replicas, segment.bytes, ...): one the sidecar does not
// implement is refused (INVALID_CONFIG), not ignored.
type TopicSpec struct {
	Name              string
	Partitions        int32
	ReplicationFactor int16
	Configs           map[string]string
	ValidateOnly      bool
}

// ConfigChange is one config set (Value) or deleted (Value nil) by
// IncrementalAlterConfigs.
type ConfigChange struct {
	Name  string
	Value *string
}

// ProduceRequest is one partition's batch of a Produce request.
type ProduceRequest struct {
	Topic     string
	Partition int32
	Batch     []byte
	// Records is the number of records in Batch (its header says so; the
	// listener has validated the header and the CRC).
	Records int
	Acks    int16 // 0, 1 or -1
	Timeout time.Duration
}

// ProduceResult is where the batch was appended.
type ProduceResult struct {
	BaseOffset     int64
	LogStartOffset int64
	// Duplicate: an idempotent producer's resend of a batch already
	// appended; BaseOffset is the original's.
	Duplicate bool
}

// FetchRequest is one partition of a Fetch request.
type FetchRequest struct {
	Topic              string
	Partition          int32
	Offset             int64
	MaxBytes           int32
	CurrentLeaderEpoch int32 // -1 when the client sent none
	// LastFetchedEpoch is the epoch of the last batch the client read
	// before Offset (Fetch v12+), -1 when it sent none.
	LastFetchedEpoch int32
}

// FetchResult is one partition's answer.
type FetchResult struct {
	HighWatermark  int64
	LogStartOffset int64
	// Records are whole batches, or nil/empty; the listener writes them
	// to the connection with WriteTo (sendfile when they are a file's
	// region and the connection a TCP socket) and closes them.
	Records Records
	// Diverging, when not nil, says the client's log diverges from the
	// partition's at or before Offset (its LastFetchedEpoch ends earlier,
	// or is not in the log): the largest epoch at most LastFetchedEpoch
	// in the log and where it ends. No records go with it.
	Diverging *EpochEndOffset
}

// EpochEndOffset is where an epoch ends in a partition's log: Fetch's
// diverging_epoch.
type EpochEndOffset struct {
	Epoch     int32
	EndOffset int64
}

// Records are a fetch answer's batches, read once.
type Records interface {
	// Len is the exact number of bytes WriteTo writes.
	Len() int64
	io.WriterTo
	io.Closer
}

// Position is a partition and an offset, for WaitForData.
type Position struct {
	Topic     string
	Partition int32
	Offset    int64
}

// The special timestamps of a ListOffsets request, and the version that
// brought each (ReplicaManager's timestampMinSupportedVersion in Kafka).
const (
	LatestTimestamp   int64 = -1
	EarliestTimestamp int64 = -2
	// MaxTimestamp asks for the record with the largest timestamp
	// (KIP-734, v7).
	MaxTimestamp int64 = -3
	// EarliestLocalTimestamp asks for the first offset on the broker's
	// disk (KIP-405, v8): the log start, logagent having no tiered
	// storage.
	EarliestLocalTimestamp int64 = -4
)

// OffsetAt is a ListOffsets answer.
type OffsetAt struct {
	Offset      int64
	Timestamp   int64 // -1 when unknown
	LeaderEpoch int32 // -1 when unknown
}
