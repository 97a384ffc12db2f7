package partition

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/producer"
	"github.com/logagent/logagent/reassign"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"
)

// A Replica is this agent's copy of one partition. One goroutine, the loop,
// owns the replication state machine (replicate.Leader or
// replicate.Follower), the log's writer side and every decision; everything
// else talks to it with events:
//
//	HTTP handlers ── produce, leader fetch, epoch query ──┐
//	campaign goroutine ── leadership won ─────────────────┤
//	syncer goroutine ── fsync done (group commit) ────────┼──► loop ──► segstore.Log (append, truncate)
//	fetch sessions ── fetch answer ───────────────────────┤         ──► state machine inputs, Ready
//	ISR proposals ── committed / failed ──────────────────┤         ──► replies, notifications
//	manager ── metadata (latest value) ───────────────────┘
//
// Readers (fetch handlers) read the log directly, bounded by the high
// watermark the loop publishes in the log, and wait for changes on
// changed. Results of asynchronous work carry the generation they were
// started in; the loop drops those of an earlier role. Every goroutine the
// replica starts ends before Stop returns.
type Replica struct {
	deps      *Deps
	topic     string
	partition int
	topicID   string
	dir       string
	log       hclog.Logger

	segLog  atomic.Pointer[segstore.Log]
	view    atomic.Pointer[View]
	changed *broadcast

	events chan any
	// fetchAnswers are the answers the fetch sessions delivered, and
	// fetchSignal tells the loop of them: a session never waits for a busy
	// loop.
	fetchMu      sync.Mutex
	fetchAnswers []fetchAnswered
	fetchSignal  chan struct{}
	metaMu       sync.Mutex
	pendingMeta  *replicaMeta
	// pendingAnnounced is the newest leader announced over a fetch
	// session (leaderAnnounced) that the loop has not taken yet.
	pendingAnnounced followTarget
	metaSignal       chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	// closeErr is the log's Close error, set before done is closed.
	closeErr error
	// tasks holds every goroutine the replica starts besides the loop
	// (syncer, campaign, resignations, ISR proposals, peer requests), so
	// that Stop returns only once they have ended. Only start, the loop
	// and those goroutines add to it, so no Add comes after Stop's Wait.
	tasks sync.WaitGroup

	// Everything below is owned by the loop goroutine.
	meta replicaMeta
	// announced is the newest leader that announced itself over its fetch
	// session; it is followed while its epoch is above the metadata's.
	announced followTarget
	gen       uint64
	role      Role
	dataLoss  bool
	logFailed bool
	reopenAt  time.Time
	// markStale says replica.json may not say what dataLoss says: its
	// last write failed, and the loop writes it again (a fresh temporary
	// file, fsynced and renamed) at markRetryAt, further apart after each
	// failure (markBackoff), until one succeeds (recordDataLoss).
	markStale   bool
	markRetryAt time.Time
	markBackoff backoffDelay
	// checkpointAt is when the log's pending checkpoint is due; zero
	// while it has nothing to checkpoint (runWhenDue).
	checkpointAt time.Time
	// checkpointing says a checkpoint of the log is being written, off
	// the loop (checkpoint); its checkpointResult clears it.
	checkpointing bool
	// retentionAt is when retention and the producers' expiry are next
	// due; zero while neither has anything to remove (runWhenDue).
	retentionAt time.Time
	syncReq     chan struct{}
	syncerStop  chan struct{}
	// failBackoff is how long a reopened log waits before it campaigns:
	// a replica whose disk keeps failing must not win elections over and
	// over (each one a new epoch) only to fail again. It starts over once
	// the log has held up for failBackoffReset since healthySince, the
	// last successful reopen.
	failBackoff  backoffDelay
	healthySince time.Time

	leader     *replicate.Leader
	leadership *election.Leadership
	// leaderISR is leader.ISR() as of its last change, for publish.
	leaderISR  []string
	acks       map[replicate.AckID]pendingProduce
	nextAck    replicate.AckID
	isrRetry   *replicate.ISRProposal
	isrRetryAt time.Time
	// liveness is the liveness last handed to the leader, and deadReplicas
	// the partition's replicas it says are dead (see applyLiveness).
	liveness     *election.Liveness
	deadReplicas []string
	// deadSince is since when this leadership has seen each dead replica
	// dead; healing says a start of a move re-placing them is out, and
	// healRetryAt holds back the next attempt, healBusyIndex is the
	// metadata index at which reassign.MaxHealing moves were in flight
	// (nothing to try before a newer one), healWaitLogged says the lack of
	// an agent to re-place them on was logged (heal.go).
	deadSince      reassign.DeadSince
	healing        bool
	healWaitLogged bool
	healRetryAt    time.Time
	healBusyIndex  uint64
	// healStall watches the replicas a self-healing move in flight adds,
	// and healAvoid holds until when each agent whose catch-up stalled in
	// one takes no re-placing of this partition (heal.go).
	healStall healStall
	healAvoid map[string]time.Time

	// producers is the partition's idempotent-producer state, as of the
	// log end (producers.go); producersDirty says it changed since the
	// snapshot at producerSnapshotEnd (-1: none on disk) was written.
	// After a failed write producerSnapshotEnd is the largest end the
	// file on disk may have: a truncation below it removes the file.
	producers           *producer.State
	producersDirty      bool
	producerSnapshotEnd int64

	follower  *replicate.Follower
	following followTarget
	// fetchAddr is the leader the fetch in flight went to (empty for
	// none), and fetchOut that fetch. fetchSeq numbers the fetches sent:
	// only the answer to the last one counts (resendFlags sends a fetch
	// again while the first one's answer may already be delivered).
	fetchAddr string
	fetchOut  peer.Fetch
	fetchSeq  uint64
	// leaderPos are the positions of the leader's last answer in this
	// following, nil before the first.
	leaderPos     *peer.FetchPositions
	knownLeaderHW int64
	// reportedEnd is the largest log end this replica told a leader it
	// holds (a fetch offset), less what a truncation took back: a leader
	// may have acknowledged writes below it on its word, in "replicated"
	// durability before they were fsynced here.
	reportedEnd int64
	// leaderHW is the largest high watermark this replica's leader state
	// published, whether or not the log took it (a failed log refuses
	// SetHighWatermark): reopen's data-loss check must not trust the
	// failed log's.
	leaderHW      int64
	followRetryAt time.Time
	followBackoff backoffDelay

	campaigning     bool
	campaignCancel  context.CancelFunc
	campaignRetryAt time.Time
	// retiring is set by a graceful stop: the replica no longer campaigns,
	// and hands over the leadership it has (handover.go).
	retiring bool
	// handover is the handover of this replica's leadership in progress,
	// nil when none.
	handover *handover
	// preferredSince is when the partition's preferred replica was last
	// seen to enter this leader's ISR in the leadership of preferredEpoch
	// (zero while it is out of it), and moveRetryAt holds back the next
	// move to it after one that did not come together.
	preferredSince time.Time
	preferredEpoch int32
	moveRetryAt    time.Time
	// reassignRetryAt holds back the next step of a reassignment, and
	// reassignIndexes are the indexes its completion in flight decided
	// from (reassign.go).
	reassignRetryAt time.Time
	reassignIndexes reassignIndexes
	// replicasFloor is the replicas key's index of the snapshot this
	// leadership's election was decided on, when the replica's own
	// metadata lagged it, or the one its completion of a move replaced:
	// metadata at or below it is no newer than the replica set the leader
	// follows.
	replicasFloor uint64
	// catchUp counts the bytes sent to replicas being added.
	catchUp catchUp
	// yieldedAt is when this replica first held back its campaign for the
	// partition's preferred replica (see ensureCampaign); zero before.
	yieldedAt time.Time

	wakeTimer *time.Timer
	wakeAt    time.Time
	// leaderTicker runs while leading: ISR lag, every leaderTickEvery
	// (adjustLeaderTick), stopped while that is zero. An awaited ack's
	// deadline is the wake timer's (armWake).
	leaderTicker    *time.Ticker
	leaderTickEvery time.Duration
	// parkedBy is the session that parked each follower's fetch in this
	// leadership (docs/design.md §7.9); the loop writes it, sessions read
	// it (HoldsPark), under parkMu.
	parkMu   sync.Mutex
	parkedBy map[string]uint64
	// unparks are the sessions' Unparks the loop has not taken yet, under
	// parkMu, and unparkSignal tells the loop of them: a session's writer
	// never waits for a busy loop (docs/design.md §7.9).
	unparks      []unparkRequest
	unparkSignal chan struct{}
}

