package replicate

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/testseed"
)

// simIterationsEnv sets how many seeded runs TestRandomizedReplication does
// (default simDefaultIterations, a few seconds under -race); `make torture`
// raises it. Run i uses seed LOGAGENT_TEST_SEED+i, so a failing run repeats
// with its own seed and 1 iteration.
const (
	simIterationsEnv     = "LOGAGENT_REPLICATE_SIM_ITERATIONS"
	simDefaultIterations = 100
	simFaultSteps        = 1500
	simHealSteps         = 20000
)

// TestRandomizedReplication runs a leader and two followers through a
// simulated network that drops, delays and reorders messages, random crashes
// that lose what was not fsynced (fsync mode) or nothing (replicated mode: a
// process crash keeps the page cache), and leader changes with epoch bumps,
// including zombie leaders that learn late that they lost. Leaders hear
// which nodes are dead (the crashed ones, and now and then a live one). A model of Consul
// elects leaders from the ISR and applies ISR changes only from the current
// leader. Followers fetch on fetch sessions (sim_park_test.go), where a
// fetch with nothing to answer is parked as the agent parks it and answered
// late (an append, a HW move, a leadership change, another fetch, or for no
// reason of the leader's), or let go of by a forget or the session's end;
// producers pause now and then so that parks last. It checks, at every
// step:
//
//   - no record below any replica's HW ever changes or disappears, so
//     replicas are identical below the HW, and every acknowledged acks=all
//     record is among them;
//   - every new leader has every such record;
//   - a follower never truncates below its own HW;
//   - a leader's HW never goes backwards within its epoch, and never
//     passes the fetch offset a member of its maximal ISR last sent:
//     parks and unparks never move a follower's position;
//   - a leader never counts a follower caught up later than the latest
//     time its log end was at most what the follower fetched (or when it
//     started leading, or the follower joined the ISR);
//   - a parked follower is proposed for removal for lag only once an
//     append passed its park more than lag_time_max ago, and then by the
//     first tick with no change in flight;
//
// and, once faults stop, that the replicas converge to identical logs that
// hold every acknowledged record.
func TestRandomizedReplication(t *testing.T) {
	iterations := simDefaultIterations
	if s := os.Getenv(simIterationsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive count", simIterationsEnv, s)
		}
		iterations = n
	}
	base := testseed.Seed(t)
	for i := range iterations {
		seed := base + uint64(i)
		if !t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { newSim(t, seed).run() }) {
			break
		}
	}
}

type simMessageKind uint8

const (
	msgFetch simMessageKind = iota
	msgFetchResponse
	msgTimeout
	msgMetadata
	msgISRTxn
	msgISRTxnResult
	msgForget
)

// simMessage is anything in flight: a follower request or its answer, a
// request timeout, a metadata update from the watch, an ISR transaction.
type simMessage struct {
	at   time.Time
	seq  int
	kind simMessageKind
	from string
	to   string // "" for the controller
	// gen and reqID tie an answer or a timeout to the request's sender and
	// role: a stale one is ignored, as the agent ignores a late answer. A
	// forget's reqID is the fetch it forgets.
	gen   int
	reqID int
	// session is a fetch's session, 0 for a GET; knownHW the leader HW
	// its follower knows.
	session int
	knownHW int64

	fetch     FetchRequest
	result    FetchResult
	records   []memRecord
	leaderEnd int64
	err       error
	view      simView
	isr       []string
	epoch     int32
	committed bool
}

// simView is Consul's partition state, as the controller has it and as each
// node last saw it.
type simView struct {
	version int
	epoch   int32
	leader  string // "" while no one leads
	isr     []string
}

type simNode struct {
	id      string
	log     *memLog
	up      bool
	restart time.Time
	gen     int
	view    simView

	leader   *Leader
	leaderHW int64 // the leader's last HW in this role, to check it only grows

	follower      *Follower
	followLeader  string
	outstanding   int // reqID of the follower's request in flight
	backoff       bool
	knownLeaderHW int64
	// sessions are the follower side's open fetch sessions, by leader.
	sessions map[string]int

	// lv is the current (or last) leadership; parks are the fetches its
	// sessions hold, unparks those the loop has not taken yet.
	lv      *simLeadership
	parks   []*simPark
	unparks []simUnpark
	// sessionSeen is the latest request each session brought.
	sessionSeen map[int]int

	checkedHW int64 // records below it were checked against the committed prefix
}

