package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/logagent/logagent/client"
)

// GroupsConfig is the consumer-group benchmark (`logagent bench groups`):
//
//   - Commit throughput of one coordinator: Members members of one group
//     own one partition each (Members = the topic's partitions) and
//     Concurrency workers per member commit their member's partition's
//     offset, a closed loop, through the agents in Addrs (member i uses
//     Addrs[i % len]). The baseline, run before and after it on the same
//     cluster, is the same workers sending acks=all produce requests of one
//     RecordBytes record to the same partitions: a commit is an acks=all
//     append of one small record to the group's offsets partition, plus the
//     group checks and one sidecar-to-coordinator hop. A second variant has
//     one member own every partition and each request commit all of them.
//   - Settle times of a group of SettleMembers members with well-behaved
//     heartbeat loops (see member), Rounds times: from a kill (heartbeats
//     stop, no leave) until the survivors own every partition, balanced;
//     the same for a kill while a heartbeat is held, a graceful leave and
//     a member joining.
type GroupsConfig struct {
	// Addrs are client APIs of agents, "http://host:port".
	Addrs []string
	Topic string
	// Create makes the topic if it does not exist, with Partitions,
	// ReplicationFactor and MinInsyncReplicas (0: the agents' defaults).
	Create                                   bool
	Partitions, ReplicationFactor, MinInsync int
	// Group prefixes the groups' names; each run adds its own suffix, so
	// runs against one cluster do not meet each other's members.
	Group string
	// Members of the commit group and commit workers per member.
	Members, Concurrency int
	// RecordBytes is the size of each baseline record's value.
	RecordBytes int
	// SeedRecords are written to every partition first; commits cycle
	// through offsets 1..SeedRecords, all at or below the high watermark.
	SeedRecords int
	// Duration of each measured throughput run, after Warmup of the same
	// load (not measured).
	Duration, Warmup time.Duration
	// SessionTimeout of every member; HeartbeatWait is its long poll.
	SessionTimeout, HeartbeatWait time.Duration
	// SettleMembers, Rounds and SettleTimeout shape the settle phase.
	SettleMembers, Rounds int
	SettleTimeout         time.Duration
	// SkipCommits and SkipSettle leave a phase out.
	SkipCommits, SkipSettle bool
	// CoordinatorProfile, when set, is where a CPU profile of the commit
	// group's coordinator during the measured commit run is written (its
	// client API must serve /debug/pprof: client { pprof = true }).
	CoordinatorProfile string
	Clock              Clock
}

// Validate reports a configuration that cannot run, as an error matching
// ErrInvalidConfig.
func (c *GroupsConfig) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case len(c.Addrs) == 0:
		return bad("no agent address")
	case c.Topic == "":
		return bad("a topic is required")
	case c.Partitions < 0 || c.ReplicationFactor < 0 || c.MinInsync < 0:
		return bad("partitions, replication factor and min in-sync replicas must not be negative")
	case c.Group == "":
		return bad("a group name prefix is required")
	case c.SkipCommits && c.SkipSettle:
		return bad("both phases skipped: nothing to run")
	case c.Members <= 0 || c.Concurrency <= 0:
		return bad("members %d and workers per member %d must be positive", c.Members, c.Concurrency)
	case c.RecordBytes <= 0 || c.SeedRecords <= 0:
		return bad("record size %d and seed records %d must be positive", c.RecordBytes, c.SeedRecords)
	case !c.SkipCommits && c.Duration <= 0:
		return bad("duration %v must be positive", c.Duration)
	case c.Warmup < 0:
		return bad("warm-up %v is negative", c.Warmup)
	case c.SessionTimeout < time.Millisecond || c.SessionTimeout%time.Millisecond != 0:
		return bad("session timeout %v: want a positive number of milliseconds", c.SessionTimeout)
	case c.HeartbeatWait < 0 || c.HeartbeatWait > 30*time.Second || c.HeartbeatWait%time.Millisecond != 0:
		return bad("heartbeat wait %v: want whole milliseconds from 0 to 30s", c.HeartbeatWait)
	case c.SettleMembers < 2:
		return bad("settle members %d: a kill needs a survivor, want at least 2", c.SettleMembers)
	case c.Rounds <= 0:
		return bad("rounds %d must be positive", c.Rounds)
	case c.SettleTimeout <= c.SessionTimeout:
		return bad("settle timeout %v must be longer than the session timeout %v", c.SettleTimeout, c.SessionTimeout)
	}
	for _, a := range c.Addrs {
		if _, err := newGroupAPI(a, nil); err != nil {
			return err
		}
	}
	return nil
}

