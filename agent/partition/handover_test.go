package partition

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/internal/consultest"
	"github.com/logagent/logagent/replicate"
)

// TestDecideHandover: the successor is the first of the leader's
// successors that the handover accepts, taken once nothing is pending or
// at the drain's end; a stop without one steps down, a move leads on.
func TestDecideHandover(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	retire := &handover{retiring: true, drainBy: t0.Add(retireDrain)}
	move := &handover{targets: []string{"n3"}, drainBy: t0.Add(moveDrain)}
	offRemoved := &handover{targets: []string{"n4", "n2"}, reassign: true, drainBy: t0.Add(moveDrain)}
	for _, tc := range []struct {
		name       string
		h          *handover
		at         time.Time
		pending    int
		successors []string
		followers  int
		want       handoverStep
		successor  string
	}{
		{"stop: caught up, nothing pending", retire, t0, 0, []string{"n2", "n3"}, 2, stepRelease, "n2"},
		{"stop: acks pending wait", retire, t0, 3, []string{"n2", "n3"}, 2, stepWait, ""},
		{"stop: nobody caught up yet", retire, t0, 0, nil, 2, stepWait, ""},
		{"stop: acks still pending at the drain's end", retire, t0.Add(retireDrain), 3, []string{"n3"}, 2, stepRelease, "n3"},
		{"stop: nobody caught up by the drain's end", retire, t0.Add(retireDrain), 0, nil, 2, stepDownPlain, ""},
		{"stop: an ISR of one", retire, t0, 1, nil, 0, stepDownPlain, ""},
		{"move: the target caught up", move, t0, 0, []string{"n2", "n3"}, 2, stepRelease, "n3"},
		{"move: only another follower caught up", move, t0, 0, []string{"n2"}, 2, stepWait, ""},
		{"move: the target not caught up by the drain's end", move, t0.Add(moveDrain), 0, []string{"n2"}, 2, stepAbort, ""},
		{"move: acks pending", move, t0, 1, []string{"n3"}, 2, stepWait, ""},
		{"reassign: the first target in the move's order", offRemoved, t0, 0, []string{"n2", "n3", "n4"}, 3, stepRelease, "n4"},
		{"reassign: another target caught up", offRemoved, t0, 0, []string{"n2", "n3"}, 3, stepRelease, "n2"},
		{"reassign: only a removed replica caught up", offRemoved, t0, 0, []string{"n3"}, 3, stepWait, ""},
		{"reassign: no target by the drain's end", offRemoved, t0.Add(moveDrain), 0, []string{"n3"}, 3, stepAbort, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			step, successor := decideHandover(tc.h, tc.at, tc.pending, tc.successors, tc.followers)
			if step != tc.want || successor != tc.successor {
				t.Fatalf("decideHandover = %d %q, want %d %q", step, successor, tc.want, tc.successor)
			}
		})
	}
}

func TestPreferredMoveDue(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	replicas := []string{"n2", "n1", "n3"}
	inSync := []replicate.ReplicaStatus{{ID: "n2", LogEndOffset: 90, InSync: true}, {ID: "n1", LogEndOffset: 100, InSync: true}, {ID: "n3", LogEndOffset: 100, InSync: true}}
	behind := slices.Clone(inSync)
	behind[0].LogEndOffset = 70
	out := slices.Clone(inSync)
	out[0].InSync = false
	stopping := slices.Clone(inSync)
	stopping[0].Retiring = true
	delay := 10 * time.Second
	for _, tc := range []struct {
		name     string
		self     string
		progress []replicate.ReplicaStatus
		since    time.Time
		want     bool
	}{
		{"in sync long enough", "n1", inSync, t0.Add(-delay), true},
		{"not long enough", "n1", inSync, t0.Add(-delay + time.Millisecond), false},
		{"never seen in sync", "n1", inSync, time.Time{}, false},
		{"below the high watermark", "n1", behind, t0.Add(-delay), false},
		{"out of the ISR", "n1", out, t0.Add(-delay), false},
		{"its agent stopping", "n1", stopping, t0.Add(-delay), false},
		{"this replica is the preferred one", "n2", inSync, t0.Add(-delay), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := preferredMoveDue(tc.self, replicas, tc.progress, 80, tc.since, t0, delay); got != tc.want {
				t.Fatalf("preferredMoveDue = %t, want %t", got, tc.want)
			}
		})
	}
}