type simAck struct {
	first  int64
	acks   Acks
	values []memRecord
}

type sim struct {
	t          *testing.T
	seed       uint64
	rng        *rand.Rand
	durability Durability
	minISR     int
	lagTimeMax time.Duration
	start, now time.Time
	faults     bool

	nodes []*simNode
	ctl   simView
	// offlineSince is when the controller lost its leader (lock delay).
	offlineSince time.Time
	// wronglyDead is a live node Consul's liveness calls dead until
	// wronglyDeadUntil (a stale view, a check that flapped): that may cost
	// availability, never an acknowledged record.
	wronglyDead      string
	wronglyDeadUntil time.Time

	queue       []*simMessage
	seq         int
	nextReq     int
	nextSession int
	// producePct is the run's chance of a write per step, and quietUntil
	// ends a pause of the producers: both let fetches park, some for
	// longer than lag_time_max.
	producePct int
	quietUntil time.Time

	// committed is the longest prefix any replica had below its HW; every
	// replica's records below its HW must match it.
	committed []memRecord
	acked     map[int64]memRecord
	acks      map[AckID]simAck
	nextAck   AckID
	nextValue int

	trace []string
	stats struct {
		produced, acked, crashes, elections, isrChanges, truncations, diverging, wrongDeaths int
		// parks: fetches parked; passedParks: parks an append passed;
		// parkAnswers: parked fetches answered, by what woke them;
		// lateAnswers: answered more than lag_time_max after an append
		// passed them; sessionEnds and forgets: parks let go of
		// without an answer; refusedUnparks: parks a refused fetch
		// ended; staleUnparks: unparks the loop dropped (not held, or
		// no longer leading); parkedRemovals: parked followers
		// proposed for removal.
		parks, passedParks, lateAnswers, sessionEnds, forgets, refusedUnparks, staleUnparks, parkedRemovals int
		parkAnswers                                                                                         map[string]int
	}
}

func newSim(t *testing.T, seed uint64) *sim {
	rng := newRand(seed)
	s := &sim{
		t:          t,
		seed:       seed,
		rng:        rng,
		durability: []Durability{DurabilityFsync, DurabilityReplicated}[rng.IntN(2)],
		minISR:     1 + rng.IntN(2),
		lagTimeMax: 100 * time.Millisecond,
		producePct: 10 + rng.IntN(21),
		start:      t0,
		now:        t0,
		faults:     true,
		acked:      make(map[int64]memRecord),
		acks:       make(map[AckID]simAck),
	}
	s.stats.parkAnswers = map[string]int{}
	for _, id := range []string{"n1", "n2", "n3"} {
		s.nodes = append(s.nodes, &simNode{id: id, log: newMemLog(), up: true})
	}
	s.ctl = simView{isr: []string{"n1", "n2", "n3"}}
	return s
}

func (s *sim) replicaIDs() []string { return []string{"n1", "n2", "n3"} }

