package replicate

import (
	"fmt"
	"slices"
	"time"
)

// The fetch sessions of the simulation (docs/design.md §7.9), as the agent
// drives the state machine with them: a follower fetches on a session to
// each leader agent (or, now and then, with a GET, which never parks); the
// leader's loop (serveFetch) parks a session's fetch that finds nothing to
// answer (at its log end, knowing the HW) with FollowerParked and records
// the session in parkedBy; the session's writer answers a parked fetch, a
// random while after its wake-up (a writer busy with other partitions),
// once the log end or the HW passed it, the leadership changed or another
// fetch of the follower ended the park, and now and then for no reason of
// the leader's (a log start that moved: "the wait ends"), queueing the
// unpark for the loop before the answer goes out; a forget or the session's
// end lets go of a park without an answer, the end as of the session's
// last frame. The loop takes the queued unparks before any fetch and
// otherwise when it gets to them, and FollowerUnparked only those of the
// session that holds the park.

const (
	// simHeartbeat is the sessions' heartbeat, lag_time_max/8 as the
	// agent's bound grants; simSilence is how long a leader takes at most
	// to find a silent session dead (its bound, lag_time_max/2).
	simHeartbeat = 12500 * time.Microsecond
	simSilence   = 50 * time.Millisecond
)

// simPark is a fetch parked in a leader agent's session.
type simPark struct {
	from     string
	gen      int // the follower's gen and request, to address the answer
	reqID    int
	session  int
	fetch    FetchRequest
	result   FetchResult // the loop's answer to the fetch
	knownHW  int64
	parkedAt time.Time
	// answerAt is when the writer gets to the woken park, zero before
	// the wake; reason is what woke it.
	answerAt time.Time
	reason   string
	// endAt is when the leader finds the session dead, zero while it is
	// alive; lastSeen is its last frame.
	endAt, lastSeen time.Time
}

// simUnpark is a session's unpark queued for the loop.
type simUnpark struct {
	id      string
	epoch   int32
	session int
	at      time.Time
}

// simSMPark is a park the state machine holds: from FollowerParked until a
// Fetch or a FollowerUnparked the loop passed on ends it.
type simSMPark struct {
	offset   int64
	parkedAt time.Time
	// passed is the first append past it, zero before.
	passed time.Time
}

// simLeadership is what the simulation knows of one leadership, to check
// the leader's view of its followers against what happened: the loop's
// parkedBy, the parks the state machine holds, what the followers' fetches
// said and the log end's history.
type simLeadership struct {
	epoch    int32
	parkedBy map[string]int
	parked   map[string]*simSMPark
	// recorded is the fetch offset the leader took last from each
	// follower (-1 before any, and after a diverging fetch): the position
	// it must count for the follower, parked or not. reached is the
	// largest it took.
	recorded, reached map[string]int64
	// floor is when the leader must count a follower caught up whatever it
	// fetched: every ISR member as the leadership starts, a member an ISR
	// change adds as it commits.
	floor map[string]time.Time
	// startEnd is the log end as the leadership started, appends every
	// later end and when the append made it.
	startEnd int64
	appends  []simAppend
	// dead is what the leader was last told is dead; added is the
	// follower the ISR change in flight adds.
	dead  []string
	added string
}

type simAppend struct {
	at  time.Time
	end int64
}

func newSimLeadership(epoch int32, followers, isr []string, logEnd int64, now time.Time) *simLeadership {
	lv := &simLeadership{
		epoch: epoch, parkedBy: map[string]int{}, parked: map[string]*simSMPark{},
		recorded: map[string]int64{}, reached: map[string]int64{}, floor: map[string]time.Time{},
		startEnd: logEnd,
	}
	for _, id := range followers {
		lv.recorded[id], lv.reached[id] = unknownOffset, unknownOffset
		if slices.Contains(isr, id) {
			lv.floor[id] = now
		}
	}
	return lv
}

// fetched records what a Fetch the leader answered did: any it did not
// refuse ends the follower's park.
func (lv *simLeadership) fetched(req FetchRequest, res FetchResult, err error) {
	if err != nil {
		return
	}
	delete(lv.parked, req.ReplicaID)
	if res.Diverging != nil {
		lv.recorded[req.ReplicaID] = unknownOffset
		return
	}
	lv.recorded[req.ReplicaID] = req.FetchOffset
	lv.reached[req.ReplicaID] = max(lv.reached[req.ReplicaID], req.FetchOffset)
}

