package partition

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/logagent/logagent/agent/peer"
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
func (r *Replica) becomeLeader(l *election.Leadership) {
	r.stopFollowing()
	log := r.CurrentLog()
	leo := log.LogEndOffset()
	fail := func(err error) {
		r.log.Error("cannot lead", "epoch", l.Epoch(), "error", err)
		r.resignAsync(l)
		// Campaign would hand the same leadership back until the
		// resignation has gone through.
		r.campaignRetryAt = r.deps.Now().Add(campaignBackoff)
		if errors.Is(err, segstore.ErrFailed) || errors.Is(err, replicate.ErrInconsistentLog) {
			r.failLog(err)
		}
	}
	if err := log.AssignEpoch(l.Epoch(), leo); err != nil {
		fail(fmt.Errorf("assign epoch: %w", err))
		return
	}
	st := l.State()
	// The replica's metadata may lag the snapshot the election was decided
	// on: Consul's ISR may then name a replica a move just added, which the
	// older set would have the leader take for a non-replica and take out
	// of the ISR.
	replicas, floor := r.meta.pm.Replicas, uint64(0)
	if decided, index := l.DecidedReplicas(); index > r.meta.pm.ReplicasIndex {
		replicas, floor = decided, index
	}
	leader, err := replicate.NewLeader(replicate.LeaderConfig{
		Self:              r.deps.Self,
		Epoch:             l.Epoch(),
		EpochStartOffset:  leo,
		Replicas:          replicas,
		ISR:               st.ISR,
		ELR:               replicateELR(st.ELR),
		MinInsyncReplicas: r.meta.tc.MinInsyncReplicas,
		LagTimeMax:        r.deps.Config.Replication.LagTimeMax,
		Durability:        r.deps.Durability,
		LogEndOffset:      leo,
		SyncedEndOffset:   min(log.SyncedOffset(), leo),
		HighWatermark:     min(log.HighWatermark(), leo),
		EpochCache:        epochCache{log: log},
	}, r.deps.Now())
	if err != nil {
		fail(err)
		return
	}
	r.gen++
	r.role, r.leader, r.leadership, r.leaderISR = RoleLeader, leader, l, leader.ISR()
	r.parkMu.Lock()
	clear(r.parkedBy)
	r.parkMu.Unlock()
	r.replicasFloor = floor
	r.leaderTicker, r.leaderTickEvery = time.NewTicker(leaderTickMin), leaderTickMin
	r.isrRetry = nil
	r.log.Info("leading", "epoch", l.Epoch(), "log_end_offset", leo, "high_watermark", leader.HighWatermark(), "isr", st.ISR)
	r.deps.Hooks.leaderElected()
	if r.deps.AnnounceLeadership != nil {
		r.deps.AnnounceLeadership(peer.Leading{Topic: r.topic, Partition: r.partition, Epoch: l.Epoch(), Leader: r.deps.Self}, replicas)
	}
	if r.deps.Durability == replicate.DurabilityFsync {
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
func (r *Replica) stepDown(cause error, release bool) {
	if r.role != RoleLeader {
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
	r.role, r.leader, r.leadership, r.leaderTicker, r.leaderISR = RoleNone, nil, nil, nil, nil
	r.isrRetry = nil
	r.stopLiveness()
	r.following = followTarget{}
	r.publish()
}

// processLeaderReady carries out the leader's output: the new high
// watermark goes to the log (so readers see it) before any ack is answered.
func (r *Replica) processLeaderReady() {
	if r.leader == nil || !r.leader.HasReady() {
		return
	}
	rd := r.leader.Ready()
	if rd.HighWatermarkChanged {
		r.leaderHW = max(r.leaderHW, rd.HighWatermark)
		if err := r.CurrentLog().SetHighWatermark(rd.HighWatermark); err != nil {
			r.log.Warn("cannot set the high watermark", "high_watermark", rd.HighWatermark, "error", err)
		}
		r.changed.notify()
	}
	if p := rd.ISRProposal; p != nil {
		if len(p.NonReplicas) > 0 {
			// Consul's state was edited or written wrong: say so, the
			// leader repairs it but someone should know.
			r.log.Warn("consul's isr or elr names agents that are not replicas: taking them out",
				"non_replicas", p.NonReplicas, "replicas", r.leader.Replicas(), "epoch", p.Epoch, "isr", p.ISR, "elr", p.ELR)
		}
		r.propose(*p, false)
	}
	for _, a := range rd.Acks {
		p, ok := r.acks[a.ID]
		if !ok {
			continue
		}
		delete(r.acks, a.ID)
		p.reply <- ProduceOutcome{Base: p.base, Last: p.last, Epoch: p.epoch, Appended: true, Duplicate: p.duplicate, Err: a.Err}
	}
}

// propose writes an ISR change with the guarded transaction, off the loop.
// retry says an earlier try of p has an unknown outcome: it may have
// committed.
func (r *Replica) propose(p replicate.ISRProposal, retry bool) {
	gen, idx := r.gen, r.reassignIndexes
	r.tasks.Go(func() {
		ctx, cancel := context.WithTimeout(r.ctx, isrProposalTimeout)
		defer cancel()
		var err error
		if p.Replicas != nil {
			err = r.deps.Coord.CompleteReassign(ctx, r.topic, r.partition, p.Epoch, idx.m, idx.replicas, idx.move, p.ISR, electionELR(p.ELR))
		} else {
			err = r.deps.Coord.ProposeISR(ctx, r.topic, r.partition, p.Epoch, p.ISR, electionELR(p.ELR))
		}
		r.send(isrResult{gen: gen, proposal: p, retry: retry, err: err})
	})
}

type isrResult struct {
	gen      uint64
	proposal replicate.ISRProposal
	// retry: an earlier try of the proposal has an unknown outcome.
	retry bool
	err   error
}

// onISRResult feeds an ISR transaction's outcome back: committed; not
// leader any more (step down); a refusal because the state moved, which
// takes Consul's ISR as the committed one (or steps down if the epoch
// moved); a refusal before any write (no permission, invalid), which ends
// the proposal, unless an earlier try's outcome is unknown: then it steps
// down (abdicateUnknown). An unknown outcome (Consul unreachable, a
// timeout) is retried with the same proposal still in flight, so a
// follower being added keeps counting for the high watermark until Consul
// says whether it is in the ISR. A committed ISR the leader state refuses
// steps down (abdicateCommitted). No outcome leaves the proposal in flight
// for good: the state machine proposes nothing else until it ends.
func (r *Replica) onISRResult(ev isrResult) {
	if ev.gen != r.gen || r.leader == nil {
		return
	}
	switch {
	case ev.err == nil:
		if err := r.leader.ISRCommitted(ev.proposal.ISR, ev.proposal.ELR, r.deps.Now()); err != nil {
			r.abdicateCommitted(ev.proposal.ISR, ev.proposal.ELR, err)
			return
		}
		if ev.proposal.Replicas != nil {
			// The completion of a move: the removed replicas are out of
			// the ISR, so the state machine forgets them. A refusal
			// leaves the ISR as committed (the HW stays safe) and the
			// replica set to the next snapshot (syncReplicas).
			if err := r.leader.SetReplicas(ev.proposal.Replicas); err != nil {
				r.log.Error("completed replica set refused by the leader state", "replicas", ev.proposal.Replicas, "error", err)
			}
			r.replicasFloor = r.reassignIndexes.replicas
			r.log.Info("reassignment complete", "epoch", ev.proposal.Epoch, "replicas", ev.proposal.Replicas)
		}
		r.log.Info("isr changed", "epoch", ev.proposal.Epoch, "isr", ev.proposal.ISR)
		r.deps.Hooks.isrChanged()
	case errors.Is(ev.err, election.ErrNotLeader):
		r.stepDown(ev.err, false)
		return
	case errors.Is(ev.err, election.ErrConflict):
		st := r.leadership.State()
		if st.Epoch != r.leader.Epoch() {
			r.stepDown(ev.err, false)
			return
		}
		elr := replicateELR(st.ELR)
		if err := r.leader.ISRCommitted(st.ISR, elr, r.deps.Now()); err != nil {
			r.abdicateCommitted(st.ISR, elr, err)
			return
		}
		if ev.proposal.Replicas != nil {
			// A completion decided from a snapshot that has moved on (or
			// one that committed on an earlier try whose answer was
			// lost): decide again once the metadata caught up.
			r.reassignRetryAt = r.deps.Now().Add(reassignRetry)
		}
	case errors.Is(ev.err, context.Canceled):
		return
	case errors.Is(ev.err, election.ErrPermissionDenied), errors.Is(ev.err, election.ErrInvalidTopic):
		if ev.retry {
			r.abdicateUnknown(ev.proposal, ev.err)
			return
		}
		// Refused before anything was written: the proposal is over.
		r.log.Error("isr change refused", "isr", ev.proposal.ISR, "error", ev.err)
		if err := r.leader.ISRProposalFailed(); err != nil {
			// Refused only with no proposal in flight (a resigned
			// leader has stepped down, and its results are dropped
			// above): nothing is left to get stuck on.
			r.log.Error("isr proposal failure refused by the leader state", "error", err)
		}
	default:
		r.log.Warn("isr change not confirmed; retrying", "isr", ev.proposal.ISR, "error", ev.err)
		r.isrRetry = &ev.proposal
		r.isrRetryAt = r.deps.Now().Add(isrRetryBackoff)
		return
	}
	r.leaderISR = r.leader.ISR()
	r.processLeaderReady()
}

// abdicateCommitted steps down, giving the lock back, from a leadership
// whose ISR and ELR, as committed in Consul at its epoch, its state machine
// refused (an ISR without the leader, an eligible replica in the ISR;
// members that are not replicas it takes out with an ISR change of its own
// instead, replicate.ISRProposal.NonReplicas, and a member named twice
// election reads once).
// Going on would be unsafe, not just stuck: its HW counts only the ISR it
// knows, while Consul may elect any member of the committed one, or an
// eligible replica while that HW moves on, after acknowledged writes it
// never waited for; and a leader outside Consul's ISR must not acknowledge
// at all. Clearing the proposal and proposing again would keep it
// acknowledging under that HW until a change commits, and then write its
// own view over a state it could not read. An election decides again from
// Consul's state and the replicas read together; this replica runs in it
// like the others.
func (r *Replica) abdicateCommitted(isr []string, elr []replicate.EligibleReplica, cause error) {
	r.abdicate("committed isr refused by the leader state", cause, "isr", isr, "elr", elr)
}

// abdicateUnknown steps down, giving the lock back, from a leadership whose
// ISR proposal p had a try with an unknown outcome and whose retry was then
// refused before writing. The refusal says nothing of the earlier try,
// which may have committed: ending the proposal (ISRProposalFailed) would
// have the HW stop waiting for a follower p adds while Consul's ISR, which
// elections pick from, may hold it, and the next leader may lack writes
// acknowledged with acks=all after that; a completion of a move may have
// replaced the replica set too. Re-reading Consul's state would not settle
// it: the read may be refused as the write was, the Coordinator offers no
// consistent read of a partition's state, and a state still at the index
// the earlier try was guarded by does not rule out that try's being
// applied after the read; only a write at that index fences it, and writes
// are what is refused. Keeping the proposal in flight and retrying would
// keep the HW safe but, refused for good (a revoked token, a proposal
// invalid against the replicas), leave it in flight for good: no follower
// would leave the ISR again. Stepping down is safe whatever Consul holds:
// the next election, this replica's campaign included, starts from the
// state it reads there.
func (r *Replica) abdicateUnknown(p replicate.ISRProposal, cause error) {
	r.abdicate("isr change refused after a try whose outcome is unknown", cause, "isr", p.ISR, "replicas", p.Replicas)
}

// abdicate steps down for why, giving the lock back, and holds this
// replica's next campaign, which would hand the same leadership back until
// the resignation has gone through. kv are what the log line adds.
func (r *Replica) abdicate(why string, cause error, kv ...any) {
	r.log.Error(why+": stepping down", append(append([]any{"epoch", r.leader.Epoch()}, kv...), "error", cause)...)
	r.stepDown(fmt.Errorf("%s: %w", why, cause), true)
	r.campaignRetryAt = r.deps.Now().Add(campaignBackoff)
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
	// AnyEpoch for a write made on this agent.
	epoch    int32
	deadline time.Time
	reply    chan ProduceOutcome
}

// AnyEpoch is the epoch of a produce for a write that aims at whichever
// leadership this replica holds.
const AnyEpoch int32 = -1

// ProduceOutcome answers a produce. Appended says the batch is in
// the leader's log, so a failure's outcome is unknown rather than "nothing
// written".
type ProduceOutcome struct {
	Base, Last int64
	Epoch      int32
	Appended   bool
	// Duplicate says an earlier copy of the batch appended it: Base, Last
	// and Epoch are that copy's.
	Duplicate bool
	Err       error
}

// ErrNotLeaderHere refuses a request sent to a replica that does not lead.
var ErrNotLeaderHere = errors.New("agent: this replica does not lead")

func (r *Replica) onProduce(req *produceRequest) {
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

func (r *Replica) onProduceGroup(ev *produceGroupRequest) {
	appended := false
	for _, req := range ev.reqs {
		appended = r.produceOne(req) || appended
	}
	r.afterProduce(appended)
}

// afterProduce wakes followers and readers after appends, asks for their
// fsync, and carries out what the leader decided.
func (r *Replica) afterProduce(appended bool) {
	if appended {
		r.changed.notify()
		if r.deps.Durability == replicate.DurabilityFsync {
			r.requestSync()
		}
	}
	r.processLeaderReady()
}

// produceOne appends one request's batch, or answers it as a duplicate or
// a refusal; it reports whether it appended.
func (r *Replica) produceOne(req *produceRequest) bool {
	if r.leader == nil {
		req.reply <- ProduceOutcome{Err: ErrNotLeaderHere}
		return false
	}
	if r.handover != nil {
		// Draining: the successor must reach a log end that stays put.
		req.reply <- ProduceOutcome{Err: ErrLeadershipMoving}
		return false
	}
	epoch := r.leader.Epoch()
	if req.epoch != AnyEpoch {
		if err := replicate.CheckLeaderEpoch(req.epoch, epoch); err != nil {
			req.reply <- ProduceOutcome{Err: err}
			return false
		}
	}
	if err := r.leader.CanAppend(req.acks); err != nil {
		req.reply <- ProduceOutcome{Err: err}
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
			req.reply <- ProduceOutcome{Err: &ProducerError{Decision: d}}
			return false
		}
	}
	base, last, err := r.CurrentLog().AppendLeader(req.batch, epoch)
	if err != nil {
		req.reply <- ProduceOutcome{Err: err}
		if errors.Is(err, segstore.ErrFailed) {
			r.failLog(err)
		}
		return false
	}
	if ok, err := applyProducerBatch(r.producers, h, r.deps.Now()); err != nil {
		// Check allowed the batch's fields and the log put it at its end,
		// so Apply refuses it only when the state holds batches past the
		// log end: the state and the log disagree. Acknowledged with the
		// state not knowing it, the batch's resend was appended again.
		// The state is rebuilt from the log, as at open, which reaches
		// the batch; a rebuild that does not (the log refused a read)
		// leaves the outcome to the log's recovery.
		r.log.Error("the producer state disagrees with the log; rebuilding it", "offset", base, "error", err)
		r.loadProducers()
		if d := r.producers.Check(h.ProducerID(), h.ProducerEpoch(), h.BaseSequence(), h.RecordCount()); d.Verdict != producer.Duplicate || d.Original.BaseOffset != base {
			err = fmt.Errorf("agent: producer state rebuilt without the batch appended at %d: %w", base, err)
			r.failLog(err)
			req.reply <- ProduceOutcome{Base: base, Last: last, Epoch: epoch, Appended: true, Err: err}
			return false
		}
	} else if ok {
		r.producersDirty = true
	}
	if err := r.leader.Appended(last, r.deps.Now()); err != nil {
		r.failLog(err)
		req.reply <- ProduceOutcome{Base: base, Last: last, Epoch: epoch, Appended: true, Err: err}
		return false
	}
	r.waitAck(req, base, last, epoch, false)
	return true
}

// waitAck answers req once its batch at [base, last], appended at epoch,
// is acknowledged as req.acks asks (the caller processes the leader's
// Ready afterwards). duplicate says the batch was appended by an earlier
// copy of the request.
func (r *Replica) waitAck(req *produceRequest, base, last int64, epoch int32, duplicate bool) {
	out := ProduceOutcome{Base: base, Last: last, Epoch: epoch, Appended: true, Duplicate: duplicate}
	if req.acks == replicate.AcksNone {
		req.reply <- out
		return
	}
	r.nextAck++
	id := r.nextAck
	r.acks[id] = pendingProduce{reply: req.reply, base: base, last: last, epoch: epoch, duplicate: duplicate}
	if err := r.leader.WaitAck(id, last, req.acks, req.deadline); err != nil {
		delete(r.acks, id)
		out.Err = err
		req.reply <- out
	}
}

// leaderFetchRequest is a follower's fetch as the peer handler hands it to
// the leader's loop. A fetch from a session (session not 0) that finds
// nothing to answer is parked (docs/design.md §7.9).
type leaderFetchRequest struct {
	req     replicate.FetchRequest
	session uint64
	knownHW int64
	reply   chan LeaderFetchOutcome
}

type LeaderFetchOutcome struct {
	Result         replicate.FetchResult
	LogStartOffset int64
	// Throttled says the answer counts against the catch-up throttle: the
	// fetch is from a replica a move adds, not yet in the ISR.
	Throttled bool
	// Parked says the session's fetch has nothing to answer (it is at the
	// log end and knows the high watermark) and waits in the session, the
	// follower counting as caught up until Unpark.
	Parked bool
	Err    error
}

// OutOfRangeError refuses a fetch outside the leader's log.
type OutOfRangeError struct {
	LogStartOffset, LogEndOffset int64
}

func (e *OutOfRangeError) Error() string {
	return fmt.Sprintf("agent: offset out of the leader's log [%d, %d]", e.LogStartOffset, e.LogEndOffset)
}

func (r *Replica) onLeaderFetch(ev *leaderFetchRequest) {
	// A session queues its unpark before it answers the parked fetch, so
	// before the follower's next fetch: it goes first.
	r.takeUnparks()
	if r.leader == nil {
		ev.reply <- LeaderFetchOutcome{Err: r.notLeaderFor(ev.req.CurrentLeaderEpoch)}
		return
	}
	log := r.CurrentLog()
	var result replicate.FetchResult
	var err error
	if lso := log.LogStartOffset(); ev.req.FetchOffset < lso {
		// Refused before the state machine sees it, but like any fetch it
		// ends the follower's park below.
		err = &OutOfRangeError{LogStartOffset: lso, LogEndOffset: log.LogEndOffset()}
	} else {
		result, err = r.leader.Fetch(ev.req, r.deps.Now())
		if errors.Is(err, replicate.ErrOffsetOutOfRange) {
			err = &OutOfRangeError{LogStartOffset: log.LogStartOffset(), LogEndOffset: log.LogEndOffset()}
		}
	}
	// Any fetch, whatever its outcome, ends the follower's park; a
	// session's with nothing to answer starts one. One that says the follower lost data is answered:
	// the follower clears its mark from the answer's positions (the HW and
	// the epoch's start), which a park never sends while the partition is
	// idle, and an added replica of an empty partition would never join.
	r.parkMu.Lock()
	prev, had := r.parkedBy[ev.req.ReplicaID]
	delete(r.parkedBy, ev.req.ReplicaID)
	parked := false
	if err == nil && ev.session != 0 && !ev.req.DataLoss && result.Diverging == nil && ev.req.FetchOffset == r.leader.LogEndOffset() &&
		r.leader.HighWatermark() <= ev.knownHW {
		if perr := r.leader.FollowerParked(ev.req.ReplicaID, ev.req.CurrentLeaderEpoch, ev.req.FetchOffset); perr != nil {
			r.log.Error("leader refused to park a fetch", "replica", ev.req.ReplicaID, "error", perr)
		} else {
			parked = true
			r.parkedBy[ev.req.ReplicaID] = ev.session
		}
	}
	r.parkMu.Unlock()
	if had && err != nil {
		// The park ended here, but the state machine refused the fetch
		// and so changed nothing, and the session that held the park can
		// no longer end it (its unpark finds it gone): end it in the
		// state machine now, or the follower counts as caught up until it
		// sends a fetch the leader takes.
		if uerr := r.leader.FollowerUnparked(ev.req.ReplicaID, r.leader.Epoch(), r.deps.Now()); uerr != nil {
			r.log.Debug("unpark refused", "replica", ev.req.ReplicaID, "error", uerr)
		}
	}
	if had && prev != ev.session {
		// Another fetch of the follower (another session's, or a GET)
		// ended the park a session still holds: wake it, so that it
		// answers its fetch and the follower fetches again there.
		r.changed.notify()
	}
	ev.reply <- LeaderFetchOutcome{Result: result, LogStartOffset: log.LogStartOffset(), Throttled: r.throttled(ev.req.ReplicaID), Parked: parked, Err: err}
	if errors.Is(err, replicate.ErrInconsistentLog) {
		r.failLog(err)
		return
	}
	r.processLeaderReady()
}

// unparkRequest ends the park of a follower's fetch that session started:
// answered at at, forgotten, or the session's end (at is then its last sign
// of life). An unpark from a session that no longer holds the park (the
// follower fetched since, maybe on a newer session) changes nothing.
type unparkRequest struct {
	replicaID string
	epoch     int32
	session   uint64
	at        time.Time
}

// takeUnparks carries out the unparks the sessions queued, in order.
func (r *Replica) takeUnparks() {
	r.parkMu.Lock()
	unparks := r.unparks
	r.unparks = nil
	r.parkMu.Unlock()
	for _, ev := range unparks {
		r.onUnpark(ev)
	}
}

func (r *Replica) onUnpark(ev unparkRequest) {
	r.parkMu.Lock()
	held := r.parkedBy[ev.replicaID] == ev.session
	if held {
		delete(r.parkedBy, ev.replicaID)
	}
	r.parkMu.Unlock()
	if r.leader == nil || !held {
		return
	}
	if err := r.leader.FollowerUnparked(ev.replicaID, ev.epoch, ev.at); err != nil {
		r.log.Debug("unpark refused", "replica", ev.replicaID, "error", err)
	}
}

// epochQueryRequest is a follower's epoch end offset request.
type epochQueryRequest struct {
	req   replicate.EpochRequest
	reply chan EpochQueryOutcome
}

type EpochQueryOutcome struct {
	Answer replicate.EpochEndOffset
	Err    error
}

func (r *Replica) onEpochQuery(ev *epochQueryRequest) {
	if r.leader == nil {
		ev.reply <- EpochQueryOutcome{Err: r.notLeaderFor(ev.req.CurrentLeaderEpoch)}
		return
	}
	answer, err := r.leader.OffsetForEpoch(ev.req)
	ev.reply <- EpochQueryOutcome{Answer: answer, Err: err}
	if errors.Is(err, replicate.ErrInconsistentLog) {
		r.failLog(err)
	}
}

// notLeaderFor is what a replica that does not lead answers a request
// carrying epoch: fenced if the sender follows an older epoch than this
// replica knows, unknown if a newer one, else not leader.
func (r *Replica) notLeaderFor(epoch int32) error {
	if err := replicate.CheckLeaderEpoch(epoch, r.meta.pm.State.Epoch); err != nil {
		return err
	}
	return ErrNotLeaderHere
}

// Calls from handlers. Each waits for the loop's answer, or for the replica
// to stop.

// ErrReplicaStopped answers requests to a replica that stopped meanwhile.
var ErrReplicaStopped = errors.New("agent: replica stopped")

// Produce hands a batch to the loop, which appends it if this replica leads
// at epoch (AnyEpoch: at whichever epoch it leads) and answers once it is
// acknowledged as acks asks, by deadline; Produce waits at most wait for
// that answer. The batch belongs to the loop from then on: it is stamped in
// place.
func (r *Replica) Produce(batch []byte, acks replicate.Acks, epoch int32, deadline time.Time, wait time.Duration) ProduceOutcome {
	req := &produceRequest{batch: batch, acks: acks, epoch: epoch, deadline: deadline, reply: make(chan ProduceOutcome, 1)}
	if !r.send(req) {
		return ProduceOutcome{Err: ErrReplicaStopped}
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	return r.await(req, timer.C)
}

// ProduceAsync hands a batch to the loop as Produce does, without waiting
// for its answer (acks=0); false if the replica stopped first.
func (r *Replica) ProduceAsync(batch []byte, acks replicate.Acks, epoch int32, deadline time.Time) bool {
	return r.send(&produceRequest{batch: batch, acks: acks, epoch: epoch, deadline: deadline, reply: make(chan ProduceOutcome, 1)})
}

// ProduceGroup hands batches to the loop in one event (appended in order in
// one loop turn) and waits at most wait, in all, for every answer.
func (r *Replica) ProduceGroup(batches [][]byte, acks replicate.Acks, epoch int32, deadline time.Time, wait time.Duration) []ProduceOutcome {
	reqs := make([]*produceRequest, len(batches))
	for i, b := range batches {
		reqs[i] = &produceRequest{batch: b, acks: acks, epoch: epoch, deadline: deadline, reply: make(chan ProduceOutcome, 1)}
	}
	outs := make([]ProduceOutcome, len(batches))
	if !r.send(&produceGroupRequest{reqs: reqs}) {
		for i := range outs {
			outs[i] = ProduceOutcome{Err: ErrReplicaStopped}
		}
		return outs
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for i, req := range reqs {
		outs[i] = r.await(req, timer.C)
	}
	return outs
}

// await waits for the loop's answer to a request it was sent, the
// replica's stop, or expired.
func (r *Replica) await(req *produceRequest, expired <-chan time.Time) ProduceOutcome {
	select {
	case out := <-req.reply:
		return out
	case <-r.done:
		return ProduceOutcome{Err: ErrReplicaStopped, Appended: true}
	case <-expired:
		return ProduceOutcome{Err: replicate.ErrAckTimeout, Appended: true}
	}
}

// LeaderFetch hands a follower's fetch to the leader's loop, which
// validates it and records the follower's progress, and returns its answer.
func (r *Replica) LeaderFetch(req replicate.FetchRequest) LeaderFetchOutcome {
	ev := &leaderFetchRequest{req: req, reply: make(chan LeaderFetchOutcome, 1)}
	return ask(r, ev, ev.reply, LeaderFetchOutcome{Err: ErrReplicaStopped})
}

// SessionFetch is LeaderFetch for a fetch that arrived on session (not
// 0): one with nothing to answer, at the log end and knowing the high
// watermark knownHW, is parked (LeaderFetchOutcome.Parked), and the session
// calls Unpark once it answers it or ends.
func (r *Replica) SessionFetch(req replicate.FetchRequest, session uint64, knownHW int64) LeaderFetchOutcome {
	ev := &leaderFetchRequest{req: req, session: session, knownHW: knownHW, reply: make(chan LeaderFetchOutcome, 1)}
	return ask(r, ev, ev.reply, LeaderFetchOutcome{Err: ErrReplicaStopped})
}

// ask hands ev to the loop and waits for its answer on reply; stopped is
// the answer when the replica stops first.
func ask[T any](r *Replica, ev any, reply <-chan T, stopped T) T {
	if !r.send(ev) {
		return stopped
	}
	select {
	case out := <-reply:
		return out
	case <-r.done:
		return stopped
	}
}

// Unpark ends the park of replicaID's fetch that session started in the
// leadership of epoch, as of at. It does not wait for the loop, which takes
// it before the next fetch it handles: a session's writer calls it for each
// parked fetch it answers, and one partition's loop, busy with a burst of
// produces, held up the answers of every other partition of the session.
func (r *Replica) Unpark(replicaID string, epoch int32, session uint64, at time.Time) {
	r.parkMu.Lock()
	r.unparks = append(r.unparks, unparkRequest{replicaID: replicaID, epoch: epoch, session: session, at: at})
	r.parkMu.Unlock()
	select {
	case r.unparkSignal <- struct{}{}:
	default:
	}
}

// HoldsPark says the loop holds the park session started for replicaID's
// fetch: false once another fetch of the follower ended it.
func (r *Replica) HoldsPark(replicaID string, session uint64) bool {
	r.parkMu.Lock()
	defer r.parkMu.Unlock()
	return r.parkedBy[replicaID] == session
}

// OnChange calls fn after every change that Changed reports, and once the
// replica has stopped, until the returned cancel is called; fn must not
// block.
func (r *Replica) OnChange(fn func()) (cancel func()) { return r.changed.subscribe(fn) }

// EpochQuery hands a follower's epoch end offset request to the leader's
// loop and returns its answer.
func (r *Replica) EpochQuery(req replicate.EpochRequest) EpochQueryOutcome {
	ev := &epochQueryRequest{req: req, reply: make(chan EpochQueryOutcome, 1)}
	return ask(r, ev, ev.reply, EpochQueryOutcome{Err: ErrReplicaStopped})
}
