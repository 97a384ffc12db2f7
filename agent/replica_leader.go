package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/producer"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"
)

// isrProposalTimeout bounds one guarded ISR transaction.
const isrProposalTimeout = 10 * time.Second

// becomeLeader starts leading at l's epoch: the epoch starts at the log end
// in the log's epoch cache, then the leader state machine takes over from
// the log's positions.
func (r *replica) becomeLeader(l *election.Leadership) {
	r.stopFollowing()
	log := r.currentLog()
	leo := log.LogEndOffset()
	fail := func(err error) {
		r.log.Error("cannot lead", "epoch", l.Epoch(), "error", err)
		r.resignAsync(l)
		// Campaign would hand the same leadership back until the
		// resignation has gone through.
		r.campaignRetryAt = r.deps.now().Add(campaignBackoff)
		if errors.Is(err, segstore.ErrFailed) || errors.Is(err, replicate.ErrInconsistentLog) {
			r.failLog(err)
		}
	}
	if err := log.AssignEpoch(l.Epoch(), leo); err != nil {
		fail(fmt.Errorf("assign epoch: %w", err))
		return
	}
	st := l.State()
	leader, err := replicate.NewLeader(replicate.LeaderConfig{
		Self:              r.deps.self,
		Epoch:             l.Epoch(),
		EpochStartOffset:  leo,
		Replicas:          r.meta.pm.Replicas,
		ISR:               st.ISR,
		ELR:               replicateELR(st.ELR),
		MinInsyncReplicas: r.meta.tc.MinInsyncReplicas,
		LagTimeMax:        r.deps.cfg.Replication.LagTimeMax,
		Durability:        r.deps.durability,
		LogEndOffset:      leo,
		SyncedEndOffset:   min(log.SyncedOffset(), leo),
		HighWatermark:     min(log.HighWatermark(), leo),
		EpochCache:        epochCache{log: log},
	}, r.deps.now())
	if err != nil {
		fail(err)
		return
	}
	r.gen++
	r.role, r.leader, r.leadership, r.leaderISR = roleLeader, leader, l, leader.ISR()
	r.leaderTicker = time.NewTicker(leaderTick)
	r.isrRetry = nil
	r.log.Info("leading", "epoch", l.Epoch(), "log_end_offset", leo, "high_watermark", leader.HighWatermark(), "isr", st.ISR)
	if r.deps.durability == replicate.DurabilityFsync {
		r.requestSync()
	}
	r.publish()
	// Members Consul already reports dead (a failover after a crash) leave
	// the ISR now, not lag_time_max from now.
	r.applyLiveness()
}

// stepDown ends this replica's leadership: every pending write fails with
// not_leader at once. release also gives the lock back in Consul, for a
// leader that steps down on its own.
func (r *replica) stepDown(cause error, release bool) {
	if r.role != roleLeader {
		return
	}
	r.log.Info("stopped leading", "epoch", r.leader.Epoch(), "cause", cause)
	r.leader.Resign()
	r.processLeaderReady()
	if release {
		r.resignAsync(r.leadership)
	}
	r.leaderTicker.Stop()
	r.gen++
	r.role, r.leader, r.leadership, r.leaderTicker, r.leaderISR = roleNone, nil, nil, nil, nil
	r.isrRetry = nil
	r.stopLiveness()
	r.following = followTarget{}
	r.publish()
}

// processLeaderReady carries out the leader's output: the new high
// watermark goes to the log (so readers see it) before any ack is answered.
func (r *replica) processLeaderReady() {
	if r.leader == nil || !r.leader.HasReady() {
		return
	}
	rd := r.leader.Ready()
	if rd.HighWatermarkChanged {
		if err := r.currentLog().SetHighWatermark(rd.HighWatermark); err != nil {
			r.log.Warn("cannot set the high watermark", "high_watermark", rd.HighWatermark, "error", err)
		}
		r.changed.notify()
	}
	if rd.ISRProposal != nil {
		r.propose(*rd.ISRProposal)
	}
	for _, a := range rd.Acks {
		p, ok := r.acks[a.ID]
		if !ok {
			continue
		}
		delete(r.acks, a.ID)
		p.reply <- produceOutcome{base: p.base, last: p.last, epoch: p.epoch, appended: true, duplicate: p.duplicate, err: a.Err}
	}
}

