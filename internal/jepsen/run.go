package jepsen

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/checker"
	"github.com/logagent/logagent/internal/consultest"
	"github.com/logagent/logagent/internal/testcluster"
)

// Scenario is one fault applied for some cycles under load.
type Scenario struct {
	Name  string
	Fault Fault
	// Proxies puts the agents behind fault-injecting proxies (link cuts).
	Proxies bool
	// MinInsync is the topic's min_insync_replicas; default 2.
	MinInsync int
	// Partitions, when set, is the topic's partition count, whatever
	// Config says.
	Partitions int
	// PinProducers gives every partition producers of its own, one
	// through each agent (Config.Producers is then ignored): a producer
	// waiting on a stalled partition does not hold back writes to the
	// others, so each partition's time to its first acknowledgement after
	// a fault is its own.
	PinProducers bool
	// PersistentConsul runs Consul as a server with its data on disk, so
	// that it can be stopped and started again (RestartConsul).
	PersistentConsul bool
	// Producing is what producers do about a write whose outcome they
	// could not learn; the retrying ones need Proxies. A run of RetryPlain
	// fails unless the final log holds a duplicate (the checker must see
	// what a resend without idempotence makes), one of RetryIdempotent if
	// it holds any.
	Producing Producing
}

// Config is how long and with what seed a scenario runs.
type Config struct {
	Seed uint64
	// Cycles of inject, hold, heal; at least one.
	Cycles int
	// Duration, when set, repeats cycles until it has passed (make
	// torture), whatever Cycles says.
	Duration time.Duration
	// Partitions, Producers and Consumers size the workload; defaults
	// 2, 3 and 2.
	Partitions, Producers, Consumers int
	// Timing is the agents' failure-detection timing; the zero value is
	// testcluster's default, TimingFast (TestScenarios takes it from
	// LOGAGENT_JEPSEN_TIMING, shipped unless set).
	Timing testcluster.Timing
}

const (
	agents     = 3
	quietMin   = 1 * time.Second
	quietMax   = 2 * time.Second
	healedTail = 2 * time.Second
	settle     = 60 * time.Second
)

// Measure is a figure of one cycle.
type Measure struct {
	Cycle    int           `json:"cycle"`
	Fault    string        `json:"fault"`
	Failover time.Duration `json:"failover_ns,omitempty"`
	// FailoverSeen says a new epoch's leader was seen (Failover is
	// then its delay).
	FailoverSeen bool `json:"failover_seen"`
	// Killed, KilledAt and RestartedAt, for a fault that kills an agent
	// and measures what writers waited (DeadAgent), are that agent and
	// when it was killed and restarted (the recorder's clock); Recoveries
	// is each partition's wait, from the history.
	Killed      string        `json:"killed,omitempty"`
	KilledAt    time.Duration `json:"killed_at_ns,omitempty"`
	RestartedAt time.Duration `json:"restarted_at_ns,omitempty"`
	Recoveries  []Recovery    `json:"recoveries,omitempty"`
	// Restarts are a rolling restart's graceful restarts, with what the
	// writers of each partition waited around each one.
	Restarts []Restart `json:"restarts,omitempty"`
}

// Restart is one agent's graceful stop and start in a rolling restart, on
// the recorder's clock.
type Restart struct {
	Agent string `json:"agent"`
	// Stopped is when SIGTERM was sent, Exited when the process had
	// exited, Serving when the restarted agent answered its health check,
	// InSync when every partition's ISR was full again (zero if it did not
	// fill in time).
	Stopped time.Duration `json:"stopped_ns"`
	Exited  time.Duration `json:"exited_ns"`
	Serving time.Duration `json:"serving_ns"`
	InSync  time.Duration `json:"in_sync_ns,omitempty"`
	// Until is the end of the restart's window: the next restart's SIGTERM,
	// or the clients' stop after the last one, so that every stretch after
	// the first SIGTERM falls in some restart's window, leadership moving
	// back to a preferred replica included.
	Until time.Duration `json:"until_ns"`
	// Gaps is, per partition, the longest stretch without an acknowledged
	// write overlapping [Stopped, Until] (WindowGap).
	Gaps []time.Duration `json:"longest_write_gap_ns"`
}

