package group

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// The errors of the classic protocol (Kafka's JoinGroup/SyncGroup), each
// named after the Kafka error code it is answered with.
var (
	// ErrMemberIDRequired: a new member's first JoinGroup (v4+) is given
	// its member id and must join again with it.
	ErrMemberIDRequired = errors.New("group: member id required")
	// ErrIllegalGeneration: a request of a generation that is not the
	// group's: the member must join again.
	ErrIllegalGeneration = errors.New("group: illegal generation")
	// ErrRebalanceInProgress: the group is rebalancing; the member must
	// join again.
	ErrRebalanceInProgress = errors.New("group: rebalance in progress")
	// ErrInconsistentProtocol: a member whose protocol type or protocols
	// the group's members do not share, or a group id already used by the
	// other protocol (classic against server-side members).
	ErrInconsistentProtocol = errors.New("group: inconsistent group protocol")
)

// ClassicState is the state of a classic group, as Kafka names them.
type ClassicState uint8

// The states of a classic group.
const (
	// ClassicEmpty: no members (a group that only keeps offsets, or whose
	// members all left).
	ClassicEmpty ClassicState = iota
	// ClassicPreparingRebalance: the join phase; members must join again
	// before the rebalance deadline.
	ClassicPreparingRebalance
	// ClassicCompletingRebalance: the join phase ended (a new
	// generation); the leader's SyncGroup with the assignment is awaited.
	ClassicCompletingRebalance
	// ClassicStable: every member can have its assignment.
	ClassicStable
)

func (s ClassicState) String() string {
	switch s {
	case ClassicEmpty:
		return "Empty"
	case ClassicPreparingRebalance:
		return "PreparingRebalance"
	case ClassicCompletingRebalance:
		return "CompletingRebalance"
	case ClassicStable:
		return "Stable"
	}
	return fmt.Sprintf("ClassicState(%d)", uint8(s))
}

// Protocol is one assignor a member supports, with its metadata (opaque to
// the coordinator: the subscription, as the client encodes it).
type Protocol struct {
	Name     string
	Metadata []byte
}

// ClassicJoinRequest is a JoinGroup.
type ClassicJoinRequest struct {
	// MemberID is empty for a new member.
	MemberID string
	// NewMemberID is the id a new member is given; the caller picks it
	// (the state machine has no randomness).
	NewMemberID      string
	ClientID         string
	ClientHost       string
	ProtocolType     string
	Protocols        []Protocol // in the member's order of preference
	SessionTimeout   time.Duration
	RebalanceTimeout time.Duration
	// RequireKnownMemberID (JoinGroup v4+): a new member is answered
	// ErrMemberIDRequired with its id and joins again with it, so that a
	// lost answer does not leave an unknown member behind until its
	// session expires.
	RequireKnownMemberID bool
}

// ClassicJoinResponse is the answer to a JoinGroup, once its join phase
// completed.
type ClassicJoinResponse struct {
	Generation   int32
	ProtocolType string
	Protocol     string
	Leader       string
	MemberID     string
	// Members are every member's metadata for Protocol, in member id
	// order: for the leader only, which computes the assignment.
	Members []ClassicMember
}

// ClassicMember is a member's metadata in a ClassicJoinResponse.
type ClassicMember struct {
	MemberID string
	Metadata []byte
}

// Classic is one classic consumer group (Kafka's JoinGroup/SyncGroup
// protocol with a client-side assignor, docs/design.md §7.5) as a pure
// state machine: no I/O, no clock, no goroutines. A JoinGroup or SyncGroup
// that must wait (for the other members to join, for the leader's
// assignment) returns done false; the caller holds it and asks JoinAnswer
// or SyncAnswer again after every later call, and calls Tick by
// Ready().Deadline. It is not safe for concurrent use.
type Classic struct {
	id           string
	generation   int32
	state        ClassicState
	protocolType string
	protocol     string
	leader       string
	members      map[string]*classicMember
	// pending are the member ids handed out with ErrMemberIDRequired and
	// not yet used, each with when it expires: the join phase waits for
	// them, as Kafka's does.
	pending map[string]time.Time
	// rebalanceDeadline ends the join phase: members that did not join
	// again by then are removed.
	rebalanceDeadline time.Time
	// joins numbers the members' joins, so that the first to join leads.
	joins uint64
}