func (c *GroupsConfig) settings(partitions int) map[string]any {
	return map[string]any{
		"addrs":                   strings.Join(c.Addrs, ","),
		"topic":                   c.Topic,
		"partitions":              partitions,
		"members":                 c.Members,
		"workers_per_member":      c.Concurrency,
		"baseline_record_bytes":   c.RecordBytes,
		"seed_records":            c.SeedRecords,
		"duration":                c.Duration.String(),
		"warmup":                  c.Warmup.String(),
		"session_timeout_ms":      c.SessionTimeout.Milliseconds(),
		"heartbeat_wait_ms":       c.HeartbeatWait.Milliseconds(),
		"settle_members":          c.SettleMembers,
		"rounds":                  c.Rounds,
		"skip_commits":            c.SkipCommits,
		"skip_settle":             c.SkipSettle,
		"coordinator_profile_set": c.CoordinatorProfile != "",
	}
}

// Settle events, in the order a round runs them.
const (
	EventStart       = "start"
	EventKill        = "kill"
	EventKillMidPoll = "kill_mid_poll"
	EventJoin        = "join"
	EventLeave       = "leave"
)

var eventDescriptions = map[string]string{
	EventStart:       "all members join an empty group until each owns its share",
	EventKill:        "a member dies right after a heartbeat answer (no leave) until the survivors own every partition",
	EventKillMidPoll: "a member dies while the agent holds its heartbeat (connection dropped, no leave) until the survivors own every partition",
	EventJoin:        "a member joins a settled group until every member owns its share",
	EventLeave:       "a member leaves (DELETE) until the others own every partition",
}

// SettleStat is one settle event's measurements over the rounds.
type SettleStat struct {
	Event string
	Runs  []time.Duration
	// AfterTimeout marks the kill events, whose figure minus the session
	// timeout is what the coordinator adds to its wait.
	AfterTimeout bool
}

// Median of the runs (the mean of the middle two for an even count).
func (s SettleStat) Median() time.Duration {
	if len(s.Runs) == 0 {
		return 0
	}
	r := slices.Sorted(slices.Values(s.Runs))
	n := len(r)
	if n%2 == 1 {
		return r[n/2]
	}
	return (r[n/2-1] + r[n/2]) / 2
}

// Max of the runs.
func (s SettleStat) Max() time.Duration {
	if len(s.Runs) == 0 {
		return 0
	}
	return slices.Max(s.Runs)
}

// GroupsResult is what a groups benchmark measured.
type GroupsResult struct {
	Config         map[string]any
	SessionTimeout time.Duration
	// ProduceBaseline merges the produce runs before and after the commits.
	ProduceBaseline *Result
	// Commit has one offset per request (Records are offsets);
	// CommitAll commits every partition in each request.
	Commit, CommitAll *Result
	Settle            []SettleStat
	// Notes say what went wrong besides failed requests (members whose
	// heartbeats failed, a profile that could not be taken).
	Notes []string
}

// CommitRatio is commit requests/s over baseline produce requests/s.
func (r *GroupsResult) CommitRatio() float64 {
	return ratioOf(r.Commit, r.ProduceBaseline, func(x *Result) float64 { return x.RequestsPerSecond() })
}

// CommitAllRatio is offsets/s of CommitAll over baseline records/s.
func (r *GroupsResult) CommitAllRatio() float64 {
	return ratioOf(r.CommitAll, r.ProduceBaseline, func(x *Result) float64 { return x.RecordsPerSecond() })
}

