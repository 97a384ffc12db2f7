package partition

import (
	"errors"
	"fmt"
	"time"

	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"

	"github.com/logagent/logagent/wire"
)

// becomeFollower starts following the leader of target's epoch: the
// follower state machine fetches at once, and the leader's answer says
// where the logs diverge, if they do (docs/design.md §7).
func (r *Replica) becomeFollower(target followTarget) {
	if target != r.following {
		r.followBackoff.reset()
		r.followRetryAt = time.Time{}
	}
	r.stopFollowing()
	r.following = target
	log := r.CurrentLog()
	leo := log.LogEndOffset()
	f, err := replicate.NewFollower(replicate.FollowerConfig{
		Self:            r.deps.Self,
		LeaderEpoch:     target.epoch,
		Durability:      r.deps.Durability,
		LogEndOffset:    leo,
		SyncedEndOffset: min(log.SyncedOffset(), leo),
		HighWatermark:   min(log.HighWatermark(), leo),
		EpochCache:      epochCache{log: log},
	})
	if err != nil {
		// Metadata older than the log (its epoch is above the leader's):
		// wait for newer metadata.
		r.log.Warn("cannot follow", "leader", target.node, "epoch", target.epoch, "error", err)
		r.followRetryAt = r.deps.Now().Add(r.followBackoff.next())
		return
	}
	r.gen++
	r.role, r.follower = RoleFollower, f
	r.knownLeaderHW, r.leaderPos = f.HighWatermark(), nil
	if r.deps.Durability == replicate.DurabilityFsync && log.SyncedOffset() < leo {
		// In fsync mode the first fetch waits for the log to be durable to
		// its end (a leader deposed before its group commit leaves a tail
		// not yet fsynced); nothing else would ask for the sync.
		r.requestSync()
	}
	r.log.Info("following", "leader", target.node, "epoch", target.epoch, "log_end_offset", leo)
	r.publish()
}

// stopFollowing drops the follower state; answers to its requests still in
// flight are dropped by their generation.
func (r *Replica) stopFollowing() {
	r.following = followTarget{}
	r.forgetFetch()
	if r.follower == nil {
		return
	}
	r.gen++
	r.follower = nil
	if r.role == RoleFollower {
		r.role = RoleNone
	}
}

// driveFollower carries out the follower's output until it waits for an
// answer: fetches go to the fetch session, truncations are done here (they
// are the log's writer side).
func (r *Replica) driveFollower() {
	for r.follower != nil && r.follower.HasReady() {
		if r.deps.Now().Before(r.followRetryAt) {
			return
		}
		agent, ok := r.deps.LookupAgent(r.following.node)
		if !ok {
			r.followRetryAt = r.deps.Now().Add(r.followBackoff.next())
			return
		}
		rd := r.follower.Ready()
		if rd.HighWatermarkChanged {
			r.setFollowerHighWatermark(rd.HighWatermark)
		}
		switch {
		case rd.Truncate != nil:
			if !r.truncate(*rd.Truncate) {
				return
			}
		case rd.Fetch != nil:
			r.fetch(agent.PeerAddr, *rd.Fetch)
		}
	}
}

func (r *Replica) setFollowerHighWatermark(hw int64) {
	if err := r.CurrentLog().SetHighWatermark(hw); err != nil {
		r.log.Warn("cannot set the high watermark", "high_watermark", hw, "error", err)
		return
	}
	r.changed.notify()
}

// truncate applies a truncation the follower decided; false if the log
// failed.
func (r *Replica) truncate(t replicate.Truncation) bool {
	log := r.CurrentLog()
	before := log.LogEndOffset()
	var err error
	if t.Restart {
		err = log.TruncateFully(t.Offset)
	} else {
		err = log.Truncate(t.Offset)
	}
	if err != nil {
		if errors.Is(err, segstore.ErrNoSpace) && !errors.Is(err, segstore.ErrFailed) {
			// Refused for space, the log usable: follow again later, which
			// decides the truncation again from the log. A full truncation
			// may have emptied the log at its start before its checkpoint
			// was refused: the producer state must not keep what it lost.
			r.log.Warn("cannot truncate the partition log: its disk is full", "offset", t.Offset, "error", err)
			if log.LogEndOffset() != before {
				r.producersTruncated(t.Restart)
				if r.logFailed {
					return false
				}
				r.reportedEnd = min(r.reportedEnd, log.LogEndOffset())
			}
			r.restartFollowing()
			return false
		}
		r.failLog(fmt.Errorf("truncate to %d: %w", t.Offset, err))
		return false
	}
	r.producersTruncated(t.Restart)
	if r.logFailed {
		return false
	}
	r.reportedEnd = min(r.reportedEnd, log.LogEndOffset())
	if err := r.follower.Truncated(log.LogEndOffset()); err != nil {
		r.failLog(err)
		return false
	}
	if r.deps.Durability == replicate.DurabilityFsync && log.SyncedOffset() < log.LogEndOffset() {
		// A sync in flight started before the cut is not counted for what
		// remains; the follower fetches again only once this one is.
		r.requestSync()
	}
	if after := log.LogEndOffset(); after != before || t.Restart {
		r.log.Info("truncated by epoch", "log_end_offset_was", before, "log_end_offset", after, "restart", t.Restart)
	}
	r.changed.notify()
	return true
}

