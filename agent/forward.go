package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/replicate"

	"github.com/logagent/logagent/wire"
)

// A produce for a partition another agent leads is forwarded to that
// agent's peer API as one binary batch; the answer is the leader's own
// produce answer, relayed unchanged:
//
//	sidecar                                              leader
//	POST /v1/replica/produce?topic=t&partition=0
//	     &acks=all&timeout_ms=4980&leader_epoch=7
//	Content-Type: application/vnd.logagent.batch
//	<one batch, validated by the sidecar>                ──►
//	                                     ◄──  200 {"topic":"t","partition":0,"base_offset":42,
//	                                               "last_offset":51,"count":10,"epoch":7}
//	                                     ◄──  409 not_leader | fenced_leader_epoch,
//	                                          412 unknown_leader_epoch,
//	                                          503 leader_not_available  (nothing appended:
//	                                              the sidecar refreshes metadata and retries)
//	                                     ◄──  any other error: relayed to the client
//
// leader_epoch is the epoch of the leadership the sidecar aims at
// (forwardTarget: its metadata's, or one its replica follows ahead of it);
// the leader refuses a different one, so a write never lands in a
// leadership the sidecar did not aim at. The request is a POST because fasthttp
// retries requests it deems idempotent (PUT among them), and a forwarded
// write whose outcome is unknown must not be sent twice.
const (
	peerProducePath = "/v1/replica/produce"
	// forwardRetryPause is the most a forward waits for newer metadata
	// before it tries again after a refusal that appended nothing.
	forwardRetryPause = 50 * time.Millisecond
)

// newForwarder returns the clients of forwarded produces (sendForward
// sends them).
func newForwarder(token []byte, tlsFor peer.TLSConfig) *peer.Clients {
	return peer.NewClients(string(token), 64<<10, false, tlsFor)
}

// idempotentForward says a forward's batches carry a producer id: a group
// forward holds idempotent batches only, so the first one tells.
func idempotentForward(req *fasthttp.Request) bool {
	body := req.Body()
	return len(body) >= record.HeaderSize && record.Header(body).ProducerID() >= 0
}

// errForwardRefused is a forward the leader refused before appending, or
// one that never reached it: retrying cannot duplicate the write.
var errForwardRefused = errors.New("agent: forward refused before append")

// forwardOnce makes one attempt. An error wrapping errForwardRefused may be
// retried; any other is final.
func (a *Agent) forwardOnce(snap *election.Snapshot, topic string, partition int, batch []byte, acks replicate.Acks, deadline time.Time) (produceResponse, error) {
	body, err := a.forwardRaw(snap, topic, partition, batch, 1, acks, deadline)
	if err != nil {
		return produceResponse{}, err
	}
	var answer produceResponse
	if err := json.Unmarshal(body, &answer); err != nil {
		return produceResponse{}, reply.NewAPIError(fasthttp.StatusBadGateway, wire.CodeInternal,
			"undecodable answer from the leader: "+err.Error()+": the outcome is unknown", false)
	}
	return answer, nil
}