// propose writes an ISR change with the guarded transaction, off the loop.
func (r *replica) propose(p replicate.ISRProposal) {
	gen := r.gen
	r.tasks.Go(func() {
		ctx, cancel := context.WithTimeout(r.ctx, isrProposalTimeout)
		defer cancel()
		err := r.deps.coord.ProposeISR(ctx, r.topic, r.partition, p.Epoch, p.ISR, electionELR(p.ELR))
		r.send(isrResult{gen: gen, proposal: p, err: err})
	})
}

type isrResult struct {
	gen      uint64
	proposal replicate.ISRProposal
	err      error
}

// onISRResult feeds an ISR transaction's outcome back: committed; not
// leader any more (step down); a refusal because the state moved, which
// takes Consul's ISR as the committed one (or steps down if the epoch
// moved); a refusal before any write (no permission, invalid), which ends
// the proposal. An unknown outcome (Consul unreachable, a timeout) is
// retried with the same proposal still in flight, so a follower being added
// keeps counting for the high watermark until Consul says whether it is in
// the ISR.
func (r *replica) onISRResult(ev isrResult) {
	if ev.gen != r.gen || r.leader == nil {
		return
	}
	var err error
	switch {
	case ev.err == nil:
		err = r.leader.ISRCommitted(ev.proposal.ISR, ev.proposal.ELR, r.deps.now())
		r.log.Info("isr changed", "epoch", ev.proposal.Epoch, "isr", ev.proposal.ISR)
	case errors.Is(ev.err, election.ErrNotLeader):
		r.stepDown(ev.err, false)
		return
	case errors.Is(ev.err, election.ErrConflict):
		st := r.leadership.State()
		if st.Epoch != r.leader.Epoch() {
			r.stepDown(ev.err, false)
			return
		}
		err = r.leader.ISRCommitted(st.ISR, replicateELR(st.ELR), r.deps.now())
	case errors.Is(ev.err, context.Canceled):
		return
	case errors.Is(ev.err, election.ErrPermissionDenied), errors.Is(ev.err, election.ErrInvalidTopic):
		// Refused before anything was written: the proposal is over.
		r.log.Error("isr change refused", "isr", ev.proposal.ISR, "error", ev.err)
		err = r.leader.ISRProposalFailed()
	default:
		r.log.Warn("isr change not confirmed; retrying", "isr", ev.proposal.ISR, "error", ev.err)
		r.isrRetry = &ev.proposal
		r.isrRetryAt = r.deps.now().Add(isrRetryBackoff)
		return
	}
	if err != nil {
		r.log.Error("isr change refused by the leader state", "error", err)
	}
	r.leaderISR = r.leader.ISR()
	r.processLeaderReady()
}

// replicateELR and electionELR carry the eligible leader replicas between
// Consul's state and the leader state machine, which do not import each
// other.
func replicateELR(elr []election.EligibleReplica) []replicate.EligibleReplica {
	out := make([]replicate.EligibleReplica, 0, len(elr))
	for _, e := range elr {
		out = append(out, replicate.EligibleReplica{ID: e.Node, LogEndOffset: e.LogEndOffset})
	}
	return out
}

func electionELR(elr []replicate.EligibleReplica) []election.EligibleReplica {
	out := make([]election.EligibleReplica, 0, len(elr))
	for _, e := range elr {
		out = append(out, election.EligibleReplica{Node: e.ID, LogEndOffset: e.LogEndOffset})
	}
	return out
}

// produceRequest is a produce call from a handler. The batch belongs to the
// loop from then on: it is stamped in place.
type produceRequest struct {
	batch []byte
	acks  replicate.Acks
	// epoch is the leader epoch a forwarding sidecar aimed at, checked by
	// the loop against the epoch it leads at when it appends (a check
	// before the handoff could pass for a leadership that then ends), or
	// anyEpoch for a write made on this agent.
	epoch    int32
	deadline time.Time
	reply    chan produceOutcome
}

// anyEpoch is a produceRequest's epoch for a write that aims at whichever
// leadership this replica holds.
const anyEpoch int32 = -1

// produceOutcome answers a produceRequest. appended says the batch is in
// the leader's log, so a failure's outcome is unknown rather than "nothing
// written".
type produceOutcome struct {
	base, last int64
	epoch      int32
	appended   bool
	// duplicate says an earlier copy of the batch appended it: base, last
	// and epoch are that copy's.
	duplicate bool
	err       error
}