type classicMember struct {
	id                               string
	clientID, clientHost             string
	protocols                        []Protocol
	sessionTimeout, rebalanceTimeout time.Duration
	lastHeartbeat                    time.Time
	// joined: it joined during the current join phase; joinedAt orders
	// the joins.
	joined   bool
	joinedAt uint64
	// answer is the answer of the join phase it joined, once that ended:
	// kept until it joins again, so a held JoinGroup can read it whenever
	// it looks.
	answer     *ClassicJoinResponse
	assignment []byte
	// awaitingSync: its SyncGroup waits for the leader's (CompletingRebalance):
	// kept alive meanwhile, as Kafka keeps a member whose sync it holds.
	awaitingSync bool
}

// NewClassic returns an empty classic group, generation 0.
func NewClassic(id string) (*Classic, error) {
	if err := checkName("group id", id); err != nil {
		return nil, err
	}
	return &Classic{id: id, members: make(map[string]*classicMember), pending: make(map[string]time.Time)}, nil
}

// ID is the group's id.
func (g *Classic) ID() string { return g.id }

// Generation is the group's generation.
func (g *Classic) Generation() int32 { return g.generation }

// State is the group's state.
func (g *Classic) State() ClassicState { return g.state }

// Members is the number of members. A member id handed out with
// ErrMemberIDRequired and not used yet makes no member, as in Kafka (its
// GroupMetadata keeps pending members apart): a group with only those is
// Empty, so it may be deleted, reset or taken over by the HTTP API's
// protocol.
func (g *Classic) Members() int { return len(g.members) }

// Pending is the number of member ids handed out with ErrMemberIDRequired
// and not used yet: until they expire (Tick), a join with one must find the
// group.
func (g *Classic) Pending() int { return len(g.pending) }

