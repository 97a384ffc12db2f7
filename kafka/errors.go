package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/logagent/logagent/wire"
)

// Error is an error answered with a Kafka error code of its own choosing.
type Error struct {
	Code    int16 // a Kafka error code (kerr's table)
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "kafka: " + kerr.ErrorForCode(e.Code).Error()
	}
	return "kafka: " + kerr.ErrorForCode(e.Code).Error() + ": " + e.Message
}

// codedError is an error of the sidecar's HTTP API, which carries one of
// the API's codes (package wire): the listener answers it with the Kafka
// code codeForWire gives.
type codedError interface {
	error
	WireCode() string
}

// codeForWire maps the sidecar's error codes to Kafka's (docs/kafka.md,
// "Pointing an application at the sidecar": what the answers mean). Codes
// missing here are answered UNKNOWN_SERVER_ERROR; a produce answers
// internal REQUEST_TIMED_OUT (kafkabroker's Broker.Produce).
var codeForWire = map[string]*kerr.Error{
	wire.CodeInvalidRequest:               kerr.InvalidRequest,
	wire.CodeServiceUnavailable:           kerr.BrokerNotAvailable,
	wire.CodeInternal:                     kerr.UnknownServerError,
	wire.CodeInvalidTopicName:             kerr.InvalidTopicException,
	wire.CodeCorruptBatch:                 kerr.CorruptMessage,
	wire.CodeUnsupportedBatch:             kerr.UnsupportedForMessageFormat,
	wire.CodeUnknownTopic:                 kerr.UnknownTopicOrPartition,
	wire.CodeUnknownPartition:             kerr.UnknownTopicOrPartition,
	wire.CodeTopicExists:                  kerr.TopicAlreadyExists,
	wire.CodeRecordTooLarge:               kerr.MessageTooLarge,
	wire.CodeRequestTooLarge:              kerr.RecordListTooLarge,
	wire.CodeOffsetOutOfRange:             kerr.OffsetOutOfRange,
	wire.CodeNotLeader:                    kerr.NotLeaderForPartition,
	wire.CodeLeaderNotAvailable:           kerr.LeaderNotAvailable,
	wire.CodeNotEnoughReplicas:            kerr.NotEnoughReplicas,
	wire.CodeNotEnoughReplicasAfterAppend: kerr.NotEnoughReplicasAfterAppend,
	wire.CodeNotLeaderAfterAppend:         kerr.NotLeaderForPartition,
	wire.CodeAckTimeout:                   kerr.RequestTimedOut,
	wire.CodeTimeoutBeforeWrite:           kerr.RequestTimedOut,
	wire.CodeStorageError:                 kerr.KafkaStorageError,
	wire.CodeInsufficientStorage:          kerr.KafkaStorageError,
	wire.CodeOutOfOrderSequence:           kerr.OutOfOrderSequenceNumber,
	wire.CodeInvalidProducerEpoch:         kerr.InvalidProducerEpoch,
	wire.CodeUnknownProducerID:            kerr.UnknownProducerID,
	wire.CodeCoordinatorNotAvailable:      kerr.CoordinatorNotAvailable,
	wire.CodeInternalTopic:                kerr.TopicAuthorizationFailed,
	wire.CodeUnauthorized:                 kerr.ClusterAuthorizationFailed,
	wire.CodeFencedLeaderEpoch:            kerr.FencedLeaderEpoch,
	wire.CodeUnknownLeaderEpoch:           kerr.UnknownLeaderEpoch,
	wire.CodeUnknownGroup:                 kerr.GroupIDNotFound,
	wire.CodeUnknownMember:                kerr.UnknownMemberID,
	wire.CodeGroupNotEmpty:                kerr.NonEmptyGroup,
}

// ErrorCode is the Kafka error code an error of the Broker or Groups is
// answered with: 0 for nil, an *Error's own code, the mapped code of an
// error carrying a wire code, REQUEST_TIMED_OUT for a context that ended,
// else UNKNOWN_SERVER_ERROR.
func ErrorCode(err error) int16 {
	if err == nil {
		return 0
	}
	var ke *Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	var ce codedError
	if errors.As(err, &ce) {
		if k, ok := codeForWire[ce.WireCode()]; ok {
			return k.Code
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return kerr.RequestTimedOut.Code
	}
	return kerr.UnknownServerError.Code
}
