package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/logagent/logagent/internal/testcluster"
)

// `benchrun cost` (issue 19) measures what partitions cost: for each
// partition count it starts Consul and three agents with the shipped
// timing (testcluster.TimingShipped), creates one RF 3 topic of that many
// partitions and measures
//
//	create → led   the time from the creation request until every partition has a leader
//	idle           per agent, over -idle with no client traffic: CPU (utime+stime from
//	               /proc/<pid>/stat), RSS (VmRSS), open descriptors (/proc/<pid>/fd), and the
//	               cluster's replica fetch requests and Consul requests per second (the
//	               agents' logagent_replica_fetch_requests_total and
//	               logagent_consul_requests_total)
//	failover       kill -9 of the agent leading the most partitions: the time until every
//	               partition it led accepted an acks=all write through another agent
//	               (every partition probed at once, each on a connection opened before the
//	               kill, until its first success), and the
//	               surviving agents' Consul requests per second meanwhile
//	429s           Consul's "too many concurrent connections" refusals in the agents' logs
//
// and then, on one more cluster, acks=all produce records/s (100 B records,
// 4 workers of 100-record batches, as make bench's rows) into topics of 1,
// 30 and 300 partitions. The agents run under RLIMIT_NOFILE -nofile
// (20,000, the bound), set on benchrun itself and inherited. The
// figures go between the cost markers of docs/benchmarks.md, the curves
// into docs/benchmarks-cost.png.
const (
	costBeginMarker = "<!-- cost:begin -->"
	costEndMarker   = "<!-- cost:end -->"
	costTopic       = "cost"
	// clockTicks is Linux's USER_HZ, the unit of /proc/<pid>/stat's times:
	// 100 on every architecture Go supports there.
	clockTicks = 100
	// probeTimeout is the timeout of one failover probe write (the agent
	// holds a write it cannot place yet up to that long): the client API's
	// default, what a producer that sets none gets. Shorter (it was 2 s),
	// a burst that outran it had every write retried while its first copy
	// was still being replicated, and the burst collapsed under its own
	// retries (docs/benchmarks.md). probeRetry is the pause after a
	// refused write.
	probeTimeout = 5 * time.Second
	probeRetry   = 100 * time.Millisecond
	// probeQuiet is the pause between opening the probe's connections
	// (a write to every partition) and the kill: the checkpoints those
	// writes make due (5 s after) are done by then.
	probeQuiet = 15 * time.Second
)

// costHCL is every agent's configuration on top of the harness's: info
// logs (debug logs of thousands of partitions would be the cost measured).
const costHCL = "log_level = \"info\"\n"

type costOptions struct {
	partitions        []int
	producePartitions []int
	idle, settle      time.Duration
	leadTimeout       time.Duration
	produceDuration   time.Duration
	nofile            uint64
	bin               string
	out               string
	work              string
	log               io.Writer
}

// agentCost is one agent's idle cost.
type agentCost struct {
	Node       string
	CPUPercent float64
	RSSBytes   int64
	FDs        int
	// ScrapeCPU is what one GET /metrics cost the agent (at clockTicks'
	// grain): a Prometheus scraping it pays that every interval.
	ScrapeCPU time.Duration
}

// costPoint is everything measured at one partition count.
type costPoint struct {
	Partitions int
	Led        time.Duration
	// InSync is from the creation until every partition's ISR held all
	// its replicas, 0 when that did not happen within the settle;
	// ISRChanges are the ISR changes the agents made from the creation
	// to the end of the settle (a new partition's replicas all start in
	// the ISR: each change is a leader giving up on a follower, or taking
	// it back).
	InSync     time.Duration
	ISRChanges int
	Agents     []agentCost
	// FetchesPerSecond, WakesPerSecond (the replica loops') and
	// ConsulPerSecond are the cluster's, idle.
	FetchesPerSecond float64
	WakesPerSecond   float64
	ConsulPerSecond  float64
	// KilledNode led FailedOver partitions; FailoverMax and FailoverMedian
	// are from its kill to their first acknowledged write; Unrecovered
	// did not accept one within the probe's bound.
	KilledNode           string
	FailedOver           int
	FailoverMax          time.Duration
	FailoverMedian       time.Duration
	Unrecovered          int
	FailoverConsulPerSec float64
	// ProbeBaseline is how long the same probe took, with every agent
	// alive, to have a write acknowledged by each of those partitions.
	ProbeBaseline time.Duration
	Consul429     int
	// LoadAverage is the machine's 1-minute load average at the end of
	// the idle window: what else ran beside the agents.
	LoadAverage float64
	Err         string
}

