package ui

import "context"

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
	// Up is true when the agent's Consul check passes.
	Up bool `json:"up"`
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

	// Lag is LEO - HW of this agent's replica (derived): on the leader,
	// how far the slowest in-sync replica trails its log; null without
	// positions.
	Lag *int64 `json:"lag"`
	// UnderReplicated is true when the ISR is smaller than the replica set
	// (derived).
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
	Topics             int `json:"topics"`
	Partitions         int `json:"partitions"`
	UnderReplicated    int `json:"under_replicated"`
	UnderMinISR        int `json:"under_min_isr"`
	Offline            int `json:"offline"`
	LeaderNotPreferred int `json:"leader_not_preferred"`
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
			p.UnderReplicated = len(p.ISR) < len(p.Replicas)
			p.UnderMinISR = len(p.ISR) < t.MinInsyncReplicas
			p.LeaderNotPreferred = p.Leader != "" && len(p.Replicas) > 0 && p.Leader != p.Replicas[0]
			p.Offline = p.Leader == "" || !up[p.Leader]
			s.Totals.Partitions++
			s.Totals.UnderReplicated += b2i(p.UnderReplicated)
			s.Totals.UnderMinISR += b2i(p.UnderMinISR)
			s.Totals.Offline += b2i(p.Offline)
			s.Totals.LeaderNotPreferred += b2i(p.LeaderNotPreferred)
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