// caughtUpBound is the latest time id can be counted caught up at now: the
// latest time the leader's log end was at most the largest fetch offset
// the follower sent (while it still is, now), or the floor if later.
func (lv *simLeadership) caughtUpBound(id string, logEnd int64, now time.Time) time.Time {
	var bound time.Time
	switch h := lv.reached[id]; {
	case logEnd <= h:
		bound = now
	case lv.startEnd <= h:
		// The ends only grow, and the log end is past h.
		i, _ := slices.BinarySearchFunc(lv.appends, h+1, func(a simAppend, end int64) int { return int(a.end - end) })
		bound = lv.appends[i].at
	}
	return maxTime(bound, lv.floor[id])
}

// sessionFor is the session n's follower fetches on from leader, zero for
// a GET; a session starts with the first fetch after none was open.
func (s *sim) sessionFor(n *simNode, leader string) int {
	if s.rng.IntN(100) < 15 {
		return 0
	}
	if n.sessions == nil {
		n.sessions = map[string]int{}
	}
	if n.sessions[leader] == 0 {
		s.nextSession++
		n.sessions[leader] = s.nextSession
	}
	return n.sessions[leader]
}

// serveFetch is the leader side of the agent's fetch (Replica.onLeaderFetch
// behind peerapi's session, or the GET handler for session 0).
func (s *sim) serveFetch(n *simNode, m *simMessage) {
	id := m.fetch.ReplicaID
	if m.session != 0 {
		if !s.inSessionOrder(n, m, m.reqID) {
			return
		}
		// The session's reader replaces the follower's earlier fetch of
		// the partition: its park goes without an answer or an unpark
		// (the loop's Fetch ends it).
		n.parks = slices.DeleteFunc(n.parks, func(p *simPark) bool { return p.session == m.session && p.from == id })
	}
	s.takeUnparks(n)
	reply := &simMessage{kind: msgFetchResponse, from: n.id, to: m.from, gen: m.gen, reqID: m.reqID}
	if n.leader == nil || n.leader.Resigned() {
		reply.err = fmt.Errorf("%w: %s does not lead", ErrNotLeader, n.id)
		s.send(reply)
		return
	}
	l, lv := n.leader, n.lv
	res, err := l.Fetch(m.fetch, s.now)
	lv.fetched(m.fetch, res, err)
	_, had := lv.parkedBy[id]
	delete(lv.parkedBy, id)
	parked := false
	if err == nil && m.session != 0 && res.Diverging == nil && m.fetch.FetchOffset == l.LogEndOffset() && l.HighWatermark() <= m.knownHW {
		s.must(l.FollowerParked(id, m.fetch.CurrentLeaderEpoch, m.fetch.FetchOffset))
		lv.parkedBy[id] = m.session
		lv.parked[id] = &simSMPark{offset: m.fetch.FetchOffset, parkedAt: s.now}
		parked = true
	}
	if had && err != nil {
		// A refused fetch changed nothing, and the session's unpark will
		// find the park gone: the loop ends it now.
		s.must(l.FollowerUnparked(id, l.Epoch(), s.now))
		delete(lv.parked, id)
		s.stats.refusedUnparks++
	}
	if parked {
		s.stats.parks++
		s.tracef("%s parks %s's fetch at %d (session %d, known HW %d)", n.id, id, m.fetch.FetchOffset, m.session, m.knownHW)
		n.parks = append(n.parks, &simPark{
			from: m.from, gen: m.gen, reqID: m.reqID, session: m.session, fetch: m.fetch,
			result: res, knownHW: m.knownHW, parkedAt: s.now,
		})
	} else {
		reply.result, reply.err, reply.leaderEnd = res, err, n.log.logEnd()
		if err == nil && res.Diverging == nil {
			reply.records = n.log.read(m.fetch.FetchOffset, 1+s.rng.IntN(64))
		}
		s.send(reply)
	}
	s.pumpLeader(n)
}

