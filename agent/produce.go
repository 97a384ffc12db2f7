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

	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"
)

// Bounds of a produce request.
const (
	defaultProduceTimeout = 5 * time.Second
	maxProduceTimeout     = 30 * time.Second
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
}

// handleProduce serves POST /v1/topics/{topic}/records. Only the partition's
// leader appends; another agent answers not_leader with the leader's client
// address.
func (a *Agent) handleProduce(ctx *fasthttp.RequestCtx) {
	if !a.serving(ctx) {
		return
	}
	topic := pathParam(ctx, "topic")
	tm, ok := a.coord.Metadata().Topic(topic)
	if !ok {
		writeAPIError(ctx, unknownTopic(topic))
		return
	}
	args := ctx.QueryArgs()
	acks, err := parseAcks(args.Peek("acks"))
	if err != nil {
		writeErr(ctx, err)
		return
	}
	timeout, err := durationParam(args, "timeout", defaultProduceTimeout, maxProduceTimeout)
	if err != nil {
		writeErr(ctx, err)
		return
	}
	key := args.Peek("key")
	if !args.Has("key") {
		key = nil
	}
	partition, err := a.choosePartition(args, key, len(tm.Partitions))
	if err != nil {
		writeErr(ctx, err)
		return
	}
	batch, count, err := a.decodeProduceBody(ctx.Request.Header.ContentType(), ctx.PostBody(), key)
	if err != nil {
		writeErr(ctx, err)
		return
	}
	r := a.replicas.get(topic, partition)
	if r == nil || r.currentView().role != roleLeader {
		writeAPIError(ctx, a.notLeaderError(topic, partition, "this agent does not lead "+partitionName(topic, partition)))
		return
	}
	req := &produceRequest{batch: batch, acks: acks, deadline: a.now().Add(timeout)}
	resp := produceResponse{Topic: topic, Partition: partition, Count: count}
	if acks == replicate.AcksNone {
		// Answered before the append (DESIGN §7): the loop's answer is
		// not awaited.
		req.reply = make(chan produceOutcome, 1)
		if !r.send(req) {
			writeAPIError(ctx, a.notLeaderError(topic, partition, "the replica stopped"))
			return
		}
		writeJSON(ctx, fasthttp.StatusOK, resp)
		return
	}
	out := r.produce(req, timeout+produceGrace)
	if out.err != nil {
		writeAPIError(ctx, a.produceError(topic, partition, out))
		return
	}
	resp.BaseOffset, resp.LastOffset, resp.Epoch = &out.base, &out.last, &out.epoch
	writeJSON(ctx, fasthttp.StatusOK, resp)
}

// produceError maps a failed produce to the API's codes (DESIGN §7, §8).
func (a *Agent) produceError(topic string, partition int, out produceOutcome) *apiError {
	err := out.err
	switch {
	case errors.Is(err, replicate.ErrNotEnoughReplicas):
		return newAPIError(fasthttp.StatusServiceUnavailable, codeNotEnoughReplicas, err.Error(), true)
	case errors.Is(err, replicate.ErrNotEnoughReplicasAfterAppend):
		return newAPIError(fasthttp.StatusServiceUnavailable, codeNotEnoughReplicasAfterAppend,
			err.Error()+": the write is in the leader's log and may be committed; a retry may duplicate it", true)
	case errors.Is(err, replicate.ErrAckTimeout):
		return newAPIError(fasthttp.StatusGatewayTimeout, codeAckTimeout, err.Error()+": the outcome is unknown", false)
	case out.appended && (errors.Is(err, replicate.ErrNotLeader) || errors.Is(err, errReplicaStopped)):
		e := a.notLeaderError(topic, partition, "leadership ended before the write was acknowledged: its outcome is unknown, a retry may duplicate it")
		e.status, e.Code = fasthttp.StatusServiceUnavailable, codeNotLeaderAfterAppend
		return e
	case errors.Is(err, replicate.ErrNotLeader), errors.Is(err, errNotLeaderHere), errors.Is(err, errReplicaStopped):
		return a.notLeaderError(topic, partition, "this agent does not lead "+partitionName(topic, partition))
	case errors.Is(err, record.ErrCorrupt), errors.Is(err, record.ErrShort):
		return newAPIError(fasthttp.StatusBadRequest, codeCorruptBatch, err.Error(), false)
	case errors.Is(err, segstore.ErrFailed), errors.Is(err, segstore.ErrClosed):
		return newAPIError(fasthttp.StatusServiceUnavailable, codeStorageError, err.Error(), true)
	default:
		return newAPIError(fasthttp.StatusInternalServerError, codeInternal, err.Error(), false)
	}
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
		return 0, newAPIError(fasthttp.StatusBadRequest, codeInvalidRequest, "acks must be all, 1 or 0, not "+strconv.Quote(string(v)), false)
	}
}

