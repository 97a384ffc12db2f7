package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/logagent/logagent/wire"
)

// Error codes of the client API (docs/design.md §8), as package wire
// defines them. Error.Code carries whatever the agent sent; each code also
// has a sentinel (below) that an *Error with that code matches.
const (
	CodeInvalidRequest               = wire.CodeInvalidRequest
	CodeNotFound                     = wire.CodeNotFound
	CodeMethodNotAllowed             = wire.CodeMethodNotAllowed
	CodeServiceUnavailable           = wire.CodeServiceUnavailable
	CodeInternal                     = wire.CodeInternal
	CodeInvalidTopicName             = wire.CodeInvalidTopicName
	CodeInvalidOffset                = wire.CodeInvalidOffset
	CodeCorruptBatch                 = wire.CodeCorruptBatch
	CodeUnsupportedBatch             = wire.CodeUnsupportedBatch
	CodeUnknownTopic                 = wire.CodeUnknownTopic
	CodeUnknownPartition             = wire.CodeUnknownPartition
	CodeTopicExists                  = wire.CodeTopicExists
	CodeRecordTooLarge               = wire.CodeRecordTooLarge
	CodeRequestTooLarge              = wire.CodeRequestTooLarge
	CodeOffsetOutOfRange             = wire.CodeOffsetOutOfRange
	CodeNotAcceptable                = wire.CodeNotAcceptable
	CodeUnsupportedMediaType         = wire.CodeUnsupportedType
	CodeNotLeader                    = wire.CodeNotLeader
	CodeLeaderNotAvailable           = wire.CodeLeaderNotAvailable
	CodeNotEnoughReplicas            = wire.CodeNotEnoughReplicas
	CodeNotEnoughReplicasAfterAppend = wire.CodeNotEnoughReplicasAfterAppend
	CodeNotLeaderAfterAppend         = wire.CodeNotLeaderAfterAppend
	CodeAckTimeout                   = wire.CodeAckTimeout
	CodeStorageError                 = wire.CodeStorageError
	CodeInsufficientStorage          = wire.CodeInsufficientStorage
	CodeTimeoutBeforeWrite           = wire.CodeTimeoutBeforeWrite
	CodeOutOfOrderSequence           = wire.CodeOutOfOrderSequence
	CodeInvalidProducerEpoch         = wire.CodeInvalidProducerEpoch
	CodeUnknownProducerID            = wire.CodeUnknownProducerID
	CodeUnknownGroup                 = wire.CodeUnknownGroup
	CodeUnknownMember                = wire.CodeUnknownMember
	CodeFencedMemberEpoch            = wire.CodeFencedMemberEpoch
	CodeStaleMemberEpoch             = wire.CodeStaleMemberEpoch
	CodeNotOwner                     = wire.CodeNotOwner
	CodeOffsetBeyondHighWatermark    = wire.CodeOffsetBeyondHighWatermark
	CodeCommitSuperseded             = wire.CodeCommitSuperseded
	CodeGroupNotEmpty                = wire.CodeGroupNotEmpty
	CodeCoordinatorNotAvailable      = wire.CodeCoordinatorNotAvailable
	CodeInternalTopic                = wire.CodeInternalTopic
	CodeUnauthorized                 = wire.CodeUnauthorized
	CodeFencedLeaderEpoch            = wire.CodeFencedLeaderEpoch
	CodeUnknownLeaderEpoch           = wire.CodeUnknownLeaderEpoch
	CodeReassignmentInProgress       = wire.CodeReassignmentInProgress
	CodeNoReassignmentInProgress     = wire.CodeNoReassignmentInProgress
	CodeNotReplica                   = wire.CodeNotReplica
	CodeInconsistentTopicID          = wire.CodeInconsistentTopicID
)

