package ui

import (
	"context"
	"slices"
)

// Source is what the status page reads on every poll.
type Source interface {
	// State is the cluster as this agent sees it now.
	State(ctx context.Context) (State, error)
}

// State is the answer of /ui/api/state. The source fills everything but
// Totals and the fields of Partition marked derived, which the handler adds.
type State struct {
	// TimeUnixMilli is when the source took the state, by the agent's
	// clock: the page divides by the time between two states for its
	// rates, not by the time between two answers' arrivals.
	TimeUnixMilli int64 `json:"time_unix_ms"`
	Self          Self  `json:"self"`
	// Agents are every agent the cluster knows of, up or down, by node id.
	Agents []Agent `json:"agents"`
	// Topics are sorted by name, their partitions by number.
	Topics []Topic `json:"topics"`
	// Counters are this agent's cumulative counters; nil when it keeps
	// none (the page shows its byte rates as unknown then).
	Counters *Counters `json:"counters"`
	// Warnings say what part of the state may be old or incomplete, such
	// as agents listed from memory because Consul did not answer.
	Warnings []string `json:"warnings"`
	Totals   Totals   `json:"totals"`
}

// Self is the agent that answers.
type Self struct {
	NodeID string `json:"node_id"`
	// State is starting, serving or stopping, as /v1/health reports it.
	State string `json:"state"`
}

// Agent is one agent of the cluster.
type Agent struct {
	NodeID string `json:"node_id"`
	// The addresses are empty for an agent known only as a replica in the
	// metadata, never seen registered.
	ClientAddress string `json:"client_address"`
	PeerAddress   string `json:"peer_address"`
	// Up is true when Consul reports the agent alive.
	Up bool `json:"up"`
	// NotPassing is true for an agent up but in Consul maintenance mode or
	// with a check in warning: it serves, and takes no new replica.
	NotPassing bool `json:"not_passing"`
	// Draining is true while the agent is being drained (logagent node
	// drain, docs/design.md §7.7): its replicas move away.
	Draining bool `json:"draining"`
	// Version is the build the agent registered (logagent version), ""
	// when it registered none: a rolling upgrade shows as agents of two
	// builds.
	Version string `json:"version"`
}

// Topic is one topic and its partitions.
type Topic struct {
	Name              string `json:"name"`
	ReplicationFactor int    `json:"replication_factor"`
	MinInsyncReplicas int    `json:"min_insync_replicas"`
	// Error is set when the topic's metadata is corrupt: its partitions
	// are then shown as stored but not led.
	Error      string      `json:"error,omitempty"`
	Partitions []Partition `json:"partitions"`
}

// Partition is one partition: its metadata, and its positions where the
// answering agent holds a replica of it.
type Partition struct {
	Partition int `json:"partition"`
	// Leader is "" before the first election.
	Leader   string   `json:"leader"`
	Epoch    int32    `json:"epoch"`
	Replicas []string `json:"replicas"`
	ISR      []string `json:"isr"`
	// Role is this agent's replica's (leader, follower, offline), "" when
	// it holds none.
	Role string `json:"role"`
	// The positions of this agent's replica; null when it holds none or
	// its log is not open.
	HighWatermark  *int64 `json:"high_watermark"`
	LogEndOffset   *int64 `json:"log_end_offset"`
	LogStartOffset *int64 `json:"log_start_offset"`
	// Move is the reassignment in flight (docs/design.md §7.6), null when
	// there is none.
	Move *Move `json:"move"`

	// Lag is LEO - HW of this agent's replica (derived): on the leader,
	// how far the slowest in-sync replica trails its log; null without
	// positions.
	Lag *int64 `json:"lag"`
	// UnderReplicated is true when the ISR is smaller than the replica set,
	// or the replica set than the replication factor (derived). During a
	// move the replicas it adds are not counted (Kafka's rule): a partition
	// is not under-replicated just because a move is under way.
	UnderReplicated bool `json:"under_replicated"`
	// UnderMinISR is true when the ISR is smaller than the topic's
	// min_insync_replicas: acks=all writes are refused (derived).
	UnderMinISR bool `json:"under_min_isr"`
	// LeaderNotPreferred is true when a leader other than the first
	// replica, the preferred one, leads (derived).
	LeaderNotPreferred bool `json:"leader_not_preferred"`
	// Offline is true when no agent that is up leads the partition
	// (derived).
	Offline bool `json:"offline"`
}

// Move is a partition's reassignment in flight, as /v1/status shows it.
type Move struct {
	Target   []string `json:"target"`
	Adding   []string `json:"adding"`
	Removing []string `json:"removing"`
	// Cancelled marks a cancel's way back: Target is the list the
	// cancelled move started from, Removing the replicas it had added.
	Cancelled bool `json:"cancelled"`
	// Progress is each added replica's catch-up; only the partition's
	// leader knows it, so it is empty unless the answering agent leads.
	Progress []MoveProgress `json:"progress"`
	// Phase is the step the move waits for (derived, docs/design.md §7.6):
	// "adding" while a target replica is not in the ISR, "leader-off" while
	// the leader is a replica the move removes (it hands over first), then
	// "completing" until the leader's completion transaction; a cancel's
	// way back is "cancelling" throughout.
	Phase string `json:"phase"`
}

// MoveProgress is one replica a move adds, as the leader sees it.
type MoveProgress struct {
	Node string `json:"node"`
	// LogEndOffset is the replica's last fetch offset, -1 before its first
	// fetch from this leader; Lag is the leader's log end less it.
	LogEndOffset int64 `json:"log_end_offset"`
	Lag          int64 `json:"lag"`
	InSync       bool  `json:"in_sync"`
	// CatchUpBytes is what the leader has sent it while it caught up.
	CatchUpBytes int64 `json:"catch_up_bytes"`
	// CaughtUp is the part of the leader's log, from its log start to its
	// log end, the replica holds, from 0 to 1 (1 once in sync); null when
	// the leader's positions are not known (derived).
	CaughtUp *float64 `json:"caught_up"`
}