// Join is a member's JoinGroup. done says whether the answer is final:
// otherwise the join phase is under way, and the answer is JoinAnswer's
// once it says done. A new member without RequireKnownMemberID joins as
// NewMemberID; with it, Join answers ErrMemberIDRequired with
// ClassicJoinResponse.MemberID set. A member joining again with the
// protocols it had and the group not needing a new assignment (a follower
// in CompletingRebalance or Stable: a resent JoinGroup) gets the current
// generation's answer without a rebalance; every other join starts a
// rebalance or takes part in the one under way.
func (g *Classic) Join(req ClassicJoinRequest, now time.Time) (resp ClassicJoinResponse, done bool, err error) {
	if err := g.checkJoin(req); err != nil {
		return ClassicJoinResponse{}, true, err
	}
	if req.RebalanceTimeout <= 0 {
		// JoinGroup v0 has no rebalance timeout: Kafka takes the session's.
		req.RebalanceTimeout = req.SessionTimeout
	}
	id := req.MemberID
	m := g.members[id]
	switch {
	case id == "" && req.RequireKnownMemberID:
		if err := checkName("member id", req.NewMemberID); err != nil {
			return ClassicJoinResponse{}, true, err
		}
		g.pending[req.NewMemberID] = now.Add(req.SessionTimeout)
		return ClassicJoinResponse{MemberID: req.NewMemberID}, true,
			fmt.Errorf("%w: group %q: join again as %q", ErrMemberIDRequired, g.id, req.NewMemberID)
	case id == "":
		// A new member; one already known by NewMemberID is the same
		// join resent after a lost answer.
		id = req.NewMemberID
		if err := checkName("member id", id); err != nil {
			return ClassicJoinResponse{}, true, err
		}
		m = g.members[id]
	case m == nil:
		if _, ok := g.pending[id]; !ok {
			return ClassicJoinResponse{}, true, fmt.Errorf("%w: %q in group %q", ErrUnknownMember, id, g.id)
		}
		delete(g.pending, id)
	}
	if m == nil {
		m = &classicMember{id: id}
		g.members[id] = m
	} else if g.state != ClassicPreparingRebalance && sameProtocols(m.protocols, req.Protocols) &&
		(g.state == ClassicCompletingRebalance || id != g.leader) {
		m.lastHeartbeat = now
		return g.answerFor(m), true, nil
	}
	m.clientID, m.clientHost = req.ClientID, req.ClientHost
	m.protocols = slices.Clone(req.Protocols)
	m.sessionTimeout, m.rebalanceTimeout = req.SessionTimeout, req.RebalanceTimeout
	m.lastHeartbeat = now
	m.answer = nil
	g.protocolType = req.ProtocolType
	if g.state != ClassicPreparingRebalance {
		g.prepareRebalance(now)
	}
	g.joins++
	m.joined, m.joinedAt = true, g.joins
	g.maybeComplete(now)
	if m.answer != nil {
		return *m.answer, true, nil
	}
	return ClassicJoinResponse{MemberID: id}, false, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// checkJoin refuses a join the group cannot take: bad input, another
// protocol type, or no protocol in common with every other member.
func (g *Classic) checkJoin(req ClassicJoinRequest) error {
	if req.SessionTimeout <= 0 {
		return fmt.Errorf("%w: group %q: session timeout %v", ErrInvalidInput, g.id, req.SessionTimeout)
	}
	if req.ProtocolType == "" || len(req.Protocols) == 0 {
		return fmt.Errorf("%w: group %q: a join needs a protocol type and protocols", ErrInconsistentProtocol, g.id)
	}
	for _, p := range req.Protocols {
		if err := checkName("protocol", p.Name); err != nil {
			return err
		}
	}
	others := 0
	for id := range g.members {
		if id != req.MemberID {
			others++
		}
	}
	if others == 0 {
		return nil
	}
	if req.ProtocolType != g.protocolType {
		return fmt.Errorf("%w: group %q has protocol type %q, not %q", ErrInconsistentProtocol, g.id, g.protocolType, req.ProtocolType)
	}
	for _, p := range req.Protocols {
		if g.allSupport(p.Name, req.MemberID) {
			return nil
		}
	}
	return fmt.Errorf("%w: group %q: no protocol of %q is supported by every member", ErrInconsistentProtocol, g.id, req.MemberID)
}

// allSupport says whether every member but except supports protocol name.
func (g *Classic) allSupport(name, except string) bool {
	for id, m := range g.members {
		if id != except && !slices.ContainsFunc(m.protocols, func(p Protocol) bool { return p.Name == name }) {
			return false
		}
	}
	return true
}

func sameProtocols(a, b []Protocol) bool {
	return slices.EqualFunc(a, b, func(x, y Protocol) bool { return x.Name == y.Name && bytes.Equal(x.Metadata, y.Metadata) })
}

// prepareRebalance starts a join phase: every member must join again by
// the deadline, the largest of their rebalance timeouts from now.
func (g *Classic) prepareRebalance(now time.Time) {
	g.state = ClassicPreparingRebalance
	g.rebalanceDeadline = now
	for _, m := range g.members {
		if m.awaitingSync {
			// Its held sync is answered REBALANCE_IN_PROGRESS now: its
			// session counts from then (Kafka's propagateAssignment).
			m.lastHeartbeat = now
		}
		m.joined, m.awaitingSync = false, false
		m.assignment = nil
		g.rebalanceDeadline = later(g.rebalanceDeadline, now.Add(m.rebalanceTimeout))
	}
}

// maybeComplete ends the join phase once every member joined again and no
// member id handed out is still unused.
func (g *Classic) maybeComplete(now time.Time) {
	if g.state != ClassicPreparingRebalance || len(g.pending) > 0 {
		return
	}
	for _, m := range g.members {
		if !m.joined {
			return
		}
	}
	g.complete(now)
}

// complete ends the join phase: the members that did not join again are
// removed, the generation increases, the leader (the previous one if it
// stayed, else the first to join) and the protocol are chosen, and every
// member's answer is set. Sessions count again from now.
func (g *Classic) complete(now time.Time) {
	for id, m := range g.members {
		if !m.joined {
			delete(g.members, id)
		}
	}
	g.generation++
	if len(g.members) == 0 {
		g.state, g.protocolType, g.protocol, g.leader = ClassicEmpty, "", "", ""
		return
	}
	g.state = ClassicCompletingRebalance
	if g.members[g.leader] == nil {
		g.leader = ""
		for id, m := range g.members {
			if g.leader == "" || m.joinedAt < g.members[g.leader].joinedAt {
				g.leader = id
			}
		}
	}
	g.protocol = g.selectProtocol()
	for _, m := range g.members {
		m.lastHeartbeat = now
		a := g.answerFor(m)
		m.answer = &a
	}
}

// selectProtocol is Kafka's vote: each member votes for the first of its
// protocols that every member supports; the most votes win, ties going to
// the name first in order.
func (g *Classic) selectProtocol() string {
	votes := map[string]int{}
	for id, m := range g.members {
		for _, p := range m.protocols {
			if g.allSupport(p.Name, id) {
				votes[p.Name]++
				break
			}
		}
	}
	best := ""
	for _, name := range slices.Sorted(maps.Keys(votes)) {
		if best == "" || votes[name] > votes[best] {
			best = name
		}
	}
	return best
}

// answerFor is m's JoinGroup answer for the current generation.
func (g *Classic) answerFor(m *classicMember) ClassicJoinResponse {
	r := ClassicJoinResponse{Generation: g.generation, ProtocolType: g.protocolType, Protocol: g.protocol,
		Leader: g.leader, MemberID: m.id}
	if m.id == g.leader {
		for _, id := range slices.Sorted(maps.Keys(g.members)) {
			r.Members = append(r.Members, ClassicMember{MemberID: id, Metadata: g.members[id].metadata(g.protocol)})
		}
	}
	return r
}

func (m *classicMember) metadata(protocol string) []byte {
	for _, p := range m.protocols {
		if p.Name == protocol {
			return p.Metadata
		}
	}
	return nil
}

// JoinAnswer is the answer to a held JoinGroup of memberID: done once its
// join phase ended (the answer is then the same until the member joins
// again), ErrUnknownMember if the member is no longer in the group.
func (g *Classic) JoinAnswer(memberID string) (ClassicJoinResponse, bool, error) {
	m := g.members[memberID]
	if m == nil {
		return ClassicJoinResponse{}, true, fmt.Errorf("%w: %q in group %q", ErrUnknownMember, memberID, g.id)
	}
	if m.answer == nil {
		return ClassicJoinResponse{MemberID: memberID}, false, nil
	}
	return *m.answer, true, nil
}

// ClassicSyncRequest is a SyncGroup.
type ClassicSyncRequest struct {
	MemberID   string
	Generation int32
	// ProtocolType and Protocol (SyncGroup v5+) must be the group's when
	// not empty.
	ProtocolType, Protocol string
	// Assignments, the leader's, by member id.
	Assignments map[string][]byte
}

// Sync is a member's SyncGroup: the leader's sets every member's
// assignment (an assignment for a member not in the group is ignored, a
// member without one gets none), and a member gets its own, done; a
// follower's waits (done false) until the leader's, and SyncAnswer then
// gives it.
func (g *Classic) Sync(req ClassicSyncRequest, now time.Time) ([]byte, bool, error) {
	m := g.members[req.MemberID]
	switch {
	case m == nil:
		return nil, true, fmt.Errorf("%w: %q in group %q", ErrUnknownMember, req.MemberID, g.id)
	case req.Generation != g.generation:
		return nil, true, fmt.Errorf("%w: group %q is at generation %d, not %d", ErrIllegalGeneration, g.id, g.generation, req.Generation)
	case req.ProtocolType != "" && req.ProtocolType != g.protocolType, req.Protocol != "" && req.Protocol != g.protocol:
		return nil, true, fmt.Errorf("%w: group %q has protocol %s/%s, not %s/%s", ErrInconsistentProtocol, g.id,
			g.protocolType, g.protocol, req.ProtocolType, req.Protocol)
	case g.state == ClassicPreparingRebalance:
		return nil, true, fmt.Errorf("%w: group %q", ErrRebalanceInProgress, g.id)
	}
	m.lastHeartbeat = now
	if g.state == ClassicCompletingRebalance && req.MemberID == g.leader {
		for id, x := range g.members {
			x.assignment = slices.Clone(req.Assignments[id])
			if x.awaitingSync {
				x.awaitingSync, x.lastHeartbeat = false, now
			}
		}
		g.state = ClassicStable
	}
	a, done, err := g.SyncAnswer(req.MemberID, req.Generation)
	if !done && err == nil {
		m.awaitingSync = true
	}
	return a, done, err
}

// SyncAnswer is the answer to a held SyncGroup of memberID at generation:
// done with its assignment once the leader's SyncGroup set it, else
// ErrRebalanceInProgress if a new join phase began meanwhile,
// ErrUnknownMember if the member is gone.
func (g *Classic) SyncAnswer(memberID string, generation int32) ([]byte, bool, error) {
	m := g.members[memberID]
	switch {
	case m == nil:
		return nil, true, fmt.Errorf("%w: %q in group %q", ErrUnknownMember, memberID, g.id)
	case generation != g.generation || g.state == ClassicPreparingRebalance:
		return nil, true, fmt.Errorf("%w: group %q", ErrRebalanceInProgress, g.id)
	case g.state == ClassicCompletingRebalance:
		return nil, false, nil
	}
	return slices.Clone(m.assignment), true, nil
}

// Heartbeat is a member's Heartbeat at generation: it renews its session,
// and says ErrRebalanceInProgress during a join phase (the member must
// join again), ErrIllegalGeneration for another generation,
// ErrUnknownMember for a member not in the group.
func (g *Classic) Heartbeat(memberID string, generation int32, now time.Time) error {
	m := g.members[memberID]
	switch {
	case m == nil:
		return fmt.Errorf("%w: %q in group %q", ErrUnknownMember, memberID, g.id)
	case generation != g.generation:
		return fmt.Errorf("%w: group %q is at generation %d, not %d", ErrIllegalGeneration, g.id, g.generation, generation)
	}
	m.lastHeartbeat = now
	if g.state == ClassicPreparingRebalance {
		return fmt.Errorf("%w: group %q", ErrRebalanceInProgress, g.id)
	}
	return nil
}

// Leave removes members that leave (LeaveGroup; several at once from v3):
// errs[i] is ErrUnknownMember for an id not in the group, else nil. If any
// left, a join phase starts (or the one under way may end).
func (g *Classic) Leave(memberIDs []string, now time.Time) []error {
	errs := make([]error, len(memberIDs))
	left, pendingLeft := false, false
	for i, id := range memberIDs {
		switch _, pending := g.pending[id]; {
		case g.members[id] != nil:
			delete(g.members, id)
			left = true
		case pending:
			delete(g.pending, id)
			pendingLeft = true
		default:
			errs[i] = fmt.Errorf("%w: %q in group %q", ErrUnknownMember, id, g.id)
		}
	}
	if left {
		g.rebalanceAfterRemoval(now)
	} else if pendingLeft {
		g.maybeComplete(now)
	}
	return errs
}

func (g *Classic) rebalanceAfterRemoval(now time.Time) {
	if g.state != ClassicPreparingRebalance && g.state != ClassicEmpty {
		g.prepareRebalance(now)
	}
	if g.state == ClassicEmpty && len(g.members) == 0 {
		return
	}
	g.maybeComplete(now)
}

// Tick expires what is due by now and returns the ids of the members
// removed: members whose session expired (a member that joined the join
// phase under way waits for it, not on its session), member ids handed
// out and not used within the session timeout, and at the rebalance
// deadline every member that did not join again. A removal starts a join
// phase, or ends the one under way.
func (g *Classic) Tick(now time.Time) []string {
	var gone []string
	for id, m := range g.members {
		joining := g.state == ClassicPreparingRebalance && m.joined || g.state == ClassicCompletingRebalance && m.awaitingSync
		if !joining && !now.Before(m.lastHeartbeat.Add(m.sessionTimeout)) {
			delete(g.members, id)
			gone = append(gone, id)
		}
	}
	removed := len(gone) > 0
	for id, exp := range g.pending {
		if !now.Before(exp) {
			// An unused member id: no member of the generation, so no
			// rebalance (Kafka's removePendingMemberAndUpdateGroup); a
			// join phase under way may end.
			delete(g.pending, id)
			gone = append(gone, id)
		}
	}
	if g.state == ClassicPreparingRebalance && !now.Before(g.rebalanceDeadline) {
		clear(g.pending)
		for id, m := range g.members {
			if !m.joined {
				gone = append(gone, id)
			}
		}
		g.complete(now)
	} else if removed {
		g.rebalanceAfterRemoval(now)
	} else if len(gone) > 0 {
		g.maybeComplete(now)
	}
	slices.Sort(gone)
	return slices.Compact(gone)
}

// Deadline is when Tick next has something to do; zero when nothing is
// due ever (no members).
func (g *Classic) Deadline() time.Time {
	var d time.Time
	earlier := func(t time.Time) {
		if d.IsZero() || t.Before(d) {
			d = t
		}
	}
	for _, m := range g.members {
		if !(g.state == ClassicPreparingRebalance && m.joined || g.state == ClassicCompletingRebalance && m.awaitingSync) {
			earlier(m.lastHeartbeat.Add(m.sessionTimeout))
		}
	}
	for _, exp := range g.pending {
		earlier(exp)
	}
	if g.state == ClassicPreparingRebalance {
		earlier(g.rebalanceDeadline)
	}
	return d
}

// CheckCommit checks an OffsetCommit, Kafka's rules: a "simple" commit
// (generation below 0, no member id) of a consumer outside any group is
// allowed only while the group is Empty (Kafka's check is of the state: a
// member id handed out with ErrMemberIDRequired and not used yet makes no
// member, and a join phase under way refuses it even once its members
// left); otherwise the member must be in the group, at its generation,
// and not while the leader's assignment is awaited
// (ErrRebalanceInProgress). During a join phase a member of the
// generation may still commit (an eager consumer commits what it consumed
// before it joins again).
func (g *Classic) CheckCommit(memberID string, generation int32) error {
	if generation < 0 && memberID == "" {
		if g.state != ClassicEmpty {
			return fmt.Errorf("%w: a commit without a member to group %q, which is %v", ErrUnknownMember, g.id, g.state)
		}
		return nil
	}
	m := g.members[memberID]
	switch {
	case m == nil:
		return fmt.Errorf("%w: commit by %q in group %q", ErrUnknownMember, memberID, g.id)
	case generation != g.generation:
		return fmt.Errorf("%w: commit to group %q at generation %d, not %d", ErrIllegalGeneration, g.id, generation, g.generation)
	case g.state == ClassicCompletingRebalance:
		return fmt.Errorf("%w: group %q", ErrRebalanceInProgress, g.id)
	}
	return nil
}

// ClassicDescription is an admin's view of a classic group
// (DescribeGroups).
type ClassicDescription struct {
	ID           string
	State        ClassicState
	Generation   int32
	ProtocolType string
	Protocol     string
	Leader       string
	Members      []ClassicMemberDescription // in member id order
}

// ClassicMemberDescription is one member in a ClassicDescription.
type ClassicMemberDescription struct {
	MemberID   string
	ClientID   string
	ClientHost string
	// Metadata is its metadata for the group's protocol; Assignment what
	// the leader assigned it (empty until the group is Stable).
	Metadata   []byte
	Assignment []byte
}

// Describe returns a copy of the group's state.
func (g *Classic) Describe() ClassicDescription {
	d := ClassicDescription{ID: g.id, State: g.state, Generation: g.generation, ProtocolType: g.protocolType,
		Protocol: g.protocol, Leader: g.leader}
	for _, id := range slices.Sorted(maps.Keys(g.members)) {
		m := g.members[id]
		d.Members = append(d.Members, ClassicMemberDescription{MemberID: id, ClientID: m.clientID, ClientHost: m.clientHost,
			Metadata: slices.Clone(m.metadata(g.protocol)), Assignment: slices.Clone(m.assignment)})
	}
	return d
}