// Sentinels matched (errors.Is) by an *Error with the corresponding code,
// wherever it sits in the chain: errors.Is(err, ErrNotLeader) holds for a
// Send that failed with not_leader, and errors.Is(err, ErrAckTimeout) for
// one whose outcome is unknown because the agent answered ack_timeout.
// ErrInvalidTopicName is also returned, before any request, for a name that
// docs/design.md §3 does not allow; ErrCorruptBatch also for a fetched
// batch that fails verification.
var (
	ErrInvalidRequest     = errors.New("client: invalid request")
	ErrNotFound           = errors.New("client: no such endpoint")
	ErrMethodNotAllowed   = errors.New("client: method not allowed")
	ErrServiceUnavailable = errors.New("client: agent unavailable (starting or stopping)")
	ErrInternal           = errors.New("client: agent internal error")
	ErrInvalidTopicName   = errors.New("client: invalid topic name")
	ErrInvalidOffset      = errors.New("client: invalid offset")
	// ErrCorruptBatch: a batch failed verification (CRC-32C, structure,
	// limits): the agent's answer to a produce, or a fetched batch.
	ErrCorruptBatch     = errors.New("client: corrupt batch")
	ErrUnsupportedBatch = errors.New("client: unsupported batch")
	ErrUnknownTopic     = errors.New("client: unknown topic")
	ErrUnknownPartition = errors.New("client: unknown partition")
	ErrTopicExists      = errors.New("client: topic exists")
	ErrRecordTooLarge   = errors.New("client: record too large")
	// ErrRequestTooLarge: the request body is over the agent's
	// limits.max_request_bytes (WithMaxBatchBytes should stay below it).
	ErrRequestTooLarge      = errors.New("client: request too large")
	ErrOffsetOutOfRange     = errors.New("client: offset out of range")
	ErrNotAcceptable        = errors.New("client: no acceptable answer format")
	ErrUnsupportedMediaType = errors.New("client: unsupported media type")
	// ErrNotLeader: the agent asked is not the partition's leader
	// (Error.Leader and LeaderAddress name the leader when known); nothing
	// was written.
	ErrNotLeader          = errors.New("client: not the partition's leader")
	ErrLeaderNotAvailable = errors.New("client: leader not available")
	ErrNotEnoughReplicas  = errors.New("client: not enough in-sync replicas")
	// ErrNotEnoughReplicasAfterAppend, ErrNotLeaderAfterAppend and
	// ErrAckTimeout: the leader appended the records but could not confirm
	// them; the write's outcome is unknown (ErrOutcomeUnknown matches too).
	ErrNotEnoughReplicasAfterAppend = errors.New("client: not enough in-sync replicas after the append")
	ErrNotLeaderAfterAppend         = errors.New("client: leadership lost after the append")
	ErrAckTimeout                   = errors.New("client: timed out waiting for the in-sync replicas")
	ErrStorage                      = errors.New("client: storage error on the agent")
	ErrInsufficientStorage          = errors.New("client: the partition's disk is full")
	// ErrTimeoutBeforeWrite: the request's timeout passed before the agent
	// sent the write to the partition's leader; nothing was written.
	ErrTimeoutBeforeWrite = errors.New("client: timed out before the write was sent to the leader")
	// ErrOutOfOrderSequence: the partition's leader found a gap in an
	// idempotent producer's sequence; nothing of the request was written.
	ErrOutOfOrderSequence = errors.New("client: out of order sequence")
	// ErrInvalidProducerEpoch: another instance took over the producer id
	// with a newer epoch; this one is fenced.
	ErrInvalidProducerEpoch = errors.New("client: producer fenced by a newer epoch")
	ErrUnknownProducerID    = errors.New("client: unknown producer id")

	// Consumer groups. ErrUnknownGroup: the group has neither members nor
	// committed offsets. ErrUnknownMember: the member's session ended (it
	// must join again). ErrFencedMember: the coordinator fenced the
	// member's epoch; it owns nothing and must join again.
	// ErrStaleMemberEpoch: the coordinator moved to a newer epoch of the
	// member, which a heartbeat brings. ErrNotOwner: the member does not
	// own that partition. ErrGroupNotEmpty: offsets cannot be reset while
	// a member holds a partition of the topic. ErrInternalTopic: the
	// topic is the groups' own, which clients do not write or delete.
	ErrUnknownGroup              = errors.New("client: unknown group")
	ErrUnknownMember             = errors.New("client: unknown group member")
	ErrFencedMember              = errors.New("client: group member fenced")
	ErrStaleMemberEpoch          = errors.New("client: stale member epoch")
	ErrNotOwner                  = errors.New("client: member does not own the partition")
	ErrOffsetBeyondHighWatermark = errors.New("client: offset beyond the high watermark")
	// ErrCommitSuperseded: the commit waited (for its partition's high
	// watermark) while a later commit of the partition went first, and was
	// refused rather than take the committed offset back.
	ErrCommitSuperseded        = errors.New("client: a later commit of the partition went first")
	ErrGroupNotEmpty           = errors.New("client: group not empty")
	ErrCoordinatorNotAvailable = errors.New("client: group coordinator not available")
	ErrInternalTopic           = errors.New("client: internal topic")

	// ErrReassignmentInProgress: the partition's replicas are being moved
	// already; a second move waits until the first is done.
	ErrReassignmentInProgress = errors.New("client: reassignment in progress")
	// ErrNoReassignmentInProgress: a cancel found no move of the partition
	// in flight (none was started, or it completed first).
	ErrNoReassignmentInProgress = errors.New("client: no reassignment in progress")

	// ErrUnauthorized: the agent's client API wants a token (WithToken)
	// and the request carried none, or another.
	ErrUnauthorized = errors.New("client: unauthorized: missing or wrong token")
	// The peer API's codes, which the client API passes on at most:
	// a leader epoch older or newer than the replica's, a replica that
	// is not one of the partition's, a fetch of another incarnation of
	// the topic.
	ErrFencedLeaderEpoch   = errors.New("client: fenced leader epoch")
	ErrUnknownLeaderEpoch  = errors.New("client: unknown leader epoch")
	ErrNotReplica          = errors.New("client: not a replica of the partition")
	ErrInconsistentTopicID = errors.New("client: another incarnation of the topic")
)