// forwardRaw sends batches (n of them, back to back) to the partition's
// leader and returns the body of its 200 answer. An error wrapping
// errForwardRefused says nothing was appended; any other is final for a
// plain batch.
func (a *Agent) forwardRaw(snap *election.Snapshot, topic string, partition int, body []byte, n int, acks replicate.Acks, deadline time.Time) ([]byte, error) {
	pm, ok := snap.Partition(topic, partition)
	if !ok {
		return nil, reply.UnknownTopic(topic)
	}
	leader, epoch := a.forwardTarget(pm)
	if leader == "" {
		return nil, fmt.Errorf("%w: %w", errForwardRefused,
			reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeLeaderNotAvailable, a.noLeaderMessage(topic, partition), true))
	}
	if leader == a.cfg.NodeID {
		// The metadata names this agent but its loop does not lead yet
		// (or any more): wait for the two to agree.
		return nil, fmt.Errorf("%w: %w", errForwardRefused,
			reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeLeaderNotAvailable, "this agent is taking or leaving the lead of "+reply.PartitionName(topic, partition), true))
	}
	info, ok := a.agents.lookup(leader)
	if !ok {
		return nil, fmt.Errorf("%w: %w", errForwardRefused,
			reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeLeaderNotAvailable, "leader "+leader+" is not among the registered agents", true))
	}
	timeout := deadline.Sub(a.now())
	if timeout <= 0 {
		// Nothing left the sidecar: not an unknown outcome (ack_timeout),
		// which dropped the lane and told the client its write might be in.
		return nil, fmt.Errorf("%w: %w", errForwardRefused,
			reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeTimeoutBeforeWrite,
				"the request's timeout passed before the write was forwarded to leader "+leader+": nothing was written", true))
	}
	req := a.forwarder.NewRequest(info.PeerAddr, peerProducePath)
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType(wire.ContentTypeBatch)
	args := req.URI().QueryArgs()
	args.Set("topic", topic)
	args.SetUint("partition", partition)
	args.Set("acks", acksParam(acks))
	args.Set("timeout_ms", strconv.FormatInt(max(timeout.Milliseconds(), 1), 10))
	args.Set("leader_epoch", strconv.FormatInt(int64(epoch), 10))
	if n > 1 {
		args.SetUint("batches", n)
	}
	req.SetBodyRaw(body)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	// The leader answers ack_timeout itself at the deadline; the margin
	// lets its answer arrive.
	if unsent, err := sendForward(a.forwarder.Client(info.PeerAddr), req, resp, deadline.Add(produceGrace), a.now); err != nil {
		if unsent {
			return nil, fmt.Errorf("%w: %w", errForwardRefused,
				reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeLeaderNotAvailable, "leader "+leader+" unreachable: "+err.Error(), true))
		}
		return nil, reply.NewAPIError(fasthttp.StatusGatewayTimeout, wire.CodeAckTimeout,
			"forwarding to leader "+leader+" failed after sending: "+err.Error()+": the outcome is unknown", false)
	}
	if resp.StatusCode() == fasthttp.StatusOK {
		return append([]byte(nil), resp.Body()...), nil
	}
	e := reply.RelayedError(resp)
	switch e.Code {
	case wire.CodeNotLeader, wire.CodeFencedLeaderEpoch, wire.CodeUnknownLeaderEpoch, wire.CodeLeaderNotAvailable,
		wire.CodeServiceUnavailable: // the leader's agent is starting or stopping
		return nil, fmt.Errorf("%w: %w", errForwardRefused, a.clientFacing(e, topic, partition))
	}
	return nil, e
}

// clientFacing turns the peer-only refusals a retry could not cure in time
// into the client API's: the client sees not_leader naming the leader
// (whose address it may use) or leader_not_available.
func (a *Agent) clientFacing(e *reply.APIError, topic string, partition int) *reply.APIError {
	switch e.Code {
	case wire.CodeFencedLeaderEpoch, wire.CodeUnknownLeaderEpoch, wire.CodeNotLeader:
		return a.notLeaderError(topic, partition, "leader changed while forwarding: "+e.Message)
	case wire.CodeServiceUnavailable:
		return reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeLeaderNotAvailable, "the leader's agent is not serving: "+e.Message, true)
	}
	return e
}

// forwardTarget is the leader a forward of pm's partition goes to and the
// epoch it aims at, leader "" when there is none: the metadata's, or the
// leader this agent's replica of the partition follows when that one
// announced a newer epoch over its fetch session (docs/design.md §7.9).
// After a failover at 10,000 partitions the metadata watch delivered the
// new leaderships 6-11 s after the kill, seconds after the replicas had
// followed the announcements, and every forward meanwhile was refused "no
// leader". The announced leader needs no more trust than the metadata's:
// the forward carries the epoch, and a leader appends only in the
// leadership of that epoch.
func (a *Agent) forwardTarget(pm election.PartitionMeta) (leader string, epoch int32) {
	var v *partition.View
	if r := a.replicas.Get(pm.Topic, pm.Partition); r != nil {
		v = r.CurrentView()
	}
	return forwardTargetOf(pm, v)
}

// forwardTargetOf is forwardTarget's rule, given the replica's view (nil
// without a replica here).
func forwardTargetOf(pm election.PartitionMeta, v *partition.View) (leader string, epoch int32) {
	if v != nil && v.Role == roleFollower && v.Leader != "" && v.Epoch > pm.State.Epoch {
		return v.Leader, v.Epoch
	}
	if pm.LeaderSession == "" {
		return "", 0
	}
	return pm.State.Leader, pm.State.Epoch
}

