package agent

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"mime"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/metrics"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"

	"github.com/logagent/logagent/wire"
)

// Bounds of a produce request.
const (
	defaultProduceTimeout = 5 * time.Second
	maxProduceTimeout     = wire.MaxClientWait
	// produceGrace is how much longer than its timeout a handler waits for
	// the loop to answer, so the loop's own ack timeout normally answers.
	produceGrace = time.Second
)

// produceResponse is the answer to a produce request. Offsets are absent for
// acks=0, which answers before the append.
type produceResponse struct {
	Topic      string `json:"topic"`
	Partition  int    `json:"partition"`
	BaseOffset *int64 `json:"base_offset,omitempty"`
	LastOffset *int64 `json:"last_offset,omitempty"`
	Count      int    `json:"count"`
	Epoch      *int32 `json:"epoch,omitempty"`
	// Duplicate says the request resent a batch its idempotent producer had
	// written: nothing was appended, the offsets are the first copy's.
	Duplicate bool `json:"duplicate,omitempty"`
}

// handleProduce serves POST /v1/topics/{topic}/records. The partition's
// leader appends; any other agent forwards the batch to the leader over the
// peer API (docs/design.md §9) and relays its answer.
func (a *Agent) handleProduce(ctx *fasthttp.RequestCtx) {
	start := a.now()
	args := ctx.QueryArgs()
	acks, acksErr := parseAcks(args.Peek("acks"))
	// Every answer is observed, by acks and outcome, the refusals before
	// the acks were read included (they were not counted: an agent that
	// refused every produce as not serving, or for an unknown topic, showed
	// no produce errors). acksParam's names are the metric's acks label
	// values.
	acksLabel := metrics.AcksInvalid
	if acksErr == nil {
		acksLabel = acksParam(acks)
	}
	defer func() {
		a.metrics.ObserveProduce(acksLabel, metrics.OutcomeOf(ctx.Response.StatusCode()), a.now().Sub(start))
	}()
	if !a.serving(ctx) {
		return
	}
	topic, ok := a.topicParam(ctx)
	if !ok || refuseInternalTopic(ctx, topic, "written") {
		return
	}
	tm, ok := a.lookupTopic(topic)
	if !ok {
		reply.WriteAPIError(ctx, reply.UnknownTopic(topic))
		return
	}
	if acksErr != nil {
		writeErr(ctx, acksErr)
		return
	}
	timeout, err := durationParam(args, "timeout", defaultProduceTimeout, maxProduceTimeout)
	if err != nil {
		writeErr(ctx, err)
		return
	}
	ph, err := readProducerHeaders(&ctx.Request.Header)
	if err != nil {
		writeErr(ctx, err)
		return
	}
	key := args.Peek("key")
	if !args.Has("key") {
		key = nil
	}
	batch, count, firstKey, err := a.decodeProduceBody(ctx.Request.Header.ContentType(), ctx.PostBody(), key, key == nil && !args.Has("partition"))
	if err != nil {
		writeErr(ctx, err)
		return
	}
	if key == nil {
		key = firstKey
	}
	partition, err := a.choosePartition(args, key, len(tm.Partitions))
	if err != nil {
		writeErr(ctx, err)
		return
	}
	idempotent, err := applyProducerHeaders(batch, ph, args.Has("partition"), acks)
	if err != nil {
		writeErr(ctx, err)
		return
	}
	deadline := a.now().Add(timeout)
	var resp produceResponse
	var apiErr *reply.APIError
	// A combined batch has one producer header: idempotent producers'
	// batches are grouped apart and sent side by side.
	if a.coalesce != nil && acks != replicate.AcksNone && len(batch) < a.coalesce.maxBytes {
		resp, apiErr = a.coalesce.submit(groupKey{topic: topic, partition: partition, acks: acks, idempotent: idempotent}, batch, count, deadline)
	} else {
		resp, apiErr = a.produceBatch(topic, partition, batch, count, acks, deadline)
	}
	if apiErr != nil {
		reply.WriteAPIError(ctx, apiErr)
		return
	}
	a.metrics.Produced(topic, count, len(batch))
	reply.WriteJSON(ctx, fasthttp.StatusOK, resp)
}

// appendLocal hands a batch to this agent's leader loop and waits for its
// answer; acks=0 answers before the append (docs/design.md §7).
// epoch is the leadership the write aims at (anyEpoch for any).
func (a *Agent) appendLocal(r *partition.Replica, topic string, partition int, batch []byte, count int, acks replicate.Acks, epoch int32, timeout time.Duration) (produceResponse, *reply.APIError) {
	deadline := a.now().Add(timeout)
	resp := produceResponse{Topic: topic, Partition: partition, Count: count}
	if acks == replicate.AcksNone {
		// Answered before the append (docs/design.md §7): the loop's answer is
		// not awaited.
		if !r.ProduceAsync(batch, acks, epoch, deadline) {
			return resp, a.notLeaderError(topic, partition, "the replica stopped")
		}
		return resp, nil
	}
	out := r.Produce(batch, acks, epoch, deadline, timeout+produceGrace)
	if out.Err != nil {
		return resp, a.produceError(topic, partition, out)
	}
	resp.BaseOffset, resp.LastOffset, resp.Epoch, resp.Duplicate = &out.Base, &out.Last, &out.Epoch, out.Duplicate
	return resp, nil
}