// inSessionOrder keeps a session's requests in order, as its connection
// does: one the simulated network delivers after a later one of the same
// session would have come before it (and found its park, if any, replaced):
// it is dropped, and its sender waits for it no more. A request is later
// than any whose reqID is below after; a forget names the fetch it
// forgets, which must not come after it.
func (s *sim) inSessionOrder(n *simNode, m *simMessage, after int) bool {
	if n.sessionSeen == nil {
		n.sessionSeen = map[int]int{}
	}
	if after <= n.sessionSeen[m.session] {
		return false
	}
	n.sessionSeen[m.session] = m.reqID
	return true
}

// takeUnparks is the loop carrying out the unparks its sessions queued.
func (s *sim) takeUnparks(n *simNode) {
	unparks := n.unparks
	n.unparks = nil
	for _, u := range unparks {
		lv := n.lv
		held := lv != nil && lv.parkedBy[u.id] == u.session
		if held {
			delete(lv.parkedBy, u.id)
		}
		if n.leader == nil || n.leader.Resigned() || !held {
			s.stats.staleUnparks++
			continue
		}
		s.tracef("%s unparks %s as of %s", n.id, u.id, s.at(u.at))
		s.must(n.leader.FollowerUnparked(u.id, u.epoch, u.at))
		delete(lv.parked, u.id)
		s.pumpLeader(n)
	}
}

func (s *sim) at(t time.Time) string {
	return fmt.Sprintf("%.3fms", float64(t.Sub(s.start).Microseconds())/1000)
}

// writerDelay is how long a session's writer takes to reach a woken park:
// mostly at once, sometimes after other partitions' answers, rarely after
// longer than lag_time_max (a slow link).
func (s *sim) writerDelay() time.Duration {
	switch r := s.rng.IntN(100); {
	case r < 60:
		return 0
	case r < 90:
		return time.Duration(s.rng.IntN(10_000)) * time.Microsecond
	case r < 95:
		return time.Duration(10_000+s.rng.IntN(50_000)) * time.Microsecond
	default:
		return time.Duration(60_000+s.rng.IntN(240_000)) * time.Microsecond
	}
}

// serveParks runs the sessions' writers and ends: every woken park is
// answered once its writer gets to it, and a dead session's parks are let
// go of.
func (s *sim) serveParks() {
	for _, n := range s.nodes {
		if !n.up {
			continue
		}
		for _, p := range slices.Clone(n.parks) {
			if !p.endAt.IsZero() {
				if !s.now.Before(p.endAt) {
					s.releasePark(n, p)
				}
				continue
			}
			if p.answerAt.IsZero() {
				p.reason = s.parkWake(n, p)
				if p.reason == "" && s.rng.IntN(400) == 0 {
					p.reason = "wait end"
				}
				if p.reason == "" {
					continue
				}
				p.answerAt = s.now.Add(s.writerDelay())
			}
			if !s.now.Before(p.answerAt) {
				s.answerPark(n, p)
			}
		}
	}
}

// parkWake is why the writer would answer p now ("" for no reason): the
// session's re-check of the positions and the role.
func (s *sim) parkWake(n *simNode, p *simPark) string {
	switch {
	case n.leader == nil || n.leader.Resigned() || n.leader.Epoch() != p.fetch.CurrentLeaderEpoch:
		return "not leader"
	case n.log.logEnd() > p.fetch.FetchOffset:
		return "append"
	case n.log.hw > p.knownHW:
		return "HW"
	case n.lv == nil || n.lv.parkedBy[p.from] != p.session:
		return "not held"
	}
	return ""
}