// errNotLeaderHere refuses a request sent to a replica that does not lead.
var errNotLeaderHere = errors.New("agent: this replica does not lead")

func (r *replica) onProduce(req *produceRequest) {
	r.afterProduce(r.produceOne(req))
}

// produceGroupRequest is several produce requests of one sidecar group
// (agent/groupsend.go), taken in one loop turn: their batches are
// appended one after the other before followers and readers are woken, so
// that one replication round carries them all, as it carries one merged
// batch.
type produceGroupRequest struct {
	reqs []*produceRequest
}

func (r *replica) onProduceGroup(ev *produceGroupRequest) {
	appended := false
	for _, req := range ev.reqs {
		appended = r.produceOne(req) || appended
	}
	r.afterProduce(appended)
}

// afterProduce wakes followers and readers after appends, asks for their
// fsync, and carries out what the leader decided.
func (r *replica) afterProduce(appended bool) {
	if appended {
		r.changed.notify()
		if r.deps.durability == replicate.DurabilityFsync {
			r.requestSync()
		}
	}
	r.processLeaderReady()
}

// produceOne appends one request's batch, or answers it as a duplicate or
// a refusal; it reports whether it appended.
func (r *replica) produceOne(req *produceRequest) bool {
	if r.leader == nil {
		req.reply <- produceOutcome{err: errNotLeaderHere}
		return false
	}
	epoch := r.leader.Epoch()
	if req.epoch != anyEpoch {
		if err := replicate.CheckLeaderEpoch(req.epoch, epoch); err != nil {
			req.reply <- produceOutcome{err: err}
			return false
		}
	}
	if err := r.leader.CanAppend(req.acks); err != nil {
		req.reply <- produceOutcome{err: err}
		return false
	}
	h := record.Header(req.batch)
	if h.ProducerID() >= 0 {
		d := r.producers.Check(h.ProducerID(), h.ProducerEpoch(), h.BaseSequence(), h.RecordCount())
		switch d.Verdict {
		case producer.Append:
		case producer.Duplicate:
			// Answered as the original once that is acknowledged as acks
			// asks: a resend must not be told more than the first copy.
			r.waitAck(req, d.Original.BaseOffset, d.Original.LastOffset, d.Original.LeaderEpoch, true)
			return false
		default:
			req.reply <- produceOutcome{err: &producerError{decision: d}}
			return false
		}
	}
	base, last, err := r.currentLog().AppendLeader(req.batch, epoch)
	if err != nil {
		req.reply <- produceOutcome{err: err}
		if errors.Is(err, segstore.ErrFailed) {
			r.failLog(err)
		}
		return false
	}
	if ok, err := applyProducerBatch(r.producers, h); err != nil {
		r.log.Warn("appended batch not recorded in the producer state", "offset", base, "error", err)
	} else if ok {
		r.producersDirty = true
	}
	if err := r.leader.Appended(last); err != nil {
		r.failLog(err)
		req.reply <- produceOutcome{base: base, last: last, epoch: epoch, appended: true, err: err}
		return false
	}
	r.waitAck(req, base, last, epoch, false)
	return true
}

// waitAck answers req once its batch at [base, last], appended at epoch,
// is acknowledged as req.acks asks (the caller processes the leader's
// Ready afterwards). duplicate says the batch was appended by an earlier
// copy of the request.
func (r *replica) waitAck(req *produceRequest, base, last int64, epoch int32, duplicate bool) {
	out := produceOutcome{base: base, last: last, epoch: epoch, appended: true, duplicate: duplicate}
	if req.acks == replicate.AcksNone {
		req.reply <- out
		return
	}
	r.nextAck++
	id := r.nextAck
	r.acks[id] = pendingProduce{reply: req.reply, base: base, last: last, epoch: epoch, duplicate: duplicate}
	if err := r.leader.WaitAck(id, last, req.acks, req.deadline); err != nil {
		delete(r.acks, id)
		out.err = err
		req.reply <- out
	}
}

// leaderFetchRequest is a follower's fetch as the peer handler hands it to
// the leader's loop.
type leaderFetchRequest struct {
	req   replicate.FetchRequest
	reply chan leaderFetchOutcome
}

type leaderFetchOutcome struct {
	result         replicate.FetchResult
	logStartOffset int64
	err            error
}