// Deps is what every replica shares with its agent.
type Deps struct {
	// Self is this agent's node id.
	Self   string
	Config *config.Config
	Coord  Coordinator
	// Peers are the settings (token, body limit, TLS) of the fetch
	// sessions' connections, and of the fetches they send to a leader
	// without sessions.
	Peers *peer.Clients
	// sessions carries the followers' fetches, one session per leader
	// agent (docs/design.md §7.9); NewManager sets it and Manager.Stop
	// closes it.
	sessions *peer.Sessions
	// LookupAgent finds a registered agent by node id; a miss may start a
	// refresh, and the follower tries again after its backoff.
	LookupAgent func(node string) (election.AgentInfo, bool)
	Log         hclog.Logger
	Now         func() time.Time
	// FS does the partitions' file I/O.
	FS         segstore.FS
	Durability replicate.Durability
	LogOptions segstore.Options
	// ProducerOptions configure every partition's producer state.
	ProducerOptions producer.Options

	// moves spaces the moves to preferred replicas of every replica of
	// the agent; NewManager sets it, and without it no replica moves.
	moves *moveLimiter
	// heals lets one replica of the agent at a time start a move that
	// re-places replicas (heal.go); NewManager sets it, and without it no
	// replica starts one.
	heals *healLimiter
	// checkpoints holds a slot for each checkpoint being written
	// (Replica.checkpoint); NewManager sets it, and without it checkpoints
	// are not bounded.
	checkpoints chan struct{}
	// Hooks hear of elections and ISR changes.
	Hooks Hooks
	// AnnounceLeadership, when not nil, tells the agents of the other
	// replicas, over their fetch sessions, of a leadership just won
	// (peerapi.Server.AnnounceLeadership); it must not block.
	AnnounceLeadership func(l peer.Leading, replicas []string)
}

// Coordinator is what the partitions ask of Consul: the metadata, the
// liveness watch, elections and ISR changes. election.Client implements
// it, and so does every agent.Coordinator.
type Coordinator interface {
	// Metadata is the latest metadata snapshot.
	Metadata() *election.Snapshot
	// CampaignAs blocks until this agent leads the partition, at an epoch
	// above the candidate's log's.
	CampaignAs(ctx context.Context, topic string, partition int, cand election.Candidate) (*election.Leadership, error)
	// ProposeISR writes an ISR change, and the eligible leader replicas it
	// leaves, with the guarded transaction.
	ProposeISR(ctx context.Context, topic string, partition int, epoch int32, isr []string, elr []election.EligibleReplica) error
	// CompleteReassign writes a reassignment's completion: the ISR change
	// with the replicas set to the target and the move deleted, guarded
	// by the indexes of the snapshot it was decided from.
	CompleteReassign(ctx context.Context, topic string, partition int, epoch int32, m election.Reassignment, replicasIndex, reassignIndex uint64, isr []string, elr []election.EligibleReplica) error
	// StartReassignFrom starts a move of the partition's replicas to
	// target (self-healing's re-placing of dead or drained replicas),
	// refused unless the partition is still as from, the metadata the
	// target was chosen from.
	StartReassignFrom(ctx context.Context, topic string, partition int, from election.DecidedFrom, target []string) (election.Reassignment, bool, error)
	// CancelReassignFrom cancels the move whose reassign key is at
	// reassignIndex (a stalled self-healing move), refused when the
	// partition has another move by then.
	CancelReassignFrom(ctx context.Context, topic string, partition int, reassignIndex uint64) (election.Reassignment, error)
	// Liveness is the latest word of Consul on which agents are dead (the
	// watch starts on first use): leaders drop dead replicas from the ISR.
	Liveness() *election.Liveness
}

// Role is what a replica does for its partition.
type Role uint8

const (
	RoleNone Role = iota
	RoleLeader
	RoleFollower
)

func (r Role) String() string {
	switch r {
	case RoleLeader:
		return "leader"
	case RoleFollower:
		return "follower"
	default:
		return "none"
	}
}