var codeSentinels = map[string]error{
	CodeInvalidRequest:               ErrInvalidRequest,
	CodeNotFound:                     ErrNotFound,
	CodeMethodNotAllowed:             ErrMethodNotAllowed,
	CodeServiceUnavailable:           ErrServiceUnavailable,
	CodeInternal:                     ErrInternal,
	CodeInvalidTopicName:             ErrInvalidTopicName,
	CodeInvalidOffset:                ErrInvalidOffset,
	CodeCorruptBatch:                 ErrCorruptBatch,
	CodeUnsupportedBatch:             ErrUnsupportedBatch,
	CodeUnknownTopic:                 ErrUnknownTopic,
	CodeUnknownPartition:             ErrUnknownPartition,
	CodeTopicExists:                  ErrTopicExists,
	CodeRecordTooLarge:               ErrRecordTooLarge,
	CodeRequestTooLarge:              ErrRequestTooLarge,
	CodeOffsetOutOfRange:             ErrOffsetOutOfRange,
	CodeNotAcceptable:                ErrNotAcceptable,
	CodeUnsupportedMediaType:         ErrUnsupportedMediaType,
	CodeNotLeader:                    ErrNotLeader,
	CodeLeaderNotAvailable:           ErrLeaderNotAvailable,
	CodeNotEnoughReplicas:            ErrNotEnoughReplicas,
	CodeNotEnoughReplicasAfterAppend: ErrNotEnoughReplicasAfterAppend,
	CodeNotLeaderAfterAppend:         ErrNotLeaderAfterAppend,
	CodeAckTimeout:                   ErrAckTimeout,
	CodeStorageError:                 ErrStorage,
	CodeInsufficientStorage:          ErrInsufficientStorage,
	CodeTimeoutBeforeWrite:           ErrTimeoutBeforeWrite,
	CodeOutOfOrderSequence:           ErrOutOfOrderSequence,
	CodeInvalidProducerEpoch:         ErrInvalidProducerEpoch,
	CodeUnknownProducerID:            ErrUnknownProducerID,

	CodeUnknownGroup:              ErrUnknownGroup,
	CodeUnknownMember:             ErrUnknownMember,
	CodeFencedMemberEpoch:         ErrFencedMember,
	CodeStaleMemberEpoch:          ErrStaleMemberEpoch,
	CodeNotOwner:                  ErrNotOwner,
	CodeOffsetBeyondHighWatermark: ErrOffsetBeyondHighWatermark,
	CodeCommitSuperseded:          ErrCommitSuperseded,
	CodeGroupNotEmpty:             ErrGroupNotEmpty,
	CodeCoordinatorNotAvailable:   ErrCoordinatorNotAvailable,
	CodeInternalTopic:             ErrInternalTopic,
	CodeReassignmentInProgress:    ErrReassignmentInProgress,
	CodeNoReassignmentInProgress:  ErrNoReassignmentInProgress,

	CodeUnauthorized:        ErrUnauthorized,
	CodeFencedLeaderEpoch:   ErrFencedLeaderEpoch,
	CodeUnknownLeaderEpoch:  ErrUnknownLeaderEpoch,
	CodeNotReplica:          ErrNotReplica,
	CodeInconsistentTopicID: ErrInconsistentTopicID,
}

// ErrOutcomeUnknown is matched by the error of a write that may or may not
// have been applied (see OutcomeUnknownError). Retrying such a write may
// duplicate its records.
var ErrOutcomeUnknown = errors.New("client: outcome unknown")

// ErrClosed is returned by a Producer, a consumer or a Client after its
// Close (or the Client's), and fails the records that a Producer's Close
// could not deliver before its context ended.
var ErrClosed = errors.New("client: closed")

// ErrProtocol reports an answer from the agent that breaks the API contract:
// a missing header, a malformed JSON body, a fetch response out of order.
var ErrProtocol = errors.New("client: response breaks the API contract")

