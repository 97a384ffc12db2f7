package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
)

// MaxInFlightIdempotent is the most batches of one partition an idempotent
// producer may have sent and not yet seen acknowledged: the agent recognises
// a resend only among a producer's last 5 batches on a partition.
const MaxInFlightIdempotent = 5

// ProducerID is an idempotent producer's identity, as POST /v1/producers
// answers it: an id unique across the cluster and its epoch. The agent
// refuses writes of an id with an epoch older than one it has seen on the
// partition (ErrInvalidProducerEpoch): the older instance is fenced.
type ProducerID struct {
	ID    int64 `json:"producer_id"`
	Epoch int16 `json:"producer_epoch"`
}

// InitProducer allocates a new producer id, with epoch 0. A Producer does
// this itself at its first send; InitProducer is for applications that
// write idempotently with requests of their own.
func (c *Client) InitProducer(ctx context.Context) (ProducerID, error) {
	return c.initProducer(ctx, struct{}{})
}

// ReinitProducer bumps id's epoch, which fences the instance that used the
// older epoch. When the epoch would pass 32767 the agent answers a new id
// with epoch 0: always use the answer's id. An id the cluster never
// allocated fails with ErrUnknownProducerID.
func (c *Client) ReinitProducer(ctx context.Context, id int64) (ProducerID, error) {
	if id < 0 {
		return ProducerID{}, fmt.Errorf("%w: producer id %d", ErrInvalidOption, id)
	}
	return c.initProducer(ctx, struct {
		ID int64 `json:"producer_id"`
	}{id})
}

func (c *Client) initProducer(ctx context.Context, in any) (ProducerID, error) {
	var out struct {
		ID    *int64 `json:"producer_id"`
		Epoch *int16 `json:"producer_epoch"`
	}
	if err := c.doJSON(ctx, http.MethodPost, "/v1/producers", in, &out); err != nil {
		return ProducerID{}, fmt.Errorf("init producer: %w", err)
	}
	if out.ID == nil || out.Epoch == nil || *out.ID < 0 || *out.Epoch < 0 {
		return ProducerID{}, fmt.Errorf("%w: init producer: answer without a valid producer_id and producer_epoch", ErrProtocol)
	}
	return ProducerID{ID: *out.ID, Epoch: *out.Epoch}, nil
}

// producerSession is a producer id that a partition's batches are numbered
// under. Its id is allocated at the first send that needs it, once.
type producerSession struct {
	mu    sync.Mutex
	known bool
	id    ProducerID
}

// identity returns the session's id, allocating it if it has none yet.
// Concurrent callers wait for the one allocation.
func (p *Producer) identity(s *producerSession) (ProducerID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.known {
		return s.id, nil
	}
	ctx, cancel := context.WithTimeout(p.life, p.cfg.ackTimeout+requestGrace)
	defer cancel()
	id, err := p.client.InitProducer(ctx)
	if err != nil {
		return ProducerID{}, err
	}
	s.known, s.id = true, id
	return id, nil
}

// classifyInit decides whether a failed producer id allocation is worth
// trying again: nothing of a batch was sent either way.
func classifyInit(err error) attemptOutcome {
	var e *Error
	switch {
	case noProducersEndpoint(err):
		return attemptFailed
	case errors.As(err, &e):
		if e.Retriable || e.Status >= 500 {
			return attemptRetry
		}
		return attemptFailed
	}
	var te *transportError
	if errors.As(err, &te) || errors.Is(err, ErrProtocol) {
		return attemptRetry
	}
	return attemptFailed
}

// noProducersEndpoint: the agent does not know POST /v1/producers (an
// agent older than idempotent producers).
func noProducersEndpoint(err error) bool {
	var e *Error
	return errors.As(err, &e) && (e.Status == http.StatusNotFound || e.Status == http.StatusMethodNotAllowed)
}

// initError explains a failed allocation, pointing at WithIdempotence when
// the agent does not support idempotent producers.
func initError(err error) error {
	if noProducersEndpoint(err) {
		return fmt.Errorf("%w (the agent does not support idempotent producers: WithIdempotence(false) produces without)", err)
	}
	return err
}

func formatProducer(id ProducerID, seq int32) string {
	return "producer " + strconv.FormatInt(id.ID, 10) + " epoch " + strconv.Itoa(int(id.Epoch)) + " sequence " + strconv.Itoa(int(seq))
}