// View is what request handlers read without asking the loop.
type View struct {
	Role Role
	// Epoch is this replica's epoch when leading, the epoch it follows, or
	// the metadata's.
	Epoch int32
	// Leader is the agent a follower follows at Epoch: the metadata's
	// leader, or one that announced a newer epoch over its fetch session
	// (docs/design.md §7.9). Empty unless following.
	Leader string
	// ISR is the committed ISR: the leader's own when leading, else the
	// metadata's.
	ISR []string
	// DataLoss says this replica lost acknowledged data and is fetching it
	// again: it does not lead and is not a follower read source.
	DataLoss bool
}

// InSync says whether node is in the view's ISR.
func (v *View) InSync(node string) bool { return slices.Contains(v.ISR, node) }

// replicaMeta is the partition as the latest metadata snapshot shows it.
type replicaMeta struct {
	pm election.PartitionMeta
	tc election.TopicConfig
	// usable is false for a topic whose metadata is corrupt: it is never
	// led, and nothing is decided from it.
	usable bool
	// draining are the partition's replicas on agents being drained: a
	// drain's start or end is a change of the replica's metadata, which
	// wakes it (no timer does).
	draining []string
}

type followTarget struct {
	node  string
	epoch int32
}

type pendingProduce struct {
	reply      chan ProduceOutcome
	base, last int64
	epoch      int32
	duplicate  bool
}

// Intervals of the loop.
const (
	// leaderTickMin and leaderTickMax bound a leader's tick, which is
	// otherwise a tenth of lag_time_max, so a lagging follower leaves the
	// ISR at most that late (docs/design.md §7); a new leader ticks at the
	// least until its first adjustLeaderTick.
	leaderTickMin = 50 * time.Millisecond
	leaderTickMax = time.Second
	// CheckpointInterval is how long a replica's log waits, once it has
	// something to checkpoint (segstore.Log.CheckpointPending), before the
	// checkpoint; a full disk refuses those too, and the next is due as
	// long again later. An idle log is not checkpointed, so its replica
	// does not wake.
	CheckpointInterval = 5 * time.Second
	retentionInterval  = time.Minute
	reopenBackoff      = 5 * time.Second
	campaignBackoff    = time.Second
	failBackoffMin     = time.Second
	failBackoffMax     = 30 * time.Second
	failBackoffReset   = 2 * time.Minute
	isrRetryBackoff    = 200 * time.Millisecond
	// markRetryMin and markRetryMax bound the wait before the next write
	// of a replica.json whose write failed (setDataLoss).
	markRetryMin = time.Second
	markRetryMax = 30 * time.Second
	// preferredLeaderGrace is how long a replica other than the first of
	// its partition's replica list waits before campaigning for a partition
	// that never had a leader, so that the preferred replica wins and a new
	// topic's leaders spread over the agents as its assignment does; and
	// how often it looks again while it waits longer for a live one.
	preferredLeaderGrace = 500 * time.Millisecond
	// preferredLeaderHold is how long, in all, it waits while Consul
	// reports the preferred replica alive: an agent opening thousands of
	// new partitions reaches each a few seconds before or after the
	// others, and every partition a non-preferred replica wins is a
	// handover later, one every two seconds per agent (docs/design.md §6).
	preferredLeaderHold = 10 * time.Second
	// eventQueue bounds the events waiting for the loop; senders block.
	eventQueue = 256
)

func newReplica(deps *Deps, topic string, partition int, topicID, dir string, log *segstore.Log, dataLoss bool) *Replica {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Replica{
		deps:          deps,
		topic:         topic,
		partition:     partition,
		topicID:       topicID,
		dir:           dir,
		log:           deps.Log.Named("replica").With("topic", topic, "partition", partition),
		changed:       newBroadcast(),
		events:        make(chan any, eventQueue),
		metaSignal:    make(chan struct{}, 1),
		fetchSignal:   make(chan struct{}, 1),
		unparkSignal:  make(chan struct{}, 1),
		ctx:           ctx,
		cancel:        cancel,
		done:          make(chan struct{}),
		dataLoss:      dataLoss,
		acks:          map[replicate.AckID]pendingProduce{},
		parkedBy:      map[string]uint64{},
		followBackoff: backoffDelay{min: 50 * time.Millisecond, max: 2 * time.Second},
		failBackoff:   backoffDelay{min: failBackoffMin, max: failBackoffMax},
		markBackoff:   backoffDelay{min: markRetryMin, max: markRetryMax},
	}
	r.segLog.Store(log)
	r.view.Store(&View{DataLoss: dataLoss})
	return r
}

// start runs the loop.
func (r *Replica) start() {
	r.startSyncer(r.segLog.Load())
	go r.run()
}

// Stop ends the loop: a leader stops acknowledging (pending writes fail with
// not_leader), and the log is closed. It returns the log's Close error once
// every goroutine of the replica has ended. Cancelling r.ctx ends the
// campaign and an ISR proposal at once; what cannot be cancelled is
// bounded: a resignation by peer.CallTimeout (fasthttp requests take no
// context). A follower's fetch
// in flight belongs to the manager's fetch sessions, which drop it (Forget)
// and whose Close waits for them.
func (r *Replica) Stop() error {
	r.cancel()
	<-r.done
	r.tasks.Wait()
	return r.closeErr
}

// setMeta hands the loop the partition's latest metadata; only the latest
// value is kept, so the manager never waits for a busy loop.
func (r *Replica) setMeta(m replicaMeta) {
	r.metaMu.Lock()
	r.pendingMeta = &m
	r.metaMu.Unlock()
	select {
	case r.metaSignal <- struct{}{}:
	default:
	}
}

// leaderAnnounced hands the loop a leader's own word that it leads the
// partition at an epoch (a leading frame of its fetch session, docs/design.md
// §7.9); only the newest is kept, and the caller never waits for a busy
// loop.
func (r *Replica) leaderAnnounced(t followTarget) {
	r.metaMu.Lock()
	if t.epoch > r.pendingAnnounced.epoch {
		r.pendingAnnounced = t
	}
	r.metaMu.Unlock()
	select {
	case r.metaSignal <- struct{}{}:
	default:
	}
}

// CurrentLog is the open log. It changes only when a failed log is reopened.
func (r *Replica) CurrentLog() *segstore.Log { return r.segLog.Load() }

