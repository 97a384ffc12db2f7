package partition

import (
	"testing"

	"github.com/logagent/logagent/election"
)

// TestSameMeta: a replica is handed its metadata again when any key of its
// partition was written (each write moves that key's ModifyIndex), its
// leader's session or handover hint changed, a move began or ended, the
// topic is another incarnation or no longer usable; never otherwise.
func TestSameMeta(t *testing.T) {
	base := replicaMeta{
		pm: election.PartitionMeta{Topic: "t", Partition: 3, Replicas: []string{"n1", "n2", "n3"},
			State: election.PartitionState{Leader: "n1", Epoch: 4, ISR: []string{"n1", "n2", "n3"}}, StateIndex: 40, ReplicasIndex: 10, LeaderSession: "s1"},
		tc:     election.TopicConfig{ID: "A", Name: "t", Partitions: 4, ReplicationFactor: 3, MinInsyncReplicas: 2},
		usable: true,
	}
	for _, tt := range []struct {
		name   string
		change func(*replicaMeta)
		same   bool
	}{
		{"nothing", func(*replicaMeta) {}, true},
		{"the same values decoded again", func(m *replicaMeta) {
			m.pm.Replicas = []string{"n1", "n2", "n3"}
			m.pm.State.ISR = []string{"n1", "n2", "n3"}
		}, true},
		{"state written", func(m *replicaMeta) { m.pm.StateIndex = 41 }, false},
		{"replicas written", func(m *replicaMeta) { m.pm.ReplicasIndex = 11 }, false},
		{"a move begins", func(m *replicaMeta) { m.pm.Reassign, m.pm.ReassignIndex = &election.Reassignment{}, 42 }, false},
		{"the move key written", func(m *replicaMeta) { m.pm.ReassignIndex = 43 }, false},
		{"leader session lost", func(m *replicaMeta) { m.pm.LeaderSession = "" }, false},
		{"handover hint", func(m *replicaMeta) { m.pm.Successor = "n2" }, false},
		{"another incarnation", func(m *replicaMeta) { m.tc.ID = "B" }, false},
		{"no longer usable", func(m *replicaMeta) { m.usable = false }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := base
			m.pm.State.ISR = append([]string(nil), base.pm.State.ISR...)
			tt.change(&m)
			if got := sameMeta(base, m); got != tt.same {
				t.Fatalf("sameMeta = %v, want %v", got, tt.same)
			}
		})
	}
}