// outOfRangeError refuses a fetch outside the leader's log.
type outOfRangeError struct {
	logStartOffset, logEndOffset int64
}

func (e *outOfRangeError) Error() string {
	return fmt.Sprintf("agent: offset out of the leader's log [%d, %d]", e.logStartOffset, e.logEndOffset)
}

func (r *replica) onLeaderFetch(ev *leaderFetchRequest) {
	if r.leader == nil {
		ev.reply <- leaderFetchOutcome{err: r.notLeaderFor(ev.req.CurrentLeaderEpoch)}
		return
	}
	log := r.currentLog()
	if lso := log.LogStartOffset(); ev.req.FetchOffset < lso {
		ev.reply <- leaderFetchOutcome{err: &outOfRangeError{logStartOffset: lso, logEndOffset: log.LogEndOffset()}}
		return
	}
	result, err := r.leader.Fetch(ev.req, r.deps.now())
	if errors.Is(err, replicate.ErrOffsetOutOfRange) {
		err = &outOfRangeError{logStartOffset: log.LogStartOffset(), logEndOffset: log.LogEndOffset()}
	}
	ev.reply <- leaderFetchOutcome{result: result, logStartOffset: log.LogStartOffset(), err: err}
	if errors.Is(err, replicate.ErrInconsistentLog) {
		r.failLog(err)
		return
	}
	r.processLeaderReady()
}

// epochQueryRequest is a follower's epoch end offset request.
type epochQueryRequest struct {
	req   replicate.EpochRequest
	reply chan epochQueryOutcome
}

type epochQueryOutcome struct {
	answer replicate.EpochEndOffset
	err    error
}

func (r *replica) onEpochQuery(ev *epochQueryRequest) {
	if r.leader == nil {
		ev.reply <- epochQueryOutcome{err: r.notLeaderFor(ev.req.CurrentLeaderEpoch)}
		return
	}
	answer, err := r.leader.OffsetForEpoch(ev.req)
	ev.reply <- epochQueryOutcome{answer: answer, err: err}
	if errors.Is(err, replicate.ErrInconsistentLog) {
		r.failLog(err)
	}
}

// notLeaderFor is what a replica that does not lead answers a request
// carrying epoch: fenced if the sender follows an older epoch than this
// replica knows, unknown if a newer one, else not leader.
func (r *replica) notLeaderFor(epoch int32) error {
	if err := replicate.CheckLeaderEpoch(epoch, r.meta.pm.State.Epoch); err != nil {
		return err
	}
	return errNotLeaderHere
}

// Calls from handlers. Each waits for the loop's answer, or for the replica
// to stop.

// errReplicaStopped answers requests to a replica that stopped meanwhile.
var errReplicaStopped = errors.New("agent: replica stopped")

func (r *replica) produce(req *produceRequest, wait time.Duration) produceOutcome {
	req.reply = make(chan produceOutcome, 1)
	if !r.send(req) {
		return produceOutcome{err: errReplicaStopped}
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	return r.await(req, timer.C)
}

// await waits for the loop's answer to a request it was sent, the
// replica's stop, or expired.
func (r *replica) await(req *produceRequest, expired <-chan time.Time) produceOutcome {
	select {
	case out := <-req.reply:
		return out
	case <-r.done:
		return produceOutcome{err: errReplicaStopped, appended: true}
	case <-expired:
		return produceOutcome{err: replicate.ErrAckTimeout, appended: true}
	}
}

func (r *replica) leaderFetch(req replicate.FetchRequest) leaderFetchOutcome {
	ev := &leaderFetchRequest{req: req, reply: make(chan leaderFetchOutcome, 1)}
	if !r.send(ev) {
		return leaderFetchOutcome{err: errReplicaStopped}
	}
	select {
	case out := <-ev.reply:
		return out
	case <-r.done:
		return leaderFetchOutcome{err: errReplicaStopped}
	}
}

func (r *replica) epochQuery(req replicate.EpochRequest) epochQueryOutcome {
	ev := &epochQueryRequest{req: req, reply: make(chan epochQueryOutcome, 1)}
	if !r.send(ev) {
		return epochQueryOutcome{err: errReplicaStopped}
	}
	select {
	case out := <-ev.reply:
		return out
	case <-r.done:
		return epochQueryOutcome{err: errReplicaStopped}
	}
}
