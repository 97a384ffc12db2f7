package group

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"
)

// DefaultHeartbeatInterval is the Options.HeartbeatInterval used when it is
// zero.
const DefaultHeartbeatInterval = time.Second

// MaxNameLen is the longest group id, member id or topic name, in bytes.
const MaxNameLen = 255

// TopicPartition names one partition of a topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (tp TopicPartition) String() string { return fmt.Sprintf("%s/%d", tp.Topic, tp.Partition) }

func compareTP(a, b TopicPartition) int {
	return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
}

// Options configure a Group.
type Options struct {
	// HeartbeatInterval is how often members are told to heartbeat, at most
	// a third of a member's session timeout. Zero or less means
	// DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
}

// Group is the coordinator's state of one consumer group. It is not safe
// for concurrent use: one goroutine of the coordinator owns it.
type Group struct {
	id                string
	heartbeatInterval time.Duration
	// epoch is the group epoch, which every change of the membership, of a
	// subscription or of a subscribed topic's partition count increases.
	// The target assignment is always the one of this epoch.
	epoch   int32
	counts  map[string]int32
	members map[string]*member
	// target maps each partition of a subscribed topic to the member the
	// target assignment gives it to.
	target map[TopicPartition]string
	// owners maps each owned partition to its owner: the member it was
	// granted to, until that member releases it (in a heartbeat that no
	// longer lists it), leaves or dies. A partition is granted only while
	// it has no owner.
	owners map[TopicPartition]string
}

// member is one member's state.
type member struct {
	id             string
	topics         []string // sorted, distinct
	sessionTimeout time.Duration
	lastHeartbeat  time.Time
	// epoch is the member epoch: the group epoch whose target the member
	// was last reconciled to. prevEpoch is the one before, which a
	// heartbeat may still carry when the answer that moved it was lost.
	epoch, prevEpoch int32
	// target is the member's part of the group's target assignment.
	target map[TopicPartition]bool
	// assigned are the partitions granted to the member and still in its
	// target, each with the member epoch it was granted at; revoking are
	// those it was granted that left its target, which it still owns until
	// it releases them.
	assigned map[TopicPartition]int32
	revoking map[TopicPartition]int32
}

// New returns an empty group: no members, epoch 0, no partition counts
// known.
func New(id string, opts Options) (*Group, error) {
	if err := checkName("group id", id); err != nil {
		return nil, err
	}
	iv := opts.HeartbeatInterval
	if iv <= 0 {
		iv = DefaultHeartbeatInterval
	}
	return &Group{
		id:                id,
		heartbeatInterval: iv,
		counts:            make(map[string]int32),
		members:           make(map[string]*member),
		target:            make(map[TopicPartition]string),
		owners:            make(map[TopicPartition]string),
	}, nil
}

func checkName(what, name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("%w: %s %q: 1 to %d bytes", ErrInvalidInput, what, name, MaxNameLen)
	}
	return nil
}

// ID is the group's id.
func (g *Group) ID() string { return g.id }

// Epoch is the group epoch.
func (g *Group) Epoch() int32 { return g.epoch }

// Members is the number of members.
func (g *Group) Members() int { return len(g.members) }

// Response is the answer to a Join or Heartbeat.
type Response struct {
	// MemberEpoch is the member's epoch, which its next heartbeat, fetches
	// and commits carry.
	MemberEpoch int32
	// Assigned are the partitions the member owns and keeps: it consumes
	// them now. It is the whole set, not a change, in partition order.
	Assigned []TopicPartition
	// Revoke are partitions the member still owns but must give up: it
	// finishes with them (commits), stops consuming them, and heartbeats
	// without them. Only then are they granted to their new owner.
	Revoke []TopicPartition
	// HeartbeatInterval is when the member should heartbeat next.
	HeartbeatInterval time.Duration
}

