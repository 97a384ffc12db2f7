package group

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/testseed"
)

// The property test runs a Group with simulated clients that behave as the
// protocol asks of them, with random timing: they join with random
// subscriptions, heartbeat at random moments (some too late, so their
// sessions expire), take a random number of heartbeats to finish a
// revocation, lose answers, leave, rejoin or crash, while topics grow. After
// every step it checks:
//
//   - the coordinator's ownership is consistent, and no partition is owned
//     by two members;
//   - what each client consumes is owned by its member, so no partition is
//     consumed by two clients, and the client may commit it at its epoch;
//   - a revocation only names a partition that left the member's target
//     since the member joined;
//   - a partition of a target that has no owner is waiting only for its
//     target member's next heartbeat, and Ready lists that member (or the
//     member is finishing a revocation first);
//
// and every so often that heartbeats settle: with every client
// heartbeating promptly, within a few rounds every partition of a
// subscribed topic is owned by its target member and Ready is quiet.

// simClient is one simulated group member.
type simClient struct {
	id       string
	topics   []string
	session  time.Duration
	epoch    int32
	lastSent time.Time
	// consuming is what the client consumes; revoke what it was told to
	// give up and still consumes.
	consuming map[TopicPartition]bool
	revoke    map[TopicPartition]bool
}

func (c *simClient) apply(r Response) {
	c.epoch = r.MemberEpoch
	next := make(map[TopicPartition]bool)
	for _, tp := range r.Assigned {
		next[tp] = true
	}
	for _, tp := range r.Revoke {
		if c.consuming[tp] {
			next[tp] = true
			c.revoke[tp] = true
		}
	}
	c.consuming = next
}

func (c *simClient) owned() []TopicPartition {
	return slices.SortedFunc(maps.Keys(c.consuming), compareTP)
}

type sim struct {
	t       *testing.T
	rng     *rand.Rand
	g       *Group
	now     time.Time
	clients map[string]*simClient
	next    int
	counts  map[string]int32
	// lost[m] are the partitions that left member m's target since it
	// joined; targets the target of each member after the previous step.
	lost    map[string]map[TopicPartition]bool
	targets map[string]map[TopicPartition]bool
	step    int
	stats   *simStats
}

// simStats count what the runs exercised, so that a run that stopped
// exercising something fails instead of passing unseen.
type simStats struct {
	revokes, released, waited, lost, fenced, expired, rejoined, grown, failovers int
}

var simTopics = []string{"a", "b", "c"}