// TopicID is the incarnation of the topic this replica holds
// (election.TopicConfig.ID).
func (r *Replica) TopicID() string { return r.topicID }

// CurrentView is the replica's published state.
func (r *Replica) CurrentView() *View { return r.view.Load() }

// Changed returns a channel closed by the next change of the log (an
// append, a new high watermark, a truncation) or of the role or epoch: a
// waiter takes it, re-checks its condition, then blocks on it.
func (r *Replica) Changed() <-chan struct{} { return r.changed.wait() }

// Done is closed once the loop has stopped.
func (r *Replica) Done() <-chan struct{} { return r.done }

// WaitFor holds a request until cond holds, wait passes, stop or done
// closes (nil for never) or the replica stops, re-checking cond on every
// change (Changed). The agent's long polls share it: a client's fetch, a
// Kafka fetch and a follower's fetch, with stop closed when the agent
// stops.
func (r *Replica) WaitFor(wait time.Duration, stop, done <-chan struct{}, cond func() bool) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		changed := r.Changed()
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			return
		case <-stop:
			return
		case <-done:
			return
		case <-r.Done():
			return
		}
	}
}

// send delivers an event to the loop unless the replica stops first.
func (r *Replica) send(ev any) bool {
	select {
	case r.events <- ev:
		return true
	case <-r.ctx.Done():
		return false
	}
}

func (r *Replica) run() {
	defer func() {
		close(r.done)
		// Fetch sessions holding a fetch for this replica look at Done.
		r.changed.notify()
	}()
	r.loadProducers()
	r.wakeTimer = time.NewTimer(time.Hour)
	r.wakeTimer.Stop()
	defer r.wakeTimer.Stop()

	for {
		var leadershipDone <-chan struct{}
		var tick <-chan time.Time
		// observed: the wake was a metrics scrape's read of the
		// followers' progress, which the wake count leaves out.
		observed := false
		if r.leadership != nil {
			leadershipDone, tick = r.leadership.Done(), r.leaderTicker.C
		}
		select {
		case <-r.ctx.Done():
			r.shutdown()
			return
		case ev := <-r.events:
			// select picks among ready cases at random: an ended
			// leadership must be handled before a queued request, or a
			// produce could be appended and acknowledged after it.
			r.stepDownIfLeadershipEnded()
			r.handle(ev)
			_, observed = ev.(progressRequest)
		case <-r.fetchSignal:
			for _, ev := range r.takeFetchAnswers() {
				r.onFetchAnswered(ev)
			}
		case <-r.unparkSignal:
			r.stepDownIfLeadershipEnded()
			r.takeUnparks()
		case <-r.metaSignal:
			r.metaMu.Lock()
			m := r.pendingMeta
			r.pendingMeta = nil
			if a := r.pendingAnnounced; a.epoch > r.announced.epoch {
				r.announced = a
			}
			r.metaMu.Unlock()
			if m != nil {
				prev := r.meta.tc
				r.meta = *m
				if !bytes.Equal(prev.Storage, m.tc.Storage) {
					r.applyTopicStorage()
				}
			}
		case <-leadershipDone:
			r.stepDownIfLeadershipEnded()
		case <-tick:
			// A tick may be chosen over a closed Done as well: no ISR
			// proposal from a leadership that ended.
			r.stepDownIfLeadershipEnded()
			if r.leader != nil {
				r.leader.Tick(r.deps.Now())
				r.processLeaderReady()
			}
		case <-r.livenessChanged():
			r.stepDownIfLeadershipEnded()
			if r.leader != nil {
				r.applyLiveness()
			}
		case <-r.wakeTimer.C:
			r.wakeAt = time.Time{}
			// The wake may be an awaited ack's deadline (armWake).
			r.stepDownIfLeadershipEnded()
			if r.leader != nil {
				r.leader.Tick(r.deps.Now())
				r.processLeaderReady()
			}
		}
		if !observed {
			r.deps.Hooks.loopWoke()
		}
		r.reconcile()
	}
}

// stepDownIfLeadershipEnded steps down when the leadership this replica
// leads under has ended.
func (r *Replica) stepDownIfLeadershipEnded() {
	if r.leadership == nil {
		return
	}
	select {
	case <-r.leadership.Done():
		r.stepDown(fmt.Errorf("leadership ended: %w", r.leadership.Err()), false)
	default:
	}
}

func (r *Replica) handle(ev any) {
	switch ev := ev.(type) {
	case *produceRequest:
		r.onProduce(ev)
	case *produceGroupRequest:
		r.onProduceGroup(ev)
	case *leaderFetchRequest:
		r.onLeaderFetch(ev)
	case *epochQueryRequest:
		r.onEpochQuery(ev)
	case campaignResult:
		r.onCampaignResult(ev)
	case syncResult:
		r.onSyncResult(ev)
	case checkpointResult:
		r.onCheckpointResult(ev)
	case isrResult:
		r.onISRResult(ev)
	case retireRequest:
		r.onRetire(ev)
	case retireStepDown:
		r.onRetireStepDown()
	case handoverRequest:
		r.onHandoverRequest(ev)
	case handoverReleased:
		r.onHandoverReleased(ev)
	case progressRequest:
		r.onProgress(ev)
	case healResult:
		r.onHealResult(ev)
	case healCancelResult:
		r.onHealCancelResult(ev)
	default:
		panic(fmt.Sprintf("agent: replica event of unknown type %T", ev))
	}
}

// reconcile runs after every event: it moves the replica towards what the
// metadata asks (campaign, follow the leader), retries what backed off, and
// arms the wake timer for the next retry.
func (r *Replica) reconcile() {
	now := r.deps.Now()
	if r.markStale && !now.Before(r.markRetryAt) {
		r.recordDataLoss()
	}
	if r.logFailed && !now.Before(r.reopenAt) {
		r.reopen()
	}
	// A checkpoint CheckpointInterval after the log has something to
	// checkpoint; retention and producer expiry every retentionInterval
	// while they could remove something.
	r.runWhenDue(now, &r.checkpointAt, CheckpointInterval, r.checkpoint, r.CurrentLog().CheckpointPending)
	r.runWhenDue(now, &r.retentionAt, retentionInterval, r.retain, r.retentionPending)
	if r.role == RoleLeader {
		if r.isrRetry != nil && !now.Before(r.isrRetryAt) {
			p := r.isrRetry
			r.isrRetry = nil
			r.propose(*p, true)
		}
		r.applyMinInsyncReplicas()
		r.driveReassign(now)
		r.cancelStalledHeal(now)
		r.maybeHeal(now)
		r.maybeMoveToPreferred(now)
	}
	if r.handover != nil {
		r.driveHandover(now)
	}
	if r.role != RoleLeader && !r.logFailed && r.meta.usable {
		r.ensureCampaign(now)
		target, led := r.leaderToFollow()
		if led && (target != r.following || (r.follower == nil && !now.Before(r.followRetryAt))) {
			r.becomeFollower(target)
		}
		r.driveFollower()
	}
	r.publish()
	r.armWake(now)
	r.adjustLeaderTick()
}