func ratioOf(a, b *Result, f func(*Result) float64) float64 {
	if a == nil || b == nil || f(b) <= 0 {
		return 0
	}
	return f(a) / f(b)
}

// ErrorRatio is the highest error ratio of the throughput runs.
func (r *GroupsResult) ErrorRatio() float64 {
	var worst float64
	for _, x := range []*Result{r.ProduceBaseline, r.Commit, r.CommitAll} {
		if x != nil {
			worst = max(worst, x.ErrorRatio())
		}
	}
	return worst
}

// groupsRun is one run of Groups.
type groupsRun struct {
	cfg        *GroupsConfig
	clock      Clock
	apis       []*groupAPI
	partitions int
	topicJSON  []byte
	suffix     string
	res        *GroupsResult
}

// Groups runs the benchmark against the agents.
func Groups(ctx context.Context, cfg GroupsConfig) (*GroupsResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &groupsRun{cfg: &cfg, clock: orSystemClock(cfg.Clock), res: &GroupsResult{SessionTimeout: cfg.SessionTimeout}}
	// Every worker keeps a connection, every member one for its held
	// heartbeat, and a killed member's dropped connection is replaced.
	hc := HTTPClient(cfg.Members*cfg.Concurrency + 2*cfg.Members + 2*cfg.SettleMembers + 16)
	for _, a := range cfg.Addrs {
		api, err := newGroupAPI(a, hc)
		if err != nil {
			return nil, err
		}
		g.apis = append(g.apis, api)
	}
	c, err := client.New(g.apis[0].base, client.WithHTTPClient(hc))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	spec := client.TopicSpec{Name: cfg.Topic, Partitions: cfg.Partitions, ReplicationFactor: cfg.ReplicationFactor, MinInsyncReplicas: cfg.MinInsync}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	info, err := EnsureTopic(tctx, c, spec, cfg.Create, g.clock)
	cancel()
	if err != nil {
		return nil, err
	}
	g.partitions = len(info.Partitions)
	switch {
	case !cfg.SkipCommits && cfg.Members > g.partitions:
		return nil, fmt.Errorf("%w: %d members for %d partitions: a member without a partition cannot commit", ErrInvalidConfig, cfg.Members, g.partitions)
	case !cfg.SkipSettle && cfg.SettleMembers > g.partitions:
		return nil, fmt.Errorf("%w: %d settle members for %d partitions", ErrInvalidConfig, cfg.SettleMembers, g.partitions)
	}
	g.topicJSON, _ = json.Marshal(cfg.Topic)
	g.suffix = strconv.FormatInt(g.clock.Now().UnixNano(), 36)
	g.res.Config = cfg.settings(g.partitions)
	if err := g.seed(ctx); err != nil {
		return nil, err
	}
	if !cfg.SkipCommits {
		if err := g.commitPhase(ctx); err != nil {
			return nil, err
		}
	}
	if !cfg.SkipSettle {
		if err := g.settlePhase(ctx); err != nil {
			return nil, err
		}
	}
	return g.res, nil
}

// seed writes SeedRecords records to every partition, so that every
// commit's offset is at or below the high watermark.
func (g *groupsRun) seed(ctx context.Context) error {
	var body bytes.Buffer
	for i := range g.cfg.SeedRecords {
		fmt.Fprintf(&body, "seed-%d\n", i)
	}
	for p := range g.partitions {
		if err := g.apis[p%len(g.apis)].produce(ctx, g.cfg.Topic, p, "text/plain", body.Bytes()); err != nil {
			return fmt.Errorf("bench: seed partition %d of %q: %w", p, g.cfg.Topic, err)
		}
	}
	return nil
}

func (g *groupsRun) newMember(group string, i int, watch *groupWatch) *member {
	return &member{api: g.apis[i%len(g.apis)], group: group, topics: []string{g.cfg.Topic},
		sessionMS: g.cfg.SessionTimeout.Milliseconds(), waitMS: g.cfg.HeartbeatWait.Milliseconds(),
		clock: g.clock, watch: watch}
}