func (s *sim) node(id string) *simNode {
	for _, n := range s.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

func (s *sim) tracef(format string, args ...any) {
	const keep = 400
	if len(s.trace) == keep {
		s.trace = s.trace[1:]
	}
	s.trace = append(s.trace, fmt.Sprintf("%8.3fms ", float64(s.now.Sub(s.start).Microseconds())/1000)+fmt.Sprintf(format, args...))
}

// fail reports a violation with the recent history and how to repeat it.
func (s *sim) fail(format string, args ...any) {
	s.t.Helper()
	for _, line := range s.trace {
		s.t.Log(line)
	}
	for _, n := range s.nodes {
		s.t.Logf("%s up=%t gen=%d log=%v", n.id, n.up, n.gen, n.log)
		for _, p := range n.parks {
			s.t.Logf("%s holds %s's fetch %+v parked at %s (session %d, answer at %s, end at %s)", n.id, p.from, p.fetch, s.at(p.parkedAt), p.session, s.at(p.answerAt), s.at(p.endAt))
		}
	}
	s.t.Logf("controller %+v; %s, min ISR %d", s.ctl, s.durability, s.minISR)
	s.t.Fatalf("seed %d (repeat with %s=%d %s=1): %s", s.seed, testseed.Env, s.seed, simIterationsEnv, fmt.Sprintf(format, args...))
}

func (s *sim) must(err error) {
	s.t.Helper()
	if err != nil {
		s.fail("unexpected error: %v", err)
	}
}

func (s *sim) run() {
	s.elect(s.nodes[0])
	for range simFaultSteps {
		s.step()
	}
	s.faults = false
	s.tracef("faults stop")
	for i := 0; !s.converged(); i++ {
		if i == simHealSteps {
			s.fail("no convergence %d steps after the faults stopped", simHealSteps)
		}
		s.step()
	}
	s.checkFinal()
	s.t.Logf("%s, min ISR %d: %+v", s.durability, s.minISR, s.stats)
}

func (s *sim) step() {
	s.now = s.now.Add(time.Duration(s.rng.IntN(5000)) * time.Microsecond)
	s.deliverDue()
	for _, n := range s.nodes {
		if !n.up && (!s.faults || !s.now.Before(n.restart)) {
			s.restartNode(n)
		}
	}
	s.maybeElect()
	s.serveParks()
	for _, n := range s.nodes {
		if n.up && len(n.unparks) > 0 && s.rng.IntN(4) == 0 {
			s.takeUnparks(n)
		}
	}
	dead := s.deadNodes()
	for _, n := range s.nodes {
		if n.up && n.leader != nil && !n.leader.Resigned() {
			s.must(n.leader.SetDeadFollowers(dead, s.now))
			n.lv.dead = dead
			s.pumpLeader(n)
			if !n.leader.TickNeeded() {
				// The agent stops ticking such a leader: a Tick at
				// any later time must find nothing to do.
				n.leader.Tick(s.now.Add(time.Hour))
				if n.leader.HasReady() {
					s.fail("%s needed no tick at epoch %d, but a tick an hour later did something: %+v", n.id, n.leader.Epoch(), n.leader.Ready())
				}
			}
			n.leader.Tick(s.now)
			s.pumpLeader(n)
			s.checkParkedLag(n)
		}
	}
	quiet := s.now.Before(s.quietUntil)
	switch r := s.rng.IntN(100); {
	case r < s.producePct && s.faults && !quiet:
		s.produce()
	case r < 60 || !s.faults:
		s.syncNode(s.nodes[s.rng.IntN(len(s.nodes))])
	}
	if s.faults {
		if s.rng.IntN(1000) < 4 {
			s.crash(s.nodes[s.rng.IntN(len(s.nodes))])
		}
		if s.rng.IntN(1000) < 4 {
			s.changeLeader()
		}
		if s.rng.IntN(1000) < 3 {
			s.breakSession()
		}
		if !quiet && s.rng.IntN(1000) < 10 {
			s.quietUntil = s.now.Add(time.Duration(s.rng.IntN(300)) * time.Millisecond)
		}
		if s.rng.IntN(1000) < 3 {
			s.stats.wrongDeaths++
			s.wronglyDead = s.nodes[s.rng.IntN(len(s.nodes))].id
			s.wronglyDeadUntil = s.now.Add(time.Duration(s.rng.IntN(300)) * time.Millisecond)
		}
	}
}

// deadNodes is what Consul's liveness says, as every leader hears it at
// once: the crashed nodes, and while faults last the wrongly dead one.
func (s *sim) deadNodes() []string {
	var dead []string
	for _, n := range s.nodes {
		if !n.up || (s.faults && n.id == s.wronglyDead && s.now.Before(s.wronglyDeadUntil)) {
			dead = append(dead, n.id)
		}
	}
	return dead
}

// send queues m after a random delay; with faults some messages vanish and
// their sender times out. Metadata and ISR transactions are not dropped:
// the watch and the Consul client retry until they get through.
func (s *sim) send(m *simMessage) { s.sendAfter(m, 0) }

// sendAfter is send with an extra delay, a back-off.
func (s *sim) sendAfter(m *simMessage, extra time.Duration) {
	delay := extra + time.Duration(s.rng.IntN(20_000))*time.Microsecond
	if s.rng.IntN(10) == 0 {
		delay = time.Duration(s.rng.IntN(100)) * time.Millisecond
	}
	droppable := m.kind != msgMetadata && m.kind != msgISRTxn && m.kind != msgISRTxnResult && m.kind != msgTimeout && m.kind != msgForget
	if droppable && s.faults && s.rng.IntN(100) < 3 {
		s.tracef("drop %s", s.describe(m))
		s.timeout(m)
		return
	}
	s.seq++
	m.at, m.seq = s.now.Add(delay), s.seq
	s.queue = append(s.queue, m)
}

// timeout tells a request's sender, later, that it got no answer.
func (s *sim) timeout(m *simMessage) {
	requester := m.from
	if m.kind == msgFetchResponse {
		requester = m.to
	}
	s.seq++
	s.queue = append(s.queue, &simMessage{
		at: s.now.Add(50 * time.Millisecond), seq: s.seq, kind: msgTimeout,
		to: requester, gen: m.gen, reqID: m.reqID,
	})
}

func (s *sim) deliverDue() {
	for {
		i := -1
		for j, m := range s.queue {
			if !m.at.After(s.now) && (i < 0 || m.at.Before(s.queue[i].at) || (m.at.Equal(s.queue[i].at) && m.seq < s.queue[i].seq)) {
				i = j
			}
		}
		if i < 0 {
			return
		}
		m := s.queue[i]
		s.queue = slices.Delete(s.queue, i, i+1)
		s.deliver(m)
	}
}

func (s *sim) describe(m *simMessage) string {
	switch m.kind {
	case msgFetch:
		return fmt.Sprintf("fetch %s->%s %+v", m.from, m.to, m.fetch)
	case msgFetchResponse:
		return fmt.Sprintf("fetch answer %s->%s %d records, err %v, diverging %v, hw %d", m.from, m.to, len(m.records), m.err, m.result.Diverging, m.result.HighWatermark)
	case msgTimeout:
		return fmt.Sprintf("timeout of %s's request %d", m.to, m.reqID)
	case msgMetadata:
		return fmt.Sprintf("metadata to %s %+v", m.to, m.view)
	case msgISRTxn:
		return fmt.Sprintf("ISR txn from %s epoch %d %v", m.from, m.epoch, m.isr)
	case msgForget:
		return fmt.Sprintf("forget %s->%s session %d", m.from, m.to, m.session)
	default:
		return fmt.Sprintf("ISR txn result to %s committed %t", m.to, m.committed)
	}
}

func (s *sim) deliver(m *simMessage) {
	if m.kind == msgISRTxn {
		s.applyISRTxn(m)
		return
	}
	n := s.node(m.to)
	if !n.up {
		if m.kind == msgFetch {
			s.timeout(m)
		}
		return
	}
	switch m.kind {
	case msgFetch:
		s.serveFetch(n, m)
	case msgForget:
		s.deliverForget(n, m)
	case msgMetadata:
		s.learn(n, m.view)
	case msgISRTxnResult:
		if n.gen != m.gen || n.leader == nil {
			return
		}
		s.tracef("%s: %s", n.id, s.describe(m))
		n.lv.added = ""
		if m.committed {
			for _, id := range m.isr {
				if !slices.Contains(n.leader.ISR(), id) {
					n.lv.floor[id] = s.now
				}
			}
			s.must(n.leader.ISRCommitted(m.isr, nil, s.now))
		} else {
			s.must(n.leader.ISRProposalFailed())
		}
		s.pumpLeader(n)
	default:
		if n.gen != m.gen || n.outstanding != m.reqID || n.follower == nil {
			return // late: the node moved on
		}
		n.outstanding = 0
		s.tracef("%s: %s", n.id, s.describe(m))
		switch m.kind {
		case msgFetchResponse:
			s.handleFetchResponse(n, m)
		case msgTimeout:
			n.backoff = true
			s.must(n.follower.FetchFailed())
		}
		s.pumpFollower(n)
	}
}

func (s *sim) handleFetchResponse(n *simNode, m *simMessage) {
	f := n.follower
	switch {
	case errors.Is(m.err, ErrOffsetOutOfRange):
		s.must(f.FetchOutOfRange(0, m.leaderEnd))
	case m.err != nil:
		n.backoff = true
		s.must(f.FetchFailed())
	case m.result.Diverging != nil:
		s.stats.diverging++
		n.knownLeaderHW = max(n.knownLeaderHW, m.result.HighWatermark)
		s.must(f.FetchResponded(m.result))
	default:
		if len(m.records) > 0 {
			if n.log.logEnd() != f.LogEndOffset() {
				s.fail("%s's log ends at %d, its follower state at %d", n.id, n.log.logEnd(), f.LogEndOffset())
			}
			if err := n.log.append(m.records...); err != nil {
				s.fail("%s appends fetched records: %v", n.id, err)
			}
			s.must(f.Appended(n.log.logEnd() - 1))
			if s.rng.IntN(2) == 0 {
				s.syncNode(n)
			}
		}
		n.backoff = false
		n.knownLeaderHW = max(n.knownLeaderHW, m.result.HighWatermark)
		s.must(f.FetchResponded(m.result))
	}
}

// pumpFollower does what the follower's Ready asks until it waits on
// something.
func (s *sim) pumpFollower(n *simNode) {
	for n.follower != nil && n.follower.HasReady() {
		rd := n.follower.Ready()
		if rd.HighWatermarkChanged {
			s.checkpointHW(n, rd.HighWatermark)
		}
		switch {
		case rd.Truncate != nil:
			s.truncate(n, *rd.Truncate)
		case rd.Fetch != nil:
			s.sendRequest(n, &simMessage{kind: msgFetch, fetch: *rd.Fetch, session: s.sessionFor(n, n.followLeader), knownHW: n.knownLeaderHW})
		}
	}
}

func (s *sim) sendRequest(n *simNode, m *simMessage) {
	s.nextReq++
	m.from, m.to, m.gen, m.reqID = n.id, n.followLeader, n.gen, s.nextReq
	n.outstanding = m.reqID
	var backoff time.Duration
	if n.backoff {
		backoff = 20 * time.Millisecond
	}
	s.sendAfter(m, backoff)
}

func (s *sim) truncate(n *simNode, t Truncation) {
	if t.Restart {
		s.fail("%s restarts its log at %d, but every log here starts at 0", n.id, t.Offset)
	}
	if t.Offset < n.log.hw {
		s.fail("%s truncates to %d, below its HW %d", n.id, t.Offset, n.log.hw)
	}
	if t.Offset < n.log.logEnd() {
		s.stats.truncations++
	}
	s.tracef("%s truncates %d -> %d", n.id, n.log.logEnd(), t.Offset)
	n.log.truncate(t.Offset)
	s.must(n.follower.Truncated(n.log.logEnd()))
}

// pumpLeader applies the leader's Ready.
func (s *sim) pumpLeader(n *simNode) {
	for n.leader != nil && n.leader.HasReady() {
		rd := n.leader.Ready()
		if rd.HighWatermarkChanged {
			if rd.HighWatermark <= n.leaderHW {
				s.fail("%s's HW went from %d to %d in epoch %d", n.id, n.leaderHW, rd.HighWatermark, n.leader.Epoch())
			}
			n.leaderHW = rd.HighWatermark
			if !n.leader.Resigned() {
				s.checkHW(n, rd.HighWatermark)
			}
			s.checkpointHW(n, rd.HighWatermark)
		}
		for _, a := range rd.Acks {
			s.finishAck(a)
		}
		if p := rd.ISRProposal; p != nil {
			s.checkProposal(n, p)
			s.tracef("%s proposes ISR %v at epoch %d", n.id, p.ISR, p.Epoch)
			s.send(&simMessage{kind: msgISRTxn, from: n.id, gen: n.gen, epoch: p.Epoch, isr: p.ISR})
		}
	}
	if n.leader != nil && n.leader.HighWatermark() < n.leaderHW {
		s.fail("%s's HW %d is below the %d it reported", n.id, n.leader.HighWatermark(), n.leaderHW)
	}
	if n.leader != nil && !n.leader.Resigned() {
		s.checkLeaderView(n)
	}
}

// checkpointHW records a node's new HW and checks the records below it
// against the committed prefix, extending the prefix.
func (s *sim) checkpointHW(n *simNode, hw int64) {
	if hw > n.log.logEnd() {
		s.fail("%s's HW %d is beyond its log end %d", n.id, hw, n.log.logEnd())
	}
	n.log.hw = hw
	for o := n.checkedHW; o < hw; o++ {
		r := n.log.records[o]
		if o < int64(len(s.committed)) {
			if s.committed[o] != r {
				s.fail("%s has %v at committed offset %d, others had %v", n.id, r, o, s.committed[o])
			}
			continue
		}
		s.committed = append(s.committed, r)
	}
	n.checkedHW = max(n.checkedHW, hw)
}

func (s *sim) finishAck(a AckOutcome) {
	info := s.acks[a.ID]
	delete(s.acks, a.ID)
	if a.Err != nil {
		if !errors.Is(a.Err, ErrNotLeader) && !errors.Is(a.Err, ErrAckTimeout) && !errors.Is(a.Err, ErrNotEnoughReplicasAfterAppend) {
			s.fail("ack %d: unexpected outcome %v", a.ID, a.Err)
		}
		return
	}
	if info.acks != AcksAll {
		return
	}
	s.stats.acked++
	for i, r := range info.values {
		o := info.first + int64(i)
		if o >= int64(len(s.committed)) || s.committed[o] != r {
			s.fail("acks=all write %v at %d acknowledged but not committed", r, o)
		}
		s.acked[o] = r
	}
}

func (s *sim) produce() {
	var leaders []*simNode
	for _, n := range s.nodes {
		if n.up && n.leader != nil && !n.leader.Resigned() {
			leaders = append(leaders, n) // zombies included
		}
	}
	if len(leaders) == 0 {
		return
	}
	n := leaders[s.rng.IntN(len(leaders))]
	acks := AcksAll
	if s.rng.IntN(5) == 0 {
		acks = AcksLeader
	}
	if err := n.leader.CanAppend(acks); err != nil {
		if !errors.Is(err, ErrNotEnoughReplicas) {
			s.fail("CanAppend: %v", err)
		}
		return
	}
	first := n.log.logEnd()
	var values []memRecord
	for range 1 + s.rng.IntN(3) {
		s.nextValue++
		values = append(values, memRecord{Epoch: n.leader.Epoch(), Value: "v" + strconv.Itoa(s.nextValue)})
	}
	if err := n.log.append(values...); err != nil {
		s.fail("%s appends: %v", n.id, err)
	}
	last := n.log.logEnd() - 1
	s.must(n.leader.Appended(last, s.now))
	n.lv.appends = append(n.lv.appends, simAppend{at: s.now, end: last + 1})
	for _, id := range s.replicaIDs() {
		if sp := n.lv.parked[id]; sp != nil && sp.passed.IsZero() {
			sp.passed = s.now
			s.stats.passedParks++
			s.tracef("%s's append passes %s's park at %d", n.id, id, sp.offset)
		}
	}
	s.nextAck++
	s.acks[s.nextAck] = simAck{first: first, acks: acks, values: values}
	s.must(n.leader.WaitAck(s.nextAck, last, acks, s.now.Add(time.Second)))
	s.stats.produced++
	s.tracef("%s appends %v at %d (acks=%s, ack %d)", n.id, values, first, acks, s.nextAck)
	s.pumpLeader(n)
}

func (s *sim) syncNode(n *simNode) {
	if !n.up {
		return
	}
	n.log.sync()
	if n.log.logEnd() == 0 {
		return
	}
	switch {
	case n.leader != nil && !n.leader.Resigned():
		s.must(n.leader.Synced(n.log.logEnd() - 1))
		s.pumpLeader(n)
	case n.follower != nil:
		s.must(n.follower.Synced(n.log.logEnd() - 1))
		s.pumpFollower(n)
	}
}

// crash stops n at once: it loses what it did not fsync in fsync mode
// (power loss) and nothing in replicated mode (the process dies, the page
// cache stays). Its Consul session dies with it.
func (s *sim) crash(n *simNode) {
	if !n.up {
		return
	}
	s.stats.crashes++
	s.tracef("%s crashes (log end %d, synced %d)", n.id, n.log.logEnd(), n.log.synced)
	if s.durability == DurabilityFsync {
		if n.log.hw > n.log.synced {
			s.fail("%s's HW %d is above its fsynced records (%d)", n.id, n.log.hw, n.log.synced)
		}
		n.log.crash()
	}
	n.up, n.restart = false, s.now.Add(time.Duration(20+s.rng.IntN(300))*time.Millisecond)
	s.crashParks(n)
	n.gen++
	n.leader, n.follower, n.outstanding = nil, nil, 0
	n.checkedHW = min(n.checkedHW, n.log.hw)
	if s.ctl.leader == n.id {
		s.ctl.leader = ""
		s.ctl.version++
		s.offlineSince = s.now
		s.broadcast()
	}
}

func (s *sim) restartNode(n *simNode) {
	s.tracef("%s restarts with %v", n.id, n.log)
	n.up = true
	n.gen++
	n.backoff = false
	s.learn(n, s.cloneView()) // a consistent read at start-up
}

// broadcast sends the controller's state to every node through the watch.
func (s *sim) broadcast() {
	for _, n := range s.nodes {
		s.send(&simMessage{kind: msgMetadata, to: n.id, view: s.cloneView()})
	}
}

func (s *sim) cloneView() simView {
	v := s.ctl
	v.isr = slices.Clone(v.isr)
	return v
}

// maybeElect elects a leader among the live ISR members once the lock delay
// of a lost leader passed.
func (s *sim) maybeElect() {
	if s.ctl.leader != "" || s.now.Sub(s.offlineSince) < 30*time.Millisecond {
		return
	}
	var candidates []*simNode
	for _, n := range s.nodes {
		if n.up && slices.Contains(s.ctl.isr, n.id) {
			candidates = append(candidates, n)
		}
	}
	if len(candidates) > 0 {
		s.elect(candidates[s.rng.IntN(len(candidates))])
	}
}

// changeLeader moves the leadership to another live ISR member while the
// current leader runs on (a lost session, or a preferred-leader move); the
// old leader learns it from the watch, late.
func (s *sim) changeLeader() {
	var candidates []*simNode
	for _, n := range s.nodes {
		if n.up && n.id != s.ctl.leader && slices.Contains(s.ctl.isr, n.id) {
			candidates = append(candidates, n)
		}
	}
	if s.ctl.leader == "" || len(candidates) == 0 {
		return
	}
	s.elect(candidates[s.rng.IntN(len(candidates))])
}

// elect runs the election txn for n: a new epoch, the ISR unchanged; n
// knows at once, the others through the watch.
func (s *sim) elect(n *simNode) {
	s.stats.elections++
	s.ctl.epoch++
	s.ctl.leader = n.id
	s.ctl.version++
	for o, r := range s.committed {
		if int64(o) >= n.log.logEnd() || n.log.records[o] != r {
			s.fail("new leader %s of epoch %d lacks committed record %v at %d", n.id, s.ctl.epoch, r, o)
		}
	}
	s.tracef("%s elected, epoch %d, ISR %v", n.id, s.ctl.epoch, s.ctl.isr)
	s.becomeLeader(n)
	s.broadcast()
}

func (s *sim) becomeLeader(n *simNode) {
	s.forget(n)
	n.view = s.cloneView()
	n.gen++
	n.follower, n.outstanding = nil, 0
	n.log.assignEpoch(s.ctl.epoch)
	l, err := NewLeader(LeaderConfig{
		Self:              n.id,
		Epoch:             s.ctl.epoch,
		EpochStartOffset:  n.log.logEnd(),
		Replicas:          s.replicaIDs(),
		ISR:               s.ctl.isr,
		MinInsyncReplicas: s.minISR,
		LagTimeMax:        s.lagTimeMax,
		Durability:        s.durability,
		LogEndOffset:      n.log.logEnd(),
		SyncedEndOffset:   n.log.synced,
		HighWatermark:     n.log.hw,
		EpochCache:        n.log,
	}, s.now)
	s.must(err)
	n.leader, n.leaderHW = l, n.log.hw
	n.lv = newSimLeadership(s.ctl.epoch, slices.DeleteFunc(s.replicaIDs(), func(id string) bool { return id == n.id }), s.ctl.isr, n.log.logEnd(), s.now)
	s.pumpLeader(n)
}

// learn is a node reacting to Consul's state: a leader that lost resigns; a
// node follows the leader of a newer epoch.
func (s *sim) learn(n *simNode, v simView) {
	if v.version < n.view.version {
		return
	}
	n.view = v
	if n.leader != nil && (v.leader != n.id || v.epoch != n.leader.Epoch()) {
		s.tracef("%s learns it no longer leads (epoch %d, leader %q)", n.id, v.epoch, v.leader)
		n.leader.Resign()
		s.pumpLeader(n)
		n.leader = nil
		n.gen++
	}
	if v.leader == "" || v.leader == n.id || (n.follower != nil && n.follower.LeaderEpoch() == v.epoch) {
		return
	}
	if n.followLeader != v.leader {
		s.forget(n)
	}
	n.gen++
	n.outstanding, n.backoff = 0, false
	f, err := NewFollower(FollowerConfig{
		Self:            n.id,
		LeaderEpoch:     v.epoch,
		Durability:      s.durability,
		LogEndOffset:    n.log.logEnd(),
		SyncedEndOffset: n.log.synced,
		HighWatermark:   n.log.hw,
		EpochCache:      n.log,
	})
	s.must(err)
	s.tracef("%s follows %s in epoch %d", n.id, v.leader, v.epoch)
	n.follower, n.followLeader, n.knownLeaderHW = f, v.leader, f.HighWatermark()
	s.pumpFollower(n)
}

// applyISRTxn is Consul's guarded transaction: it commits only for the
// current leader at the current epoch (and, rarely, fails anyway, as a
// conflicting write would make it).
func (s *sim) applyISRTxn(m *simMessage) {
	ok := s.ctl.leader == m.from && s.ctl.epoch == m.epoch && (!s.faults || s.rng.IntN(20) > 0)
	if ok {
		s.stats.isrChanges++
		s.ctl.isr = slices.Clone(m.isr)
		s.ctl.version++
		s.broadcast()
	}
	s.tracef("ISR txn from %s epoch %d %v: committed %t", m.from, m.epoch, m.isr, ok)
	s.send(&simMessage{kind: msgISRTxnResult, to: m.from, gen: m.gen, isr: m.isr, committed: ok})
}

func (s *sim) converged() bool {
	ln := s.node(s.ctl.leader)
	if ln == nil || !ln.up || ln.leader == nil || ln.leader.Resigned() {
		return false
	}
	end := ln.log.logEnd()
	if ln.leader.HighWatermark() != end {
		return false
	}
	for _, n := range s.nodes {
		if !n.up || n.log.logEnd() != end || n.log.hw != end {
			return false
		}
		if n != ln && (n.follower == nil || n.follower.LeaderEpoch() != s.ctl.epoch) {
			return false
		}
	}
	return true
}

func (s *sim) checkFinal() {
	final := s.node(s.ctl.leader).log.records
	for _, n := range s.nodes {
		if !slices.Equal(n.log.records, final) {
			s.fail("%s's log differs from the leader's after convergence", n.id)
		}
	}
	for o, r := range s.acked {
		if o >= int64(len(final)) || final[o] != r {
			s.fail("acknowledged %v at %d is lost", r, o)
		}
	}
	if s.stats.acked == 0 {
		s.fail("no write was acknowledged: the run tested nothing")
	}
}