// Recovery is how long the writers of one partition waited for an
// acknowledged acks=all write after an agent was killed.
type Recovery struct {
	Partition int `json:"partition"`
	// Led says the killed agent led the partition at the kill; else it
	// was one of its followers.
	Led bool `json:"led"`
	// FirstAck is from the kill to the completion of the first
	// acknowledged write invoked after it. When Acked is false no write
	// was acknowledged before the agent was restarted, and FirstAck is
	// the time to the restart: a lower bound.
	FirstAck time.Duration `json:"first_ack_ns"`
	Acked    bool          `json:"acked_while_dead"`
}

// Result is a run's report.json: the checker's report, the figures and
// everything recorded.
type Result struct {
	Scenario     string               `json:"scenario"`
	Timings      testcluster.Timings  `json:"timings"`
	Seed         uint64               `json:"seed"`
	Dir          string               `json:"dir"`
	Report       *checker.Report      `json:"report"`
	ReadErrors   []string             `json:"read_errors,omitempty"`
	CorruptReads []string             `json:"corrupt_reads,omitempty"`
	Unconverged  []int                `json:"unconverged_partitions,omitempty"`
	Measures     []Measure            `json:"measures"`
	LongestGaps  []time.Duration      `json:"longest_write_gap_ns"`
	AckedAfter   []int                `json:"acknowledged_after_heal"`
	Events       []Event              `json:"events"`
	Ops          []Op                 `json:"ops"`
	Replicas     []checker.ReplicaLog `json:"replicas"`
	// Producing is the producers' way with unknown outcomes; with the
	// retrying ones, DuplicateAnswers counts the resends the leader
	// answered as duplicates, and ClientFailures what producers met that
	// no resend could get past.
	Producing        Producing `json:"producing"`
	DuplicateAnswers int       `json:"duplicate_answers"`
	ClientFailures   []string  `json:"client_failures,omitempty"`
	// Wall is the run's time from the topic's creation to the checker's
	// verdict.
	Wall time.Duration `json:"wall_ns"`
	// ConsulLog is where a failing run keeps Consul's log.
	ConsulLog    string   `json:"consul_log"`
	AgentLogDirs []string `json:"agent_log_dirs"`
}