// startSettled joins n members to group and waits until they settled.
func (g *groupsRun) startSettled(ctx context.Context, group string, n int, watch *groupWatch) ([]*member, time.Duration, error) {
	ms := make([]*member, n)
	for i := range ms {
		ms[i] = g.newMember(group, i, watch)
	}
	ch := watch.arm(ms)
	start := g.clock.Now()
	for i, m := range ms {
		if err := m.start(ctx); err != nil {
			g.stopAll(ms[:i])
			return nil, 0, err
		}
	}
	if err := g.await(ctx, ch, watch, "start"); err != nil {
		g.stopAll(ms)
		return nil, 0, err
	}
	return ms, watch.settledTime().Sub(start), nil
}

// await waits for ch until SettleTimeout.
func (g *groupsRun) await(ctx context.Context, ch <-chan struct{}, watch *groupWatch, what string) error {
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := g.clock.AfterFunc(g.cfg.SettleTimeout, cancel)
	defer stop()
	select {
	case <-ch:
		return nil
	case <-tctx.Done():
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("bench: %s: not settled within %v: %s", what, g.cfg.SettleTimeout, watch.describe())
	}
}

// stopAll leaves with every member still running, and notes the members
// whose heartbeats failed.
func (g *groupsRun) stopAll(ms []*member) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range ms {
		if p := m.problems(); p != "" {
			g.res.Notes = append(g.res.Notes, p)
		}
		if m.cancel == nil {
			continue
		}
		select {
		case <-m.done:
			continue // killed: it does not leave
		default:
		}
		if err := m.leave(ctx); err != nil {
			g.res.Notes = append(g.res.Notes, err.Error())
		}
	}
}

// measure runs ops for the warm-up, forgetting the figures, then for the
// duration.
func (g *groupsRun) measure(ctx context.Context, ops []Op, warmup bool) (*Result, error) {
	if warmup && g.cfg.Warmup > 0 {
		if _, err := Run(ctx, Plan{Duration: g.cfg.Warmup, Clock: g.cfg.Clock}, ops); err != nil {
			return nil, err
		}
	}
	return Run(ctx, Plan{Duration: g.cfg.Duration, Clock: g.cfg.Clock}, ops)
}

// produceOps are the baseline's workers: worker w of member i sends one
// record per request to partition i, through member i's agent.
func (g *groupsRun) produceOps() []Op {
	value := bytes.Repeat([]byte{'v'}, g.cfg.RecordBytes)
	var ops []Op
	for i := range g.cfg.Members {
		api := g.apis[i%len(g.apis)]
		p := i % g.partitions
		for range g.cfg.Concurrency {
			ops = append(ops, func(ctx context.Context, _ Request) (Done, error) {
				if err := api.produce(ctx, g.cfg.Topic, p, "application/octet-stream", value); err != nil {
					return Done{}, err
				}
				return Done{Records: 1, Bytes: int64(len(value))}, nil
			})
		}
	}
	return ops
}

// errOwnsNothing fails a commit of a member that owns no partition at the
// moment (the group moved while the benchmark ran).
var errOwnsNothing = errors.New("bench: the member owns no partition")

// commitOps are workers committing for ms, perMember workers each: one
// offset per request (the member's partitions in turn), or every owned
// partition in each request with all.
func (g *groupsRun) commitOps(group string, ms []*member, perMember int, all bool) []Op {
	var ops []Op
	for _, m := range ms {
		for range perMember {
			var buf []byte
			var n int64
			ops = append(ops, func(ctx context.Context, req Request) (Done, error) {
				idJSON, epoch, owned := m.current()
				if len(owned) == 0 {
					return Done{}, errOwnsNothing
				}
				ps := make([]int32, 0, len(owned))
				if all {
					for _, p := range owned {
						ps = append(ps, p.Partition)
					}
				} else {
					ps = append(ps, owned[req.Seq%int64(len(owned))].Partition)
				}
				n++
				offset := 1 + n%int64(g.cfg.SeedRecords)
				buf = appendCommitBody(buf[:0], idJSON, epoch, g.topicJSON, ps, offset)
				if err := m.api.commit(ctx, group, buf); err != nil {
					return Done{}, err
				}
				return Done{Records: int64(len(ps))}, nil
			})
		}
	}
	return ops
}