// produceError maps a failed produce to the API's codes (docs/design.md §7, §8).
func (a *Agent) produceError(topic string, p int, out partition.ProduceOutcome) *reply.APIError {
	err := out.Err
	var pe *partition.ProducerError
	switch {
	case errors.As(err, &pe):
		return producerAPIError(pe)
	case errors.Is(err, replicate.ErrNotEnoughReplicas):
		return reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeNotEnoughReplicas, err.Error(), true)
	case errors.Is(err, replicate.ErrNotEnoughReplicasAfterAppend):
		return reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeNotEnoughReplicasAfterAppend,
			err.Error()+": the write is in the leader's log and may be committed; a retry may duplicate it", true)
	case errors.Is(err, replicate.ErrAckTimeout):
		return reply.NewAPIError(fasthttp.StatusGatewayTimeout, wire.CodeAckTimeout, err.Error()+": the outcome is unknown", false)
	case out.Appended && (errors.Is(err, replicate.ErrNotLeader) || errors.Is(err, partition.ErrReplicaStopped)):
		e := a.notLeaderError(topic, p, "leadership ended before the write was acknowledged: its outcome is unknown, a retry may duplicate it")
		e.Status, e.Code = fasthttp.StatusServiceUnavailable, wire.CodeNotLeaderAfterAppend
		return e
	case errors.Is(err, replicate.ErrNotLeader), errors.Is(err, partition.ErrNotLeaderHere), errors.Is(err, partition.ErrReplicaStopped):
		return a.notLeaderError(topic, p, "this agent does not lead "+reply.PartitionName(topic, p))
	case errors.Is(err, partition.ErrLeadershipMoving):
		// The successor is not elected yet: nothing to name.
		return reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeLeaderNotAvailable,
			"the leadership of "+reply.PartitionName(topic, p)+" is being handed over to another replica: nothing was written; retry in a moment", true)
	case errors.Is(err, replicate.ErrFencedLeaderEpoch):
		return reply.NewAPIError(fasthttp.StatusConflict, wire.CodeFencedLeaderEpoch, err.Error(), true)
	case errors.Is(err, replicate.ErrUnknownLeaderEpoch):
		return reply.NewAPIError(fasthttp.StatusPreconditionFailed, wire.CodeUnknownLeaderEpoch, err.Error(), true)
	case errors.Is(err, record.ErrCorrupt), errors.Is(err, record.ErrShort):
		return reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeCorruptBatch, err.Error(), false)
	case !out.Appended && errors.Is(err, segstore.ErrNoSpace):
		// Retriable: the write was refused whole, and space may be freed
		// (retention, an operator) without a restart.
		return reply.NewAPIError(fasthttp.StatusInsufficientStorage, wire.CodeInsufficientStorage,
			"the disk of "+reply.PartitionName(topic, p)+" on "+a.cfg.NodeID+" is full: "+err.Error(), true)
	case errors.Is(err, segstore.ErrFailed), errors.Is(err, segstore.ErrClosed):
		return reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeStorageError, err.Error(), true)
	case out.Appended:
		return reply.NewAPIError(fasthttp.StatusInternalServerError, wire.CodeInternal,
			err.Error()+": after the append: the outcome is unknown, a retry may duplicate it", false)
	default:
		return reply.NewAPIError(fasthttp.StatusInternalServerError, wire.CodeInternal, err.Error(), false)
	}
}

// refusedLocally says a local append's error means nothing was appended
// and the leadership is elsewhere or on its way: the sidecar tries again,
// forwarding to the new leader.
func refusedLocally(e *reply.APIError) bool {
	return e != nil && (e.Code == wire.CodeNotLeader || e.Code == wire.CodeLeaderNotAvailable)
}

// parseAcks reads acks: all (or -1, the default), 1 or 0.
func parseAcks(v []byte) (replicate.Acks, error) {
	switch string(v) {
	case "", "all", "-1":
		return replicate.AcksAll, nil
	case "1":
		return replicate.AcksLeader, nil
	case "0":
		return replicate.AcksNone, nil
	default:
		return 0, reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeInvalidRequest, "acks must be all, 1 or 0, not "+strconv.Quote(string(v)), false)
	}
}