// Run runs scenario s with cfg against a new cluster and fails t on any
// anomaly. A failing run keeps its directory (data, agent logs,
// report.json, summary.txt) and logs where it is; a passing one removes
// it.
func Run(t *testing.T, s Scenario, cfg Config) *Result {
	t.Helper()
	t.Logf("jepsen: scenario %s, seed %d", s.Name, cfg.Seed)
	cfg.Cycles = max(cfg.Cycles, 1)
	cfg.Partitions = cmp.Or(s.Partitions, cfg.Partitions, 2)
	cfg.Producers = cmp.Or(cfg.Producers, 3)
	if s.PinProducers {
		cfg.Producers = cfg.Partitions * agents
	}
	cfg.Consumers = cmp.Or(cfg.Consumers, 2)
	if s.Producing != MoveOn && !s.Proxies {
		t.Fatalf("jepsen: %s: producers that %s reach their sidecars through proxies: set Scenario.Proxies", s.Name, s.Producing)
	}
	dir, err := os.MkdirTemp("", "logagent-jepsen-"+s.Name+"-")
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs after the processes are stopped.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("jepsen: run kept in %s (report.json, summary.txt, n*/data, n*/logs); seed %d", dir, cfg.Seed)
			return
		}
		os.RemoveAll(dir)
	})

	opts := testcluster.Options{Agents: agents, Dir: dir, Proxies: s.Proxies, Timing: cfg.Timing}
	if s.PersistentConsul {
		opts.Consul = []consultest.Option{consultest.Persistent()}
	}
	c := testcluster.Start(t, opts)
	t.Logf("jepsen: %s: agents run with the %s", s.Name, c.Timings)
	// Consul's log lives in a test temporary directory, removed when the
	// test ends: a failing run keeps a copy. Registered after Start, this
	// runs before that removal.
	keptConsulLog := filepath.Join(dir, "consul.log")
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if b, err := os.ReadFile(c.Consul.LogPath()); err == nil {
			os.WriteFile(keptConsulLog, b, 0o644)
		}
	})
	const topic = "jepsen"
	if err := c.Agents[0].CreateTopic(testcluster.TopicSpec{Name: topic, Partitions: cfg.Partitions, ReplicationFactor: agents,
		MinInsyncReplicas: cmp.Or(s.MinInsync, 2)}); err != nil {
		t.Fatalf("jepsen: create topic: %v", err)
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6e656d))
	start := time.Now()
	rec := NewRecorder(func() time.Duration { return time.Since(start) })
	env := &Env{Cluster: c, Topic: topic, Partitions: cfg.Partitions, Rng: rng, Recorder: rec, Logf: t.Logf, Fatalf: t.Fatalf,
		paused: map[*testcluster.Agent]bool{}}
	for p := range cfg.Partitions {
		env.mustLeader(p)
	}
	if !env.waitFullISR(failoverTimeout) {
		t.Fatalf("jepsen: the ISR of %s is not full %s after creation", topic, failoverTimeout)
	}

	stop := make(chan struct{})
	w := &Workload{Cluster: c, Topic: topic, Partitions: cfg.Partitions, Producers: cfg.Producers, Consumers: cfg.Consumers,
		Pinned: s.PinProducers, Recorder: rec, Seed: rng.Uint64(), EpochMillis: start.UnixMilli(), Producing: s.Producing}
	waitClients := w.Start(stop)
	stopClients := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		waitClients()
	}
	// A fatal nemesis error must not leave clients running, nor waiting
	// on a paused agent.
	t.Cleanup(func() {
		for a := range env.paused {
			a.Resume()
		}
		stopClients()
	})

	var measures []Measure
	more := func(cycle int) bool {
		if cfg.Duration > 0 {
			return time.Since(start) < cfg.Duration
		}
		return cycle < cfg.Cycles
	}
	for cycle := 0; more(cycle); cycle++ {
		time.Sleep(between(rng, quietMin, quietMax))
		in := s.Fault.Inject(env)
		rec.Event("inject "+s.Fault.Name(), in.Detail)
		t.Logf("jepsen: cycle %d: %s", cycle, in.Detail)
		m := Measure{Cycle: cycle, Fault: s.Fault.Name(), Restarts: in.Restarts}
		if in.Killed != nil {
			m.Killed, m.KilledAt = in.Killed.NodeID, in.KilledAt
			for _, p := range in.Led {
				m.Recoveries = append(m.Recoveries, Recovery{Partition: p, Led: true})
			}
			for _, p := range in.Followed {
				m.Recoveries = append(m.Recoveries, Recovery{Partition: p})
			}
		}
		holdEnd := time.Now().Add(in.Hold)
		if in.Epoch >= 0 {
			if a, _, took, ok := env.waitLeader(in.Partition, in.Epoch, in.Hold+failoverTimeout); ok {
				m.Failover, m.FailoverSeen = took, true
				rec.Event("failover", fmt.Sprintf("%s leads p%d after %s", a.NodeID, in.Partition, took.Round(time.Millisecond)))
			}
		}
		time.Sleep(time.Until(holdEnd))
		m.RestartedAt = rec.Now()
		s.Fault.Heal(env, in)
		rec.Event("heal "+s.Fault.Name(), in.Detail)
		measures = append(measures, m)
	}
	env.healAll()
	rec.Event("heal all", "")
	healedAt := rec.Now()
	if !env.waitFullISR(failoverTimeout) {
		t.Logf("jepsen: the ISR did not fill within %s of the final heal", failoverTimeout)
	}
	time.Sleep(healedTail)
	clientsStopped := rec.Now()
	stopClients()

	unconverged := WaitConverged(c, topic, cfg.Partitions, settle)
	replicas, readErrs := FinalRead(c, topic, cfg.Partitions)
	report := checker.Check(rec.History(replicas))
	ops := rec.Ops()
	for i := range measures {
		m := &measures[i]
		for j := range m.Recoveries {
			r := &m.Recoveries[j]
			r.FirstAck, r.Acked = FirstAck(ops, r.Partition, m.KilledAt, m.RestartedAt)
		}
	}
	restartGaps(measures, ops, cfg.Partitions, clientsStopped)
	res := &Result{Scenario: s.Name, Timings: c.Timings, Seed: cfg.Seed, Dir: dir, Report: report, Unconverged: unconverged, Measures: measures,
		LongestGaps: LongestGap(ops, cfg.Partitions), AckedAfter: make([]int, cfg.Partitions), Events: rec.Events(), Ops: ops,
		Replicas: replicas, ConsulLog: keptConsulLog, CorruptReads: rec.CorruptReads(), Producing: s.Producing,
		ClientFailures: w.Failures(), Wall: time.Since(start)}
	for _, err := range readErrs {
		res.ReadErrors = append(res.ReadErrors, err.Error())
	}
	for _, a := range c.Agents {
		res.AgentLogDirs = append(res.AgentLogDirs, a.LogDir())
	}
	for _, op := range ops {
		if op.Outcome == checker.OK && op.Invoke >= healedAt {
			res.AckedAfter[op.Partition]++
		}
		if op.Duplicate {
			res.DuplicateAnswers++
		}
	}
	summary := res.Summary()
	t.Log("jepsen: " + summary)
	if table := res.RecoveryTable(); table != "" {
		t.Log("jepsen: " + table)
	}
	if table := res.RestartTable(); table != "" {
		t.Log("jepsen: " + table)
	}
	if err := res.write(); err != nil {
		t.Errorf("jepsen: %v", err)
	}
	if !report.Valid() {
		t.Errorf("jepsen: %s: the checker found anomalies (seed %d)", s.Name, cfg.Seed)
	}
	if len(readErrs) > 0 {
		t.Errorf("jepsen: %s: %d replicas could not be read: %v", s.Name, len(readErrs), readErrs)
	}
	if len(res.CorruptReads) > 0 {
		t.Errorf("jepsen: %s: %d fetch answers did not decode: %v", s.Name, len(res.CorruptReads), res.CorruptReads)
	}
	if len(unconverged) > 0 {
		t.Errorf("jepsen: %s: partitions %v did not converge within %s of the heal", s.Name, unconverged, settle)
	}
	if s.Producing != MoveOn {
		t.Logf("jepsen: %s: %s", s.Name, res.DuplicatesLine())
	}
	for _, f := range res.ClientFailures {
		t.Errorf("jepsen: %s: %s", s.Name, f)
	}
	switch {
	case s.Producing == RetryIdempotent && report.Duplicates > 0:
		t.Errorf("jepsen: %s: %d values are in the final log more than once although idempotent producers resent them (seed %d)",
			s.Name, report.Duplicates, cfg.Seed)
	case s.Producing == RetryPlain && report.Duplicates == 0:
		t.Errorf("jepsen: %s: no value is in the final log twice although producers resent without idempotence: "+
			"no answer was lost after an append, or the checker missed the duplicates (seed %d)", s.Name, cfg.Seed)
	}
	for p, n := range res.AckedAfter {
		if n == 0 {
			t.Errorf("jepsen: %s: no write to p%d acknowledged after the final heal: the partition did not recover", s.Name, p)
		}
	}
	return res
}