// Join adds a member subscribed to topics, whose session expires
// sessionTimeout after its last heartbeat (see Tick), and answers its first
// heartbeat: the free partitions of its target are granted at once. A
// member id already in the group is a member joining again (KIP-848's
// heartbeat at epoch 0): it owns nothing any more, so what it owned is
// released at once, and it starts again with a new member epoch. A member
// id therefore names one client instance: two instances sharing one would
// take each other's partitions.
//
// Every Join increases the group epoch and recomputes the target.
func (g *Group) Join(memberID string, topics []string, sessionTimeout time.Duration, now time.Time) (Response, error) {
	if err := checkName("member id", memberID); err != nil {
		return Response{}, err
	}
	if len(topics) == 0 {
		return Response{}, fmt.Errorf("%w: member %q subscribes to no topic", ErrInvalidInput, memberID)
	}
	for _, t := range topics {
		if err := checkName("topic", t); err != nil {
			return Response{}, err
		}
	}
	if sessionTimeout <= 0 {
		return Response{}, fmt.Errorf("%w: member %q: session timeout %v", ErrInvalidInput, memberID, sessionTimeout)
	}
	if old := g.members[memberID]; old != nil {
		g.remove(old)
	}
	sorted := slices.Clone(topics)
	slices.Sort(sorted)
	m := &member{
		id:             memberID,
		topics:         slices.Compact(sorted),
		sessionTimeout: sessionTimeout,
		lastHeartbeat:  now,
		assigned:       make(map[TopicPartition]int32),
		revoking:       make(map[TopicPartition]int32),
	}
	g.members[memberID] = m
	g.retarget()
	g.reconcile(m, nil)
	return g.response(m), nil
}

// Heartbeat is a member's heartbeat at memberEpoch (the one of the last
// answer it got), listing every partition it still consumes (owned). It
// renews the member's session, releases the partitions it was told to
// revoke and no longer lists, and moves it towards its target:
//
//   - a partition that left its target is revoked (kept in Response.Revoke
//     until a heartbeat no longer lists it; released at once if this one
//     already does not; kept if the target gives it back first);
//   - while any revocation is pending, nothing is granted and the member
//     epoch stays: the member finishes giving up before it takes anything;
//   - otherwise the member epoch becomes the group epoch, and every
//     partition of its target that has no owner is granted to it at that
//     epoch; one still owned by another member is granted at a later
//     heartbeat, once released (Ready lists the members waiting for one).
//
// A partition the member keeps is never revoked: a member whose target did
// not change keeps consuming throughout. An unknown member is
// ErrUnknownMember; an epoch ahead of the member's, or behind it other than
// its previous epoch with owned a subset of its partitions (the answer that
// moved it was lost), is ErrFencedMemberEpoch. Listing a partition it does
// not own changes nothing: the member consumes what Assigned says.
//
// owned is trusted to be complete: a partition it leaves out is taken as
// released. So a member has one heartbeat in flight at a time, and owned
// reflects every answer it acted on; a front end that holds heartbeats as
// long polls must answer a held one before it handles the member's next.
func (g *Group) Heartbeat(memberID string, memberEpoch int32, owned []TopicPartition, now time.Time) (Response, error) {
	m := g.members[memberID]
	if m == nil {
		return Response{}, fmt.Errorf("%w: %q in group %q", ErrUnknownMember, memberID, g.id)
	}
	set := make(map[TopicPartition]bool, len(owned))
	for _, tp := range owned {
		set[tp] = true
	}
	switch {
	case memberEpoch > m.epoch:
		return Response{}, fmt.Errorf("%w: member %q of group %q sent epoch %d, ahead of its epoch %d",
			ErrFencedMemberEpoch, memberID, g.id, memberEpoch, m.epoch)
	case memberEpoch < m.epoch && (memberEpoch != m.prevEpoch || !m.holdsAll(set)):
		return Response{}, fmt.Errorf("%w: member %q of group %q sent epoch %d, behind its epoch %d",
			ErrFencedMemberEpoch, memberID, g.id, memberEpoch, m.epoch)
	}
	m.lastHeartbeat = now
	g.reconcile(m, set)
	return g.response(m), nil
}