func (g *groupsRun) commitPhase(ctx context.Context) error {
	cfg := g.cfg
	before, err := g.measure(ctx, g.produceOps(), true)
	if err != nil {
		return err
	}

	group := cfg.Group + "-commit-" + g.suffix
	watch := newGroupWatch(g.partitions)
	ms, _, err := g.startSettled(ctx, group, cfg.Members, watch)
	if err != nil {
		return err
	}
	var profile sync.WaitGroup
	if cfg.CoordinatorProfile != "" {
		profile.Add(1)
		go func() {
			defer profile.Done()
			if err := g.profileCoordinator(ctx, group); err != nil {
				g.res.Notes = append(g.res.Notes, err.Error())
			}
		}()
	}
	commit, err := g.measure(ctx, g.commitOps(group, ms, cfg.Concurrency, false), true)
	profile.Wait()
	if err == nil {
		err = g.verifyCommitted(ctx, group, commit)
	}
	g.stopAll(ms)
	if err != nil {
		return err
	}

	groupAll := cfg.Group + "-all-" + g.suffix
	watchAll := newGroupWatch(g.partitions)
	one, _, err := g.startSettled(ctx, groupAll, 1, watchAll)
	if err != nil {
		return err
	}
	commitAll, err := g.measure(ctx, g.commitOps(groupAll, one, cfg.Members*cfg.Concurrency, true), true)
	g.stopAll(one)
	if err != nil {
		return err
	}

	after, err := g.measure(ctx, g.produceOps(), false)
	if err != nil {
		return err
	}
	baseline := mergeResults(before, after)
	baseline.Workload, baseline.Config = "produce", map[string]any{"acks": "all", "records_per_request": 1, "record_bytes": cfg.RecordBytes, "runs": 2}
	commit.Workload, commit.Config = "commit", map[string]any{"offsets_per_request": 1}
	commitAll.Workload, commitAll.Config = "commit", map[string]any{"offsets_per_request": g.partitions}
	g.res.ProduceBaseline, g.res.Commit, g.res.CommitAll = baseline, commit, commitAll
	return nil
}

// verifyCommitted checks that the group holds a committed offset of every
// partition the run committed: a run whose commits were answered 200 but
// not kept is not a result.
func (g *groupsRun) verifyCommitted(ctx context.Context, group string, commit *Result) error {
	if commit.Requests == 0 {
		return nil
	}
	got, err := g.apis[0].offsets(ctx, group)
	if err != nil {
		return fmt.Errorf("bench: committed offsets of %q: %w", group, err)
	}
	seen := map[int32]bool{}
	for _, o := range got.Offsets {
		if o.Topic == g.cfg.Topic && o.Offset >= 1 && o.Offset <= int64(g.cfg.SeedRecords) {
			seen[o.Partition] = true
		}
	}
	if len(seen) < g.cfg.Members {
		return fmt.Errorf("bench: %d commits answered, but group %q holds offsets of %d partitions, want %d", commit.Requests, group, len(seen), g.cfg.Members)
	}
	return nil
}

// profileCoordinator writes a CPU profile of the group's coordinator,
// taken while the measured commit run goes on.
func (g *groupsRun) profileCoordinator(ctx context.Context, group string) error {
	if g.cfg.Warmup > 0 && g.clock.SleepUntil(ctx, g.clock.Now().Add(g.cfg.Warmup)) != nil {
		return ctx.Err()
	}
	desc, err := g.apis[0].describe(ctx, group)
	if err != nil {
		return fmt.Errorf("bench: profile: describe %q: %w", group, err)
	}
	addr, err := g.apis[0].clientAddress(ctx, desc.Coordinator)
	if err != nil {
		return fmt.Errorf("bench: profile: %w", err)
	}
	seconds := max(1, int((g.cfg.Duration - time.Second).Seconds()))
	u := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, seconds)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("bench: profile: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("bench: profile of coordinator %s: %w", desc.Coordinator, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bench: profile of coordinator %s at %s: %w (is client { pprof = true } set?)", desc.Coordinator, u, apiError(resp))
	}
	f, err := os.Create(g.cfg.CoordinatorProfile)
	if err != nil {
		return fmt.Errorf("bench: profile: %w", err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("bench: profile: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bench: profile: %w", err)
	}
	g.res.Notes = append(g.res.Notes, fmt.Sprintf("CPU profile of coordinator %s (%s), %ds of the commit run: %s", desc.Coordinator, addr, seconds, g.cfg.CoordinatorProfile))
	return nil
}