// Summary is the readable account: the checker's verdict, figures and
// where the files are.
func (r *Result) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "scenario %s, %s, seed %d, %d cycles\n", r.Scenario, r.Timings, r.Seed, len(r.Measures))
	b.WriteString(r.Report.Summary())
	if r.Producing != MoveOn {
		fmt.Fprintf(&b, "  %s\n", r.DuplicatesLine())
	}
	for _, m := range r.Measures {
		if m.FailoverSeen {
			fmt.Fprintf(&b, "  cycle %d: failover in %s (new epoch, %s timing)\n", m.Cycle, m.Failover.Round(time.Millisecond), r.Timings.Timing)
		}
		if len(m.Recoveries) > 0 {
			fmt.Fprintf(&b, "  cycle %d: kill -9 %s, first acknowledged write: led %s; followed %s\n", m.Cycle, m.Killed,
				recoveryList(m.Recoveries, true), recoveryList(m.Recoveries, false))
		}
		for _, rs := range m.Restarts {
			fmt.Fprintf(&b, "  cycle %d: restart of %s (SIGTERM to exit %s): longest time without an acknowledged write %s\n",
				m.Cycle, rs.Agent, seconds(rs.Exited-rs.Stopped), gapList(rs.Gaps))
		}
	}
	if gaps := r.restartGaps(); len(gaps) > 0 {
		fmt.Fprintf(&b, "  rolling restarts, %s timing: longest time without an acknowledged write per restart and partition %s\n",
			r.Timings.Timing, durationStats(gaps))
	}
	if led, followed := r.recoveries(); len(led)+len(followed) > 0 {
		fmt.Fprintf(&b, "  first acknowledged write after a kill, %s timing: partitions it led %s; partitions it followed %s\n",
			r.Timings.Timing, recoveryStats(led), recoveryStats(followed))
	}
	for p, g := range r.LongestGaps {
		fmt.Fprintf(&b, "  p%d: longest time without an acknowledged write %s; %d acknowledged after the final heal\n",
			p, g.Round(time.Millisecond), r.AckedAfter[p])
	}
	for _, e := range r.ReadErrors {
		fmt.Fprintf(&b, "  read error: %s\n", e)
	}
	for _, e := range r.CorruptReads {
		fmt.Fprintf(&b, "  corrupt fetch answer: %s\n", e)
	}
	if len(r.Unconverged) > 0 {
		fmt.Fprintf(&b, "  unconverged partitions: %v\n", r.Unconverged)
	}
	fmt.Fprintf(&b, "  files: %s (agent logs %v; consul log %s if the run fails)", r.Dir, r.AgentLogDirs, r.ConsulLog)
	return b.String()
}

// DuplicatesLine is the figures of a run whose producers retry until
// acknowledged: what make duplicates prints.
func (r *Result) DuplicatesLine() string {
	verdict := "VALID"
	if !r.Report.Valid() {
		verdict = "INVALID"
	}
	return fmt.Sprintf("producers %s: %d cycles, %s, checker %s, %d writes, %d acknowledged, %d duplicates, "+
		"%d resends answered duplicate, %d producer failures, wall time %s",
		r.Producing, len(r.Measures), r.Timings.Timing, verdict, r.Report.Writes, r.Report.Acknowledged, r.Report.Duplicates,
		r.DuplicateAnswers, len(r.ClientFailures), r.Wall.Round(100*time.Millisecond))
}

// write saves report.json and summary.txt in the run's directory.
func (r *Result) write() error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("jepsen: encode report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(r.Dir, "report.json"), b, 0o644); err != nil {
		return fmt.Errorf("jepsen: write report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(r.Dir, "summary.txt"), []byte(r.Summary()+"\n"), 0o644); err != nil {
		return fmt.Errorf("jepsen: write summary: %w", err)
	}
	return nil
}