// Current is what the member's last heartbeat left it with (its epoch,
// its partitions, what it must revoke), without a heartbeat: it changes
// nothing, not even the session. A front end answers a held heartbeat
// with it when the hold ends without news, or when a later heartbeat of
// the member replaced the held one.
func (g *Group) Current(memberID string) (Response, error) {
	m := g.members[memberID]
	if m == nil {
		return Response{}, fmt.Errorf("%w: %q in group %q", ErrUnknownMember, memberID, g.id)
	}
	return g.response(m), nil
}

// Subscriptions are the topics some member subscribes to, each once, in
// no particular order.
func (g *Group) Subscriptions() []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range g.members {
		for _, t := range m.topics {
			if !seen[t] {
				seen[t] = true
				out = append(out, t)
			}
		}
	}
	return out
}

// SessionTimeout is a member's session timeout; 0 for an unknown member.
func (g *Group) SessionTimeout(memberID string) time.Duration {
	if m := g.members[memberID]; m != nil {
		return m.sessionTimeout
	}
	return 0
}

// holdsAll says whether every partition in owned is assigned to m: a
// heartbeat at m's previous epoch can only come from a member that has
// already done what the lost answer asked (Kafka's rule).
func (m *member) holdsAll(owned map[TopicPartition]bool) bool {
	for tp := range owned {
		if _, ok := m.assigned[tp]; !ok {
			return false
		}
	}
	return true
}

// Leave removes a member that is leaving: it has stopped consuming, so its
// partitions are released at once. The group epoch increases.
func (g *Group) Leave(memberID string) error {
	m := g.members[memberID]
	if m == nil {
		return fmt.Errorf("%w: %q in group %q", ErrUnknownMember, memberID, g.id)
	}
	g.remove(m)
	g.retarget()
	return nil
}

// Tick removes every member whose session expired by now (its last
// heartbeat is sessionTimeout or more before now), as dead: its partitions
// are released at once, so they can be granted. It returns their ids in
// order. If any expired, the group epoch increases, once.
func (g *Group) Tick(now time.Time) []string {
	var dead []string
	for id, m := range g.members {
		if !now.Before(m.lastHeartbeat.Add(m.sessionTimeout)) {
			dead = append(dead, id)
		}
	}
	if len(dead) == 0 {
		return nil
	}
	slices.Sort(dead)
	for _, id := range dead {
		g.remove(g.members[id])
	}
	g.retarget()
	return dead
}

// SetPartitions records that topic has count partitions (the agent's
// metadata: a topic created, grown, or deleted with count 0). If a member
// subscribes to the topic and the count changed, the group epoch increases
// and the target is recomputed; partitions beyond a lower count leave the
// target and are revoked like any other.
func (g *Group) SetPartitions(topic string, count int32) error {
	if err := checkName("topic", topic); err != nil {
		return err
	}
	if count < 0 {
		return fmt.Errorf("%w: topic %q: %d partitions", ErrInvalidInput, topic, count)
	}
	if g.counts[topic] == count {
		return nil
	}
	if count == 0 {
		delete(g.counts, topic)
	} else {
		g.counts[topic] = count
	}
	for _, m := range g.members {
		if _, ok := slices.BinarySearch(m.topics, topic); ok {
			g.retarget()
			break
		}
	}
	return nil
}

// remove drops m from the group and releases everything it owns.
func (g *Group) remove(m *member) {
	for tp := range m.assigned {
		delete(g.owners, tp)
	}
	for tp := range m.revoking {
		delete(g.owners, tp)
	}
	delete(g.members, m.id)
}