// choosePartition picks the partition of a produce request: the partition
// parameter; else, with a key, FNV-1a (32 bit) of the key modulo the
// partition count, which is stable across agents and versions; else the
// next partition in turn.
func (a *Agent) choosePartition(args *fasthttp.Args, key []byte, partitions int) (int, error) {
	if args.Has("partition") {
		p, err := parsePartition(string(args.Peek("partition")))
		if err == nil {
			err = checkPartition("the topic", p, partitions)
		}
		return p, err
	}
	if key != nil {
		h := fnv.New32a()
		h.Write(key)
		return int(h.Sum32() % uint32(partitions)), nil
	}
	return int(a.roundRobin.Add(1) % uint64(partitions)), nil
}

// decodeProduceBody turns a produce body into one batch, validated, that
// the loop may stamp in place, its record count, and the key of its first
// record when the body names keys record by record (which places a
// request that names neither partition nor key). A binary batch is read
// again for its first key only when placeByKey says the request needs it.
//
//	application/vnd.logagent.batch  the body is one batch (docs/design.md §4)
//	application/json                {"records":[...]} (jsonProduceBody)
//	application/octet-stream        the body is one record's value
//	application/x-ndjson, text/plain one record value per line; empty lines
//	                                 are skipped
//
// The key parameter is the key of every record that names none.
func (a *Agent) decodeProduceBody(contentType, body, key []byte, placeByKey bool) ([]byte, int, []byte, error) {
	mt, _, err := mime.ParseMediaType(string(contentType))
	if err != nil && len(contentType) > 0 {
		return nil, 0, nil, reply.NewAPIError(fasthttp.StatusUnsupportedMediaType, wire.CodeUnsupportedType, "bad Content-Type: "+err.Error(), false)
	}
	switch mt {
	case wire.ContentTypeBatch:
		batch, count, err := a.decodeBatch(body)
		var firstKey []byte
		if err == nil && placeByKey {
			firstKey = a.firstKey(batch)
		}
		return batch, count, firstKey, err
	case wire.ContentTypeJSON:
		return a.buildJSON(body, key)
	case wire.ContentTypeOctetStream:
		batch, count, err := a.buildOne(body, key)
		return batch, count, key, err
	case wire.ContentTypeNDJSON, "text/plain":
		batch, count, err := a.buildLines(body, key)
		return batch, count, key, err
	default:
		return nil, 0, nil, reply.NewAPIError(fasthttp.StatusUnsupportedMediaType, wire.CodeUnsupportedType,
			fmt.Sprintf("Content-Type %q is not one of %s, %s, %s, %s, text/plain", mt, wire.ContentTypeBatch, wire.ContentTypeJSON, wire.ContentTypeOctetStream, wire.ContentTypeNDJSON), false)
	}
}

// firstKey is the key of a validated batch's first record, nil when it
// has none.
func (a *Agent) firstKey(batch []byte) []byte {
	d := a.decoders.Get().(*record.Decoder)
	defer a.decoders.Put(d)
	it, err := d.Records(batch)
	if err != nil || !it.Next() || it.Record().Key == nil {
		return nil
	}
	return bytes.Clone(it.Record().Key)
}

func (a *Agent) decodeBatch(body []byte) ([]byte, int, error) {
	d := a.decoders.Get().(*record.Decoder)
	defer a.decoders.Put(d)
	h, largest, err := d.ValidateTimestamps(body)
	if err == nil {
		err = h.CheckDense()
	}
	switch {
	case errors.Is(err, record.ErrTooLarge):
		return nil, 0, reply.NewAPIError(fasthttp.StatusRequestEntityTooLarge, wire.CodeRecordTooLarge, err.Error(), false)
	case errors.Is(err, record.ErrUnsupported):
		// A valid Kafka batch using what logagent does not implement.
		return nil, 0, reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeUnsupportedBatch, err.Error(), false)
	case err != nil:
		return nil, 0, reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeCorruptBatch, err.Error(), false)
	}
	// The loop stamps offsets and the epoch in place, after this request's
	// buffer may have been reused.
	batch := bytes.Clone(body)
	if h.MaxTimestamp() != largest {
		// A max_timestamp above every record would make the segment look
		// newer than it is: time retention would keep it, and a lookup by
		// time would land on it, for as long as the client claimed.
		record.SetMaxTimestamp(batch, largest)
	}
	return batch, int(h.RecordCount()), nil
}

func (a *Agent) buildLines(body, key []byte) ([]byte, int, error) {
	var b record.Builder
	ts := a.now().UnixMilli()
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) == 0 {
			continue
		}
		if err := a.addRecord(&b, ts, key, line, nil); err != nil {
			return nil, 0, err
		}
	}
	batch, err := a.finishBatch(&b)
	return batch, b.Len(), err
}
