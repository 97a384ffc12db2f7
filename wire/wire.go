package wire

import "time"

// Error codes of the HTTP APIs (docs/design.md §8). Every error response is JSON:
//
//	{"error":{"code":"not_enough_replicas","message":"...","retriable":true}}
//
// Some codes add fields to the error object: not_leader names the leader
// ("leader", "leader_address"), offset_out_of_range the bounds
// ("log_start_offset", "high_watermark" or "log_end_offset").
const (
	CodeInvalidRequest     = "invalid_request"
	CodeNotFound           = "not_found"
	CodeMethodNotAllowed   = "method_not_allowed"
	CodeServiceUnavailable = "service_unavailable"
	CodeInternal           = "internal"

	CodeInvalidTopicName = "invalid_topic_name"
	CodeInvalidOffset    = "invalid_offset"
	CodeCorruptBatch     = "corrupt_batch"
	CodeUnsupportedBatch = "unsupported_batch"
	CodeUnknownTopic     = "unknown_topic"
	CodeUnknownPartition = "unknown_partition"
	CodeTopicExists      = "topic_exists"
	CodeRecordTooLarge   = "record_too_large"
	CodeRequestTooLarge  = "request_too_large"
	CodeOffsetOutOfRange = "offset_out_of_range"
	CodeNotAcceptable    = "not_acceptable"
	CodeUnsupportedType  = "unsupported_media_type"

	CodeNotLeader                    = "not_leader"
	CodeLeaderNotAvailable           = "leader_not_available"
	CodeNotEnoughReplicas            = "not_enough_replicas"
	CodeNotEnoughReplicasAfterAppend = "not_enough_replicas_after_append"
	CodeNotLeaderAfterAppend         = "not_leader_after_append"
	CodeAckTimeout                   = "ack_timeout"
	CodeStorageError                 = "storage_error"
	CodeInsufficientStorage          = "insufficient_storage"
	// CodeTimeoutBeforeWrite: the request's timeout passed before the
	// sidecar sent its write to the leader; nothing was written.
	CodeTimeoutBeforeWrite = "timeout_before_write"

	// Idempotent producers (docs/api.md, "Exactly-once appends").
	CodeOutOfOrderSequence   = "out_of_order_sequence"
	CodeInvalidProducerEpoch = "invalid_producer_epoch"
	CodeUnknownProducerID    = "unknown_producer_id"

	// Consumer groups (docs/api.md, "Consumer groups").
	CodeUnknownGroup              = "unknown_group"
	CodeUnknownMember             = "unknown_member"
	CodeFencedMemberEpoch         = "fenced_member_epoch"
	CodeStaleMemberEpoch          = "stale_member_epoch"
	CodeNotOwner                  = "not_owner"
	CodeCommitSuperseded          = "commit_superseded"
	CodeOffsetBeyondHighWatermark = "offset_beyond_high_watermark"
	CodeGroupNotEmpty             = "group_not_empty"
	CodeCoordinatorNotAvailable   = "coordinator_not_available"
	CodeInternalTopic             = "internal_topic"

	// Reassignments (docs/api.md, "Moving a partition's replicas").
	CodeReassignmentInProgress   = "reassignment_in_progress"
	CodeNoReassignmentInProgress = "no_reassignment_in_progress"

	// Peer API only.
	CodeUnauthorized       = "unauthorized"
	CodeFencedLeaderEpoch  = "fenced_leader_epoch"
	CodeUnknownLeaderEpoch = "unknown_leader_epoch"
	CodeNotReplica         = "not_replica"
	// CodeInconsistentTopicID refuses a fetch of a replica of another
	// incarnation of the topic (deleted and created again under its name).
	CodeInconsistentTopicID = "inconsistent_topic_id"
)

// Header names.
const (
	// Fetch answers, client and peer API.
	HeaderHighWatermark  = "Logagent-High-Watermark"
	HeaderLogStartOffset = "Logagent-Log-Start-Offset"

	// Produce requests of an idempotent producer: the producer id and epoch
	// POST /v1/producers answered, and the sequence of the request's first
	// record within that producer and partition.
	HeaderProducerID    = "Logagent-Producer-Id"
	HeaderProducerEpoch = "Logagent-Producer-Epoch"
	HeaderSequence      = "Logagent-Sequence"

	// Peer API only.
	HeaderLeaderEpoch        = "Logagent-Leader-Epoch"
	HeaderEpochStartOffset   = "Logagent-Epoch-Start-Offset"
	HeaderLogEndOffset       = "Logagent-Log-End-Offset"
	HeaderDivergingEpoch     = "Logagent-Diverging-Epoch"
	HeaderDivergingEndOffset = "Logagent-Diverging-End-Offset"
	// HeaderProxied marks a fetch one agent proxies to another, so the
	// receiver serves it or refuses it but never proxies it again.
	HeaderProxied = "Logagent-Proxied"
	// HeaderTimeoutMS is how long, in milliseconds, the sidecar that
	// forwards a group operation to its coordinator still waits for the
	// answer: the coordinator stops the operation then, so a commit the
	// sidecar gave up on is not appended after the client's next one.
	// Relative, not a deadline, so that the agents' clocks need not agree.
	HeaderTimeoutMS = "Logagent-Timeout-Ms"
)

// Content types.
const (
	// ContentTypeBatch is one binary batch (docs/design.md §4) in a produce
	// request, and back-to-back batches in a fetch answer.
	ContentTypeBatch       = "application/vnd.logagent.batch"
	ContentTypeJSON        = "application/json"
	ContentTypeNDJSON      = "application/x-ndjson"
	ContentTypeOctetStream = "application/octet-stream"
)

// Bounds of waits the APIs take.
const (
	// MaxClientWait bounds a produce's timeout and a fetch's wait on the
	// client API.
	MaxClientWait = 30 * time.Second
	// MaxReplicaFetchWait bounds how long a leader holds a follower's fetch
	// (max_wait_ms) and a fetch session's heartbeat_ms:
	// replication.fetch_max_wait, which followers send as both.
	MaxReplicaFetchWait = 30 * time.Second
)