// produceCost is one produce row.
type produceCost struct {
	Partitions    int
	RecordsPerSec float64
	P99           time.Duration
	Command       string
	Err           string
}

func runCost(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("benchrun cost", flag.ContinueOnError)
	parts := fs.String("partitions", "100,1000,3000,10000", "comma-separated partition counts of the idle and failover points")
	produceParts := fs.String("produce-partitions", "1,30,300", "comma-separated partition counts of the produce rows")
	idle := fs.Duration("idle", 30*time.Second, "how long each point's idle cost is measured")
	settle := fs.Duration("settle", 60*time.Second, "wait after every partition is led, before the idle window (ISR joins, preferred leaders: at 10,000 partitions some dozens move back, one every 2 s per agent)")
	leadTimeout := fs.Duration("lead-timeout", 10*time.Minute, "give up waiting for every partition to be led after this long")
	produceDuration := fs.Duration("duration", 10*time.Second, "how long each produce row runs")
	nofile := fs.Uint64("nofile", 20000, "RLIMIT_NOFILE of the agents")
	out := fs.String("out", "docs", "directory holding benchmarks.md (rewritten between its cost markers) and benchmarks-cost.png")
	bin := fs.String("bin", "bin", "directory holding logagent and consul")
	quick := fs.Bool("quick", false, "a smoke run: 20 and 100 partitions, 5s idle, 2s settle, 2s produce rows of 1 and 3 partitions")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *quick {
		*parts, *produceParts, *idle, *settle, *produceDuration = "20,100", "1,3", 5*time.Second, 2*time.Second, 2*time.Second
	}
	o := costOptions{idle: *idle, settle: *settle, leadTimeout: *leadTimeout, produceDuration: *produceDuration, nofile: *nofile, out: *out, log: stdout}
	var err error
	if o.partitions, err = parseCounts(*parts); err != nil {
		return fmt.Errorf("benchrun cost: -partitions: %w", err)
	}
	if o.producePartitions, err = parseCounts(*produceParts); err != nil {
		return fmt.Errorf("benchrun cost: -produce-partitions: %w", err)
	}
	if o.bin, err = filepath.Abs(*bin); err != nil {
		return fmt.Errorf("benchrun cost: %w", err)
	}
	for _, env := range [][2]string{{"LOGAGENT_BIN", "logagent"}, {"LOGAGENT_CONSUL_BIN", "consul"}} {
		if err := os.Setenv(env[0], filepath.Join(o.bin, env[1])); err != nil {
			return fmt.Errorf("benchrun cost: %w", err)
		}
	}
	limit := syscall.Rlimit{Cur: o.nofile, Max: o.nofile}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &limit); err != nil {
		return fmt.Errorf("benchrun cost: RLIMIT_NOFILE %d: %w", o.nofile, err)
	}
	if o.work, err = os.MkdirTemp("", "benchrun-cost-"); err != nil {
		return fmt.Errorf("benchrun cost: %w", err)
	}
	// Every point's files stay until the run ends, and their removal is
	// synced: on ext4 without a journal, an inode allocation passes over
	// the inodes deleted in the last 60 s, or 300 s while their inode
	// table block is dirty (fs/ext4/ialloc.c, recently_deleted), and a
	// creation of 10,000 partitions right after the removal of another
	// took 61-82 s against 22-32 s (docs/benchmarks.md).
	defer func() {
		_ = os.RemoveAll(o.work)
		syscall.Sync()
	}()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	started := time.Now()
	var points []costPoint
	for _, n := range o.partitions {
		p := o.measurePoint(ctx, n)
		if p.Err != "" {
			fmt.Fprintf(stdout, "cost: %d partitions: %s\n", n, p.Err)
		}
		points = append(points, p)
	}
	produce := o.measureProduce(ctx)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("benchrun cost: run stopped before the end, %s left as it was: %w", o.out, err)
	}
	command := strings.TrimSpace("bin/benchrun cost " + strings.Join(args, " "))
	region := renderCost(costReport{Date: time.Now(), Machine: machineFacts(), Command: command, Options: o, Points: points, Produce: produce, Took: time.Since(started)})
	if err := writeCostOutputs(o.out, region, points); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and %s\n", filepath.Join(o.out, "benchmarks.md"), filepath.Join(o.out, "benchmarks-cost.png"))
	return nil
}