func (r *Replica) fetch(addr string, req replicate.FetchRequest) {
	req.DataLoss, req.Retiring = r.dataLoss, r.retiring
	r.reportedEnd = max(r.reportedEnd, req.FetchOffset)
	r.sendFetch(addr, peer.Fetch{
		Topic:              r.topic,
		Partition:          r.partition,
		TopicID:            r.topicID,
		FetchRequest:       req,
		KnownHighWatermark: r.knownLeaderHW,
		MaxBytes:           r.deps.Config.Replication.FetchMaxBytes,
		MaxWait:            r.deps.Config.Replication.FetchMaxWait,
	})
}

// sendFetch hands the fetch to the session with the leader at addr
// (docs/design.md §7.9); its answer comes back to the loop as a
// fetchAnswered of this generation and this fetch's sequence number.
func (r *Replica) sendFetch(addr string, f peer.Fetch) {
	r.fetchSeq++
	gen, seq := r.gen, r.fetchSeq
	r.fetchAddr, r.fetchOut = addr, f
	r.deps.sessions.Fetch(addr, f, func(answer peer.FetchAnswer, err error) {
		r.fetchMu.Lock()
		r.fetchAnswers = append(r.fetchAnswers, fetchAnswered{gen: gen, seq: seq, answer: answer, err: err})
		r.fetchMu.Unlock()
		select {
		case r.fetchSignal <- struct{}{}:
		default:
		}
	})
}

// takeFetchAnswers returns the answers delivered since the last call.
func (r *Replica) takeFetchAnswers() []fetchAnswered {
	r.fetchMu.Lock()
	defer r.fetchMu.Unlock()
	out := r.fetchAnswers
	r.fetchAnswers = nil
	return out
}

// forgetFetch drops the fetch this replica has waiting at a leader, so the
// leader stops holding it for a replica that no longer follows it there.
func (r *Replica) forgetFetch() {
	if r.fetchAddr != "" {
		r.deps.sessions.Forget(r.fetchAddr, r.topic, r.partition)
		r.fetchAddr = ""
	}
}

// resendFlags sends the fetch waiting at the leader again when the
// replica's data_loss or retiring flag changed since it went: a fetch
// parked in a session is not sent again by itself, and the leader must
// neither hand a partition over to a stopping agent nor keep a repaired
// replica out of the ISR.
func (r *Replica) resendFlags() {
	if r.fetchAddr == "" || r.follower == nil || (r.fetchOut.DataLoss == r.dataLoss && r.fetchOut.Retiring == r.retiring) {
		return
	}
	f := r.fetchOut
	f.DataLoss, f.Retiring = r.dataLoss, r.retiring
	r.sendFetch(r.fetchAddr, f)
}

type fetchAnswered struct {
	gen uint64
	// seq is the fetch's sequence number (fetchSeq when it was sent).
	seq    uint64
	answer peer.FetchAnswer
	err    error
}