// leaderToFollow is the leader this replica should follow, and false when
// there is none: the metadata's, or one that announced itself over its
// fetch session at a newer epoch (docs/design.md §7.9), ahead of the
// metadata watch. Following it needs no more trust than following the
// metadata: every fetch is fenced by the leader's epoch. An announcement
// of an agent that is not a replica of the partition is not followed: it
// can never lead it, and the newest announcement is kept.
func (r *Replica) leaderToFollow() (followTarget, bool) {
	pm := r.meta.pm
	target := followTarget{node: pm.State.Leader, epoch: pm.State.Epoch}
	led := target.node != "" && target.node != r.deps.Self && pm.LeaderSession != ""
	if a := r.announced; a.epoch > target.epoch && a.node != r.deps.Self && slices.Contains(pm.Replicas, a.node) {
		return a, true
	}
	return target, led
}

// adjustLeaderTick ticks a leader every lag_time_max/10 (at most
// leaderTickMax, at least leaderTickMin) while the clock alone may change
// something (replicate.Leader.TickNeeded: ISR lag, an awaited ack) or its
// housekeeping may come due, and not at all otherwise: thousands of idle
// leaders ticking were a cost that grew with partitions. An awaited ack's
// deadline is met by the wake timer (armWake), not by a fast tick: 3,334
// leaders awaiting acks, each ticking every 50 ms, were 66,000 loop runs a
// second more for an agent already short of CPU (docs/design.md §7). Every
// change of the leader's state comes through the loop, which runs this
// after it.
func (r *Replica) adjustLeaderTick() {
	if r.leader == nil || r.leaderTicker == nil {
		return
	}
	var every time.Duration
	if r.leader.TickNeeded() || r.housekeepingPending() {
		every = max(leaderTickMin, min(leaderTickMax, r.deps.Config.Replication.LagTimeMax/10))
	}
	if every == r.leaderTickEvery {
		return
	}
	if every == 0 {
		r.leaderTicker.Stop()
	} else {
		r.leaderTicker.Reset(every)
	}
	r.leaderTickEvery = every
}

// housekeepingPending says a leader has work that may come due without an
// event, which its idle tick looks for again: a move back to the preferred
// replica (due leader_rebalance_delay after it is in sync, and spaced by
// the agent's move limiter), re-placing dead or drained replicas (which
// waits for a healing slot, seen in the next metadata snapshot), a
// reassignment in progress. A leader with none of these, the preferred
// replica of a partition whose replicas all live, is not ticked.
func (r *Replica) housekeepingPending() bool {
	pm := r.meta.pm
	return (r.deps.Config.Replication.AutoLeaderRebalance && len(pm.Replicas) > 0 && pm.Replicas[0] != r.deps.Self) ||
		len(r.deadReplicas) > 0 || len(r.meta.draining) > 0 || pm.Reassign != nil
}