// mergeResults adds b's requests, time and latencies to a's.
func mergeResults(a, b *Result) *Result {
	m := &Result{Elapsed: a.Elapsed + b.Elapsed}
	for _, r := range []*Result{a, b} {
		m.Requests += r.Requests
		m.Records += r.Records
		m.Bytes += r.Bytes
		m.Latency.Merge(&r.Latency)
		for kind, n := range r.Errors {
			m.addErrors(kind, n, r.Examples[kind])
		}
	}
	return m
}

// settlePhase runs Rounds rounds of: start, kill, join, kill during a held
// heartbeat, join, leave, each on a fresh group.
func (g *groupsRun) settlePhase(ctx context.Context) error {
	stats := map[string]*SettleStat{}
	order := []string{EventStart, EventKill, EventKillMidPoll, EventJoin, EventLeave}
	for _, e := range order {
		stats[e] = &SettleStat{Event: e, AfterTimeout: e == EventKill || e == EventKillMidPoll}
	}
	for r := range g.cfg.Rounds {
		if err := g.settleRound(ctx, r, stats); err != nil {
			return err
		}
	}
	for _, e := range order {
		g.res.Settle = append(g.res.Settle, *stats[e])
	}
	return nil
}

func (g *groupsRun) settleRound(ctx context.Context, round int, stats map[string]*SettleStat) error {
	group := fmt.Sprintf("%s-settle-%s-%d", g.cfg.Group, g.suffix, round)
	watch := newGroupWatch(g.partitions)
	live, took, err := g.startSettled(ctx, group, g.cfg.SettleMembers, watch)
	if err != nil {
		return err
	}
	everyone := slices.Clone(live)
	defer func() { g.stopAll(everyone) }()
	stats[EventStart].Runs = append(stats[EventStart].Runs, took)

	kill := func(event string, midPoll bool) error {
		victim := live[0]
		if midPoll {
			victim.killMidPoll.Store(true)
		} else {
			victim.killAfterAnswer.Store(true)
		}
		<-victim.done
		victim.mu.Lock()
		t0 := victim.stoppedAt
		victim.mu.Unlock()
		watch.forget(victim)
		live = live[1:]
		ch := watch.arm(live)
		if err := g.await(ctx, ch, watch, event); err != nil {
			return err
		}
		stats[event].Runs = append(stats[event].Runs, watch.settledTime().Sub(t0))
		return nil
	}
	join := func() error {
		m := g.newMember(group, len(everyone), watch)
		everyone = append(everyone, m)
		live = append(live, m)
		ch := watch.arm(live)
		t0 := g.clock.Now()
		if err := m.start(ctx); err != nil {
			return err
		}
		if err := g.await(ctx, ch, watch, EventJoin); err != nil {
			return err
		}
		stats[EventJoin].Runs = append(stats[EventJoin].Runs, watch.settledTime().Sub(t0))
		return nil
	}
	if err := kill(EventKill, false); err != nil {
		return err
	}
	if err := join(); err != nil {
		return err
	}
	if err := kill(EventKillMidPoll, true); err != nil {
		return err
	}
	if err := join(); err != nil {
		return err
	}
	victim := live[0]
	victim.stop()
	watch.forget(victim)
	live = live[1:]
	ch := watch.arm(live)
	t0 := g.clock.Now()
	if err := victim.leave(ctx); err != nil {
		return err
	}
	if err := g.await(ctx, ch, watch, EventLeave); err != nil {
		return err
	}
	stats[EventLeave].Runs = append(stats[EventLeave].Runs, watch.settledTime().Sub(t0))
	return nil
}