func newSim(t *testing.T, rng *rand.Rand, stats *simStats) *sim {
	g, err := New("g", Options{HeartbeatInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s := &sim{t: t, rng: rng, g: g, now: time.Unix(1_700_000_000, 0),
		clients: make(map[string]*simClient), counts: make(map[string]int32),
		lost: make(map[string]map[TopicPartition]bool), targets: make(map[string]map[TopicPartition]bool), stats: stats}
	for _, topic := range simTopics {
		s.setPartitions(topic, int32(1+rng.IntN(6)))
	}
	return s
}

func (s *sim) fatalf(format string, args ...any) {
	s.t.Helper()
	var cs []string
	for _, id := range slices.Sorted(maps.Keys(s.clients)) {
		c := s.clients[id]
		cs = append(cs, fmt.Sprintf("%s epoch %d consuming %v revoke %v", id, c.epoch, c.owned(), slices.SortedFunc(maps.Keys(c.revoke), compareTP)))
	}
	s.t.Fatalf("step %d: %s\n%+v\nclients:\n%s", s.step, fmt.Sprintf(format, args...), s.g.Describe(), strings.Join(cs, "\n"))
}

// failover moves the group to a new coordinator: its State is stored as
// JSON and restored, and every session starts again at now.
func (s *sim) failover() {
	b, err := json.Marshal(s.g.State())
	if err != nil {
		s.fatalf("State: %v", err)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		s.fatalf("State: %v", err)
	}
	g, err := Restore(s.g.ID(), Options{HeartbeatInterval: time.Second}, st, s.now)
	if err != nil {
		s.fatalf("Restore: %v\n%s", err, b)
	}
	if again, _ := json.Marshal(g.State()); string(again) != string(b) {
		s.fatalf("Restore changed the state:\n%s\n%s", b, again)
	}
	s.g = g
	s.stats.failovers++
}

func (s *sim) setPartitions(topic string, n int32) {
	if err := s.g.SetPartitions(topic, n); err != nil {
		s.t.Fatal(err)
	}
	s.counts[topic] = n
}

func (s *sim) join(c *simClient) {
	c.consuming, c.revoke = map[TopicPartition]bool{}, map[TopicPartition]bool{}
	r, err := s.g.Join(c.id, c.topics, c.session, s.now)
	if err != nil {
		s.fatalf("Join(%s): %v", c.id, err)
	}
	s.clients[c.id] = c
	s.lost[c.id] = map[TopicPartition]bool{}
	s.targets[c.id] = nil
	c.lastSent = s.now
	s.checkRevoke(c, r)
	c.apply(r)
}

func (s *sim) heartbeat(c *simClient, finish bool, lose bool) {
	if finish {
		for tp := range c.revoke {
			delete(c.consuming, tp)
			s.stats.released++
		}
		clear(c.revoke)
	}
	r, err := s.g.Heartbeat(c.id, c.epoch, c.owned(), s.now)
	switch {
	case errors.Is(err, ErrUnknownMember):
		// Expired: the client was late, and stopped consuming when its
		// session ran out.
		if len(c.consuming) > 0 {
			s.fatalf("client %s consumes %v but its heartbeat says %v", c.id, c.owned(), err)
		}
		s.stats.rejoined++
		s.join(c)
		return
	case errors.Is(err, ErrFencedMemberEpoch):
		// Answers lost in a row: the client gives up everything and joins
		// again.
		s.stats.fenced++
		s.join(c)
		return
	case err != nil:
		s.fatalf("Heartbeat(%s): %v", c.id, err)
	}
	c.lastSent = s.now
	s.checkRevoke(c, r)
	if len(r.Revoke) > 0 {
		s.stats.revokes++
	}
	if lose {
		s.stats.lost++
	} else {
		c.apply(r)
	}
}

// checkRevoke: a member is only told to revoke what left its target.
func (s *sim) checkRevoke(c *simClient, r Response) {
	s.t.Helper()
	s.trackTargets()
	for _, tp := range r.Revoke {
		if !s.lost[c.id][tp] {
			s.fatalf("member %s told to revoke %v, which never left its target", c.id, tp)
		}
	}
}

// trackTargets records which partitions left each member's target.
func (s *sim) trackTargets() {
	for _, m := range s.g.Describe().Members {
		cur := map[TopicPartition]bool{}
		for _, tp := range m.Target {
			cur[tp] = true
		}
		for tp := range s.targets[m.ID] {
			if !cur[tp] {
				s.lost[m.ID][tp] = true
			}
		}
		s.targets[m.ID] = cur
	}
}

// advance moves the clock; clients that could not heartbeat within their
// session stop consuming (a client's own session timer), then the
// coordinator expires them.
func (s *sim) advance(d time.Duration) {
	s.now = s.now.Add(d)
	for _, c := range s.clients {
		if !s.now.Before(c.lastSent.Add(c.session)) {
			clear(c.consuming)
			clear(c.revoke)
		}
	}
	for _, id := range s.g.Tick(s.now) {
		s.stats.expired++
		if c := s.clients[id]; c != nil && len(c.consuming) > 0 {
			s.fatalf("member %s expired while its client consumes %v", id, c.owned())
		}
	}
}

func (s *sim) check() {
	s.t.Helper()
	s.trackTargets()
	d := s.g.Describe()
	owner := map[TopicPartition]string{}
	members := map[string]MemberDescription{}
	for _, m := range d.Members {
		members[m.ID] = m
		for _, gr := range append(slices.Clone(m.Assigned), m.Revoking...) {
			if o, ok := owner[gr.TopicPartition]; ok {
				s.fatalf("%v owned by %s and %s", gr.TopicPartition, o, m.ID)
			}
			owner[gr.TopicPartition] = m.ID
			if got, ok := s.g.Owner(gr.TopicPartition); !ok || got != m.ID {
				s.fatalf("Owner(%v) = %q, %v; member %s holds it", gr.TopicPartition, got, ok, m.ID)
			}
			if gr.Epoch > m.MemberEpoch {
				s.fatalf("%v granted to %s at epoch %d, above its epoch %d", gr.TopicPartition, m.ID, gr.Epoch, m.MemberEpoch)
			}
		}
	}
	for id, c := range s.clients {
		for tp := range c.consuming {
			if owner[tp] != id {
				s.fatalf("client %s consumes %v, owned by %q", id, tp, owner[tp])
			}
			if err := s.g.CheckCommit(id, c.epoch, tp); err != nil {
				s.fatalf("client %s consuming %v cannot commit at epoch %d: %v", id, tp, c.epoch, err)
			}
		}
	}
	wake := map[string]bool{}
	for _, id := range s.g.Ready().Wake {
		wake[id] = true
	}
	for _, m := range d.Members {
		for _, tp := range m.Target {
			if _, ok := s.g.Owner(tp); !ok && !wake[m.ID] && len(m.Revoking) == 0 {
				s.fatalf("%v of %s's target has no owner, and Ready does not wake %s", tp, m.ID, m.ID)
			}
			if o, ok := s.g.Owner(tp); ok && o != m.ID {
				s.stats.waited++
			}
		}
	}
}

// settle has every client heartbeat every second, finishing revocations at
// once, until the members of crashed clients have expired (sessions are at
// most 10 s) and a few rounds more, and checks that the group converges:
// every partition of a subscribed topic owned by its target member,
// nothing pending.
func (s *sim) settle() {
	s.t.Helper()
	for range 15 {
		for _, id := range slices.Sorted(maps.Keys(s.clients)) {
			s.heartbeat(s.clients[id], true, false)
			s.check()
		}
		s.advance(time.Second)
		s.check()
	}
	d := s.g.Describe()
	subscribed := map[string]bool{}
	for _, m := range d.Members {
		if len(m.Revoking) > 0 || !slices.Equal(tpsOf(m.Assigned), m.Target) {
			s.fatalf("member %s did not settle", m.ID)
		}
		for _, t := range m.Topics {
			subscribed[t] = true
		}
	}
	for t := range subscribed {
		for p := range s.counts[t] {
			if _, ok := s.g.Owner(TopicPartition{t, p}); !ok {
				s.fatalf("%s/%d of a subscribed topic has no owner after settling", t, p)
			}
		}
	}
	if w := s.g.Ready().Wake; len(w) > 0 {
		s.fatalf("Ready wakes %v after settling", w)
	}
}

func tpsOf(gs []Grant) []TopicPartition {
	out := make([]TopicPartition, 0, len(gs))
	for _, g := range gs {
		out = append(out, g.TopicPartition)
	}
	return out
}

func (s *sim) randomClient() *simClient {
	if len(s.clients) == 0 {
		return nil
	}
	ids := slices.Sorted(maps.Keys(s.clients))
	return s.clients[ids[s.rng.IntN(len(ids))]]
}

func (s *sim) randomTopics() []string {
	var ts []string
	for _, t := range simTopics {
		if s.rng.IntN(2) == 0 {
			ts = append(ts, t)
		}
	}
	if len(ts) == 0 {
		ts = []string{simTopics[s.rng.IntN(len(simTopics))]}
	}
	return ts
}

func (s *sim) run(steps int) {
	for s.step = range steps {
		switch x := s.rng.IntN(100); {
		case x < 8 && len(s.clients) < 7:
			s.next++
			s.join(&simClient{id: fmt.Sprintf("m%02d", s.next), topics: s.randomTopics(),
				session: time.Duration(3+s.rng.IntN(8)) * time.Second})
		case x < 12:
			if c := s.randomClient(); c != nil {
				if err := s.g.Leave(c.id); err != nil && !errors.Is(err, ErrUnknownMember) {
					s.fatalf("Leave: %v", err)
				}
				delete(s.clients, c.id)
			}
		case x < 15:
			// A crash: the client is gone, its member expires later.
			if c := s.randomClient(); c != nil {
				delete(s.clients, c.id)
			}
		case x < 17:
			// The client restarts with the same member id.
			if c := s.randomClient(); c != nil {
				s.join(c)
			}
		case x < 20 && x >= 19:
			s.failover()
		case x < 20:
			t := simTopics[s.rng.IntN(len(simTopics))]
			if s.counts[t] < 16 {
				s.setPartitions(t, s.counts[t]+int32(1+s.rng.IntN(3)))
				s.stats.grown++
			}
		default:
			if c := s.randomClient(); c != nil {
				s.heartbeat(c, s.rng.IntN(2) == 0, s.rng.IntN(5) == 0)
			}
		}
		s.check()
		s.advance(time.Duration(s.rng.IntN(400)) * time.Millisecond)
		s.check()
		if s.step%200 == 199 {
			s.settle()
		}
	}
	s.settle()
}

func TestGroupModel(t *testing.T) {
	rng := testseed.Rand(t)
	rounds, steps := 15, 2000
	if raceEnabled || testing.Short() {
		rounds = 4
	}
	var st simStats
	for range rounds {
		newSim(t, rng, &st).run(steps)
	}
	t.Logf("%+v", st)
	if st.revokes == 0 || st.released == 0 || st.waited == 0 || st.lost == 0 || st.fenced == 0 || st.expired == 0 || st.rejoined == 0 || st.grown == 0 || st.failovers == 0 {
		t.Fatalf("the runs did not exercise everything: %+v", st)
	}
}