func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// startCostCluster starts Consul and three agents with the shipped timing.
func (o *costOptions) startCostCluster(name string) (*testcluster.Main, error) {
	dir := filepath.Join(o.work, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("benchrun cost: %w", err)
	}
	m, err := testcluster.StartMain(testcluster.Options{Agents: 3, Timing: testcluster.TimingShipped, HCL: costHCL, Dir: dir})
	if err != nil {
		return nil, fmt.Errorf("benchrun cost: cluster for %s: %w", name, err)
	}
	return m, nil
}

func (o *costOptions) measurePoint(ctx context.Context, n int) (p costPoint) {
	p.Partitions = n
	fmt.Fprintf(o.log, "cost: %d partitions: starting the cluster\n", n)
	m, err := o.startCostCluster(fmt.Sprintf("p%d", n))
	if err != nil {
		p.Err = err.Error()
		return p
	}
	defer func() {
		if err := m.Stop(); err != nil && p.Err == "" {
			p.Err = "stop: " + err.Error()
		}
	}()
	c := m.Cluster
	first := c.Agents[0]

	start := time.Now()
	if err := first.CreateTopic(testcluster.TopicSpec{Name: costTopic, Partitions: n, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		p.Err = "create: " + err.Error()
		return p
	}
	err = waitAllLed(ctx, first, costTopic, n, o.leadTimeout)
	p.Led = time.Since(start)
	if err != nil {
		p.Err = err.Error()
		return p
	}
	fmt.Fprintf(o.log, "cost: %d partitions: all led after %s\n", n, p.Led.Round(time.Millisecond))
	settled := time.Now().Add(o.settle)
	if p.InSync, err = waitAllInSync(ctx, first, costTopic, n, start, settled); err != nil {
		p.Err = err.Error()
		return p
	}
	if p.InSync > 0 {
		fmt.Fprintf(o.log, "cost: %d partitions: every replica in sync after %s\n", n, p.InSync.Round(time.Millisecond))
	} else {
		fmt.Fprintf(o.log, "cost: %d partitions: not every replica in sync within the %s settle\n", n, o.settle)
	}
	if !sleepCtx(ctx, time.Until(settled)) {
		return p
	}

	before, err := sampleAgents(c.Agents, false)
	if err != nil {
		p.Err = err.Error()
		return p
	}
	if !sleepCtx(ctx, o.idle) {
		return p
	}
	after, err := sampleAgents(c.Agents, true)
	if err != nil {
		p.Err = err.Error()
		return p
	}
	p.LoadAverage = loadAverage()
	window := after[0].at.Sub(before[0].at).Seconds()
	for i, a := range c.Agents {
		p.ISRChanges += int(before[i].isrChanges)
		cpu := float64(after[i].cpuTicks-before[i].cpuTicks) / clockTicks
		p.Agents = append(p.Agents, agentCost{Node: a.NodeID, CPUPercent: 100 * cpu / window, RSSBytes: after[i].rss, FDs: after[i].fds,
			ScrapeCPU: time.Duration(after[i].scrapeTicks) * time.Second / clockTicks})
		p.FetchesPerSecond += (after[i].fetches - before[i].fetches) / window
		p.WakesPerSecond += (after[i].wakes - before[i].wakes) / window
		p.ConsulPerSecond += (after[i].consul - before[i].consul) / window
	}
	fmt.Fprintf(o.log, "cost: %d partitions: idle %+v, %.0f replica fetches/s, %.0f replica loop wakes/s, %.0f Consul requests/s\n", n, p.Agents, p.FetchesPerSecond, p.WakesPerSecond, p.ConsulPerSecond)

	// Failover: the agent leading the most partitions dies.
	leaders, err := currentLeaders(first, costTopic, n)
	if err != nil {
		p.Err = err.Error()
		return p
	}
	victim, led := busiestLeader(c.Agents, leaders)
	survivor := c.Agents[0]
	if survivor == victim {
		survivor = c.Agents[1]
	}
	var survivors []*testcluster.Agent
	for _, a := range c.Agents {
		if a != victim {
			survivors = append(survivors, a)
		}
	}
	consulBefore, err := sampleAgents(survivors, false)
	if err != nil {
		p.Err = err.Error()
		return p
	}
	p.KilledNode, p.FailedOver = victim.NodeID, len(led)
	probe, baseline, err := newFailoverProbe(ctx, survivor, led)
	p.ProbeBaseline = baseline
	if err != nil {
		p.Err = err.Error()
		return p
	}
	defer probe.close()
	if !sleepCtx(ctx, probeQuiet) {
		return p
	}
	killed := time.Now()
	victim.Kill()
	times, unrecovered := probe.run(ctx, killed, 2*time.Minute)
	consulAfter, err := sampleAgents(survivors, true)
	if err != nil {
		p.Err = err.Error()
		return p
	}
	span := consulAfter[0].at.Sub(consulBefore[0].at).Seconds()
	for i := range survivors {
		p.FailoverConsulPerSec += (consulAfter[i].consul - consulBefore[i].consul) / span
	}
	p.Unrecovered = unrecovered
	if len(times) > 0 {
		slices.Sort(times)
		p.FailoverMax, p.FailoverMedian = times[len(times)-1], times[len(times)/2]
	}
	for _, a := range c.Agents {
		p.Consul429 += countInFile(a.LogPath(), "too many concurrent connections")
	}
	fmt.Fprintf(o.log, "cost: %d partitions: kill -9 of %s (led %d): all acks=all again after %s (median %s, deciles %s, %d never; the same writes with none killed: %s), %.0f Consul requests/s meanwhile, %d 429s\n",
		n, p.KilledNode, p.FailedOver, p.FailoverMax.Round(time.Millisecond), p.FailoverMedian.Round(time.Millisecond), deciles(times), p.Unrecovered, p.ProbeBaseline.Round(time.Millisecond), p.FailoverConsulPerSec, p.Consul429)
	return p
}

// waitAllLed polls a's description of topic until every one of its n
// partitions has a leader.
func waitAllLed(ctx context.Context, a *testcluster.Agent, topic string, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	last := 0
	for {
		leaders, err := currentLeaders(a, topic, n)
		if err == nil && len(leaders) == n {
			return nil
		}
		if err == nil {
			last = len(leaders)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d partitions led after %s (last error %v)", last, n, limit, err)
		}
		if !sleepCtx(ctx, time.Second) {
			return ctx.Err()
		}
	}
}

// waitAllInSync polls a's description of topic until every one of its n
// partitions has all its replicas in the ISR, and returns the time since
// start then, or 0 when it did not happen by until.
func waitAllInSync(ctx context.Context, a *testcluster.Agent, topic string, n int, start, until time.Time) (time.Duration, error) {
	for {
		t, err := a.Describe(topic)
		if err == nil && len(t.Partitions) == n && !slices.ContainsFunc(t.Partitions, func(p testcluster.Partition) bool { return len(p.ISR) != len(p.Replicas) }) {
			return time.Since(start), nil
		}
		if time.Now().After(until) {
			return 0, nil
		}
		if !sleepCtx(ctx, time.Second) {
			return 0, ctx.Err()
		}
	}
}

// currentLeaders maps each led partition of topic to its leader.
func currentLeaders(a *testcluster.Agent, topic string, n int) (map[int]string, error) {
	t, err := a.Describe(topic)
	if err != nil {
		return nil, err
	}
	if len(t.Partitions) != n {
		return nil, fmt.Errorf("topic %s has %d partitions, want %d", topic, len(t.Partitions), n)
	}
	out := map[int]string{}
	for _, p := range t.Partitions {
		if p.Leader != "" {
			out[p.Partition] = p.Leader
		}
	}
	return out, nil
}

func busiestLeader(agents []*testcluster.Agent, leaders map[int]string) (*testcluster.Agent, []int) {
	byNode := map[string][]int{}
	for p, node := range leaders {
		byNode[node] = append(byNode[node], p)
	}
	best := agents[0]
	for _, a := range agents {
		if len(byNode[a.NodeID]) > len(byNode[best.NodeID]) {
			best = a
		}
	}
	led := byNode[best.NodeID]
	sort.Ints(led)
	return best, led
}

// failoverProbe writes acks=all records to partitions through one agent,
// each partition on a connection of its own, as that many producers already
// connected would.
type failoverProbe struct {
	tr   *http.Transport
	hc   *http.Client
	urls []string
}

// newFailoverProbe opens the probe's connections with one acknowledged
// write to each partition, all at once and as run writes them after the
// kill: before the kill every partition must take writes, and after it no
// try waits for a connection. It returns how long the last partition took
// with every agent alive, the probe's own time (each write a partition's
// first in a while, fsynced on its three replicas): what the failover's
// figure is to be read against.
func newFailoverProbe(ctx context.Context, a *testcluster.Agent, partitions []int) (*failoverProbe, time.Duration, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: len(partitions), DisableCompression: true, IdleConnTimeout: 10 * time.Minute}
	fp := &failoverProbe{tr: tr, hc: &http.Client{Transport: tr, Timeout: probeTimeout + 5*time.Second}}
	for _, p := range partitions {
		fp.urls = append(fp.urls, fmt.Sprintf("http://%s/v1/topics/%s/records?partition=%d&acks=all&timeout=%s", a.ClientAddr, costTopic, p, probeTimeout))
	}
	times, never := fp.run(ctx, time.Now(), 2*time.Minute)
	if never > 0 {
		fp.close()
		return nil, 0, fmt.Errorf("failover probe: %d of %d partitions took no write in 2m0s before the kill", never, len(partitions))
	}
	return fp, slices.Max(times), nil
}