// answerPark is the session's writer answering p: it queues the unpark,
// then sends the answer read from the log as it is now, or a refusal if
// the leadership changed.
func (s *sim) answerPark(n *simNode, p *simPark) {
	reason := s.parkWake(n, p)
	if reason == "" && p.reason != "wait end" {
		p.answerAt = time.Time{}
		return
	}
	if reason == "" {
		reason = p.reason
	}
	n.parks = slices.DeleteFunc(n.parks, func(q *simPark) bool { return q == p })
	n.unparks = append(n.unparks, simUnpark{id: p.from, epoch: p.fetch.CurrentLeaderEpoch, session: p.session, at: s.now})
	s.stats.parkAnswers[reason]++
	if n.lv != nil {
		if sp := n.lv.parked[p.from]; sp != nil && !sp.passed.IsZero() && s.now.Sub(sp.passed) > s.lagTimeMax {
			s.stats.lateAnswers++
		}
	}
	reply := &simMessage{kind: msgFetchResponse, from: n.id, to: p.from, gen: p.gen, reqID: p.reqID}
	if reason == "not leader" {
		reply.err = fmt.Errorf("%w: leadership changed while the fetch waited", ErrNotLeader)
	} else {
		reply.result = p.result
		reply.result.HighWatermark = max(p.result.HighWatermark, n.log.hw)
		reply.result.LogEndOffset = n.log.logEnd()
		reply.records = n.log.read(p.fetch.FetchOffset, 1+s.rng.IntN(64))
	}
	s.tracef("%s answers %s's parked fetch at %d (%s, parked at %s)", n.id, p.from, p.fetch.FetchOffset, reason, s.at(p.parkedAt))
	s.send(reply)
}

// releasePark lets go of a park of a dead session, as of its last frame;
// the follower's fetch fails.
func (s *sim) releasePark(n *simNode, p *simPark) {
	n.parks = slices.DeleteFunc(n.parks, func(q *simPark) bool { return q == p })
	n.unparks = append(n.unparks, simUnpark{id: p.from, epoch: p.fetch.CurrentLeaderEpoch, session: p.session, at: p.lastSeen})
	s.stats.sessionEnds++
	s.tracef("%s's session %d with %s ended, last seen %s", n.id, p.session, p.from, s.at(p.lastSeen))
	s.failFetch(p)
}

// failFetch tells the follower of a parked fetch that its session failed.
func (s *sim) failFetch(p *simPark) {
	s.seq++
	s.queue = append(s.queue, &simMessage{at: s.now.Add(time.Millisecond), seq: s.seq, kind: msgTimeout, to: p.from, gen: p.gen, reqID: p.reqID})
}

// endSession has leader find follower's session dead at endAt, its last
// frame at most one heartbeat (or, for a silent one, the silence bound)
// before.
func (s *sim) endSession(leader *simNode, follower string, session int, endAt time.Time, silence time.Duration) {
	for _, p := range leader.parks {
		if p.from == follower && p.session == session && p.endAt.IsZero() {
			p.endAt = endAt
			p.lastSeen = maxTime(p.parkedAt, s.now.Add(-time.Duration(s.rng.Int64N(int64(silence)))))
		}
	}
}

// breakSession drops a random session that holds a park: the follower
// opens another for its next fetch.
func (s *sim) breakSession() {
	type held struct {
		leader *simNode
		park   *simPark
	}
	var parks []held
	for _, n := range s.nodes {
		for _, p := range n.parks {
			if p.endAt.IsZero() {
				parks = append(parks, held{n, p})
			}
		}
	}
	if len(parks) == 0 {
		return
	}
	h := parks[s.rng.IntN(len(parks))]
	s.tracef("session %d of %s to %s breaks", h.park.session, h.park.from, h.leader.id)
	s.endSession(h.leader, h.park.from, h.park.session, s.now, simSilence)
	if f := s.node(h.park.from); f.sessions[h.leader.id] == h.park.session {
		delete(f.sessions, h.leader.id)
	}
}

// forget is n's follower leaving the leader it follows (a new leader, or
// leading itself): its session tells that leader, which lets go of the
// park as of the forget's arrival.
func (s *sim) forget(n *simNode) {
	if n.follower == nil || n.sessions[n.followLeader] == 0 {
		return
	}
	s.send(&simMessage{kind: msgForget, from: n.id, to: n.followLeader, gen: n.gen, reqID: n.outstanding, session: n.sessions[n.followLeader]})
}

func (s *sim) deliverForget(n *simNode, m *simMessage) {
	if !s.inSessionOrder(n, m, m.reqID+1) {
		return
	}
	for _, p := range n.parks {
		if p.from == m.from && p.session == m.session && p.endAt.IsZero() {
			n.parks = slices.DeleteFunc(n.parks, func(q *simPark) bool { return q == p })
			n.unparks = append(n.unparks, simUnpark{id: p.from, epoch: p.fetch.CurrentLeaderEpoch, session: p.session, at: s.now})
			s.stats.forgets++
			return
		}
	}
}

