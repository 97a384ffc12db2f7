package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/logagent/logagent/record"
)

// handleProduce appends each partition's batch, the partitions of one
// request concurrently (a goroutine each, all waited for) so one slow
// partition does not hold the others back. A batch is checked before the
// Broker sees it (checkProduceBatch); a refused one writes nothing.
//
// acks=0 is answered with nothing, as Kafka does; when a partition of it
// failed, the connection is closed instead, Kafka's way of telling a
// client that does not read answers.
func (s *Server) handleProduce(ctx context.Context, req *kmsg.ProduceRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	resp.Default()
	validAcks := req.Acks == 0 || req.Acks == 1 || req.Acks == -1
	timeout := time.Duration(req.TimeoutMillis) * time.Millisecond

	type key struct {
		topic     string
		partition int32
	}
	seen := make(map[key]int)
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			seen[key{rt.Topic, rp.Partition}]++
		}
	}

	calls := newItemCalls()
	resp.Topics = make([]kmsg.ProduceResponseTopic, len(req.Topics))
	for i, rt := range req.Topics {
		t := &resp.Topics[i]
		*t = kmsg.NewProduceResponseTopic()
		t.Topic = rt.Topic
		t.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
		for j, rp := range rt.Partitions {
			p := &t.Partitions[j]
			*p = kmsg.NewProduceResponseTopicPartition()
			p.Partition = rp.Partition
			p.BaseOffset = -1
			switch {
			case !validAcks:
				p.ErrorCode = kerr.InvalidRequiredAcks.Code
				continue
			case req.TransactionID != nil:
				setProduceError(p, kerr.TransactionalIDAuthorizationFailed.Code, "transactions are not supported")
				continue
			case seen[key{rt.Topic, rp.Partition}] > 1:
				// Two batches for one partition in one request have no
				// order to append them in; Kafka's clients never send it.
				setProduceError(p, kerr.InvalidRequest.Code, "the partition appears twice in the request")
				continue
			}
			records, code, err := checkProduceBatch(rp.Records)
			if err != nil {
				setProduceError(p, code, err.Error())
				continue
			}
			pr := ProduceRequest{
				Topic:     rt.Topic,
				Partition: rp.Partition,
				Batch:     rp.Records,
				Records:   records,
				Acks:      req.Acks,
				Timeout:   timeout,
			}
			calls.Go(func() {
				res, err := s.cfg.Broker.Produce(ctx, pr)
				if err != nil {
					setProduceError(p, produceErrorCode(err), err.Error())
					return
				}
				p.BaseOffset = res.BaseOffset
				p.LogStartOffset = res.LogStartOffset
			})
		}
	}
	calls.Wait()

	if req.Acks == 0 {
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					return nil, fmt.Errorf("kafka: acks=0 produce to %s/%d failed: %s", t.Topic, p.Partition, kerr.ErrorForCode(p.ErrorCode))
				}
			}
		}
		return nil, nil
	}
	return resp, nil
}

func setProduceError(p *kmsg.ProduceResponseTopicPartition, code int16, msg string) {
	p.ErrorCode = code
	p.BaseOffset = -1
	p.ErrorMessage = &msg
}

// checkProduceBatch checks that records is exactly one RecordBatch v2 with
// at least one record, whose length fits and whose CRC-32C matches, and
// that it uses nothing logagent does not implement; it returns the number
// of records, or the Kafka error code and why.
//
// Codes, as Kafka answers them: what is not one v2 batch (another magic,
// a length that does not match, trailing bytes, no record) is
// INVALID_RECORD; a batch whose CRC or header is damaged CORRUPT_MESSAGE;
// a transactional or control batch, LogAppendTime or a delete horizon
// UNSUPPORTED_FOR_MESSAGE_FORMAT (package record refuses them everywhere).
func checkProduceBatch(records []byte) (int, int16, error) {
	if len(records) < record.HeaderSize {
		return 0, kerr.InvalidRecord.Code, fmt.Errorf("records of %d bytes are not a batch (a header is %d)", len(records), record.HeaderSize)
	}
	// The header is only looked at here; Verify checks it all.
	hdr := record.Header(records[:record.HeaderSize])
	if magic := hdr.Magic(); magic != record.Magic {
		return 0, kerr.InvalidRecord.Code, fmt.Errorf("batch magic %d: produce v3+ takes magic 2 only", magic)
	}
	if size := int64(record.LengthFieldEnd) + int64(hdr.BatchLength()); size != int64(len(records)) {
		return 0, kerr.InvalidRecord.Code, fmt.Errorf("batch_length gives a batch of %d bytes in records of %d: a partition takes exactly one whole batch", size, len(records))
	}
	h, err := record.Verify(records, 0)
	switch {
	case errors.Is(err, record.ErrUnsupported):
		return 0, kerr.UnsupportedForMessageFormat.Code, err
	case err != nil:
		return 0, kerr.CorruptMessage.Code, err
	}
	if err := h.CheckDense(); err != nil {
		return 0, kerr.InvalidRecord.Code, err
	}
	return int(h.RecordCount()), 0, nil
}

// produceErrorCode is the code a partition's failed produce is answered
// with: BROKER_NOT_AVAILABLE (the agent starts or stops) is
// NOT_LEADER_OR_FOLLOWER, which clients retry after refreshing their
// metadata; the Java producer fails the records on BROKER_NOT_AVAILABLE
// (BrokerNotAvailableException is not retriable).
func produceErrorCode(err error) int16 {
	if code := ErrorCode(err); code != kerr.BrokerNotAvailable.Code {
		return code
	}
	return kerr.NotLeaderForPartition.Code
}