// run writes to every partition at once, again probeRetry after each
// refusal, until each succeeds or limit passes, and returns each success's
// time since since (the kill, or the probe's start), and how many
// partitions never succeeded. A try the agent cannot place yet waits there
// up to probeTimeout for the metadata to move.
func (fp *failoverProbe) run(ctx context.Context, since time.Time, limit time.Duration) ([]time.Duration, int) {
	var (
		mu    sync.Mutex
		times []time.Duration
		wg    sync.WaitGroup
	)
	deadline := since.Add(limit)
	for _, u := range fp.urls {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if fp.write(ctx, u) {
					mu.Lock()
					times = append(times, time.Since(since))
					mu.Unlock()
					return
				}
				sleepCtx(ctx, probeRetry)
			}
		})
	}
	wg.Wait()
	return times, len(fp.urls) - len(times)
}

func (fp *failoverProbe) close() { fp.tr.CloseIdleConnections() }

// write sends one probe record and reports whether it was acknowledged.
func (fp *failoverProbe) write(ctx context.Context, u string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader("{\"probe\":1}\n"))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", testcluster.ContentTypeNDJSON)
	resp, err := fp.hc.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

// deciles renders the 10th to 90th percentiles of sorted times.
func deciles(sorted []time.Duration) string {
	if len(sorted) == 0 {
		return "-"
	}
	parts := make([]string, 0, 9)
	for d := 1; d <= 9; d++ {
		parts = append(parts, sorted[d*len(sorted)/10].Round(10*time.Millisecond).String())
	}
	return strings.Join(parts, " ")
}