// TestTrackPreferred: the preferred replica's time in sync counts from when
// it was seen in the ISR, restarts when it leaves it or is reported dead,
// and a new leadership does not inherit an earlier one's.
func TestTrackPreferred(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &Replica{deps: &Deps{Self: "n1"}}
	r.meta.pm.Replicas = []string{"n2", "n1", "n3"}
	step := func(at time.Duration, epoch int32, isr, dead []string, want time.Duration) {
		t.Helper()
		r.leaderISR, r.deadReplicas = isr, dead
		r.trackPreferred(t0.Add(at), epoch)
		if wantAt := t0.Add(want); (want < 0 && !r.preferredSince.IsZero()) || (want >= 0 && !r.preferredSince.Equal(wantAt)) {
			t.Fatalf("at %s (epoch %d, isr %v, dead %v): in sync since %v, want %s", at, epoch, isr, dead, r.preferredSince, want)
		}
	}
	const never = -1
	step(0, 3, []string{"n1", "n3"}, nil, never)
	step(time.Second, 3, []string{"n1", "n2", "n3"}, nil, time.Second)
	step(5*time.Second, 3, []string{"n1", "n2", "n3"}, nil, time.Second)
	step(6*time.Second, 3, []string{"n1", "n2", "n3"}, []string{"n2"}, never)
	step(7*time.Second, 3, []string{"n1", "n2", "n3"}, nil, 7*time.Second)
	// Leading again later, at another epoch: counted from now.
	step(time.Hour, 5, []string{"n1", "n2", "n3"}, nil, time.Hour)
}

func TestMoveLimiter(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &moveLimiter{interval: moveInterval}
	if !m.take(t0) {
		t.Fatal("the first move was refused")
	}
	if m.take(t0.Add(moveInterval - time.Millisecond)) {
		t.Fatal("a second move within the interval was allowed")
	}
	if !m.take(t0.Add(moveInterval)) {
		t.Fatal("a move after the interval was refused")
	}
}

// follow records a follower's fetch at the leader's loop, as the peer API's
// fetch handler does: offset is the follower's log end, with everything
// below it fetched at epoch.
func follow(t *testing.T, r *Replica, node string, offset int64, epoch int32) {
	t.Helper()
	last := epoch
	if offset == 0 {
		last = replicate.UndefinedEpoch
	}
	out := r.LeaderFetch(replicate.FetchRequest{ReplicaID: node, FetchOffset: offset, CurrentLeaderEpoch: epoch, LastFetchedEpoch: last})
	if out.Err != nil {
		t.Fatalf("fetch by %s at %d: %v", node, offset, out.Err)
	}
}

// contend campaigns for ho/0 as coord until it wins or ctx ends.
func contend(ctx context.Context, coord *election.Client) <-chan *election.Leadership {
	won := make(chan *election.Leadership, 1)
	go func() {
		l, _ := coord.CampaignAs(ctx, "ho", 0, election.Candidate{LogEpoch: election.NoEpoch})
		won <- l
	}()
	return won
}

// startElectionOnly registers node with srv as an election client alone,
// standing in for a follower's agent; it is closed when the test ends.
func startElectionOnly(t *testing.T, srv *consultest.Server, node string) *election.Client {
	t.Helper()
	cfg, log := testConfig(t, srv, node, "")
	coord := startCoord(t, cfg, log)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := coord.Close(ctx); err != nil {
			t.Errorf("close %s: %v", node, err)
		}
	})
	return coord
}

