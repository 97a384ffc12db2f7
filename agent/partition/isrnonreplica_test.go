package partition

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/internal/consultest"
	"github.com/logagent/logagent/replicate"
)

// TestNonReplicaInConsulISRIsRepaired: Consul's ISR or ELR names n9, an
// agent outside the partition's replicas (an operator's edit, a bug, a
// move racing a stale ISR write). The leader meeting it, at its election
// or in the state its ISR change reads back, refused it and handed the
// lock back; it won the next epoch, met the same state and handed it back
// again: the epoch climbed about once a second and the partition took no
// writes until someone repaired Consul. A non-replica holds nothing the HW
// counts and cannot be elected, so a leader in Consul's ISR takes it out
// with its guarded ISR change and leads on at its epoch.
func TestNonReplicaInConsulISRIsRepaired(t *testing.T) {
	tests := []struct {
		name string
		// Consul's ISR and ELR as written
		isr []string
		elr []election.EligibleReplica
		// atElection: written before the first election, which meets it;
		// else at the leader's epoch, met when its next ISR change (n3
		// leaving) loses its cas and reads the state back.
		atElection bool
	}{
		{"an isr naming a non-replica, met at the election", []string{"n1", "n2", "n3", "n9"}, nil, true},
		{"an elr naming a non-replica, met at the election", []string{"n1", "n2", "n3"}, []election.EligibleReplica{{Node: "n9"}}, true},
		{"an isr naming a non-replica, met by an isr change", []string{"n1", "n2", "n3", "n9"}, nil, false},
		{"an elr naming a non-replica, met by an isr change", []string{"n1", "n2", "n3"}, []election.EligibleReplica{{Node: "n9"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { leadsOnThroughOddState(t, tt.isr, tt.elr, tt.atElection) })
	}
}

// TestRepeatedMemberInConsulISRIsHarmless: Consul's ISR names a member
// twice (an operator's edit). NewLeader and ISRCommitted refuse such an
// ISR, and decodeState passed it on as it was, so the leader meeting it
// stepped down, won the next epoch, met the same state and stepped down
// again: the epoch climbed and the partition took no writes. A repeat
// names the same member, so the set is the same: decodeState reads the
// ISR without it, every reader (the campaign's eligibility, the clean
// election's count against min_insync_replicas, the leader) sees the one
// set, and the next election or ISR change writes it back without the
// repeat.
func TestRepeatedMemberInConsulISRIsHarmless(t *testing.T) {
	tests := []struct {
		name       string
		isr        []string
		atElection bool
	}{
		{"a follower twice, met at the election", []string{"n1", "n2", "n2", "n3"}, true},
		{"the leader twice, met at the election", []string{"n1", "n2", "n3", "n1"}, true},
		{"the leader twice, met by an isr change", []string{"n1", "n1", "n2", "n3"}, false},
		{"a follower twice, met by an isr change", []string{"n1", "n2", "n3", "n2"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { leadsOnThroughOddState(t, tt.isr, nil, tt.atElection) })
	}
}

// leadsOnThroughOddState writes isr and elr as partition 0's ISR and ELR
// in Consul (atElection: before n1's first election, which meets it; else
// at n1's epoch, met when its next ISR change, n3 leaving, loses its cas
// and reads the state back) and checks that n1 leads on at one epoch: its
// ISR change commits [n1 n2] with no ELR, and an acks=all write is
// acknowledged.
func leadsOnThroughOddState(t *testing.T, isr []string, elr []election.EligibleReplica, atElection bool) {
	t.Helper()
	srv := consultest.Start(t)
	n2, n3 := startElectionOnly(t, srv, "n2"), startElectionOnly(t, srv, "n3")
	const topic = "nonrep"
	createTopic(t, n2, topic, [][]string{{"n1", "n2", "n3"}}, 2)
	corrupt := func(st *election.PartitionState) { st.ISR, st.ELR = isr, elr }
	if atElection {
		writeConsulState(t, srv, topic, corrupt)
	}
	m, _ := startManager(t, srv, "n1", "", time.Now)
	// Consul's leader, not the replica's view: before, n1 never
	// got to lead at all when the election met the state.
	waitFor(t, func() bool { return consulState(t, srv, topic).Leader == "n1" }, "n1 elected")
	epoch := consulState(t, srv, topic).Epoch
	if !atElection {
		r := waitLeading(t, m, topic)
		epoch = r.CurrentView().Epoch
		if st := writeConsulState(t, srv, topic, corrupt); st.Leader != "n1" || st.Epoch != epoch {
			t.Fatalf("state %+v, want n1 leading at epoch %d", st, epoch)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n3.Deregister(ctx); err != nil {
		t.Fatal(err)
	}

	// What is odd leaves Consul's state, and n3 after it, at the same epoch.
	start, window := time.Now(), 5*time.Second
	var st election.PartitionState
	for {
		st = consulState(t, srv, topic)
		if st.Epoch == epoch && slices.Equal(st.ISR, []string{"n1", "n2"}) && len(st.ELR) == 0 {
			break
		}
		if time.Since(start) > window {
			t.Fatalf("epoch went from %d to %d within %s, Consul's state %+v: want n1 leading on at epoch %d with ISR [n1 n2], no ELR (written as ISR %v, ELR %v; n3 dead)",
				epoch, st.Epoch, window, st, epoch, isr, elr)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// And the partition takes writes.
	r := waitLeading(t, m, topic)
	if v := r.CurrentView(); v.Epoch != epoch {
		t.Fatalf("n1 leads at epoch %d, want %d", v.Epoch, epoch)
	}
	follow(t, r, "n2", 0, epoch)
	acked := appendAcksAll(t, r, "a")
	follow(t, r, "n2", 1, epoch)
	if out := <-acked; out.Err != nil {
		t.Fatalf("acks=all write fetched by n2 answered %v; want acknowledged at epoch %d with ISR %v", out.Err, epoch, r.CurrentView().ISR)
	}
}

// consulState reads topic's partition 0 state from Consul.
func consulState(t *testing.T, srv *consultest.Server, topic string) election.PartitionState {
	t.Helper()
	st, _ := readConsulState(t, srv, topic)
	return st
}

func readConsulState(t *testing.T, srv *consultest.Server, topic string) (election.PartitionState, uint64) {
	t.Helper()
	key := "logagent/topics/" + topic + "/0/state"
	pair, _, err := srv.Client().KV().Get(key, nil)
	if err != nil || pair == nil {
		t.Fatalf("read %s: %v, %v", key, pair, err)
	}
	var st election.PartitionState
	if err := json.Unmarshal(pair.Value, &st); err != nil {
		t.Fatal(err)
	}
	return st, pair.ModifyIndex
}

// writeConsulState changes topic's partition 0 state in Consul as an
// operator's edit would, with a cas on the state it read, which it
// returns.
func writeConsulState(t *testing.T, srv *consultest.Server, topic string, change func(*election.PartitionState)) election.PartitionState {
	t.Helper()
	st, index := readConsulState(t, srv, topic)
	read := st
	change(&st)
	value, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	key := "logagent/topics/" + topic + "/0/state"
	if ok, _, err := srv.Client().KV().CAS(&api.KVPair{Key: key, Value: value, ModifyIndex: index}, nil); err != nil || !ok {
		t.Fatalf("write %s: %v, %v", key, ok, err)
	}
	return read
}

// appendAcksAll produces value acks=all on the leader r (5 s timeout) and
// returns, once the leader appended it (its first write), the channel its
// outcome comes on.
func appendAcksAll(t *testing.T, r *Replica, value string) <-chan ProduceOutcome {
	t.Helper()
	acked := make(chan ProduceOutcome, 1)
	go func() {
		acked <- r.Produce(testBatch(t, []string{value}), replicate.AcksAll, AnyEpoch, time.Now().Add(5*time.Second), 6*time.Second)
	}()
	waitFor(t, func() bool { return r.CurrentLog().LogEndOffset() == 1 }, "the write appended")
	return acked
}
