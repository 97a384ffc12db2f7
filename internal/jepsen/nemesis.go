package jepsen

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/logagent/logagent/internal/testcluster"
)

// Env is what a fault acts on. The nemesis goroutine is its only user.
type Env struct {
	Cluster    *testcluster.Cluster
	Topic      string
	Partitions int
	Rng        *rand.Rand
	Recorder   *Recorder
	// Logf reports progress (t.Logf).
	Logf func(format string, args ...any)
	// Fatalf stops the run (t.Fatalf); only the test goroutine may call
	// it, which is where the nemesis runs.
	Fatalf func(format string, args ...any)

	paused map[*testcluster.Agent]bool
}

// reachable lists the agents that answer: running and not paused. A
// paused agent holds a request until it resumes, so it is never asked.
func (e *Env) reachable() []*testcluster.Agent {
	var out []*testcluster.Agent
	for _, a := range e.Cluster.Agents {
		if a.Running() && !e.paused[a] {
			out = append(out, a)
		}
	}
	return out
}

// leader finds the agent that leads the partition by its own account, among
// the reachable ones, with its epoch.
func (e *Env) leader(partition int) (*testcluster.Agent, int32) {
	var best *testcluster.Agent
	var epoch int32 = -1
	for _, a := range e.reachable() {
		p, err := a.DescribePartition(e.Topic, partition)
		if err == nil && p.Role == "leader" && p.Epoch > epoch {
			best, epoch = a, p.Epoch
		}
	}
	return best, epoch
}

