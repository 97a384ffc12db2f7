package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/producer"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/wire"
)

// Exactly-once appends (docs/design.md §7, docs/api.md). A producer gets an
// id from POST /v1/producers and numbers its records per partition; the
// leader keeps each producer's last batches (package producer) and answers
// a resend with the original offsets instead of appending it again. The
// sidecar uses the same mechanism for its own forwards: a plain request
// with acks=all is stamped with one of the sidecar's producer ids (a lane)
// before it leaves, so a forward whose outcome is unknown can be sent again
// until the request's deadline.

// producerRequest is the body of POST /v1/producers.
type producerRequest struct {
	// ProducerID, when set, asks for the next epoch of an existing id.
	ProducerID *int64 `json:"producer_id"`
}

type producerResponse struct {
	ProducerID    int64 `json:"producer_id"`
	ProducerEpoch int16 `json:"producer_epoch"`
}

// handleInitProducer serves POST /v1/producers: a new producer id, or the
// next epoch of one, which fences the instances using the older epochs.
func (a *Agent) handleInitProducer(ctx *fasthttp.RequestCtx) {
	if !a.serving(ctx) {
		return
	}
	var req producerRequest
	if body := bytes.TrimSpace(ctx.PostBody()); len(body) > 0 {
		if err := reply.DecodeOneObject(body, &req); err != nil {
			reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest, `body is not {"producer_id": N} or {}: `+err.Error(), false)
			return
		}
	}
	callCtx, cancel := context.WithTimeout(context.Background(), peerCallTimeout)
	defer cancel()
	var resp producerResponse
	var err error
	if req.ProducerID == nil {
		resp.ProducerID, resp.ProducerEpoch, err = a.coord.AllocateProducerID(callCtx)
	} else {
		resp.ProducerID, resp.ProducerEpoch, err = a.coord.BumpProducerEpoch(callCtx, *req.ProducerID)
	}
	switch {
	case errors.Is(err, election.ErrUnknownProducerID):
		reply.WriteError(ctx, fasthttp.StatusNotFound, wire.CodeUnknownProducerID, err.Error()+": ask for a new one with an empty body", false)
	case err != nil:
		reply.WriteError(ctx, fasthttp.StatusServiceUnavailable, wire.CodeServiceUnavailable, "cannot reserve a producer id in Consul: "+err.Error(), true)
	default:
		reply.WriteJSON(ctx, fasthttp.StatusCreated, resp)
	}
}

// producerHeaders reads the three idempotence headers of a produce
// request; present is false when there are none.
type producerHeaders struct {
	present bool
	id      int64
	epoch   int16
	seq     int32
}

func readProducerHeaders(h *fasthttp.RequestHeader) (producerHeaders, error) {
	id, epoch, seq := h.Peek(wire.HeaderProducerID), h.Peek(wire.HeaderProducerEpoch), h.Peek(wire.HeaderSequence)
	if len(id) == 0 && len(epoch) == 0 && len(seq) == 0 {
		return producerHeaders{}, nil
	}
	if len(id) == 0 || len(epoch) == 0 || len(seq) == 0 {
		return producerHeaders{}, badRequest(fmt.Sprintf("an idempotent produce carries all of %s, %s and %s", wire.HeaderProducerID, wire.HeaderProducerEpoch, wire.HeaderSequence))
	}
	p := producerHeaders{present: true}
	n, err := strconv.ParseInt(string(id), 10, 64)
	if err != nil || n < 0 {
		return p, badRequest(fmt.Sprintf("%s %q is not a producer id", wire.HeaderProducerID, id))
	}
	p.id = n
	if n, err = strconv.ParseInt(string(epoch), 10, 16); err != nil || n < 0 {
		return p, badRequest(fmt.Sprintf("%s %q is not an epoch in [0, %d]", wire.HeaderProducerEpoch, epoch, math.MaxInt16))
	}
	p.epoch = int16(n)
	if n, err = strconv.ParseInt(string(seq), 10, 32); err != nil || n < 0 {
		return p, badRequest(fmt.Sprintf("%s %q is not a sequence in [0, %d]", wire.HeaderSequence, seq, math.MaxInt32))
	}
	p.seq = int32(n)
	return p, nil
}