// armWake sets the wake timer to the earliest pending retry or awaited
// ack's deadline.
func (r *Replica) armWake(now time.Time) {
	var next, ackDeadline time.Time
	if r.leader != nil {
		if d, ok := r.leader.NextAckDeadline(); ok {
			// One already past (the loop was busy) is failed by the
			// tick of the wake right after.
			ackDeadline = d
			if !d.After(now) {
				ackDeadline = now.Add(time.Millisecond)
			}
		}
	}
	reopenAt := r.reopenAt
	if r.logFailed && !reopenAt.After(now) {
		// Failed by work reconcile did after its reopen check: nothing
		// else may wake the loop to reopen.
		reopenAt = now.Add(time.Millisecond)
	}
	var markRetryAt time.Time
	if r.markStale {
		markRetryAt = r.markRetryAt
	}
	for _, t := range []time.Time{markRetryAt, reopenAt, r.checkpointAt, r.retentionAt, r.isrRetryAt, r.followRetryAt, r.campaignRetryAt, r.handoverWake(), r.reassignRetryAt, r.healWake(), ackDeadline} {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	if next.IsZero() || (!r.wakeAt.IsZero() && !r.wakeAt.After(next) && r.wakeAt.After(now)) {
		return
	}
	r.wakeAt = next
	r.wakeTimer.Reset(next.Sub(now))
}

// publish stores the view handlers read, and wakes held requests when the
// role or epoch changed.
func (r *Replica) publish() {
	v := &View{Role: r.role, DataLoss: r.dataLoss, Epoch: r.meta.pm.State.Epoch, ISR: r.meta.pm.State.ISR}
	switch r.role {
	case RoleLeader:
		v.Epoch, v.ISR = r.leader.Epoch(), r.leaderISR
	case RoleFollower:
		v.Epoch, v.Leader = r.following.epoch, r.following.node
	}
	old := r.view.Load()
	if old.Role == v.Role && old.Epoch == v.Epoch && old.Leader == v.Leader && old.DataLoss == v.DataLoss && slices.Equal(old.ISR, v.ISR) {
		return
	}
	r.view.Store(v)
	if old.Role != v.Role || old.Epoch != v.Epoch {
		r.changed.notify()
	}
}

// ensureCampaign keeps one campaign running while this replica may lead and
// does not: election.Campaign itself waits for the leader key to be free
// and for this replica to be in the ISR.
//
// A partition's first election goes to its preferred replica (the first of
// its replica list, which the assignment rotates over the agents): the
// others hold back preferredLeaderGrace, and up to preferredLeaderHold
// while Consul reports the preferred replica alive, so that the leaders of
// a new topic do not pile up on whichever agent saw it first. Later
// elections (epoch above 0: a failover) do not wait.
//
// No campaign runs while a handover of this replica's own leadership is
// under way: the election client would still hand back the leadership
// being released.
func (r *Replica) ensureCampaign(now time.Time) {
	if r.campaigning || r.dataLoss || r.retiring || r.handover != nil || now.Before(r.campaignRetryAt) {
		return
	}
	if pm := r.meta.pm; pm.State.Epoch == 0 && len(pm.Replicas) > 0 && pm.Replicas[0] != r.deps.Self {
		if r.yieldedAt.IsZero() {
			r.yieldedAt = now
		}
		hold := preferredLeaderGrace
		if !r.deps.Coord.Liveness().Dead(pm.Replicas[0]) {
			hold = preferredLeaderHold
		}
		if until := r.yieldedAt.Add(hold); now.Before(until) {
			r.campaignRetryAt = now.Add(min(until.Sub(now), preferredLeaderGrace))
			return
		}
	}
	cand := election.Candidate{LogEpoch: election.NoEpoch, TopicID: r.topicID}
	if e, ok := r.CurrentLog().LatestEpoch(); ok {
		cand.LogEpoch = e.Epoch
	}
	ctx, cancel := context.WithCancel(r.ctx)
	r.campaigning, r.campaignCancel = true, cancel
	r.tasks.Go(func() {
		l, err := r.deps.Coord.CampaignAs(ctx, r.topic, r.partition, cand)
		if !r.send(campaignResult{leadership: l, err: err}) && l != nil {
			// The loop has stopped and cannot hand it back.
			r.resign(l)
		}
	})
}

// retireRequest asks the loop to stop campaigning for good, the first step
// of a graceful stop; it answers whether the replica leads, which it goes on
// doing until it hands the leadership over.
type retireRequest struct{ leading chan bool }

func (r *Replica) onRetire(ev retireRequest) {
	r.retiring = true
	r.resendFlags()
	r.cancelCampaign()
	ev.leading <- r.role == RoleLeader
}

// retireStepDown ends a stopping replica's leadership without a handover:
// the stop ran out of time for one. The lock is released with the
// session's, once every loop has stopped appending.
type retireStepDown struct{}

func (r *Replica) onRetireStepDown() {
	if r.role == RoleLeader {
		r.stepDown(errors.New("agent stopping"), false)
	}
}

// retire keeps the replica from campaigning again and hands its leadership
// over, if it has one, holding one of slots meanwhile (Manager.RetireAll
// bounds the handovers at once); it returns once that is over, the replica
// stopped, or ctx ended. A leader that gets no slot before ctx ends steps
// down without a handover.
func (r *Replica) retire(ctx context.Context, slots chan struct{}) {
	leading := make(chan bool, 1)
	if !r.send(retireRequest{leading: leading}) {
		return
	}
	select {
	case l := <-leading:
		if !l {
			return
		}
	case <-r.done:
		return
	}
	select {
	case slots <- struct{}{}:
		defer func() { <-slots }()
	case <-ctx.Done():
		r.send(retireStepDown{})
		return
	}
	reply := make(chan (<-chan struct{}), 1)
	if !r.send(handoverRequest{reply: reply}) {
		return
	}
	var over <-chan struct{}
	select {
	case over = <-reply:
	case <-r.done:
		return
	}
	select {
	case <-over:
	case <-r.done:
	case <-ctx.Done():
		r.send(retireStepDown{})
	}
}

func (r *Replica) cancelCampaign() {
	if r.campaignCancel != nil {
		r.campaignCancel()
	}
}

type campaignResult struct {
	leadership *election.Leadership
	err        error
}

func (r *Replica) onCampaignResult(ev campaignResult) {
	r.campaigning = false
	r.campaignCancel = nil
	if ev.err != nil {
		if !errors.Is(ev.err, context.Canceled) && !errors.Is(ev.err, election.ErrClosed) {
			r.log.Warn("campaign failed; retrying", "error", ev.err, "retry_in", campaignBackoff)
		}
		r.campaignRetryAt = r.deps.Now().Add(campaignBackoff)
		return
	}
	l := ev.leadership
	switch {
	case r.role == RoleLeader && r.leadership == l:
	case r.dataLoss || r.logFailed || r.retiring:
		r.log.Warn("won leadership but may not lead: handing it back", "epoch", l.Epoch(), "data_loss", r.dataLoss, "retiring", r.retiring)
		r.resignAsync(l)
	case l.Err() != nil:
		// Lost already; the next campaign starts from fresh metadata.
	default:
		r.becomeLeader(l)
	}
}

// resignAsync releases a leadership without blocking the loop; Stop waits
// for it, so a leader stepping down as it stops still gives the lock back.
func (r *Replica) resignAsync(l *election.Leadership) {
	r.tasks.Go(func() { r.resign(l) })
}

// resign releases a leadership, within peer.CallTimeout. Its context is not
// the replica's: a resignation started by the stop must not be cancelled
// by it.
func (r *Replica) resign(l *election.Leadership) {
	ctx, cancel := context.WithTimeout(context.Background(), peer.CallTimeout)
	defer cancel()
	if err := l.Resign(ctx); err != nil {
		r.log.Warn("resign failed; the lock goes with the session", "epoch", l.Epoch(), "error", err)
	}
}

// startSyncer starts the group-commit goroutine of log: the loop asks for
// a sync with requestSync and hears back with a syncResult. A sync that
// starts while another runs waits for it, so one fsync covers every append
// made before it started.
func (r *Replica) startSyncer(log *segstore.Log) {
	req := make(chan struct{}, 1)
	stop := make(chan struct{})
	r.syncReq, r.syncerStop = req, stop
	r.tasks.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-req:
			}
			offset, err := log.Sync()
			if !r.send(syncResult{log: log, offset: offset, err: err}) {
				return
			}
		}
	})
}

func (r *Replica) requestSync() {
	select {
	case r.syncReq <- struct{}{}:
	default:
	}
}

type syncResult struct {
	log    *segstore.Log
	offset int64
	err    error
}

