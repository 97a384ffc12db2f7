package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/wire"
)

// Group commit for idempotent batches. Batches of different producers
// cannot be merged into one batch (a batch has one producer header), so the
// coalescer sends a group of them as they are: one loop event holding them
// all (appended in one loop turn, so that one replication round carries
// them, as it carries a merged batch), or one forward carrying them back to
// back, answered batch by batch:
//
//	POST /v1/replica/produce?topic=t&partition=0&acks=all&timeout_ms=..&leader_epoch=7&batches=3
//	<batch 1><batch 2><batch 3>                              ──►
//	                    ◄──  200 {"results":[{"response":{...produce answer...}},
//	                                         {"status":409,"error":{"code":"out_of_order_sequence",...}},
//	                                         {"response":{...,"duplicate":true}}]}
//
// Every batch is idempotent, so after an unknown outcome the batches
// without a final answer are sent again, as sendBatch does for one.

// maxGroupBatches bounds the batches of one forward.
const maxGroupBatches = 4096

// batchResult is one batch's answer in a group.
type batchResult struct {
	Response *produceResponse `json:"response,omitempty"`
	Status   int              `json:"status,omitempty"`
	Error    *reply.APIError  `json:"error,omitempty"`
}

type groupAnswer struct {
	Results []batchResult `json:"results"`
}

// produceGroup sends idempotent batches of one partition together and
// answers each. A single batch goes as produceBatch sends it.
func (a *Agent) produceIdempotentGroup(topic string, partition int, batches [][]byte, counts []int, acks replicate.Acks, deadline time.Time) ([]produceResponse, []*reply.APIError) {
	n := len(batches)
	resps, errs := make([]produceResponse, n), make([]*reply.APIError, n)
	unknown := make([]*reply.APIError, n)
	pending := make([]int, n)
	for i := range pending {
		pending[i] = i
	}
	for len(pending) > 0 {
		results := a.sendGroupOnce(topic, partition, batches, counts, pending, acks, a.attemptDeadline(deadline), deadline)
		var again []int
		remaining := deadline.Sub(a.now())
		for k, i := range pending {
			res := results[k]
			if res.err == nil {
				resps[i], errs[i] = res.resp, nil
				continue
			}
			refused := res.refused
			if unknownOutcome(res.err) {
				unknown[i], refused = res.err, true
				// A local loop that has not answered may still stamp its
				// copy in place; the resend gets its own.
				batches[i] = append([]byte(nil), batches[i]...)
			}
			// The batch's answer should it go no further; a retry's
			// outcome replaces it.
			errs[i] = res.err
			if unknown[i] != nil && !unknownOutcome(res.err) {
				errs[i] = unknown[i]
			}
			if remaining > 0 && (refused || (unknown[i] != nil && res.err.Retriable)) {
				again = append(again, i)
			}
		}
		pending = again
		if len(pending) == 0 {
			break
		}
		if !a.pauseBeforeRetry(remaining) {
			for _, i := range pending {
				errs[i] = unknown[i]
				if errs[i] == nil {
					errs[i] = reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeServiceUnavailable, "agent stopping", true)
				}
			}
			return resps, errs
		}
		if !a.now().Before(deadline) {
			// The pause used up the time: each batch keeps the answer of
			// its last attempt, which says why nothing was written, rather
			// than one more that could only say the timeout passed.
			return resps, errs
		}
	}
	return resps, errs
}

// sendResult is one batch's outcome of one attempt; refused says nothing
// of it was appended.
type sendResult struct {
	resp    produceResponse
	err     *reply.APIError
	refused bool
}

// sendGroupOnce makes one attempt for the batches at indexes pending.
func (a *Agent) sendGroupOnce(topic string, partition int, batches [][]byte, counts []int, pending []int, acks replicate.Acks, attempt, deadline time.Time) []sendResult {
	out := make([]sendResult, len(pending))
	if r := a.replicas.Get(topic, partition); r != nil && r.CurrentView().Role == roleLeader {
		sel, cnt := make([][]byte, len(pending)), make([]int, len(pending))
		for k, i := range pending {
			sel[k], cnt[k] = batches[i], counts[i]
		}
		resps, errs := a.appendLocalGroup(r, topic, partition, sel, cnt, acks, anyEpoch, deadline.Sub(a.now()))
		for k := range pending {
			out[k] = sendResult{resp: resps[k], err: errs[k], refused: refusedLocally(errs[k])}
		}
		return out
	}
	sel := make([][]byte, len(pending))
	for k, i := range pending {
		sel[k] = batches[i]
	}
	results, err := a.forwardGroupOnce(a.coord.Metadata(), topic, partition, sel, acks, attempt)
	if err != nil {
		var e *reply.APIError
		if !errors.As(err, &e) {
			e = reply.NewAPIError(fasthttp.StatusInternalServerError, wire.CodeInternal, err.Error(), false)
		}
		for k := range out {
			out[k] = sendResult{err: e, refused: errors.Is(err, errForwardRefused)}
		}
		return out
	}
	for k, res := range results {
		switch {
		case res.Response != nil:
			out[k] = sendResult{resp: *res.Response}
		case res.Error != nil:
			e := res.Error
			e.Status = res.Status
			switch e.Code {
			case wire.CodeNotLeader, wire.CodeFencedLeaderEpoch, wire.CodeUnknownLeaderEpoch, wire.CodeLeaderNotAvailable, wire.CodeServiceUnavailable:
				out[k] = sendResult{err: a.clientFacing(e, topic, partition), refused: true}
			default:
				out[k] = sendResult{err: e}
			}
		default:
			out[k] = sendResult{err: reply.NewAPIError(fasthttp.StatusBadGateway, wire.CodeInternal, "the leader's answer lacks batch "+strconv.Itoa(k)+": the outcome is unknown", false)}
		}
	}
	return out
}