// choosePartition picks the partition of a produce request: the partition
// parameter; else, with a key, FNV-1a (32 bit) of the key modulo the
// partition count, which is stable across agents and versions; else the
// next partition in turn.
func (a *Agent) choosePartition(args *fasthttp.Args, key []byte, partitions int) (int, error) {
	if args.Has("partition") {
		p, err := intParam(args, "partition", 0, 0, int64(partitions)-1)
		if err != nil {
			return 0, newAPIError(fasthttp.StatusNotFound, codeUnknownPartition, err.Error(), false)
		}
		return int(p), nil
	}
	if key != nil {
		h := fnv.New32a()
		h.Write(key)
		return int(h.Sum32() % uint32(partitions)), nil
	}
	return int(a.roundRobin.Add(1) % uint64(partitions)), nil
}

// decodeProduceBody turns a produce body into one batch, validated, that
// the loop may stamp in place, and its record count.
//
//	application/vnd.logagent.batch  the body is one batch (DESIGN §4)
//	application/x-ndjson, text/plain one record value per line; empty lines
//	                                 are skipped; every record gets the key
//	                                 parameter as key
func (a *Agent) decodeProduceBody(contentType, body, key []byte) ([]byte, int, error) {
	mt, _, err := mime.ParseMediaType(string(contentType))
	if err != nil && len(contentType) > 0 {
		return nil, 0, newAPIError(fasthttp.StatusUnsupportedMediaType, codeUnsupportedType, "bad Content-Type: "+err.Error(), false)
	}
	switch mt {
	case contentTypeBatch:
		return a.decodeBatch(body)
	case contentTypeNDJSON, "text/plain":
		return a.buildLines(body, key)
	default:
		return nil, 0, newAPIError(fasthttp.StatusUnsupportedMediaType, codeUnsupportedType,
			fmt.Sprintf("Content-Type %q is not one of %s, %s, text/plain", mt, contentTypeBatch, contentTypeNDJSON), false)
	}
}

func (a *Agent) decodeBatch(body []byte) ([]byte, int, error) {
	d := a.decoders.Get().(*record.Decoder)
	defer a.decoders.Put(d)
	h, err := d.Validate(body)
	switch {
	case errors.Is(err, record.ErrTooLarge):
		return nil, 0, newAPIError(fasthttp.StatusRequestEntityTooLarge, codeRecordTooLarge, err.Error(), false)
	case err != nil:
		return nil, 0, newAPIError(fasthttp.StatusBadRequest, codeCorruptBatch, err.Error(), false)
	case h.ProducerID() != -1:
		return nil, 0, newAPIError(fasthttp.StatusBadRequest, codeInvalidRequest, "idempotent batches (producer_id set) are not accepted by this version", false)
	}
	// The loop stamps offsets and the epoch in place, after this request's
	// buffer may have been reused.
	return bytes.Clone(body), int(h.RecordCount()), nil
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
		if limit := a.recordLimits.MaxRecordBytes; len(line) > limit {
			return nil, 0, newAPIError(fasthttp.StatusRequestEntityTooLarge, codeRecordTooLarge,
				fmt.Sprintf("a value of %d bytes is over limits.max_record_bytes (%d)", len(line), limit), false)
		}
		if err := b.Add(ts, key, line, nil); err != nil {
			return nil, 0, newAPIError(fasthttp.StatusRequestEntityTooLarge, codeRequestTooLarge, err.Error(), false)
		}
	}
	if b.Len() == 0 {
		return nil, 0, newAPIError(fasthttp.StatusBadRequest, codeInvalidRequest, "the body holds no records", false)
	}
	batch, err := b.AppendTo(nil)
	if err != nil {
		return nil, 0, newAPIError(fasthttp.StatusRequestEntityTooLarge, codeRequestTooLarge, err.Error(), false)
	}
	return batch, b.Len(), nil
}