func (r *Replica) onSyncResult(ev syncResult) {
	if ev.log != r.CurrentLog() {
		return
	}
	if ev.err != nil {
		r.failLog(fmt.Errorf("fsync: %w", ev.err))
		return
	}
	// A sync that returned before a truncation reports an offset the
	// log no longer vouches for (records appended again since the cut
	// were not fsynced): count only what the log says is synced now.
	ev.offset = min(ev.offset, ev.log.SyncedOffset())
	// A sync that raced a truncation reports the offset synced before it
	// (its fsync may not cover what the log now holds): sync again, or a
	// follower waiting for its log to be durable would wait for ever.
	if r.deps.Durability == replicate.DurabilityFsync && ev.offset < ev.log.LogEndOffset() {
		r.requestSync()
	}
	if ev.offset <= 0 {
		return
	}
	switch {
	case r.leader != nil:
		if err := r.leader.Synced(ev.offset - 1); err != nil {
			r.log.Debug("sync report refused", "error", err)
		}
		r.processLeaderReady()
	case r.follower != nil:
		if err := r.follower.Synced(ev.offset - 1); err != nil {
			r.log.Debug("sync report refused", "error", err)
		}
		// The fsync may make the log durable up to the leader's last
		// positions: the mark clears now, not at an answer that a fetch
		// parked in a session would not get.
		if r.leaderPos != nil {
			r.maybeClearDataLoss(*r.leaderPos)
			r.resendFlags()
		}
	}
}

// failLog handles a log that failed (an I/O error on a write path): stop
// acknowledging, stop following, close it and recover it from disk. A log
// already failed is left alone: results of work started on it (a queued
// sync) may still arrive, also after a reopen that did not succeed.
func (r *Replica) failLog(cause error) {
	if r.logFailed {
		r.log.Debug("partition log already failed", "error", cause)
		return
	}
	now := r.deps.Now()
	again := !r.healthySince.IsZero() && now.Sub(r.healthySince) < failBackoffReset
	if !again {
		r.failBackoff.reset()
	}
	hold := r.failBackoff.next() // applied when the reopen succeeds
	r.log.Error("partition log failed: stepping down and recovering from disk", "error", cause, "campaign_hold", hold)
	if r.role == RoleLeader {
		r.stepDown(cause, true)
	}
	r.stopFollowing()
	r.cancelCampaign()
	close(r.syncerStop)
	if err := r.CurrentLog().Close(); err != nil && !errors.Is(err, segstore.ErrFailed) {
		r.log.Warn("closing the failed log", "error", err)
	}
	r.logFailed = true
	r.reopenAt = time.Time{}
	if again {
		// Failed again soon after a reopen: a fault that comes back (a
		// file that cannot be removed, a disk that keeps failing) waits
		// the hold before the next recovery instead of spinning through
		// recoveries.
		r.reopenAt = now.Add(hold)
	}
}

// reopen opens the log again after a failure, which recovers it. The
// failed log goes along (segstore.Options.Reopen): recovery keeps only what
// its fsyncs covered, and the high watermark it had, so the replica serves
// reads of what was committed at once. A log that lost part of what was
// committed (the cut went below that high watermark, possible when acks
// do not wait for fsync) makes the replica refetch it before it may lead.
// The reopened replica holds back its campaigns for failBackoff.
func (r *Replica) reopen() {
	failed := r.CurrentLog()
	// The topic's own storage settings too: the consumer groups' offsets
	// topic must not take the agent's retention after a failure.
	opts, err := LogOptionsFor(r.deps.LogOptions, r.meta.tc)
	if err != nil {
		r.log.Error("cannot reopen the partition log; retrying", "error", err, "retry_in", reopenBackoff)
		r.reopenAt = r.deps.Now().Add(reopenBackoff)
		return
	}
	opts.Logger = r.deps.Log.Named("segstore")
	opts.Reopen = failed
	log, dataLoss, err := openPartitionLog(r.deps.FS, r.dir, opts, r.writeDataLossMark)
	if err != nil {
		r.log.Error("cannot reopen the partition log; retrying", "error", err, "retry_in", reopenBackoff)
		r.reopenAt = r.deps.Now().Add(reopenBackoff)
		return
	}
	r.segLog.Store(log)
	r.startSyncer(log)
	r.logFailed = false
	r.loadProducers()
	// What the cut may have taken that a leader counted on: below this
	// replica's own high watermark, and below what it reported holding
	// (in "replicated" durability the leader's HW passes unsynced bytes
	// here before this replica learns it).
	committed := max(failed.HighWatermark(), r.reportedEnd, r.leaderHW)
	if dataLoss || log.LogEndOffset() < committed {
		r.setDataLoss(true)
	}
	r.healthySince = r.deps.Now()
	r.campaignRetryAt = r.healthySince.Add(r.failBackoff.cur)
	r.changed.notify()
	r.log.Info("partition log reopened", "log_end_offset", log.LogEndOffset(), "log_end_offset_was", failed.LogEndOffset(),
		"high_watermark", log.HighWatermark(), "campaign_hold", r.failBackoff.cur)
}

// writeDataLossMark records durably that this replica lost data, before
// the log is cut.
func (r *Replica) writeDataLossMark() error {
	return r.writeReplicaFile(true)
}

// writeReplicaFile replaces this replica's replica.json with dataLoss.
func (r *Replica) writeReplicaFile(dataLoss bool) error {
	return writeReplicaFile(r.deps.FS, r.dir, replicaFile{Topic: r.topic, Partition: r.partition, TopicID: r.topicID, DataLoss: dataLoss})
}

// setDataLoss records, durably, whether this replica lost acknowledged data.
// The mark takes effect in memory at once; a write of replica.json that
// fails is retried by the loop (recordDataLoss) until one succeeds: a mark
// that only memory held would be gone at the next start, and the replica
// would trust a log that misses acknowledged records, and could lead with
// it.
//
// Clearing the mark clears it in memory at once too, whether or not the
// write of false succeeds: the replica has just shown that its log holds
// what the leader committed (maybeClearDataLoss), and a mark left on disk
// only makes the next start fetch up to the leader again before it leads,
// which costs time, never data. Keeping the mark in memory until that
// write succeeded would keep a replica that holds the committed log out of
// the ISR (and acks=all writes refused under min_insync_replicas) for as
// long as its disk refuses one small file.
func (r *Replica) setDataLoss(lost bool) {
	if lost {
		r.cancelCampaign()
	}
	if r.dataLoss == lost {
		return
	}
	r.dataLoss = lost
	if lost {
		r.log.Warn("replica lost acknowledged data: it will not lead until it has fetched it again")
	} else {
		r.log.Info("replica fetched back the data it had lost: it may lead again")
	}
	r.markStale = true
	r.markBackoff.reset()
	r.recordDataLoss()
}