// retarget starts a new group epoch and computes its target assignment.
func (g *Group) retarget() {
	g.epoch++
	subs := make(map[string][]string, len(g.members))
	for id, m := range g.members {
		subs[id] = m.topics
	}
	g.target = assign(subs, g.counts, g.target)
	for _, m := range g.members {
		clear(m.target)
		if m.target == nil {
			m.target = make(map[TopicPartition]bool)
		}
	}
	for tp, id := range g.target {
		g.members[id].target[tp] = true
	}
}

// reconcile moves m towards its target, given the partitions it reports it
// still owns (nil: none), as Heartbeat describes.
func (g *Group) reconcile(m *member, owned map[TopicPartition]bool) {
	for tp, e := range m.revoking {
		switch {
		case !owned[tp]:
			delete(m.revoking, tp)
			delete(g.owners, tp)
		case m.target[tp]:
			// The target gave it back before the member let it go: it
			// keeps it, and its ownership (and grant epoch) never ended.
			delete(m.revoking, tp)
			m.assigned[tp] = e
		}
	}
	if len(m.revoking) > 0 {
		return
	}
	for tp, e := range m.assigned {
		if m.target[tp] {
			continue
		}
		delete(m.assigned, tp)
		if owned[tp] {
			m.revoking[tp] = e
		} else {
			delete(g.owners, tp)
		}
	}
	if len(m.revoking) > 0 {
		return
	}
	if m.epoch != g.epoch {
		m.prevEpoch, m.epoch = m.epoch, g.epoch
	}
	for tp := range m.target {
		if _, mine := m.assigned[tp]; mine {
			continue
		}
		if _, taken := g.owners[tp]; taken {
			continue
		}
		m.assigned[tp] = m.epoch
		g.owners[tp] = m.id
	}
}

func (g *Group) response(m *member) Response {
	return Response{
		MemberEpoch:       m.epoch,
		Assigned:          sortedKeys(m.assigned),
		Revoke:            sortedKeys(m.revoking),
		HeartbeatInterval: min(g.heartbeatInterval, m.sessionTimeout/3),
	}
}

func sortedKeys[V any](m map[TopicPartition]V) []TopicPartition {
	return slices.SortedFunc(maps.Keys(m), compareTP)
}

// CheckFetch checks that a member at memberEpoch may fetch tp's records for
// the group: the rule is CheckCommit's, since a member that may read a
// partition may record how far it read.
func (g *Group) CheckFetch(memberID string, memberEpoch int32, tp TopicPartition) error {
	return g.checkOwner("fetch", memberID, memberEpoch, tp)
}

// CheckCommit checks that a member at memberEpoch may commit an offset of
// tp: it owns tp (granted and not released; a partition being revoked
// still counts, so the member can commit before it gives it up), and
// memberEpoch is at least the epoch tp was granted to it at and at most its
// current epoch. An epoch below the grant comes from before this ownership
// (the member owned tp before, lost it, and a late request of that time
// arrives), which ErrStaleMemberEpoch refuses. An epoch between the grant
// and the current one is accepted: the member's epoch moves whenever it is
// reconciled to a new target, which says nothing about tp, and refusing it
// (as Kafka's exact match does) would fail commits during every rebalance.
// An unknown member is ErrUnknownMember, a partition it does not own
// ErrNotOwner.
func (g *Group) CheckCommit(memberID string, memberEpoch int32, tp TopicPartition) error {
	return g.checkOwner("commit", memberID, memberEpoch, tp)
}

func (g *Group) checkOwner(what, memberID string, memberEpoch int32, tp TopicPartition) error {
	m := g.members[memberID]
	if m == nil {
		return fmt.Errorf("%w: %s by %q in group %q", ErrUnknownMember, what, memberID, g.id)
	}
	granted, ok := m.assigned[tp]
	if !ok {
		granted, ok = m.revoking[tp]
	}
	if !ok {
		return fmt.Errorf("%w: %s of %v by member %q of group %q", ErrNotOwner, what, tp, memberID, g.id)
	}
	if memberEpoch < granted || memberEpoch > m.epoch {
		return fmt.Errorf("%w: %s of %v by member %q of group %q at epoch %d: granted at epoch %d, member epoch %d",
			ErrStaleMemberEpoch, what, tp, memberID, g.id, memberEpoch, granted, m.epoch)
	}
	return nil
}