// sendForward sends a forward to the leader until the time until. One that
// went out on a connection the leader closed before any byte of an answer
// (a pooled connection the leader closed as it restarted, as in a rolling
// restart; or the leader read it and died) is sent again at once, on a new
// connection, when its batches are idempotent: the leader answers a
// duplicate if it did append them. unsent says, when err is not nil, that
// no byte of the request can have reached the leader: only then is nothing
// appended. After a resend it is always false, whatever ended the resend
// (a refused dial as the leader is gone): the first send may have been
// read and appended, and a sidecar that took it as refused would give the
// batch's producer sequence to another batch, which the leader would then
// answer as a duplicate of the first, unwritten.
func sendForward(c *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response, until time.Time, now func() time.Time) (unsent bool, err error) {
	err = c.DoTimeout(req, resp, until.Sub(now()))
	switch {
	case err == nil:
		return false, nil
	case neverSent(err):
		return true, err
	}
	left := until.Sub(now())
	if !closedUnder(err) || !idempotentForward(req) || left <= 0 {
		return false, err
	}
	// The peer's other idle connections most likely closed with this one.
	c.CloseIdleConnections()
	return false, c.DoTimeout(req, resp, left)
}

// neverSent says whether a forward failed before any byte of it could
// reach the leader: only then is a retry safe without idempotence.
func neverSent(err error) bool {
	var op *net.OpError
	switch {
	case errors.Is(err, fasthttp.ErrDialTimeout), errors.Is(err, fasthttp.ErrNoFreeConns),
		errors.Is(err, syscall.ECONNREFUSED):
		return true
	case errors.As(err, &op):
		return op.Op == "dial"
	}
	return false
}

// closedUnder says a forward failed because the leader closed its
// connection before any byte of an answer: fasthttp reports that as
// ErrConnectionClosed (io.EOF inside), and a write to a connection the
// leader had reset as EPIPE or ECONNRESET. The leader may have read the
// request before it closed.
func closedUnder(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, fasthttp.ErrConnectionClosed) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

func acksParam(acks replicate.Acks) string {
	switch acks {
	case replicate.AcksLeader:
		return "1"
	case replicate.AcksNone:
		return "0"
	default:
		return "all"
	}
}

// handleReplicaProduce serves a produce forwarded by another agent's
// sidecar (the diagram above).
func (a *Agent) handleReplicaProduce(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	topic := string(args.Peek("topic"))
	partition, err := intParam(args, "partition", -1, 0, 1<<31-1)
	if err == nil && partition < 0 {
		err = reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeInvalidRequest, "partition is required", false)
	}
	var acks replicate.Acks
	if err == nil {
		acks, err = parseAcks(args.Peek("acks"))
	}
	var timeoutMS, epoch int64
	if err == nil {
		timeoutMS, err = intParam(args, "timeout_ms", defaultProduceTimeout.Milliseconds(), 1, maxProduceTimeout.Milliseconds())
	}
	if err == nil {
		epoch, err = intParam(args, "leader_epoch", -1, 0, 1<<31-1)
	}
	if err == nil && epoch < 0 {
		// Unfenced, an append could land in a leadership the sidecar did
		// not aim at.
		err = reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeInvalidRequest, "leader_epoch is required", false)
	}
	var batches int64
	if err == nil {
		batches, err = intParam(args, "batches", 1, 1, maxGroupBatches)
	}
	if err != nil {
		writeErr(ctx, err)
		return
	}
	r := a.peerReplica(ctx, topic, int(partition))
	if r == nil {
		return
	}
	// A cheap refusal before decoding; the loop checks role and epoch again
	// when it appends.
	if r.CurrentView().Role != roleLeader {
		reply.WriteAPIError(ctx, reply.NewAPIError(fasthttp.StatusConflict, wire.CodeNotLeader, "this agent does not lead "+reply.PartitionName(topic, int(partition)), true))
		return
	}
	if batches > 1 {
		a.handleReplicaProduceGroup(ctx, r, topic, int(partition), int(batches), acks, int32(epoch), time.Duration(timeoutMS)*time.Millisecond)
		return
	}
	batch, count, err := a.decodeBatch(ctx.PostBody())
	if err != nil {
		writeErr(ctx, err)
		return
	}
	resp, apiErr := a.appendLocal(r, topic, int(partition), batch, count, acks, int32(epoch), time.Duration(timeoutMS)*time.Millisecond)
	if apiErr != nil {
		reply.WriteAPIError(ctx, apiErr)
		return
	}
	reply.WriteJSON(ctx, fasthttp.StatusOK, resp)
}