// recordDataLoss writes dataLoss into replica.json; after a failure the
// loop tries again at markRetryAt, each time with a fresh write of the
// file (writeFileAtomic: a new temporary file, fsynced, renamed over it).
func (r *Replica) recordDataLoss() {
	err := r.writeReplicaFile(r.dataLoss)
	if err == nil {
		if r.markBackoff.cur > 0 {
			r.log.Info("data loss state recorded after failed writes", "data_loss", r.dataLoss)
		}
		r.markStale, r.markRetryAt = false, time.Time{}
		r.markBackoff.reset()
		return
	}
	delay := r.markBackoff.next()
	r.markRetryAt = r.deps.Now().Add(delay)
	r.log.Error("cannot record the data loss state; retrying", "data_loss", r.dataLoss, "error", err, "retry_in", delay)
}

// runWhenDue runs work once *at has come, and sets *at to every from now
// when pending says there is work again: a replica with nothing to do arms
// no timer. A failed log does neither.
func (r *Replica) runWhenDue(now time.Time, at *time.Time, every time.Duration, work func(), pending func() bool) {
	if r.logFailed {
		return
	}
	if !at.IsZero() && !now.Before(*at) {
		*at = time.Time{}
		work()
		if r.logFailed {
			return
		}
	}
	if at.IsZero() && pending() {
		*at = now.Add(every)
	}
}

// retentionPending says retention or the producers' expiry could remove
// something: a segment besides the active one, or producer state.
func (r *Replica) retentionPending() bool {
	return r.CurrentLog().HasSealedSegments() || (r.producers != nil && (r.producers.Len() > 0 || r.producersDirty))
}

// checkpointConcurrency bounds the checkpoints an agent's replicas write at
// once. A failover gives one agent thousands of new leaderships whose
// checkpoints (each up to three files, each written, fsynced, renamed and
// its directory fsynced) come due within seconds of each other: 812 of one
// agent's goroutines were in those file system calls at once, each holding
// an OS thread, with the acknowledgements' own fsyncs queued behind them
// (docs/design.md §5, "Checkpoint").
const checkpointConcurrency = 8

// checkpoint writes the log's checkpoint off the loop, which goes on
// serving while the checkpoint waits for a slot (Deps.checkpoints) and is
// written; the result comes back as a checkpointResult. The log is safe to
// checkpoint beside the loop's own use of it, as it is to sync.
func (r *Replica) checkpoint() {
	if r.logFailed || r.checkpointing {
		return
	}
	r.checkpointing = true
	log := r.CurrentLog()
	slots := r.deps.checkpoints
	r.tasks.Go(func() {
		if slots != nil {
			select {
			case slots <- struct{}{}:
			case <-r.ctx.Done():
				return // the log's Close writes the checkpoint
			}
		}
		err := log.Checkpoint()
		if slots != nil {
			<-slots
		}
		r.send(checkpointResult{log: log, err: err})
	})
}

type checkpointResult struct {
	log *segstore.Log
	err error
}

func (r *Replica) onCheckpointResult(ev checkpointResult) {
	r.checkpointing = false
	if ev.log != r.CurrentLog() {
		return // a failed log, since reopened
	}
	switch {
	case ev.err == nil:
	case errors.Is(ev.err, segstore.ErrNoSpace) && !errors.Is(ev.err, segstore.ErrFailed):
		// The checkpoints on disk are older but whole; the next one due
		// tries again.
		r.log.Warn("cannot checkpoint the partition log: its disk is full", "error", ev.err)
	default:
		r.failLog(fmt.Errorf("checkpoint: %w", ev.err))
	}
}

// retain applies retention and then maintains the producer state, whose
// snapshot must not end below the new log start (maintainProducers): a
// restart in between would forget the producers of the deleted batches.
func (r *Replica) retain() {
	r.applyRetention()
	r.maintainProducers()
}

func (r *Replica) applyRetention() {
	if r.logFailed {
		return
	}
	log := r.CurrentLog()
	start := log.LogStartOffset()
	if _, err := log.ApplyRetention(log.HighWatermark()); err != nil {
		if errors.Is(err, segstore.ErrFailed) {
			r.failLog(fmt.Errorf("retention: %w", err))
			return
		}
		r.log.Warn("retention failed", "error", err)
	}
	if log.LogStartOffset() != start {
		r.LogTrimmed()
	}
}

// LogTrimmed tells the replica's waiters that its log start moved (the
// log's segments below it were deleted): fetches parked in a session are
// answered, so that followers delete theirs too.
func (r *Replica) LogTrimmed() { r.changed.notify() }

// shutdown ends the loop's work when the replica stops.
func (r *Replica) shutdown() {
	defer func() {
		if !r.markStale {
			return
		}
		// A last try: the next start knows only what the file says.
		r.recordDataLoss()
		if r.markStale && r.dataLoss {
			r.closeErr = errors.Join(r.closeErr, fmt.Errorf("agent: %s: stopped with its data loss not recorded in %s: the next start may trust a log that misses acknowledged records", r.dir, replicaFileName))
		}
	}()
	if r.role == RoleLeader {
		r.stepDown(errors.New("replica stopping"), r.leadership.Err() == nil)
	}
	if r.handover != nil {
		r.finishHandover("replica stopping")
	}
	r.stopFollowing()
	r.cancelCampaign()
	if r.logFailed {
		// Not recovered yet: recover it now, so that what its failed
		// fsyncs did not cover is cut and checked against what was
		// acknowledged (data_loss), which the next start could not do.
		r.reopen()
		if r.logFailed {
			r.closeErr = fmt.Errorf("agent: %s: stopped with its log failed and not recovered", r.dir)
			return
		}
	}
	close(r.syncerStop)
	if r.producersDirty {
		r.writeProducerSnapshot()
	}
	if err := r.CurrentLog().Close(); err != nil {
		r.closeErr = fmt.Errorf("agent: close %s: %w", r.dir, err)
	}
}

// backoffDelay doubles from min to max on every failure.
type backoffDelay struct {
	min, max, cur time.Duration
}

func (b *backoffDelay) next() time.Duration {
	b.cur = min(max(b.cur*2, b.min), b.max)
	return b.cur
}

func (b *backoffDelay) reset() { b.cur = 0 }