// waitLeader polls for a leader of the partition with an epoch above
// above, and returns it with its epoch and how long it took; ok is false
// after timeout.
func (e *Env) waitLeader(partition int, above int32, timeout time.Duration) (*testcluster.Agent, int32, time.Duration, bool) {
	start := time.Now()
	for {
		if a, epoch := e.leader(partition); a != nil && epoch > above {
			return a, epoch, time.Since(start), true
		}
		if time.Since(start) > timeout {
			return nil, -1, time.Since(start), false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mustLeader waits for any leader of the partition.
func (e *Env) mustLeader(partition int) (*testcluster.Agent, int32) {
	a, epoch, _, ok := e.waitLeader(partition, -1, leaderTimeout)
	if !ok {
		e.Fatalf("jepsen: no leader of %s/%d after %s", e.Topic, partition, leaderTimeout)
	}
	return a, epoch
}

// waitFullISR polls until every partition's leader has every agent in its
// ISR; it reports whether that happened within timeout.
func (e *Env) waitFullISR(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		full := true
		for p := range e.Partitions {
			a, _ := e.leader(p)
			if a == nil {
				full = false
				break
			}
			desc, err := a.DescribePartition(e.Topic, p)
			if err != nil || len(desc.ISR) != len(e.Cluster.Agents) {
				full = false
				break
			}
		}
		if full {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// restart starts a stopped agent on its data and waits for its health.
func (e *Env) restart(a *testcluster.Agent) {
	if !a.Running() {
		a.Restart()
	}
}

// pause and resume keep track of SIGSTOPped agents.
func (e *Env) pause(a *testcluster.Agent) {
	a.Pause()
	e.paused[a] = true
}

func (e *Env) resume(a *testcluster.Agent) {
	a.Resume()
	delete(e.paused, a)
}

// healAll undoes every fault: starts a stopped Consul, resumes paused
// agents, heals every proxy and restarts stopped agents.
func (e *Env) healAll() {
	e.Cluster.Consul.StartAgain()
	for a := range e.paused {
		e.resume(a)
	}
	for _, a := range e.Cluster.Agents {
		if a.ConsulProxy != nil {
			a.ConsulProxy.Heal()
			a.PeerProxy.Heal()
			a.ClientProxy.Heal()
		}
	}
	for _, a := range e.Cluster.Agents {
		if !a.Running() {
			a.Start()
		}
	}
	for _, a := range e.Cluster.Agents {
		a.WaitHealthy()
	}
}

const (
	leaderTimeout   = 60 * time.Second
	failoverTimeout = 45 * time.Second
)

// sessionTTL is the agents' Consul session TTL: a pause or a cut from
// Consul must outlast it for leadership to move.
func (e *Env) sessionTTL() time.Duration { return e.Cluster.Timings.SessionTTL }

// Fault is one kind of fault that a scenario injects cycle after cycle.
type Fault interface {
	// Name is a short name for logs.
	Name() string
	// Inject starts the fault (or, for the rolling restart, runs it
	// whole) and describes what it did.
	Inject(e *Env) Injected
	// Heal ends the fault: restarts, resumes, reconnects.
	Heal(e *Env, in Injected)
}

// Injected is what an injection did, for the healing and the figures.
type Injected struct {
	Detail string
	// Target is the agent acted on, if one.
	Target *testcluster.Agent
	// Partition and Epoch, when Epoch >= 0, are a partition whose leader
	// was hit and its epoch then: the nemesis measures the failover to a
	// higher epoch.
	Partition int
	Epoch     int32
	// Hold is how long the fault lasts before Heal.
	Hold time.Duration
	// Killed, when set, is an agent killed at KilledAt (the recorder's
	// clock, once the process was gone) leading the partitions Led and
	// following Followed: the run measures, per partition, how long
	// writers waited for an acknowledgement after the kill.
	Killed   *testcluster.Agent
	KilledAt time.Duration
	Led      []int
	Followed []int
	// Restarts are the graceful restarts a rolling restart made, in order.
	Restarts []Restart
}

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// KillLeader is scenario (a): kill -9 of a partition's leader, restarted
// on its data after a while.
type KillLeader struct{}

func (KillLeader) Name() string { return "kill-leader" }

func (KillLeader) Inject(e *Env) Injected {
	p := e.Rng.IntN(e.Partitions)
	a, epoch := e.mustLeader(p)
	a.Kill()
	return Injected{Detail: fmt.Sprintf("kill -9 %s, leader of p%d epoch %d", a.NodeID, p, epoch), Target: a, Partition: p, Epoch: epoch,
		Hold: between(e.Rng, 2*time.Second, 5*time.Second)}
}

func (KillLeader) Heal(e *Env, in Injected) { e.restart(in.Target) }

// DeadAgent is scenario (h): kill -9 of an agent that leads a partition,
// left dead for longer than lag_time_max, as a host that does not come back
// soon: the partitions it led need a new leader, and every partition an ISR
// without it, before an acks=all write can be acknowledged. Restarted on its
// data, it must rejoin every ISR before the next cycle, so that each cycle
// starts from the same state.
type DeadAgent struct{}

func (DeadAgent) Name() string { return "dead-agent" }

func (DeadAgent) Inject(e *Env) Injected {
	p := e.Rng.IntN(e.Partitions)
	a, epoch := e.mustLeader(p)
	in := Injected{Target: a, Killed: a, Partition: p, Epoch: epoch,
		Hold: e.Cluster.Timings.LagTimeMax + between(e.Rng, 5*time.Second, 10*time.Second)}
	for q := range e.Partitions {
		if l, _ := e.leader(q); l == a {
			in.Led = append(in.Led, q)
		} else {
			in.Followed = append(in.Followed, q)
		}
	}
	a.Kill()
	in.KilledAt = e.Recorder.Now()
	in.Detail = fmt.Sprintf("kill -9 %s, leader of %v (p%d epoch %d), follower of %v; dead for %s",
		a.NodeID, in.Led, p, epoch, in.Followed, in.Hold.Round(time.Millisecond))
	return in
}

func (DeadAgent) Heal(e *Env, in Injected) {
	e.restart(in.Target)
	if !e.waitFullISR(failoverTimeout) {
		e.Fatalf("jepsen: %s did not rejoin every ISR within %s of its restart: the next cycle would not start from a full ISR",
			in.Target.NodeID, failoverTimeout)
	}
}

// WipeReplica is scenario (i): every agent killed, one follower's data
// directory removed (a disk replaced, an operator's mistake), that agent
// started first and alone, the others only after the other sessions have
// died: the wiped replica is still in the ISR in Consul but holds nothing,
// and must neither lead nor count as in sync until it has fetched the log
// again. The checker then finds every acknowledged write on every replica.
type WipeReplica struct{}

func (WipeReplica) Name() string { return "wipe-replica" }

func (WipeReplica) Inject(e *Env) Injected {
	p := e.Rng.IntN(e.Partitions)
	leader, epoch := e.mustLeader(p)
	var followers []*testcluster.Agent
	for _, a := range e.Cluster.Agents {
		if a != leader {
			followers = append(followers, a)
		}
	}
	wiped := followers[e.Rng.IntN(len(followers))]
	for _, a := range e.Cluster.Agents {
		a.Kill()
	}
	if err := os.RemoveAll(wiped.DataDir); err != nil {
		e.Fatalf("jepsen: wipe %s: %v", wiped.DataDir, err)
	}
	wiped.Restart()
	t := e.Cluster.Timings
	return Injected{Detail: fmt.Sprintf("kill -9 every agent, wipe %s (follower of p%d, epoch %d), start it alone", wiped.NodeID, p, epoch),
		Target: wiped, Partition: p, Epoch: -1,
		// Long enough for every other session to die with its check and
		// the lock delay to pass: a wiped replica that could lead would.
		Hold: t.CheckTTL + t.LockDelay + between(e.Rng, 2*time.Second, 4*time.Second)}
}

func (WipeReplica) Heal(e *Env, in Injected) {
	for _, a := range e.Cluster.Agents {
		if a != in.Target {
			a.Start()
		}
	}
	for _, a := range e.Cluster.Agents {
		a.WaitHealthy()
	}
	if !e.waitFullISR(failoverTimeout) {
		e.Fatalf("jepsen: the wiped %s did not rejoin every ISR within %s", in.Target.NodeID, failoverTimeout)
	}
}

// PauseLeader is scenario (b): the leader SIGSTOPped longer than its
// Consul session TTL, so that another agent takes over, then resumed: a
// zombie that believes it still leads until it learns otherwise.
type PauseLeader struct{}

func (PauseLeader) Name() string { return "pause-leader" }

func (PauseLeader) Inject(e *Env) Injected {
	p := e.Rng.IntN(e.Partitions)
	a, epoch := e.mustLeader(p)
	e.pause(a)
	return Injected{Detail: fmt.Sprintf("SIGSTOP %s, leader of p%d epoch %d", a.NodeID, p, epoch), Target: a, Partition: p, Epoch: epoch,
		Hold: between(e.Rng, e.sessionTTL()+2*time.Second, e.sessionTTL()+5*time.Second)}
}

func (PauseLeader) Heal(e *Env, in Injected) { e.resume(in.Target) }

// RestartConsul is the Consul server stopped (SIGTERM) for a while and
// started again on its data, as an upgrade or a reboot of its host does:
// every agent loses Consul at once, leaders step down at their lease
// deadline, and the agents campaign again once it is back. Held from 1 s
// (inside the lease) to the session TTL plus 5 s (longer than any
// session's TTL).
type RestartConsul struct{}

func (RestartConsul) Name() string { return "restart-consul" }

func (RestartConsul) Inject(e *Env) Injected {
	hold := between(e.Rng, time.Second, e.sessionTTL()+5*time.Second)
	e.Cluster.Consul.Stop()
	return Injected{Detail: fmt.Sprintf("stop the Consul server for %s", hold.Round(time.Millisecond)), Epoch: -1, Hold: hold}
}

// Heal starts Consul and waits until every partition is led again: the
// next cycle's stop must find a cluster that recovered, or two outages
// (Consul up for a second between them, less than the agents take to renew
// their sessions and win their elections) made one gap, and the run's
// longest gap was neither outage's (30.2 s for stops of 10.6 s and 12.5 s).
func (RestartConsul) Heal(e *Env, _ Injected) {
	e.Cluster.Consul.StartAgain()
	started := time.Now()
	for p := range e.Partitions {
		e.mustLeader(p)
	}
	e.Logf("jepsen: every partition led %s after Consul was up again", time.Since(started).Round(time.Millisecond))
}

// KillAll is scenario (f): every agent killed at once, then all restarted
// on their data.
type KillAll struct{}

func (KillAll) Name() string { return "kill-all" }

func (KillAll) Inject(e *Env) Injected {
	for _, a := range e.Cluster.Agents {
		a.Kill()
	}
	return Injected{Detail: "kill -9 every agent", Epoch: -1, Hold: between(e.Rng, 500*time.Millisecond, 2*time.Second)}
}

func (KillAll) Heal(e *Env, _ Injected) {
	for _, a := range e.Cluster.Agents {
		a.Start()
	}
	for _, a := range e.Cluster.Agents {
		a.WaitHealthy()
	}
}

// RollingRestart is scenario (g): each agent in turn stopped with SIGTERM
// and restarted, waiting for the full ISR before the next, as an operator
// upgrading the fleet would. Each restart's times go into Injected.Restarts,
// so that the run measures what writers waited around each one.
type RollingRestart struct{}

func (RollingRestart) Name() string { return "rolling-restart" }

func (RollingRestart) Inject(e *Env) Injected {
	order := slices.Clone(e.Cluster.Agents)
	e.Rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	var names []string
	var restarts []Restart
	for _, a := range order {
		rs := Restart{Agent: a.NodeID, Stopped: e.Recorder.Event("sigterm", a.NodeID)}
		if code := a.Terminate(); code != 0 {
			e.Fatalf("jepsen: %s exited with code %d on SIGTERM", a.NodeID, code)
		}
		rs.Exited = e.Recorder.Event("exited", a.NodeID)
		a.Restart()
		rs.Serving = e.Recorder.Event("serving", a.NodeID)
		if e.waitFullISR(failoverTimeout) {
			rs.InSync = e.Recorder.Event("isr full", a.NodeID)
		} else {
			e.Logf("jepsen: the ISR did not fill again within %s after restarting %s", failoverTimeout, a.NodeID)
		}
		names = append(names, a.NodeID)
		restarts = append(restarts, rs)
	}
	return Injected{Detail: fmt.Sprintf("rolling restart %v", names), Epoch: -1, Restarts: restarts}
}

func (RollingRestart) Heal(*Env, Injected) {}

// CutLeaderFromConsul is scenario (c): the leader loses Consul (both ways)
// but keeps its peers, for longer than its session TTL. It needs
// Scenario.Proxies, as do IsolateThenKillLeader and RandomCut.
type CutLeaderFromConsul struct{}

func (CutLeaderFromConsul) Name() string { return "cut-leader-consul" }

func (CutLeaderFromConsul) Inject(e *Env) Injected {
	p := e.Rng.IntN(e.Partitions)
	a, epoch := e.mustLeader(p)
	a.ConsulProxy.CutBoth()
	return Injected{Detail: fmt.Sprintf("cut %s (leader of p%d epoch %d) from Consul", a.NodeID, p, epoch), Target: a, Partition: p, Epoch: epoch,
		Hold: between(e.Rng, e.sessionTTL()+2*time.Second, e.sessionTTL()+5*time.Second)}
}

func (CutLeaderFromConsul) Heal(_ *Env, in Injected) { in.Target.ConsulProxy.Heal() }

// IsolateThenKillLeader is scenario (d), Kafka's 2013 loss: the followers
// cut from the leader while it keeps Consul, then the leader killed. Past
// the replication lag limit (lag_time_max) the leader has shrunk its ISR to
// itself and acknowledged alone (with min ISR 1): a follower that left the
// ISR must not be elected, and the partition waits for the leader's return
// instead of losing writes. Under the limit the followers are still in the
// ISR but behind: one of them takes over, and nothing may have been
// acknowledged that it lacks. The cut lasts 0.5 s to lag_time_max + 3 s,
// to hit both.
type IsolateThenKillLeader struct{}

func (IsolateThenKillLeader) Name() string { return "isolate-then-kill-leader" }

func (IsolateThenKillLeader) Inject(e *Env) Injected {
	p := e.Rng.IntN(e.Partitions)
	a, epoch := e.mustLeader(p)
	a.PeerProxy.CutBoth()
	time.Sleep(between(e.Rng, 500*time.Millisecond, e.Cluster.Timings.LagTimeMax+3*time.Second))
	isr := "unknown"
	if desc, err := a.DescribePartition(e.Topic, p); err == nil {
		isr = fmt.Sprint(desc.ISR)
	}
	a.Kill()
	return Injected{Detail: fmt.Sprintf("cut %s (leader of p%d epoch %d) from its followers, then kill -9 with ISR %s", a.NodeID, p, epoch, isr),
		Target: a, Partition: p, Epoch: -1,
		Hold: between(e.Rng, 2*time.Second, 4*time.Second)}
}

func (IsolateThenKillLeader) Heal(e *Env, in Injected) {
	in.Target.PeerProxy.Heal()
	e.restart(in.Target)
}

// RandomCut is scenario (e): a random link cut both ways or one way, for
// a random while: an agent's Consul link, every peer link into an agent,
// or the peer link between two agents. Half the time the agent (or the
// pair's first) is a partition's leader: only a leader's links carry
// replication, and a cut elsewhere often changes nothing a client can see.
type RandomCut struct{}

func (RandomCut) Name() string { return "random-cut" }

func (RandomCut) Inject(e *Env) Injected {
	agents := e.Cluster.Agents
	a := agents[e.Rng.IntN(len(agents))]
	if e.Rng.IntN(2) == 0 {
		a, _ = e.mustLeader(e.Rng.IntN(e.Partitions))
	}
	hold := between(e.Rng, time.Second, e.sessionTTL()+3*time.Second)
	if e.Rng.IntN(3) == 0 {
		b := agents[(indexOf(agents, a)+1+e.Rng.IntN(len(agents)-1))%len(agents)]
		detail := fmt.Sprintf("cut the peer link %s -> %s", a.NodeID, b.NodeID)
		e.Cluster.CutLink(a, b)
		if e.Rng.IntN(2) == 0 {
			e.Cluster.CutLink(b, a)
			detail = fmt.Sprintf("cut the peer link %s <-> %s", a.NodeID, b.NodeID)
		}
		return Injected{Detail: detail, Epoch: -1, Hold: hold}
	}
	link, proxy := "consul", a.ConsulProxy
	if e.Rng.IntN(2) == 0 {
		link, proxy = "inbound peer", a.PeerProxy
	}
	how := "both ways"
	switch e.Rng.IntN(3) {
	case 0:
		proxy.CutBoth()
	case 1:
		proxy.Cut(testcluster.Forward)
		how = "forward only"
	default:
		proxy.Cut(testcluster.Backward)
		how = "backward only"
	}
	return Injected{Detail: fmt.Sprintf("cut %s's %s link %s", a.NodeID, link, how), Epoch: -1, Hold: hold}
}

// Heal reconnects every link.
func (RandomCut) Heal(e *Env, _ Injected) {
	for _, a := range e.Cluster.Agents {
		a.ConsulProxy.Heal()
		a.PeerProxy.Heal()
	}
}

// LoseAnswers is scenario (j), for producers that retry until acknowledged
// (RetryPlain, RetryIdempotent): answers lost after the append, where a
// resend is what duplicates a write. Each cycle, in a seeded random order a
// second or less apart, it cuts the client links into an agent's client API
// (Agent.ClientProxy: the link of the producers whose sidecar it is), cuts
// the peer link from an agent, as a sidecar forwarding to a partition's
// leader, to that leader, and kills the leader with -9. Neither cut agent
// is the leader (they may be one agent). The cuts stall answers (or, a
// third of the time, both ways, mid-request) for longer than twice a
// producer's wait, so requests already sent are appended but their answers
// lost.
// Needs Scenario.Proxies.
type LoseAnswers struct{}

func (LoseAnswers) Name() string { return "lose-answers" }

func (LoseAnswers) Inject(e *Env) Injected {
	p := e.Rng.IntN(e.Partitions)
	leader, epoch := e.mustLeader(p)
	agents := e.Cluster.Agents
	// Both other than the leader: a dead agent's links lose nothing more.
	client := agents[(indexOf(agents, leader)+1+e.Rng.IntN(len(agents)-1))%len(agents)]
	sidecar := agents[(indexOf(agents, leader)+1+e.Rng.IntN(len(agents)-1))%len(agents)]
	actions := []func() string{
		func() string {
			// Answers are always lost for a while first: a cut both ways
			// from the start stops the requests too, so nothing is
			// appended whose answer is lost, and a run whose cycles all
			// drew it (a ninth of the two-cycle runs of make test) had no
			// duplicates to show for the plain variant.
			client.ClientProxy.Cut(testcluster.Backward)
			if e.Rng.IntN(3) == 0 {
				time.Sleep(between(e.Rng, 200*time.Millisecond, 500*time.Millisecond))
				client.ClientProxy.CutBoth()
				return fmt.Sprintf("cut the answers of %s's client API, then its links both ways", client.NodeID)
			}
			return fmt.Sprintf("cut the answers of %s's client API", client.NodeID)
		},
		func() string {
			if e.Rng.IntN(3) == 0 {
				e.Cluster.CutLink(sidecar, leader)
				e.Cluster.CutLink(leader, sidecar)
				return fmt.Sprintf("cut the peer link %s <-> %s (leader of p%d)", sidecar.NodeID, leader.NodeID, p)
			}
			// The leader's answers on the connections the sidecar dialed:
			// its forwards, and its fetches as a follower.
			leader.PeerProxy.CutFrom(sidecar.NodeID, testcluster.Backward)
			return fmt.Sprintf("cut the answers of %s (leader of p%d) to %s's peer requests", leader.NodeID, p, sidecar.NodeID)
		},
		func() string {
			leader.Kill()
			return fmt.Sprintf("kill -9 %s, leader of p%d epoch %d", leader.NodeID, p, epoch)
		},
	}
	e.Rng.Shuffle(len(actions), func(i, j int) { actions[i], actions[j] = actions[j], actions[i] })
	var done []string
	for i, act := range actions {
		if i > 0 {
			time.Sleep(between(e.Rng, 0, time.Second))
		}
		done = append(done, act())
	}
	// Twice a producer's wait: a producer stuck at the client cut on a
	// write that the other faults keep from being appended (behind the peer
	// cut, or waiting for a new leader) resends it a wait later, and that
	// resend, appended once the partition is led again, must lose its answer
	// too. With one wait, its answer came back after the heal, and a run
	// whose cycles all went that way (about three in ten of the two-cycle
	// runs of make test) had no duplicates to show for the plain variant.
	return Injected{Detail: strings.Join(done, ", then "), Target: leader, Partition: p, Epoch: epoch,
		Hold: between(e.Rng, 2*retryClientTimeout+500*time.Millisecond, 2*retryClientTimeout+2*time.Second)}
}

// Heal reconnects every link and restarts the killed leader.
func (LoseAnswers) Heal(e *Env, in Injected) {
	for _, a := range e.Cluster.Agents {
		a.ClientProxy.Heal()
		a.PeerProxy.Heal()
	}
	e.restart(in.Target)
}
