package replicate

import "errors"

// Refusals of a follower's request; the agent answers them with the peer
// API's error codes (docs/design.md §8).
var (
	// ErrFencedLeaderEpoch is a request carrying an epoch older than the
	// leader's: the sender follows a leader that no longer leads.
	ErrFencedLeaderEpoch = errors.New("replicate: fenced leader epoch")
	// ErrUnknownLeaderEpoch is a request carrying an epoch newer than the
	// leader's: the leader has not learnt of the newer epoch yet, or is a
	// zombie about to step down. The sender retries later.
	ErrUnknownLeaderEpoch = errors.New("replicate: unknown leader epoch")
	// ErrNotReplica is a request from a node outside the partition's replica
	// set.
	ErrNotReplica = errors.New("replicate: not a replica of the partition")
	// ErrOffsetOutOfRange is a fetch offset beyond the leader's log end.
	ErrOffsetOutOfRange = errors.New("replicate: offset out of range")
	// ErrInvalidRequest is a request no correct follower sends, such as a
	// negative offset or a last fetched epoch above the leader's epoch.
	ErrInvalidRequest = errors.New("replicate: invalid request")
)

// Produce outcomes (docs/design.md §7).
var (
	// ErrNotLeader is any call on a leader state that resigned, and the
	// outcome of every ack pending when it did: the write's fate is unknown.
	ErrNotLeader = errors.New("replicate: not leader")
	// ErrNotEnoughReplicas refuses an acks=all append while the committed ISR
	// is smaller than min_insync_replicas: nothing was written.
	ErrNotEnoughReplicas = errors.New("replicate: not enough replicas")
	// ErrNotEnoughReplicasAfterAppend fails an acks=all write whose ISR shrank
	// below min_insync_replicas after the append: the write is in the
	// leader's log and may yet be committed, so a retry may duplicate it.
	ErrNotEnoughReplicasAfterAppend = errors.New("replicate: not enough replicas after append")
	// ErrAckTimeout fails a write whose deadline passed before its ack
	// condition held: its fate is unknown.
	ErrAckTimeout = errors.New("replicate: ack timeout")
)

// Misuse and corruption.
var (
	// ErrInvalidConfig is a LeaderConfig or FollowerConfig that cannot work.
	ErrInvalidConfig = errors.New("replicate: invalid config")
	// ErrInvalidInput is an input the caller should not have given in the
	// current state, such as an append below the log end or an answer to a
	// request that was never sent. The state is unchanged.
	ErrInvalidInput = errors.New("replicate: invalid input")
	// ErrInconsistentLog is the replica's own log and epoch cache
	// contradicting each other or the protocol (an epoch cache that lost the
	// current epoch, an epoch ending beyond the log end): the local log is
	// corrupt and the replica must not serve or lead from it.
	ErrInconsistentLog = errors.New("replicate: log and epoch cache inconsistent")
)