// TestRetireHandsOver drives the graceful stop of a leader whose two
// followers (election clients, their fetches made at the leader's loop as
// the peer API does) are in sync: a write taken before the stop is
// acknowledged, one that arrives while it drains is refused without being
// appended, the leadership goes to the first follower at the log end, which
// wins the next epoch while the other holds back, and RetireAll returns
// once the metadata shows it.
func TestRetireHandsOver(t *testing.T) {
	srv := consultest.Start(t)
	n2, n3 := startElectionOnly(t, srv, "n2"), startElectionOnly(t, srv, "n3")
	m, coord := startManager(t, srv, "n1", "", time.Now)
	createTopic(t, coord, "ho", [][]string{{"n1", "n2", "n3"}}, 2)
	r := waitLeading(t, m, "ho")
	epoch := r.CurrentView().Epoch
	follow(t, r, "n2", 0, epoch)
	follow(t, r, "n3", 0, epoch)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n2Won, n3Won := contend(ctx, n2), contend(ctx, n3)

	acked := make(chan ProduceOutcome, 1)
	go func() {
		acked <- r.Produce(testBatch(t, []string{"before"}), replicate.AcksAll, AnyEpoch, time.Now().Add(10*time.Second), 11*time.Second)
	}()
	waitFor(t, func() bool { return r.CurrentLog().LogEndOffset() == 1 }, "the first write appended")

	retired := make(chan time.Duration, 1)
	start := time.Now()
	go func() {
		m.RetireAll(ctx)
		retired <- time.Since(start)
	}()
	// Draining: new writes are refused, nothing appended. (acks=1 writes
	// that came before the drain are acknowledged at once.)
	waitFor(t, func() bool {
		out := r.Produce(testBatch(t, []string{"during"}), replicate.AcksLeader, AnyEpoch, time.Now().Add(time.Second), 2*time.Second)
		if out.Err != nil && (!errors.Is(out.Err, ErrLeadershipMoving) || out.Appended) {
			t.Fatalf("a write while draining: %v (appended %t), want ErrLeadershipMoving, nothing appended", out.Err, out.Appended)
		}
		return out.Err != nil
	}, "writes refused while draining")
	leo := r.CurrentLog().LogEndOffset()
	// The followers catch up; the pending writes are acknowledged and the
	// leadership goes to n2, the first of them.
	follow(t, r, "n3", leo, epoch)
	follow(t, r, "n2", leo, epoch)
	if out := <-acked; out.Err != nil {
		t.Fatalf("the write taken before the stop: %v", out.Err)
	}
	var took time.Duration
	select {
	case took = <-retired:
	case <-time.After(10 * time.Second):
		t.Fatal("RetireAll did not return within 10s")
	}
	var l *election.Leadership
	select {
	case l = <-n2Won:
	case l = <-n3Won:
		t.Fatalf("n3, not named, won epoch %d", l.Epoch())
	case <-time.After(5 * time.Second):
		t.Fatal("n2 did not win within 5s")
	}
	if l == nil || l.Epoch() != epoch+1 {
		t.Fatalf("n2's leadership %v, want epoch %d", l, epoch+1)
	}
	if pm, _ := coord.Metadata().Partition("ho", 0); pm.State.Leader != "n2" || pm.State.Epoch != epoch+1 || pm.LeaderSession == "" {
		t.Fatalf("RetireAll returned before the metadata showed the new leader: leader %q epoch %d session %q", pm.State.Leader, pm.State.Epoch, pm.LeaderSession)
	}
	t.Logf("handed over to n2 at epoch %d; RetireAll took %s", l.Epoch(), took.Round(time.Millisecond))
	if took >= retireDrain {
		t.Fatalf("RetireAll took %s: it waited for the drain's end, not for the successor", took)
	}
	if leo2 := r.CurrentLog().LogEndOffset(); leo2 != leo {
		t.Fatalf("n1 appended after the handover began: log end %d, was %d", leo2, leo)
	}
	if v := r.CurrentView(); v.Role == RoleLeader {
		t.Fatalf("n1 still leads after RetireAll: %+v", v)
	}
}

// TestRetireWithoutFollowerStepsDown: a leader with nobody to hand over to
// (an ISR of one) steps down at once, as before handovers.
func TestRetireWithoutFollowerStepsDown(t *testing.T) {
	m := startLeaderManager(t, "ho", time.Now)
	r := waitLeading(t, m, "ho")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	m.RetireAll(ctx)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("RetireAll took %s with nobody to hand over to", took)
	}
	if v := r.CurrentView(); v.Role == RoleLeader {
		t.Fatalf("still leading after RetireAll: %+v", v)
	}
}

// leadBesidePreferred has n1 lead topic "ho" of replicas [n2 n1], with
// leader_rebalance_delay as given, and n2 (an election client alone, alive
// in Consul) campaign for it from then on: the returned channel has its
// leadership once n1 hands it over.
func leadBesidePreferred(t *testing.T, delay string) (*Replica, int32, <-chan *election.Leadership) {
	t.Helper()
	srv := consultest.Start(t)
	n2 := startElectionOnly(t, srv, "n2")
	m, coord := startManager(t, srv, "n1", "replication {\n  leader_rebalance_delay = \""+delay+"\"\n}\n", time.Now)
	createTopic(t, coord, "ho", [][]string{{"n2", "n1"}}, 1)
	r := waitLeading(t, m, "ho")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return r, r.CurrentView().Epoch, contend(ctx, n2)
}