// Owner returns the member that owns tp, if one does.
func (g *Group) Owner(tp TopicPartition) (string, bool) {
	id, ok := g.owners[tp]
	return id, ok
}

// Ready is what the agent acts on after an input: whom to answer and when
// to tick. It is a level, not an event: it says the same until the state
// changes.
type Ready struct {
	// Epoch is the group epoch.
	Epoch int32
	// Wake lists, in order, the members whose next heartbeat would be
	// answered with something new (a partition to revoke, or a partition
	// of their target that has become free): a heartbeat of theirs held as
	// a long poll is answered now.
	Wake []string
	// Deadline is when the first session expires (the next Tick that can
	// remove a member); zero with no members.
	Deadline time.Time
}

// Ready returns the group's Ready.
func (g *Group) Ready() Ready {
	r := Ready{Epoch: g.epoch}
	for id, m := range g.members {
		if g.pending(m) {
			r.Wake = append(r.Wake, id)
		}
		if d := m.lastHeartbeat.Add(m.sessionTimeout); r.Deadline.IsZero() || d.Before(r.Deadline) {
			r.Deadline = d
		}
	}
	slices.Sort(r.Wake)
	return r
}

// pending says whether m's next heartbeat would revoke or grant something.
// A member with a revocation outstanding has been told already, and it
// moves on with its own next heartbeat.
func (g *Group) pending(m *member) bool {
	if len(m.revoking) > 0 {
		return false
	}
	for tp := range m.assigned {
		if !m.target[tp] {
			return true
		}
	}
	for tp := range m.target {
		if _, mine := m.assigned[tp]; mine {
			continue
		}
		if _, taken := g.owners[tp]; !taken {
			return true
		}
	}
	return false
}

// Description is an admin's view of a group.
type Description struct {
	ID    string
	Epoch int32
	// Partitions are the partition counts the group knows, by topic.
	Partitions map[string]int32
	// Members, in id order.
	Members []MemberDescription
}

// MemberDescription is one member in a Description.
type MemberDescription struct {
	ID             string
	Topics         []string
	SessionTimeout time.Duration
	LastHeartbeat  time.Time
	MemberEpoch    int32
	// Assigned are the partitions it owns and keeps, Revoking those it
	// owns and was asked to give up, each with the member epoch of its
	// grant; Target is its part of the target assignment. All in partition
	// order.
	Assigned []Grant
	Revoking []Grant
	Target   []TopicPartition
}

// Grant is a partition granted to a member, at a member epoch.
type Grant struct {
	TopicPartition
	Epoch int32
}

// Describe returns a copy of the group's state, in a stable order.
func (g *Group) Describe() Description {
	d := Description{ID: g.id, Epoch: g.epoch, Partitions: maps.Clone(g.counts)}
	for _, id := range slices.Sorted(maps.Keys(g.members)) {
		m := g.members[id]
		d.Members = append(d.Members, MemberDescription{
			ID:             id,
			Topics:         slices.Clone(m.topics),
			SessionTimeout: m.sessionTimeout,
			LastHeartbeat:  m.lastHeartbeat,
			MemberEpoch:    m.epoch,
			Assigned:       grants(m.assigned),
			Revoking:       grants(m.revoking),
			Target:         sortedKeys(m.target),
		})
	}
	return d
}

func grants(m map[TopicPartition]int32) []Grant {
	var out []Grant
	for _, tp := range sortedKeys(m) {
		out = append(out, Grant{tp, m[tp]})
	}
	return out
}