// forwardGroupOnce forwards batches in one peer request; the error is for
// the request as a whole, as forwardOnce's.
func (a *Agent) forwardGroupOnce(snap *election.Snapshot, topic string, partition int, batches [][]byte, acks replicate.Acks, deadline time.Time) ([]batchResult, error) {
	body := make([]byte, 0, groupBytes(batches))
	for _, b := range batches {
		body = append(body, b...)
	}
	answer, err := a.forwardRaw(snap, topic, partition, body, len(batches), acks, deadline)
	if err != nil {
		return nil, err
	}
	var g groupAnswer
	if json.Unmarshal(answer, &g) != nil || len(g.Results) != len(batches) {
		return nil, reply.NewAPIError(fasthttp.StatusBadGateway, wire.CodeInternal,
			fmt.Sprintf("undecodable group answer from the leader: %q: the outcome is unknown", reply.Truncate(answer, 200)), false)
	}
	return g.Results, nil
}

func groupBytes(batches [][]byte) int {
	n := 0
	for _, b := range batches {
		n += len(b)
	}
	return n
}

// appendLocalGroup hands batches to this agent's leader loop in one event
// (appended in order in one loop turn) and waits for every answer.
func (a *Agent) appendLocalGroup(r *partition.Replica, topic string, partition int, batches [][]byte, counts []int, acks replicate.Acks, epoch int32, timeout time.Duration) ([]produceResponse, []*reply.APIError) {
	outs := r.ProduceGroup(batches, acks, epoch, a.now().Add(timeout), timeout+produceGrace)
	resps, errs := make([]produceResponse, len(batches)), make([]*reply.APIError, len(batches))
	for i, out := range outs {
		resps[i] = produceResponse{Topic: topic, Partition: partition, Count: counts[i]}
		if out.Err != nil {
			errs[i] = a.produceError(topic, partition, out)
			continue
		}
		base, last, ep := out.Base, out.Last, out.Epoch
		resps[i].BaseOffset, resps[i].LastOffset, resps[i].Epoch, resps[i].Duplicate = &base, &last, &ep, out.Duplicate
	}
	return resps, errs
}

// handleReplicaProduceGroup serves a forward of several batches
// (batches=N above), after handleReplicaProduce read its parameters.
func (a *Agent) handleReplicaProduceGroup(ctx *fasthttp.RequestCtx, r *partition.Replica, topic string, partition, n int, acks replicate.Acks, epoch int32, timeout time.Duration) {
	raw, err := record.SplitBatches(ctx.PostBody(), a.recordLimits.MaxBatchBytes)
	if err == nil && len(raw) != n {
		err = fmt.Errorf("agent: the body holds %d batches, batches=%d", len(raw), n)
	}
	if err != nil {
		reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeCorruptBatch, err.Error(), false)
		return
	}
	answer := groupAnswer{Results: make([]batchResult, n)}
	batches, counts, valid := make([][]byte, 0, n), make([]int, 0, n), make([]int, 0, n)
	for i, b := range raw {
		batch, count, err := a.decodeBatch(b)
		if err != nil {
			e := &reply.APIError{Code: wire.CodeCorruptBatch, Message: err.Error(), Status: fasthttp.StatusBadRequest}
			errors.As(err, &e)
			answer.Results[i] = batchResult{Status: e.Status, Error: e}
			continue
		}
		batches, counts, valid = append(batches, batch), append(counts, count), append(valid, i)
	}
	resps, errs := a.appendLocalGroup(r, topic, partition, batches, counts, acks, epoch, timeout)
	for k, i := range valid {
		if errs[k] != nil {
			answer.Results[i] = batchResult{Status: errs[k].Status, Error: errs[k]}
			continue
		}
		answer.Results[i] = batchResult{Response: &resps[k]}
	}
	reply.WriteJSON(ctx, fasthttp.StatusOK, answer)
}