// Error is an error answer of the agent: the HTTP status and the JSON error
// object {"error":{"code","message","retriable"}} of docs/design.md §8.
type Error struct {
	Status    int
	Code      string // empty when the body was not the JSON error object
	Message   string
	Retriable bool // the agent says the same request may succeed later
	// RetryAfter is the Retry-After header (in seconds on the wire), 0 if
	// absent.
	RetryAfter time.Duration
	// LogStartOffset and HighWatermark are the partition's bounds that an
	// offset_out_of_range answer carries; -1 when absent.
	LogStartOffset int64
	HighWatermark  int64
	// Leader and LeaderAddress name the partition's leader and its client
	// API when the agent says (not_leader).
	Leader        string
	LeaderAddress string
}

func (e *Error) Error() string {
	code := e.Code
	if code == "" {
		code = "http " + strconv.Itoa(e.Status)
	} else {
		code = fmt.Sprintf("%s (%d)", code, e.Status)
	}
	if e.Message == "" {
		return "client: " + code
	}
	return "client: " + code + ": " + e.Message
}

// Is makes errors.Is(err, ErrUnknownTopic) and the other code sentinels work.
func (e *Error) Is(target error) bool {
	s, ok := codeSentinels[e.Code]
	return ok && s == target
}

// OutcomeUnknownError is the error of a write whose records may or may not
// have been written: the agent timed out waiting for replicas, answered
// after appending that it could not complete, or the connection was lost
// after the request was sent. Cause says which.
type OutcomeUnknownError struct {
	Cause error
}

func (e *OutcomeUnknownError) Error() string {
	return "client: outcome unknown, the records may have been written: " + e.Cause.Error()
}

func (e *OutcomeUnknownError) Unwrap() error { return e.Cause }

// Is makes errors.Is(err, ErrOutcomeUnknown) true.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// IsRetriable reports whether the operation that failed with err may succeed
// if the caller tries it again as it was: the agent marked the error
// retriable, or the agent could not be reached. It is false for every error
// that matches ErrOutcomeUnknown, since repeating a write whose outcome is
// unknown may duplicate it, and for context errors.
func IsRetriable(err error) bool {
	if err == nil || errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrClosed) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Retriable && !outcomeUnknownCodes[e.Code]
	}
	var te *transportError
	return errors.As(err, &te)
}

// transportError is a request that got no HTTP answer. written is whether
// any of the request may have reached the agent: for a write, false means
// nothing was applied.
type transportError struct {
	err     error
	written bool
}

func (e *transportError) Error() string { return "client: " + e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// Codes that the agent sends for a write whose records may have been
// appended: retried only by an idempotent producer, whose resend the leader
// recognises.
var outcomeUnknownCodes = map[string]bool{
	CodeAckTimeout:                   true,
	CodeNotEnoughReplicasAfterAppend: true,
	CodeNotLeaderAfterAppend:         true,
}

// Codes that the agent sends only before it appends anything, and that are
// worth retrying: leadership moves, the ISR grows back, the agent finishes
// starting, space is freed on a full disk, a request's timeout passed
// before its write left the sidecar.
var retriableBeforeAppendCodes = map[string]bool{
	CodeNotEnoughReplicas:   true,
	CodeLeaderNotAvailable:  true,
	CodeNotLeader:           true,
	CodeFencedLeaderEpoch:   true,
	CodeServiceUnavailable:  true,
	CodeInsufficientStorage: true,
	CodeTimeoutBeforeWrite:  true,
}

// maxErrorBodyBytes bounds how much of an error answer is read.
const maxErrorBodyBytes = 64 << 10

// decodeError turns a non-2xx answer into an *Error. A body that is not the
// JSON error object (a proxy's HTML page, say) becomes the message.
func decodeError(resp *http.Response) *Error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
	e := &Error{Status: resp.StatusCode, LogStartOffset: -1, HighWatermark: -1}
	if s := resp.Header.Get("Retry-After"); s != "" {
		if secs, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && secs >= 0 {
			e.RetryAfter = time.Duration(secs) * time.Second
		}
	}
	var wire struct {
		Error *struct {
			Code           string `json:"code"`
			Message        string `json:"message"`
			Retriable      bool   `json:"retriable"`
			Leader         string `json:"leader"`
			LeaderAddress  string `json:"leader_address"`
			LogStartOffset *int64 `json:"log_start_offset"`
			HighWatermark  *int64 `json:"high_watermark"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &wire); err == nil && wire.Error != nil && wire.Error.Code != "" {
		w := wire.Error
		e.Code, e.Message, e.Retriable = w.Code, w.Message, w.Retriable
		e.Leader, e.LeaderAddress = w.Leader, w.LeaderAddress
		if w.LogStartOffset != nil {
			e.LogStartOffset = *w.LogStartOffset
		}
		if w.HighWatermark != nil {
			e.HighWatermark = *w.HighWatermark
		}
		return e
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	e.Message = msg
	return e
}