func (r *Replica) onFetchAnswered(ev fetchAnswered) {
	// An answer to a fetch sent since is dropped: resendFlags sent the
	// fetch again while its answer waited in the mailbox, and the leader
	// answers the new one too. Taken, the stale answer was an answer to a
	// fetch no longer in flight (the follower refused it, and restarted),
	// or to the next one (its records not contiguous with the log, a
	// backoff; the next fetch, still pending, forgotten).
	if ev.gen != r.gen || ev.seq != r.fetchSeq || r.follower == nil {
		return
	}
	r.fetchAddr = ""
	if ev.err != nil {
		var pe *peer.Error
		if errors.As(ev.err, &pe) && pe.Code == wire.CodeOffsetOutOfRange {
			if err := r.follower.FetchOutOfRange(pe.LogStartOffset, pe.LogEndOffset); err == nil {
				return
			}
		}
		r.followerRequestFailed("fetch", ev.err)
		if err := r.follower.FetchFailed(); err != nil {
			r.log.Error("follower refused the fetch failure", "error", err)
		}
		return
	}
	pos := ev.answer.Positions
	if pos.LeaderEpoch != r.following.epoch {
		r.followerRequestFailed("fetch", fmt.Errorf("answer from epoch %d, following %d", pos.LeaderEpoch, r.following.epoch))
		_ = r.follower.FetchFailed()
		return
	}
	if pos.Diverging == nil && len(ev.answer.Batches) > 0 {
		log := r.CurrentLog()
		if err := log.AppendFollower(ev.answer.Batches, r.following.epoch); err != nil {
			if errors.Is(err, segstore.ErrFailed) {
				r.failLog(err)
				return
			}
			if errors.Is(err, segstore.ErrNoSpace) {
				// Nothing was appended; fetch the same again after the
				// backoff, which may find space freed.
				r.log.Warn("cannot append what the leader sent: the disk is full", "error", err)
			}
			r.followerRequestFailed("append", err)
			_ = r.follower.FetchFailed()
			return
		}
		if !r.appliedBatches(ev.answer.Batches) {
			return
		}
		if err := r.follower.Appended(log.LogEndOffset() - 1); err != nil {
			r.followerBroken(err)
			return
		}
		if r.deps.Durability == replicate.DurabilityFsync {
			r.requestSync()
		}
		r.changed.notify()
	}
	r.knownLeaderHW = max(r.knownLeaderHW, pos.HighWatermark)
	err := r.follower.FetchResponded(replicate.FetchResult{
		LeaderEpoch:   pos.LeaderEpoch,
		HighWatermark: pos.HighWatermark,
		LogEndOffset:  pos.LogEndOffset,
		Diverging:     pos.Diverging,
	})
	if err != nil {
		r.followerBroken(err)
		return
	}
	r.followBackoff.reset()
	r.leaderPos = &pos
	r.maybeClearDataLoss(pos)
	r.followLogStart(pos.LogStartOffset)
}

// followLogStart deletes the segments that lie wholly below the leader's
// log start offset (and this replica's high watermark): what the leader's
// retention or a restatement of the consumer groups' offsets (docs/design.md
// §7.3) deleted goes here too, as a Kafka follower's log start follows its
// leader's.
func (r *Replica) followLogStart(leaderStart int64) {
	log := r.CurrentLog()
	if leaderStart <= log.LogStartOffset() {
		return
	}
	start := log.LogStartOffset()
	if _, err := log.DeleteBefore(leaderStart); err != nil {
		if errors.Is(err, segstore.ErrFailed) {
			r.failLog(fmt.Errorf("delete below the leader's log start: %w", err))
			return
		}
		r.log.Warn("cannot delete below the leader's log start", "leader_log_start_offset", leaderStart, "error", err)
	}
	if log.LogStartOffset() != start {
		// As after retention (retain): the snapshot must not end below
		// the new start.
		r.maintainProducers()
	}
}

// maybeClearDataLoss clears the data-loss mark under Kafka's ISR-join rule:
// the replica's durable log reaches both the leader's high watermark and
// the start of the leader's epoch, so it holds every record the leader kept
// from earlier epochs, committed ones included (a new leader's HW can
// trail what the previous leader committed; its epoch start cannot). Its
// next fetch goes without the flag, and the leader admits it to the ISR by
// the same rule.
func (r *Replica) maybeClearDataLoss(pos peer.FetchPositions) {
	if !r.dataLoss || pos.Diverging != nil {
		return
	}
	durable := r.CurrentLog().LogEndOffset()
	if r.deps.Durability == replicate.DurabilityFsync {
		durable = r.CurrentLog().SyncedOffset()
	}
	if durable >= pos.HighWatermark && durable >= pos.EpochStartOffset {
		r.setDataLoss(false)
	}
}

// followerRequestFailed backs off before the next request; refusals that
// mean the metadata moved wait for the watch to deliver it.
func (r *Replica) followerRequestFailed(what string, err error) {
	delay := r.followBackoff.next()
	r.followRetryAt = r.deps.Now().Add(delay)
	r.log.Debug("follower request failed", "request", what, "leader", r.following.node, "epoch", r.following.epoch,
		"error", err, "retry_in", delay)
}

// followerBroken handles an input the follower state machine refused: the
// log contradicts the protocol, so it is reopened (recovery) and the
// follower starts over.
func (r *Replica) followerBroken(err error) {
	if errors.Is(err, replicate.ErrInconsistentLog) {
		r.failLog(err)
		return
	}
	r.log.Error("follower state refused an input; following again", "error", err)
	r.restartFollowing()
}

// restartFollowing drops the follower state; reconcile follows the same
// leader again after the backoff, starting from the log as it is.
func (r *Replica) restartFollowing() {
	r.gen++
	r.follower, r.role = nil, RoleNone
	r.followRetryAt = r.deps.Now().Add(r.followBackoff.next())
}