func badRequest(msg string) *reply.APIError {
	return reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeInvalidRequest, msg, false)
}

// applyProducerHeaders makes batch the idempotent batch the request asks
// for: the headers' fields go into a batch built without them, or must
// match those a binary batch carries. It answers whether the batch is
// idempotent, which needs an explicit partition and acks=all.
func applyProducerHeaders(batch []byte, p producerHeaders, explicitPartition bool, acks replicate.Acks) (bool, error) {
	h := record.Header(batch)
	switch {
	case p.present && h.ProducerID() == record.NoProducerID:
		record.StampProducer(batch, p.id, p.epoch, p.seq)
	case p.present && (h.ProducerID() != p.id || h.ProducerEpoch() != p.epoch || h.BaseSequence() != p.seq):
		return false, badRequest(fmt.Sprintf("the batch's producer fields (id %d, epoch %d, base sequence %d) differ from the request's headers (%d, %d, %d)",
			h.ProducerID(), h.ProducerEpoch(), h.BaseSequence(), p.id, p.epoch, p.seq))
	case h.ProducerID() == record.NoProducerID:
		return false, nil
	case h.ProducerID() < 0 || h.ProducerEpoch() < 0 || h.BaseSequence() < 0:
		return false, badRequest(fmt.Sprintf("the batch's producer fields (id %d, epoch %d, base sequence %d) are not those of an idempotent producer",
			h.ProducerID(), h.ProducerEpoch(), h.BaseSequence()))
	}
	if h.RecordCount() < 1 {
		return false, badRequest("an idempotent produce holds at least one record")
	}
	if !explicitPartition {
		return false, badRequest("an idempotent produce names its partition (partition=N): sequences are per partition")
	}
	if acks != replicate.AcksAll {
		return false, badRequest("an idempotent produce needs acks=all")
	}
	return true, nil
}

// producerAPIError maps the leader's refusal of an idempotent batch.
func producerAPIError(e *partition.ProducerError) *reply.APIError {
	code := wire.CodeOutOfOrderSequence
	if e.Decision.Verdict == producer.InvalidProducerEpoch {
		code = wire.CodeInvalidProducerEpoch
	}
	return reply.NewAPIError(fasthttp.StatusConflict, code, e.Error(), false)
}

// unknownOutcome says whether a failed produce may have been appended: only
// then does an idempotent sender try again after it. storage_error is one:
// the log may fail after the append, and the recovered log may keep it. So
// is internal, whatever its status: an unexpected error may follow the
// append (the leader loop's Appended refusing what the log wrote), and a
// lane given back after it handed its sequence to the next request, which
// the leader answered as a duplicate of the first, unwritten.
func unknownOutcome(e *reply.APIError) bool {
	switch e.Code {
	case wire.CodeAckTimeout, wire.CodeNotLeaderAfterAppend, wire.CodeNotEnoughReplicasAfterAppend, wire.CodeStorageError,
		wire.CodeInternal:
		return true
	}
	return e.Status == fasthttp.StatusBadGateway
}

// lanes are the sidecar's own producer ids for plain produce requests. A
// lane carries one request at a time, so its sequence advances only after
// an answer, and a retry resends exactly what its leader may have appended.
// A lane whose last request's outcome stayed unknown is dropped: its next
// sequence is not known.
type lanes struct {
	alloc func(ctx context.Context) (int64, int16, error)
	mu    sync.Mutex
	free  map[partitionKey][]*lane
}

// partitionKey names a partition, the key of the lanes.
type partitionKey struct {
	topic     string
	partition int
}

type lane struct {
	id    int64
	epoch int16
	next  int32
}

func newLanes(alloc func(ctx context.Context) (int64, int16, error)) *lanes {
	return &lanes{alloc: alloc, free: map[partitionKey][]*lane{}}
}

// take returns a free lane of the partition, or a new one allocated by
// deadline: a produce request waits for the allocation, and is answered by
// its own timeout even when Consul is slow to answer. With fresh, always a
// new one: after a leader refused a lane, the free lanes of the partition
// may be as stale as the refused one (its leader's state changed).
func (l *lanes) take(key partitionKey, deadline time.Time, fresh bool) (*lane, error) {
	l.mu.Lock()
	if free := l.free[key]; len(free) > 0 && !fresh {
		ln := free[len(free)-1]
		l.free[key] = free[:len(free)-1]
		l.mu.Unlock()
		return ln, nil
	}
	l.mu.Unlock()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	id, epoch, err := l.alloc(ctx)
	if err != nil {
		return nil, err
	}
	return &lane{id: id, epoch: epoch}, nil
}

