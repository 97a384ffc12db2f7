package kafkabroker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/kafka"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/wire"
)

// failingProduceSidecar has one partition of topic "t", whose produces
// fail with err.
type failingProduceSidecar struct {
	Sidecar
	err *reply.APIError
}

func (failingProduceSidecar) Serving() error { return nil }

func (failingProduceSidecar) LookupTopic(name string) (*election.TopicMeta, bool) {
	return &election.TopicMeta{Config: election.TopicConfig{Name: name}, Partitions: make([]election.PartitionMeta, 1)}, name == "t"
}

func (failingProduceSidecar) DecodeBatch(body []byte, _ replicate.Acks) ([]byte, int, error) {
	return body, 1, nil
}

func (s failingProduceSidecar) ProduceBatch(string, int, []byte, int, replicate.Acks, time.Time) (*int64, bool, *reply.APIError) {
	return nil, false, s.err
}

// TestProduceErrorCodes: a produce whose outcome the sidecar cannot know is
// REQUEST_TIMED_OUT, Kafka's answer for it, which a producer retries (an
// idempotent kgo producer resends the same sequence, marking the batch
// "unsure if produced"). internal, a 500 that may follow the leader's
// append or a 502 for a leader's answer the sidecar could not decode, was
// UNKNOWN_SERVER_ERROR, not retriable: kgo failed the records, which may
// have been written. The agent's own answer stays in the chain, for the
// produce metrics' outcome.
func TestProduceErrorCodes(t *testing.T) {
	for _, tc := range []struct {
		err  *reply.APIError
		want *kerr.Error
	}{
		{reply.NewAPIError(fasthttp.StatusBadGateway, wire.CodeInternal, "undecodable answer from the leader: the outcome is unknown", false), kerr.RequestTimedOut},
		{reply.NewAPIError(fasthttp.StatusInternalServerError, wire.CodeInternal, "after the append: the outcome is unknown", false), kerr.RequestTimedOut},
		{reply.NewAPIError(fasthttp.StatusGatewayTimeout, wire.CodeAckTimeout, "the outcome is unknown", false), kerr.RequestTimedOut},
		{reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeNotEnoughReplicas, "nothing written", true), kerr.NotEnoughReplicas},
		{reply.NewAPIError(fasthttp.StatusConflict, wire.CodeOutOfOrderSequence, "nothing written", false), kerr.OutOfOrderSequenceNumber},
	} {
		b := New(Config{
			Sidecar:           failingProduceSidecar{err: tc.err},
			ProduceTimeout:    time.Second,
			MaxProduceTimeout: time.Second,
			ObserveProduce:    func(int16, error, time.Duration) {},
			Now:               time.Now,
		})
		_, err := b.Produce(context.Background(), kafka.ProduceRequest{Topic: "t", Batch: []byte("b"), Records: 1, Acks: -1})
		if got := kerr.ErrorForCode(kafka.ErrorCode(err)); got != tc.want {
			t.Errorf("%d %s: answered %v, want %v", tc.err.Status, tc.err.Code, got, tc.want)
		}
		var apiErr *reply.APIError
		if !errors.As(err, &apiErr) || apiErr != tc.err {
			t.Errorf("%d %s: %v does not carry the agent's answer", tc.err.Status, tc.err.Code, err)
		}
	}
}
