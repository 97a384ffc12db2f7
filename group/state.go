package group

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// State is what a coordinator stores of a group so that a successor can
// take over without fencing its members (docs/design.md §7.2): everything
// but the members' last heartbeats, which change at every heartbeat and
// are not worth a write. Equal groups give equal States (every list is in
// a fixed order), so comparing two encodings tells whether a call changed
// anything worth storing.
type State struct {
	Epoch int32 `json:"epoch"`
	// Partitions are the partition counts the group knows, by topic.
	Partitions map[string]int32 `json:"partitions,omitempty"`
	// Target is the target assignment of Epoch, in partition order.
	Target  []TargetEntry `json:"target,omitempty"`
	Members []MemberState `json:"members,omitempty"`
}

// TargetEntry gives one partition of the target assignment to a member.
type TargetEntry struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Member    string `json:"member"`
}

// MemberState is one member in a State.
type MemberState struct {
	ID               string   `json:"id"`
	Topics           []string `json:"topics"`
	SessionTimeoutMS int64    `json:"session_timeout_ms"`
	Epoch            int32    `json:"epoch"`
	PrevEpoch        int32    `json:"prev_epoch"`
	// Assigned and Revoking as in MemberDescription, in partition order.
	Assigned []GrantState `json:"assigned,omitempty"`
	Revoking []GrantState `json:"revoking,omitempty"`
}

// GrantState is a partition owned by a member, granted at a member epoch.
type GrantState struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Epoch     int32  `json:"epoch"`
}

// State returns the group's state for storing.
func (g *Group) State() State {
	s := State{Epoch: g.epoch}
	if len(g.counts) > 0 {
		s.Partitions = maps.Clone(g.counts)
	}
	for _, tp := range sortedKeys(g.target) {
		s.Target = append(s.Target, TargetEntry{tp.Topic, tp.Partition, g.target[tp]})
	}
	for _, id := range slices.Sorted(maps.Keys(g.members)) {
		m := g.members[id]
		s.Members = append(s.Members, MemberState{
			ID:               id,
			Topics:           slices.Clone(m.topics),
			SessionTimeoutMS: m.sessionTimeout.Milliseconds(),
			Epoch:            m.epoch,
			PrevEpoch:        m.prevEpoch,
			Assigned:         grantStates(m.assigned),
			Revoking:         grantStates(m.revoking),
		})
	}
	return s
}

func grantStates(m map[TopicPartition]int32) []GrantState {
	var out []GrantState
	for _, tp := range sortedKeys(m) {
		out = append(out, GrantState{tp.Topic, tp.Partition, m[tp]})
	}
	return out
}

// Restore rebuilds a group from a State that State returned: a new
// coordinator taking over. Every member's session starts again at now, so
// each has its whole session timeout to reach the new coordinator. A State
// that no Group could have returned (a partition owned twice, a target
// naming no member, a bad name or timeout) is ErrInvalidInput, and nothing
// is restored.
func Restore(id string, opts Options, s State, now time.Time) (*Group, error) {
	g, err := New(id, opts)
	if err != nil {
		return nil, err
	}
	g.epoch = s.Epoch
	for t, n := range s.Partitions {
		if err := checkName("topic", t); err != nil {
			return nil, err
		}
		if n <= 0 {
			return nil, fmt.Errorf("%w: stored state of group %q: topic %q has %d partitions", ErrInvalidInput, id, t, n)
		}
		g.counts[t] = n
	}
	for _, ms := range s.Members {
		if err := checkName("member id", ms.ID); err != nil {
			return nil, err
		}
		if g.members[ms.ID] != nil || len(ms.Topics) == 0 || ms.SessionTimeoutMS <= 0 || ms.Epoch > s.Epoch || ms.PrevEpoch > ms.Epoch {
			return nil, fmt.Errorf("%w: stored state of group %q: member %q is inconsistent", ErrInvalidInput, id, ms.ID)
		}
		topics := slices.Clone(ms.Topics)
		slices.Sort(topics)
		m := &member{
			id:             ms.ID,
			topics:         slices.Compact(topics),
			sessionTimeout: time.Duration(ms.SessionTimeoutMS) * time.Millisecond,
			lastHeartbeat:  now,
			epoch:          ms.Epoch,
			prevEpoch:      ms.PrevEpoch,
			target:         make(map[TopicPartition]bool),
			assigned:       make(map[TopicPartition]int32),
			revoking:       make(map[TopicPartition]int32),
		}
		for _, list := range []struct {
			grants []GrantState
			into   map[TopicPartition]int32
		}{{ms.Assigned, m.assigned}, {ms.Revoking, m.revoking}} {
			for _, gs := range list.grants {
				tp := TopicPartition{gs.Topic, gs.Partition}
				if _, taken := g.owners[tp]; taken || gs.Epoch > ms.Epoch || gs.Partition < 0 {
					return nil, fmt.Errorf("%w: stored state of group %q: %v owned twice or granted ahead of its member", ErrInvalidInput, id, tp)
				}
				list.into[tp] = gs.Epoch
				g.owners[tp] = ms.ID
			}
		}
		g.members[ms.ID] = m
	}
	for _, te := range s.Target {
		tp := TopicPartition{te.Topic, te.Partition}
		m := g.members[te.Member]
		if _, dup := g.target[tp]; dup || m == nil {
			return nil, fmt.Errorf("%w: stored state of group %q: target of %v is inconsistent", ErrInvalidInput, id, tp)
		}
		g.target[tp] = te.Member
		m.target[tp] = true
	}
	return g, nil
}