// give returns a lane whose next sequence is known.
func (l *lanes) give(key partitionKey, ln *lane) {
	l.mu.Lock()
	l.free[key] = append(l.free[key], ln)
	l.mu.Unlock()
}

// idempotentAttemptMin is the shortest first attempt for which an
// idempotent forward is split into attempts.
const idempotentAttemptMin = time.Second

// laneAttempts bounds how many fresh lanes a request tries when leaders
// refuse a lane's sequence (a leader that lost the lane's state).
const laneAttempts = 3

// produceBatch sends a batch to the partition's leader: locally when this
// agent leads it, else forwarded. An idempotent batch (the client's, or a
// plain acks=all batch given one of the sidecar's lanes) is sent again
// after an unknown outcome until the deadline; a plain one only after
// refusals that appended nothing. A plain batch for which no lane can be
// had, or whose lanes the leader all refused, goes without idempotence.
func (a *Agent) produceBatch(topic string, partition int, batch []byte, count int, acks replicate.Acks, deadline time.Time) (produceResponse, *reply.APIError) {
	if record.Header(batch).ProducerID() >= 0 {
		return a.sendBatch(topic, partition, batch, count, acks, true, deadline)
	}
	if acks != replicate.AcksAll || a.lanes == nil {
		return a.sendBatch(topic, partition, batch, count, acks, false, deadline)
	}
	resp, e, sent := a.produceOnLane(topic, partition, batch, count, acks, deadline)
	if sent {
		return resp, e
	}
	if !a.now().Before(deadline) {
		// Sent now, a local append would land after the deadline and
		// answer an unknown outcome that nobody resends.
		return produceResponse{}, reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeTimeoutBeforeWrite,
			"the request's timeout passed before the write could be sent with one of the sidecar's producer ids: nothing was written", true)
	}
	record.StampProducer(batch, record.NoProducerID, -1, record.NoSequence)
	return a.sendBatch(topic, partition, batch, count, acks, false, deadline)
}

// produceOnLane sends a plain batch on one of the sidecar's lanes; sent is
// false, with nothing written, when no lane could be had or the leader
// refused every lane tried: a plain client never asked for a producer
// sequence, and out_of_order_sequence (not retriable) told it of one.
func (a *Agent) produceOnLane(topic string, partition int, batch []byte, count int, acks replicate.Acks, deadline time.Time) (produceResponse, *reply.APIError, bool) {
	key := partitionKey{topic: topic, partition: partition}
	for attempt := 1; ; attempt++ {
		ln, err := a.lanes.take(key, minTime(deadline, a.now().Add(peerCallTimeout)), attempt > 1)
		if err != nil {
			a.log.Warn("no producer id for a plain produce: it goes without idempotence", "topic", topic, "partition", partition, "error", err)
			return produceResponse{}, nil, false
		}
		record.StampProducer(batch, ln.id, ln.epoch, ln.next)
		resp, e := a.sendBatch(topic, partition, batch, count, acks, true, deadline)
		switch {
		case e == nil:
			ln.next = record.AddSequence(ln.next, count)
			a.lanes.give(key, ln)
			// The application sent this once; a resend was the sidecar's.
			resp.Duplicate = false
			return resp, nil, true
		case e.Code == wire.CodeOutOfOrderSequence || e.Code == wire.CodeInvalidProducerEpoch:
			// Refused before any append: the leader does not know the
			// lane's state as this sidecar does. A fresh lane starts over;
			// the refused one is dropped.
			a.log.Warn("leader refused a lane's sequence; using a new producer id", "topic", topic, "partition", partition, "producer_id", ln.id, "error", e.Message)
			if attempt < laneAttempts && a.now().Before(deadline) {
				continue
			}
			a.log.Warn("leader refused every lane tried: the plain produce goes without idempotence", "topic", topic, "partition", partition, "lanes", attempt)
			return produceResponse{}, nil, false
		case unknownOutcome(e):
			return resp, e, true
		default:
			a.lanes.give(key, ln)
			return resp, e, true
		}
	}
}