// TestMoveToPreferredReplica: a leader that is not its partition's
// preferred replica hands the leadership to it once it has been in sync
// for leader_rebalance_delay, with the same handover.
func TestMoveToPreferredReplica(t *testing.T) {
	// n2 is preferred, alive in Consul, but not campaigning yet: n1 takes
	// the first epoch after preferredLeaderHold, so its leadership (from
	// which n2 counts as in sync) starts at least that long after the
	// creation.
	created := time.Now()
	r, epoch, won := leadBesidePreferred(t, "1s")
	start := time.Now()
	var l *election.Leadership
	for l == nil {
		// n2 follows, caught up, as its fetches would show; once the
		// leadership has moved, n1 refuses them.
		r.LeaderFetch(replicate.FetchRequest{ReplicaID: "n2", FetchOffset: r.CurrentLog().LogEndOffset(), CurrentLeaderEpoch: epoch, LastFetchedEpoch: replicate.UndefinedEpoch})
		select {
		case l = <-won:
		case <-time.After(50 * time.Millisecond):
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("the leadership did not move to the preferred replica within 10s")
		}
	}
	took, sinceCreated := time.Since(start), time.Since(created)
	t.Logf("moved to n2 at epoch %d %s after n1 was seen leading, %s after the topic's creation", l.Epoch(), took.Round(time.Millisecond), sinceCreated.Round(time.Millisecond))
	if earliest := preferredLeaderHold + time.Second; l.Epoch() != epoch+1 || sinceCreated < earliest {
		t.Fatalf("n2 led at epoch %d %s after the creation; want epoch %d, not before the hold for a live preferred replica and the rebalance delay of 1s (%s)", l.Epoch(), sinceCreated, epoch+1, earliest)
	}
	waitFor(t, func() bool { return r.CurrentView().Role != RoleLeader }, "n1 to stop leading")
}

// TestMoveToPreferredReplicaWhileIdle: the move back to the preferred
// replica comes due with time alone (leader_rebalance_delay after it is in
// sync), so a leader that nothing else wakes must still make it. The idle
// leader is not ticked for its ISR (replicate.Leader.TickNeeded); a leader
// that is not the preferred replica keeps its tick for the move (caught
// by TestReassignCancelStuck's heal, which waited forever for a wake).
func TestMoveToPreferredReplicaWhileIdle(t *testing.T) {
	// The delay outlasts the loop's last wake of its own: the checkpoint,
	// CheckpointInterval after the new epoch.
	r, epoch, won := leadBesidePreferred(t, "8s")
	// One fetch at the log end, then nothing more from n2.
	r.LeaderFetch(replicate.FetchRequest{ReplicaID: "n2", FetchOffset: r.CurrentLog().LogEndOffset(), CurrentLeaderEpoch: epoch, LastFetchedEpoch: replicate.UndefinedEpoch})
	select {
	case l := <-won:
		if l == nil {
			t.Fatal("n2's campaign ended without the leadership")
		}
		t.Logf("moved to n2 at epoch %d with no event after its one fetch", l.Epoch())
	case <-time.After(20 * time.Second):
		t.Fatal("the leadership did not move to the in-sync preferred replica within 20s of its only fetch (leader_rebalance_delay 8s)")
	}
}

// TestFirstCampaignDeadPreferredReplica: a new partition whose preferred
// replica Consul reports dead (never registered) is led by another replica
// after preferredLeaderGrace, not after the longer hold a live preferred
// replica gets (TestMoveToPreferredReplica).
func TestFirstCampaignDeadPreferredReplica(t *testing.T) {
	srv := consultest.Start(t)
	m, coord := startManager(t, srv, "n1", "", time.Now)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for !coord.Liveness().Dead("n2") {
		// Dead only once the liveness watch has loaded: n2 never registers.
		if ctx.Err() != nil {
			t.Fatal("the liveness watch did not load within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	created := time.Now()
	createTopic(t, coord, "deadpref", [][]string{{"n2", "n1"}}, 1)
	waitLeading(t, m, "deadpref")
	took := time.Since(created)
	t.Logf("n1 led %s after the creation (grace %s, hold for a live preferred replica %s)", took.Round(time.Millisecond), preferredLeaderGrace, preferredLeaderHold)
	if took < preferredLeaderGrace || took >= preferredLeaderHold {
		t.Fatalf("n1 led %s after the creation; want from the grace %s on, well before the hold %s", took, preferredLeaderGrace, preferredLeaderHold)
	}
}

// waitFor polls cond for up to 10s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