// Counters are an agent's cumulative counts since it started.
type Counters struct {
	ProduceRecords uint64 `json:"produce_records"`
	ProduceBytes   uint64 `json:"produce_bytes"`
	FetchBytes     uint64 `json:"fetch_bytes"`
}

// Totals sum up the state for the page's header (derived).
type Totals struct {
	AgentsUp           int `json:"agents_up"`
	AgentsDown         int `json:"agents_down"`
	AgentsDraining     int `json:"agents_draining"`
	Topics             int `json:"topics"`
	Partitions         int `json:"partitions"`
	UnderReplicated    int `json:"under_replicated"`
	UnderMinISR        int `json:"under_min_isr"`
	Offline            int `json:"offline"`
	LeaderNotPreferred int `json:"leader_not_preferred"`
	// Moving counts the partitions with a move in flight.
	Moving int `json:"moving"`
}

// derive fills the derived fields and the totals, and turns nil slices into
// empty ones so the page never meets a null list.
func (s *State) derive() {
	up := map[string]bool{}
	s.Totals = Totals{Topics: len(s.Topics)}
	if s.Agents == nil {
		s.Agents = []Agent{}
	}
	for _, a := range s.Agents {
		up[a.NodeID] = a.Up
		if a.Up {
			s.Totals.AgentsUp++
		} else {
			s.Totals.AgentsDown++
		}
		s.Totals.AgentsDraining += b2i(a.Draining)
	}
	if s.Topics == nil {
		s.Topics = []Topic{}
	}
	if s.Warnings == nil {
		s.Warnings = []string{}
	}
	for ti := range s.Topics {
		t := &s.Topics[ti]
		if t.Partitions == nil {
			t.Partitions = []Partition{}
		}
		for pi := range t.Partitions {
			p := &t.Partitions[pi]
			if p.Replicas == nil {
				p.Replicas = []string{}
			}
			if p.ISR == nil {
				p.ISR = []string{}
			}
			p.Lag = nil
			if p.HighWatermark != nil && p.LogEndOffset != nil {
				lag := *p.LogEndOffset - *p.HighWatermark
				p.Lag = &lag
			}
			p.UnderReplicated = underReplicated(p, t.ReplicationFactor)
			if p.Move != nil {
				p.Move.derive(p)
			}
			p.UnderMinISR = len(p.ISR) < t.MinInsyncReplicas
			p.LeaderNotPreferred = p.Leader != "" && len(p.Replicas) > 0 && p.Leader != p.Replicas[0]
			p.Offline = p.Leader == "" || !up[p.Leader]
			s.Totals.Partitions++
			s.Totals.UnderReplicated += b2i(p.UnderReplicated)
			s.Totals.UnderMinISR += b2i(p.UnderMinISR)
			s.Totals.Offline += b2i(p.Offline)
			s.Totals.LeaderNotPreferred += b2i(p.LeaderNotPreferred)
			s.Totals.Moving += b2i(p.Move != nil)
		}
	}
}

// underReplicated is the partition's replica set less the replicas a move
// adds (its replicas before the move; for a cancel's way back, less the
// replicas it removes) against the ISR and the replication factor.
func underReplicated(p *Partition, rf int) bool {
	var extra []string
	switch {
	case p.Move != nil && p.Move.Cancelled:
		// The way back removes what the cancelled move had added.
		extra = p.Move.Removing
	case p.Move != nil:
		extra = p.Move.Adding
	}
	want := 0
	for _, r := range p.Replicas {
		if slices.Contains(extra, r) {
			continue
		}
		want++
		// Each counted replica must be in sync itself: an added replica
		// in the ISR does not stand in for one that fell out.
		if !slices.Contains(p.ISR, r) {
			return true
		}
	}
	return want < rf
}

// derive fills the move's phase and its replicas' share caught up, from the
// partition's ISR, leader and (on the leader) log positions.
func (m *Move) derive(p *Partition) {
	for _, l := range []*[]string{&m.Target, &m.Adding, &m.Removing} {
		if *l == nil {
			*l = []string{}
		}
	}
	if m.Progress == nil {
		m.Progress = []MoveProgress{}
	}
	allIn := !slices.ContainsFunc(m.Target, func(n string) bool { return !slices.Contains(p.ISR, n) })
	switch {
	case m.Cancelled:
		m.Phase = "cancelling"
	case !allIn:
		m.Phase = "adding"
	case slices.Contains(m.Removing, p.Leader):
		m.Phase = "leader-off"
	default:
		m.Phase = "completing"
	}
	for i := range m.Progress {
		mp := &m.Progress[i]
		mp.CaughtUp = caughtUp(*mp, p.LogStartOffset, p.LogEndOffset)
	}
}

// caughtUp is the share of the leader's log [start, end) a replica at
// mp.LogEndOffset holds. A replica added by a move starts from the
// leader's log start, so that is where its count begins.
func caughtUp(mp MoveProgress, start, end *int64) *float64 {
	if mp.InSync {
		one := 1.0
		return &one
	}
	if start == nil || end == nil {
		return nil
	}
	f := 0.0
	switch {
	case mp.LogEndOffset >= *end:
		f = 1
	case mp.LogEndOffset > *start:
		f = float64(mp.LogEndOffset-*start) / float64(*end-*start)
	}
	return &f
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