// sendBatch is one produce to the leader, local or forwarded, retried
// within the deadline while the leader refuses before appending (it moves,
// or is being elected). With idempotent, also after an unknown outcome
// (the leader answers a resend of what it appended as a duplicate); an
// answer that follows an unknown outcome is never reported as "nothing
// appended".
func (a *Agent) sendBatch(topic string, partition int, batch []byte, count int, acks replicate.Acks, idempotent bool, deadline time.Time) (produceResponse, *reply.APIError) {
	var unknown *reply.APIError
	for {
		attempt := deadline
		if idempotent {
			attempt = a.attemptDeadline(deadline)
		}
		resp, e, refused := a.sendOnce(topic, partition, batch, count, acks, attempt, deadline)
		if e == nil {
			return resp, nil
		}
		if idempotent && unknownOutcome(e) {
			if a.now().Before(deadline) {
				a.log.Info("resending an idempotent batch after an unknown outcome", "topic", topic, "partition", partition,
					"producer_id", record.Header(batch).ProducerID(), "error", e.Message)
			}
			unknown, refused = e, true
			// A local loop that has not answered may still stamp its copy
			// in place; the resend gets its own.
			batch = bytes.Clone(batch)
		}
		retry := refused || (unknown != nil && e.Retriable)
		// A pause that used up the time ends it too: the next attempt
		// could only answer that the timeout passed, where this one says
		// why nothing was written (no leader, a leader moving).
		if remaining := deadline.Sub(a.now()); !retry || remaining <= 0 || !a.pauseBeforeRetry(remaining) || !a.now().Before(deadline) {
			// A refusal that follows an unknown outcome does not say
			// nothing was written.
			if unknown != nil && !unknownOutcome(e) {
				return produceResponse{}, unknown
			}
			return produceResponse{}, e
		}
	}
}

// attemptDeadline bounds one attempt of an idempotent send: a forward
// that stalls (a cut link) is given up on half way through what is left,
// when that is long enough, so that a resend still has time once the link
// or the leadership changed; the leader answers the resend of what it
// appended as a duplicate.
func (a *Agent) attemptDeadline(deadline time.Time) time.Time {
	if remaining := deadline.Sub(a.now()); remaining > 2*idempotentAttemptMin {
		return a.now().Add(remaining / 2)
	}
	return deadline
}

// pauseBeforeRetry waits for newer metadata, or a short pause for the
// directory and the leader's loop to catch up, at most remaining; false
// once the agent has stopped serving for retryGrace.
func (a *Agent) pauseBeforeRetry(remaining time.Duration) bool {
	if until := a.retriesUntil.Load(); until != nil {
		if remaining = min(remaining, until.Sub(a.now())); remaining <= 0 {
			return false
		}
	}
	pause := time.NewTimer(min(forwardRetryPause, remaining))
	defer pause.Stop()
	select {
	case <-a.coord.Metadata().Changed():
	case <-pause.C:
	}
	return true
}

// sendOnce makes one attempt, a forward bounded by attempt, a local append
// by deadline; refused says the leader refused it before appending
// anything (or it never reached a leader).
func (a *Agent) sendOnce(topic string, partition int, batch []byte, count int, acks replicate.Acks, attempt, deadline time.Time) (produceResponse, *reply.APIError, bool) {
	if r := a.replicas.Get(topic, partition); r != nil && r.CurrentView().Role == roleLeader {
		resp, e := a.appendLocal(r, topic, partition, batch, count, acks, anyEpoch, deadline.Sub(a.now()))
		return resp, e, refusedLocally(e)
	}
	resp, err := a.forwardOnce(a.coord.Metadata(), topic, partition, batch, acks, attempt)
	if err == nil {
		return resp, nil, false
	}
	var e *reply.APIError
	if !errors.As(err, &e) {
		e = reply.NewAPIError(fasthttp.StatusInternalServerError, wire.CodeInternal, err.Error(), false)
	}
	return produceResponse{}, e, errors.Is(err, errForwardRefused)
}