// crashParks is the sessions dying with crashed node n: its leader side's
// parks vanish and their followers' fetches fail; the leaders it fetched
// from find its sessions dead within the silence bound, last heard of
// within a heartbeat of the crash.
func (s *sim) crashParks(n *simNode) {
	for _, p := range n.parks {
		if p.endAt.IsZero() {
			s.failFetch(p)
		}
	}
	n.parks, n.unparks, n.lv, n.sessionSeen = nil, nil, nil, nil
	for _, o := range s.nodes {
		if session := n.sessions[o.id]; o != n && session != 0 {
			s.endSession(o, n.id, session, s.now.Add(time.Duration(s.rng.Int64N(int64(simSilence)))), simHeartbeat)
		}
		delete(o.sessions, n.id)
	}
	n.sessions = nil
}

// checkLeaderView checks the leader's view of its followers after an input:
// parks and unparks never move a recorded position, and no follower counts
// as caught up later than the latest time the leader's log end was at most
// what it fetched.
func (s *sim) checkLeaderView(n *simNode) {
	l, lv := n.leader, n.lv
	for _, st := range l.Progress() {
		if st.ID == n.id {
			continue
		}
		if want := lv.recorded[st.ID]; st.LogEndOffset != want {
			s.fail("%s counts %s at %d, its latest fetch it took said %d", n.id, st.ID, st.LogEndOffset, want)
		}
		if bound := lv.caughtUpBound(st.ID, l.LogEndOffset(), s.now); st.LastCaughtUp.After(bound) {
			s.fail("%s counts %s caught up as of %s, but its log end passed the %d it fetched at %s", n.id, st.ID, s.at(st.LastCaughtUp), lv.reached[st.ID], s.at(bound))
		}
	}
}

// checkHW checks a new HW against the positions the followers of the
// maximal ISR sent, not what their parks wait for.
func (s *sim) checkHW(n *simNode, hw int64) {
	lv := n.lv
	for _, id := range append(n.leader.ISR(), lv.added) {
		if id != "" && id != n.id && hw > lv.recorded[id] {
			s.fail("%s's HW moved to %d, but ISR member %s fetched at %d", n.id, hw, id, lv.recorded[id])
		}
	}
}

// checkProposal checks an ISR change n proposes: a parked follower leaves
// for lag only once an append passed its park more than lag_time_max ago.
func (s *sim) checkProposal(n *simNode, p *ISRProposal) {
	lv, isr := n.lv, n.leader.ISR()
	lv.added = ""
	for _, id := range p.ISR {
		if !slices.Contains(isr, id) {
			lv.added = id
		}
	}
	for _, id := range isr {
		sp := lv.parked[id]
		if slices.Contains(p.ISR, id) || sp == nil || slices.Contains(lv.dead, id) {
			continue
		}
		s.stats.parkedRemovals++
		if sp.passed.IsZero() || s.now.Sub(sp.passed) <= s.lagTimeMax {
			s.fail("%s removes parked %s (at %d since %s, passed at %s) for lag at %s", n.id, id, sp.offset, s.at(sp.parkedAt), s.at(sp.passed), s.at(s.now))
		}
	}
}

// checkParkedLag checks, after a tick, that no ISR follower whose park an
// append passed more than lag_time_max ago (and that was not added since)
// stays in the ISR without a change in flight: the park must not keep it
// in sync.
func (s *sim) checkParkedLag(n *simNode) {
	if n.leader.InFlight() {
		return
	}
	for _, id := range n.leader.ISR() {
		sp := n.lv.parked[id]
		if sp == nil || sp.passed.IsZero() {
			continue
		}
		if since := maxTime(sp.passed, n.lv.floor[id]); s.now.Sub(since) > s.lagTimeMax {
			s.fail("%s keeps parked %s in the ISR at %s though an append passed its park at %s", n.id, id, s.at(s.now), s.at(sp.passed))
		}
	}
}
