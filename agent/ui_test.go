package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/ui"
)

// uiState reads GET /ui/api/state.
func (ta *testAgent) uiState() ui.State {
	t := ta.c.t
	t.Helper()
	status, body := ta.call("GET", ui.PathState, "", nil)
	if status != 200 {
		t.Fatalf("%s: GET %s: %d %s", ta.nodeID, ui.PathState, status, body)
	}
	var st ui.State
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func agentsLine(st ui.State) string {
	s := ""
	for _, a := range st.Agents {
		s += fmt.Sprintf("%s:%v ", a.NodeID, a.Up)
	}
	return s
}

// TestUIState: the status page's state on an in-process agent (under the
// race detector, polled while records are produced) has both agents, the
// positions of its replicas and the leader's own view; an agent that stops
// gracefully, deregistering, stays listed as down with its addresses.
func TestUIState(t *testing.T) {
	c := startTestCluster(t, 2, "")
	n1, n2 := c.agents[0], c.agents[1]
	c.createTopic(n1, "t", 2, 2, 1)
	for p := range 2 {
		c.waitLeader("t", p, 2)
	}

	var polls sync.WaitGroup
	for range 3 {
		polls.Go(func() {
			for range 10 {
				n1.uiState()
			}
		})
	}
	for i := range 20 {
		n2.mustProduce("t", i%2, fmt.Sprint("v", i))
	}
	polls.Wait()
	c.waitCaughtUp("t", 0, 10)
	c.waitCaughtUp("t", 1, 10)

	st := n1.uiState()
	if st.Self.NodeID != "n1" || st.Self.State != "serving" {
		t.Errorf("self %+v", st.Self)
	}
	if got := agentsLine(st); got != "n1:true n2:true " {
		t.Errorf("agents %s", got)
	}
	if len(st.Topics) != 1 || st.Topics[0].Name != "t" || len(st.Topics[0].Partitions) != 2 {
		t.Fatalf("topics %+v", st.Topics)
	}
	for _, p := range st.Topics[0].Partitions {
		if p.HighWatermark == nil || *p.HighWatermark != 10 || p.LogEndOffset == nil || *p.LogEndOffset != 10 || p.Lag == nil || *p.Lag != 0 {
			t.Errorf("partition %d positions HW %v LEO %v lag %v, want 10 10 0", p.Partition, p.HighWatermark, p.LogEndOffset, p.Lag)
		}
		if p.Leader == "" || len(p.ISR) != 2 || p.UnderReplicated || p.Offline {
			t.Errorf("partition %d: leader %q ISR %v under %v offline %v", p.Partition, p.Leader, p.ISR, p.UnderReplicated, p.Offline)
		}
		if (p.Role == "leader") != (p.Leader == "n1") {
			t.Errorf("partition %d: role %q with leader %q", p.Partition, p.Role, p.Leader)
		}
	}

	if err := n2.stop(); err != nil {
		t.Fatal(err)
	}
	c.waitFor(10*time.Second, "n2 listed as down", func() bool {
		return agentsLine(n1.uiState()) == "n1:true n2:false "
	})
	for _, a := range n1.uiState().Agents {
		if a.NodeID == "n2" && (a.ClientAddress != n2.client || a.PeerAddress == "") {
			t.Errorf("n2 after its stop: %+v, want its addresses as last seen", a)
		}
	}
}

// TestUIStateMove: a move in flight is on the status page's state of every
// agent, with its target and phase, and with the added replica's progress
// on the leader only; an agent being drained is marked; every agent
// registered shows its build; the totals count both. The move adds "n9", an agent that never runs (written past the
// API, which would refuse it), so it stays in flight for the test.
func TestUIStateMove(t *testing.T) {
	c := startTestCluster(t, 2, "")
	n1, n2 := c.agents[0], c.agents[1]
	c.createTopic(n1, "t", 1, 2, 1)
	c.waitLeader("t", 0, 2)
	for i := range 4 {
		n2.mustProduce("t", 0, fmt.Sprint("v", i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := n1.coord.StartReassign(ctx, "t", 0, []string{"n1", "n2", "n9"}); err != nil {
		t.Fatal(err)
	}
	if err := n1.coord.SetDraining(ctx, "n2", true); err != nil {
		t.Fatal(err)
	}
	var leader, follower *testAgent
	c.waitFor(10*time.Second, "the move and the drain on both agents' pages", func() bool {
		for _, ta := range c.agents {
			st := ta.uiState()
			p := st.Topics[0].Partitions[0]
			if p.Move == nil || st.Totals.Moving != 1 || st.Totals.AgentsDraining != 1 {
				return false
			}
			if p.Role == "leader" {
				leader = ta
			} else {
				follower = ta
			}
		}
		return leader != nil && follower != nil
	})
	for _, ta := range []*testAgent{leader, follower} {
		st := ta.uiState()
		p := st.Topics[0].Partitions[0]
		if got := fmt.Sprintf("%v %v %v %s", p.Move.Target, p.Move.Adding, p.Move.Removing, p.Move.Phase); got != "[n1 n2 n9] [n9] [] adding" {
			t.Errorf("%s: move %s", ta.nodeID, got)
		}
		if p.UnderReplicated {
			t.Errorf("%s: under-replicated for a move's added replica", ta.nodeID)
		}
		for _, a := range st.Agents {
			if a.Draining != (a.NodeID == "n2") {
				t.Errorf("%s: agent %s draining %v", ta.nodeID, a.NodeID, a.Draining)
			}
			// The build each registered; none for n9, known only from
			// the move's target.
			wantVersion := "test-" + a.NodeID
			if a.ClientAddress == "" {
				wantVersion = ""
			}
			if a.Version != wantVersion {
				t.Errorf("%s: agent %s version %q, want %q", ta.nodeID, a.NodeID, a.Version, wantVersion)
			}
		}
		wantProgress := "[]"
		if ta == leader {
			wantProgress = "[n9 -1 false 0]"
		}
		var got []string
		for _, mp := range p.Move.Progress {
			got = append(got, fmt.Sprintf("%s %d %v %v", mp.Node, mp.LogEndOffset, mp.InSync, *mp.CaughtUp))
		}
		if fmt.Sprint(got) != wantProgress {
			t.Errorf("%s (%s): progress %v, want %s", ta.nodeID, p.Role, got, wantProgress)
		}
	}
}