// agentSample is one agent's counters at one moment.
type agentSample struct {
	at       time.Time
	cpuTicks int64
	rss      int64
	fds      int
	// scrapeTicks is the CPU of the sample's own GET /metrics, in a
	// window's last sample.
	scrapeTicks int64
	fetches     float64
	wakes       float64
	consul      float64
	isrChanges  float64
}

// sampleAgents samples every agent. The window's first sample scrapes
// /metrics before it reads /proc and the last after, so the CPU of its own
// scrapes stays out of an idle window; the last records what its scrape
// cost (scrapeTicks).
func sampleAgents(agents []*testcluster.Agent, last bool) ([]agentSample, error) {
	out := make([]agentSample, len(agents))
	for i, a := range agents {
		s, err := sampleAgent(a, last)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.NodeID, err)
		}
		out[i] = s
	}
	return out, nil
}

func sampleAgent(a *testcluster.Agent, last bool) (agentSample, error) {
	var s agentSample
	var err error
	pid := a.PID()
	if !last {
		if err := scrapeCounters(a, &s); err != nil {
			return s, err
		}
	}
	s.at = time.Now()
	if s.cpuTicks, err = cpuTicksOfPID(pid); err != nil {
		return s, err
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	if s.rss, err = rssOf(string(status)); err != nil {
		return s, err
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return s, err
	}
	s.fds = len(fds)
	if last {
		if err := scrapeCounters(a, &s); err != nil {
			return s, err
		}
		after, err := cpuTicksOfPID(pid)
		if err != nil {
			return s, err
		}
		s.scrapeTicks = after - s.cpuTicks
	}
	return s, nil
}

// scrapeCounters reads the agent's counters from GET /metrics into s.
func scrapeCounters(a *testcluster.Agent, s *agentSample) error {
	code, body, err := a.Get("/metrics", "text/plain")
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("GET /metrics: %d", code)
	}
	s.fetches, _ = metricValue(body, "logagent_replica_fetch_requests_total")
	s.wakes, _ = metricValue(body, "logagent_replica_loop_wakes_total")
	s.consul, _ = metricValue(body, "logagent_consul_requests_total")
	s.isrChanges, _ = metricValue(body, "logagent_isr_changes_total")
	return nil
}