// fetchLeader is the agent a consumer fetch this agent cannot serve is
// passed on to: forwardTarget's leader, as for a produce (after a failover
// the metadata names the new leader seconds after this agent's replica
// follows it). ok is false when there is no other agent to ask.
func (a *Agent) fetchLeader(topic string, partition int) (leader string, info election.AgentInfo, ok bool) {
	pm, ok := a.coord.Metadata().Partition(topic, partition)
	if !ok {
		return "", election.AgentInfo{}, false
	}
	leader, _ = a.forwardTarget(pm)
	if leader == "" || leader == a.cfg.NodeID {
		return "", election.AgentInfo{}, false
	}
	info, ok = a.agents.lookup(leader)
	if !ok || info.ClientAddr == "" {
		return "", election.AgentInfo{}, false
	}
	return leader, info, true
}

// proxyFetch serves a consumer fetch this agent cannot serve from a
// replica in the ISR: the same request goes to the leader's client API and
// the leader's answer streams back, status, positions and body, unchanged.
// It answers false, having written nothing, when there is no leader to ask.
// The leader asked is fetchLeader's.
// wait and maxBytes are the fetch's own parameters, already read by
// handleFetch. A maxBytes above proxiedFetchMaxBytes is lowered to it in
// the request sent on, so that the leader's answer fits the proxy's bound:
// it was sent on unchanged, and a consumer whose max_bytes the leader's
// log could fill past the bound (a max_bytes above 16 MiB, which the local
// path serves) got 502 at that offset every time it asked.
func (a *Agent) proxyFetch(ctx *fasthttp.RequestCtx, topic string, partition int, wait time.Duration, maxBytes int64) bool {
	if len(ctx.Request.Header.Peek(wire.HeaderProxied)) > 0 {
		return false
	}
	leader, info, ok := a.fetchLeader(topic, partition)
	if !ok {
		return false
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	ctx.Request.Header.CopyTo(&req.Header)
	req.Header.Del(fasthttp.HeaderConnection)
	req.Header.Set(wire.HeaderProxied, a.cfg.NodeID)
	uri := ctx.Request.URI()
	if most := proxiedFetchMaxBytes(a.cfg); maxBytes > most {
		uri = fasthttp.AcquireURI()
		defer fasthttp.ReleaseURI(uri)
		ctx.Request.URI().CopyTo(uri)
		uri.QueryArgs().Set("max_bytes", strconv.FormatInt(most, 10))
	}
	a.fetchProxy.Address(req, info.ClientAddr, string(uri.RequestURI()))
	resp := fasthttp.AcquireResponse()
	if err := a.fetchProxy.Client(info.ClientAddr).DoTimeout(req, resp, wait+peerCallTimeout); err != nil {
		fasthttp.ReleaseResponse(resp)
		reply.WriteAPIError(ctx, reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeLeaderNotAvailable,
			"leader "+leader+" unreachable: "+err.Error(), true))
		return true
	}
	ctx.SetStatusCode(resp.StatusCode())
	for _, h := range []string{fasthttp.HeaderContentType, wire.HeaderHighWatermark, wire.HeaderLogStartOffset,
		wire.HeaderDivergingEpoch, wire.HeaderDivergingEndOffset, "Retry-After"} {
		if v := resp.Header.Peek(h); len(v) > 0 {
			ctx.Response.Header.SetBytesV(h, v)
		}
	}
	size := resp.Header.ContentLength()
	if size <= 0 || size > a.fetchProxy.MaxBodySize() {
		// Nothing, or an answer over the bound: the body is not read.
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
		if size > a.fetchProxy.MaxBodySize() {
			reply.WriteError(ctx, fasthttp.StatusBadGateway, wire.CodeInternal, "the leader's answer is over the proxy's bound", true)
		}
		return true
	}
	ctx.SetBodyStream(&proxiedBody{resp: resp, body: resp.BodyStream()}, size)
	return true
}

// proxiedBody streams a leader's answer to the consumer and returns the
// response to fasthttp's pool once sent.
type proxiedBody struct {
	resp *fasthttp.Response
	body io.Reader
}

func (p *proxiedBody) Read(b []byte) (int, error) { return p.body.Read(b) }

func (p *proxiedBody) Close() error {
	err := p.resp.CloseBodyStream()
	fasthttp.ReleaseResponse(p.resp)
	return err
}