func cpuTicksOfPID(pid int) (int64, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return cpuTicksOf(string(stat))
}

// cpuTicksOf is utime+stime of a /proc/<pid>/stat line. The command name
// (field 2) may hold spaces and parentheses, so fields count from the last
// ')'.
func cpuTicksOf(stat string) (int64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("benchrun cost: malformed /proc stat")
	}
	f := strings.Fields(stat[i+1:])
	// After ')': state is field 3, utime 14 and stime 15.
	if len(f) < 13 {
		return 0, errors.New("benchrun cost: short /proc stat")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("benchrun cost: /proc stat: %w", err)
	}
	return utime + stime, nil
}

// rssOf is VmRSS of a /proc/<pid>/status, in bytes.
func rssOf(status string) (int64, error) {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("benchrun cost: VmRSS %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("benchrun cost: no VmRSS")
}

// metricValue is the value of an unlabelled series in a Prometheus text
// exposition.
func metricValue(text []byte, name string) (float64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// loadAverage is the 1-minute load average, 0 when unreadable.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var v float64
	if _, err := fmt.Sscanf(string(b), "%f", &v); err != nil {
		return 0
	}
	return v
}

func countInFile(path, needle string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte(needle))
}

func (o *costOptions) measureProduce(ctx context.Context) []produceCost {
	fmt.Fprintf(o.log, "cost: produce rows %v: starting the cluster\n", o.producePartitions)
	m, err := o.startCostCluster("produce")
	if err != nil {
		return []produceCost{{Err: err.Error()}}
	}
	defer func() {
		if err := m.Stop(); err != nil {
			fmt.Fprintf(o.log, "cost: produce cluster stop: %v\n", err)
		}
	}()
	addr := "http://" + m.Cluster.Agents[0].ClientAddr
	var rows []produceCost
	for _, n := range o.producePartitions {
		if ctx.Err() != nil {
			break
		}
		topic := fmt.Sprintf("produce_%d", n)
		args := []string{"produce", "-addr", addr, "-topic", topic, "-acks", "all", "-size", "100",
			"-batch", fmt.Sprint(batchRecords), "-concurrency", fmt.Sprint(workers), "-duration", o.produceDuration.String()}
		row := produceCost{Partitions: n, Command: strings.Replace(commandLine(args...), addr, "ADDR", 1)}
		// Created and settled first, as the idle points are: leaderships
		// that move back to their preferred replicas during the row would
		// be what it measures.
		first := m.Cluster.Agents[0]
		if err := first.CreateTopic(testcluster.TopicSpec{Name: topic, Partitions: n, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
			row.Err = "create: " + err.Error()
			rows = append(rows, row)
			continue
		}
		if err := waitAllLed(ctx, first, topic, n, o.leadTimeout); err != nil {
			row.Err = err.Error()
			rows = append(rows, row)
			continue
		}
		if !sleepCtx(ctx, o.settle) {
			break
		}
		var rep logagentReport
		if _, err := runLogagentBench(ctx, filepath.Join(o.bin, "logagent"), o.produceDuration+5*time.Minute, &rep, args...); err != nil {
			row.Err = err.Error()
		}
		row.RecordsPerSec = rep.RecordsPerSecond
		row.P99 = micros(rep.Latency.P99)
		fmt.Fprintf(o.log, "cost: produce %d partitions: %.0f records/s, p99 %s %s\n", n, row.RecordsPerSec, row.P99, row.Err)
		rows = append(rows, row)
	}
	return rows
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
