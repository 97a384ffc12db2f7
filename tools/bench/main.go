package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/logagent/logagent/client"
	labench "github.com/logagent/logagent/internal/bench"
)

// Matched load shape of every row (see the package documentation).
const (
	workers      = 4
	batchRecords = 100
	maxPending   = workers * batchRecords
	partitions   = 3
)

var groupKeys = []string{"produce-r1", "produce-r3", "produce-r3-fsync", "consume", "e2e", "limits", "idempotence", "groups", "tls", "kafka"}

type options struct {
	duration time.Duration
	// warmup is how long each produce and e2e workload runs, untimed,
	// before its measured run, on both systems.
	warmup time.Duration
	groups map[string]bool
	out    string
	bin    string
	work   string
	// portOffset is passed to logagent dev.
	portOffset int
	log        io.Writer
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "cost" {
		return runCost(args[1:], stdout)
	}
	fs := flag.NewFlagSet("benchrun", flag.ContinueOnError)
	duration := fs.Duration("duration", 10*time.Second, "how long each row runs")
	warmup := fs.Duration("warmup", 2*time.Second, "how long each produce and e2e workload runs, unmeasured, before its measured run (both systems)")
	quick := fs.Bool("quick", false, "1s rows without warm-up, for smoke tests (overrides -duration and -warmup)")
	only := fs.String("only", "", "comma-separated groups to run: "+strings.Join(groupKeys, ", ")+" (default all)")
	out := fs.String("out", "docs", "directory holding benchmarks.md (rewritten between its bench markers) and benchmarks.png")
	bin := fs.String("bin", "bin", "directory holding logagent, consul and nats-server")
	timeout := fs.Duration("timeout", 0, "cap on the whole run (default 40 rows' worth of -duration plus 10 min)")
	ports := fs.Int("port-offset", 3000, "the logagent dev clusters' -port-offset (nats-server takes free ports)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *quick {
		*duration, *warmup = time.Second, 0
	}
	if *timeout == 0 {
		*timeout = 40**duration + 10*time.Minute
	}
	groups, err := parseGroups(*only)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "benchrun-")
	if err != nil {
		return fmt.Errorf("benchrun: %w", err)
	}
	defer os.RemoveAll(work)
	absBin, err := filepath.Abs(*bin)
	if err != nil {
		return fmt.Errorf("benchrun: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	o := options{duration: *duration, warmup: *warmup, groups: groups, out: *out, bin: absBin, work: work, portOffset: *ports, log: stdout}
	rows, notes := o.runAll(ctx)
	if err := ctx.Err(); err != nil {
		// A cut-short run must not replace published figures.
		return fmt.Errorf("benchrun: run stopped before the end, %s left as it was: %w", *out, err)
	}
	in := reportInput{Date: time.Now(), Machine: machineFacts(), Duration: *duration, Warmup: *warmup, Rows: rows, Notes: notes}
	if err := writeOutputs(*out, in); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and %s\n", filepath.Join(*out, "benchmarks.md"), filepath.Join(*out, "benchmarks.png"))
	return nil
}

func parseGroups(only string) (map[string]bool, error) {
	groups := map[string]bool{}
	if only == "" {
		for _, g := range groupKeys {
			groups[g] = true
		}
		return groups, nil
	}
	for _, g := range strings.Split(only, ",") {
		g = strings.TrimSpace(g)
		if !slices.Contains(groupKeys, g) {
			return nil, fmt.Errorf("benchrun: -only: unknown group %q (want %s)", g, strings.Join(groupKeys, ", "))
		}
		groups[g] = true
	}
	return groups, nil
}

// writeOutputs rewrites the bench region of dir/benchmarks.md and draws
// dir/benchmarks.png.
func writeOutputs(dir string, in reportInput) error {
	mdPath := filepath.Join(dir, "benchmarks.md")
	doc, err := os.ReadFile(mdPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("benchrun: %w", err)
	}
	updated, err := replaceRegion(string(doc), renderRegion(in))
	if err != nil {
		return fmt.Errorf("benchrun: %s: %w", mdPath, err)
	}
	var chart bytes.Buffer
	if err := drawChart(&chart, in.Rows); err != nil {
		return fmt.Errorf("benchrun: chart: %w", err)
	}
	if err := os.WriteFile(mdPath, []byte(updated), 0o644); err != nil {
		return fmt.Errorf("benchrun: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "benchmarks.png"), chart.Bytes(), 0o644); err != nil {
		return fmt.Errorf("benchrun: %w", err)
	}
	return nil
}

// produceRow is one produce comparison.
type produceRow struct {
	group, name string
	rf          int
	acks        string
	size        int
	jsReplicas  int
	goal        float64
}

func (r produceRow) topic() string {
	return strings.NewReplacer("-", "_").Replace(fmt.Sprintf("%s_%d", r.group, r.size))
}

var produceRows = []produceRow{
	{"produce-r1", "RF 1 acks=1, 100 B", 1, "1", 100, 1, 0},
	{"produce-r1", "RF 1 acks=1, 1 KiB", 1, "1", 1024, 1, 0},
	{"produce-r3", "RF 3 acks=all replicated, 100 B", 3, "all", 100, 3, 1.5},
	{"produce-r3", "RF 3 acks=all replicated, 1 KiB", 3, "all", 1024, 3, 1.5},
	{"produce-r3-fsync", "RF 3 acks=all fsync, 100 B", 3, "all", 100, 3, 2},
	{"produce-r3-fsync", "RF 3 acks=all fsync, 1 KiB", 3, "all", 1024, 3, 2},
}

// results collects every measured side by key while the systems run one
// after another; rows are assembled at the end.
type results struct {
	logagent, jetstream map[string]sample
	limits              map[string]sample
	notes               []string
}

func (o *options) progress(format string, args ...any) {
	fmt.Fprintf(o.log, "[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (o *options) note(res *results, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	o.progress("NOTE %s", msg)
	res.notes = append(res.notes, msg)
}

// runAll runs the selected groups, one system at a time, and assembles the
// rows. A failure of one system or row is a note, and the run goes on.
func (o *options) runAll(ctx context.Context) ([]comparison, []string) {
	res := &results{logagent: map[string]sample{}, jetstream: map[string]sample{}, limits: map[string]sample{}}
	g := o.groups
	// e2e runs at half of each system's RF 3 maximum, and consume reads
	// what the RF 3 rows wrote, so both need those rows.
	needR3 := g["produce-r3"] || g["consume"] || g["e2e"]
	if g["limits"] || g["consume"] {
		o.runLimits(ctx, res)
	}
	if g["produce-r1"] {
		o.runNATS(ctx, res, "R1", 1, false, func(nc natsRun) {
			o.natsProduce(ctx, res, nc, "produce-r1", false)
		})
	}
	if needR3 {
		o.runNATS(ctx, res, "R3", 3, false, func(nc natsRun) {
			o.natsProduce(ctx, res, nc, "produce-r3", g["consume"])
		})
	}
	// The tls and kafka rows set their figures against produce-r3's and
	// consume's logagent side of the same run.
	httpBaseline := g["tls"] || g["kafka"]
	if g["produce-r1"] || needR3 || httpBaseline {
		o.runLogagent(ctx, res, "replicated", func(c *logagentCluster) {
			if g["produce-r1"] {
				o.logagentProduce(ctx, res, c, "produce-r1")
			}
			if needR3 || httpBaseline {
				o.logagentProduce(ctx, res, c, "produce-r3")
			}
			if g["consume"] || httpBaseline {
				o.logagentConsume(ctx, res, c)
			}
			if g["kafka"] {
				o.logagentKafka(ctx, res, c)
			}
			if g["e2e"] {
				o.logagentEndToEnd(ctx, res, c)
			}
		})
	}
	if g["e2e"] {
		o.runNATS(ctx, res, "R3", 3, false, func(nc natsRun) { o.natsEndToEnd(ctx, res, nc) })
	}
	if g["produce-r3-fsync"] || g["limits"] {
		o.runLogagent(ctx, res, "fsync", func(c *logagentCluster) { o.logagentProduce(ctx, res, c, "produce-r3-fsync") })
	}
	if g["produce-r3-fsync"] {
		o.runNATS(ctx, res, "R3 sync always", 3, true, func(nc natsRun) {
			o.natsProduce(ctx, res, nc, "produce-r3-fsync", false)
		})
	}
	if g["idempotence"] {
		// Without the sidecar's own producer ids, a plain request is not
		// idempotent anywhere: the baseline pays for no idempotence at all.
		o.runLogagentWith(ctx, res, "replicated", "producer {\n  sidecar_idempotence = false\n}\n", func(c *logagentCluster) {
			o.logagentIdempotence(ctx, res, c)
		})
	}
	if g["groups"] {
		o.runLogagent(ctx, res, "fsync", func(c *logagentCluster) { o.logagentGroups(ctx, res, c) })
	}
	if g["tls"] {
		o.runLogagentTLS(ctx, res)
	}
	return assemble(o, res), res.notes
}

// assemble turns the measured sides into the report's rows.
func assemble(o *options, res *results) []comparison {
	var rows []comparison
	for _, r := range produceRows {
		if !o.groups[r.group] {
			continue
		}
		rows = append(rows, comparison{Group: r.group, Name: r.name, TheirsName: fmt.Sprintf("JetStream R%d", r.jsReplicas),
			Ours: res.logagent[r.topic()], Theirs: res.jetstream[r.topic()], Metric: byRecords, Goal: r.goal})
	}
	if o.groups["consume"] {
		rows = append(rows,
			comparison{Group: "consume", Name: "replay 1 KiB, RF 3 / R3", TheirsName: "JetStream R3 ordered consumer",
				Ours: res.logagent["consume"], Theirs: res.jetstream["consume"], Metric: byMB, Goal: 5},
			comparison{Group: "consume", Name: "replay 1 KiB vs loopback TCP", TheirsName: "loopback TCP 1 MiB writes",
				Ours: res.logagent["consume"], Theirs: res.limits["loopback"], Metric: byMB, Goal: 0.5},
			comparison{Group: "consume", Name: "replay 1 KiB in 4 MiB fetches vs loopback TCP", TheirsName: "loopback TCP 1 MiB writes",
				Ours: res.logagent["consume_prefetch"], Theirs: res.limits["loopback"], Metric: byMB})
	}
	if o.groups["e2e"] {
		rows = append(rows,
			comparison{Group: "e2e", Name: "1 KiB RF 3 / R3 at half JetStream's max", TheirsName: "JetStream R3",
				Ours: res.logagent["e2e-js-rate"], Theirs: res.jetstream["e2e"], Metric: byP99, Goal: 1},
			comparison{Group: "e2e", Name: "1 KiB RF 3 at half logagent's max",
				Ours: res.logagent["e2e-own-rate"], Metric: byP99})
	}
	if o.groups["idempotence"] {
		for _, size := range []int{100, 1024} {
			r := idempotenceRow(size)
			rows = append(rows, comparison{Group: "idempotence", Name: fmt.Sprintf("RF 3 acks=all idempotent, %s", sizeName(size)),
				TheirsName: "the same, not idempotent", Ours: res.logagent[r.topic()+"_idempotent"],
				Theirs: res.logagent[r.topic()+"_plain"], Metric: byRecords, Goal: 0.95})
		}
	}
	if o.groups["groups"] {
		rows = append(rows, groupRows(res)...)
	}
	if o.groups["tls"] {
		rows = append(rows, tlsRows(res)...)
	}
	if o.groups["kafka"] {
		rows = append(rows, kafkaRows(res)...)
	}
	if o.groups["limits"] {
		for _, size := range []int{100, 1024} {
			rows = append(rows, comparison{Group: "limits", Name: fmt.Sprintf("RF 3 fsync, %d B records", size),
				TheirsName: "file write + fsync", Ours: res.logagent[produceRowFor("produce-r3-fsync", size).topic()],
				Theirs: res.limits[fmt.Sprintf("fsync-%d", size)], Metric: byMB})
		}
	}
	return rows
}

func produceRowFor(group string, size int) produceRow {
	for _, r := range produceRows {
		if r.group == group && r.size == size {
			return r
		}
	}
	panic("benchrun: no produce row " + group)
}

// runLimits measures loopback TCP and raw file writes with logagent's own
// baseline tool, with one write per logagent batch.
func (o *options) runLimits(ctx context.Context, res *results) {
	args := []string{"limits", "-duration", o.duration.String(), "-size", "100,1024", "-batch", fmt.Sprint(batchRecords), "-dir", o.work}
	o.progress("limits: %s", commandLine(args...))
	var reports []limitReport
	if _, err := runLogagentBench(ctx, filepath.Join(o.bin, "logagent"), 10*o.duration+time.Minute, &reports, args...); err != nil {
		o.note(res, "limits failed: %v", err)
		return
	}
	cmd := commandLine(args...)
	for _, r := range reports {
		s := sample{MBPerSec: r.MBPerSecond, P50: micros(r.Latency.P50), P99: micros(r.Latency.P99), Command: cmd}
		switch {
		case r.Name == "loopback TCP":
			res.limits["loopback"] = s
		case r.Name == "file write + fsync":
			// The batch of 100-byte records is the smaller write.
			key := "fsync-1024"
			if small, _ := labench.BatchBytes(100, batchRecords); r.WriteBytes == small {
				key = "fsync-100"
			}
			res.limits[key] = s
		}
		o.progress("  %s %d B: %.1f MB/s", r.Name, r.WriteBytes, r.MBPerSecond)
	}
}

func micros(us float64) time.Duration { return time.Duration(us * float64(time.Microsecond)) }

// runLogagent runs body against a fresh dev cluster with the given
// durability and stops the cluster afterwards.
func (o *options) runLogagent(ctx context.Context, res *results, durability string, body func(*logagentCluster)) {
	o.runLogagentWith(ctx, res, durability, "", body)
}

// runLogagentWith is runLogagent with extra settings for the agents.
func (o *options) runLogagentWith(ctx context.Context, res *results, durability, extraHCL string, body func(*logagentCluster)) {
	dir, err := os.MkdirTemp(o.work, "logagent-"+durability+"-")
	if err != nil {
		o.note(res, "logagent %s: %v", durability, err)
		return
	}
	defer os.RemoveAll(dir)
	o.progress("starting logagent dev cluster (durability %s) in %s", durability, dir)
	c, err := startLogagent(ctx, filepath.Join(o.bin, "logagent"), dir, o.portOffset, durability, extraHCL)
	if err != nil {
		o.note(res, "logagent %s cluster did not start: %v", durability, err)
		return
	}
	body(c)
	o.progress("stopping logagent dev cluster")
	if err := c.stop(); err != nil {
		o.note(res, "%v", err)
	}
}

func (o *options) produceArgs(c *logagentCluster, r produceRow) []string {
	minISR := min(r.rf, 2)
	args := append([]string{"produce", "-addr", c.clientAddr}, c.clientFlags...)
	return append(args, "-topic", r.topic(), "-create", "-partitions", fmt.Sprint(partitions),
		"-replication-factor", fmt.Sprint(r.rf), "-min-insync-replicas", fmt.Sprint(minISR), "-acks", r.acks,
		"-size", fmt.Sprint(r.size), "-batch", fmt.Sprint(batchRecords), "-concurrency", fmt.Sprint(workers),
		"-duration", o.duration.String())
}

// idempotenceRow is the workload of the idempotence group: RF 3 acks=all,
// as produce-r3's rows.
func idempotenceRow(size int) produceRow {
	return produceRow{group: "idempotence", rf: 3, acks: "all", size: size}
}

func sizeName(size int) string {
	if size == 1024 {
		return "1 KiB"
	}
	return fmt.Sprintf("%d B", size)
}

// logagentIdempotence measures the same workload with plain and with
// idempotent producers on one cluster, each on its own topic, in the order
// of idempotenceOrder, and shows each side's mean. A single pair's ratio is
// at the mercy of this host's drift: within one make bench the last of
// five 1 KiB runs went 164,281 records/s where the four before went
// 100,800-104,570, which the mean of two runs per side turned into 0.75x,
// and the runs of one size speed up by about a quarter from first to last
// (a ramp that the median of three alternating pairs, P I, I P, P I, read
// in the idempotent side's favour: two of its three pairs ran it second).
// A first run of each size is not counted: on a fresh cluster the first
// seconds of 1 KiB writes went up to 40 % faster than every later run,
// whichever side ran them.
//
// Each run's topic is deleted after it, and the next run waits until its
// files are gone: the group's own writes (about 3 GB a 1 KiB run on the
// three replicas) otherwise filled the memory with page cache by the fifth
// 1 KiB run, where this host's writes step up by a third (pages reclaimed
// from the cache cost less than pages the hypervisor must hand back).
func (o *options) logagentIdempotence(ctx context.Context, res *results, c *logagentCluster) {
	for _, size := range []int{100, 1024} {
		r := idempotenceRow(size)
		run := func(idempotent bool, topic string) sample {
			args := o.produceArgs(c, r)
			args[slices.Index(args, "-topic")+1] = topic
			args = append(args[:len(args):len(args)], "-idempotent="+strconv.FormatBool(idempotent))
			o.progress("logagent RF 3 acks=all %s, idempotent %t", sizeName(size), idempotent)
			o.settle()
			o.logagentWarmup(ctx, res, c, args)
			s := o.logagentSample(ctx, res, c, args)
			if err := c.dropTopic(ctx, topic, 2*time.Minute); err != nil {
				o.note(res, "%v", err)
				s.Note = strings.TrimSpace(s.Note + " " + err.Error())
			}
			return s
		}
		run(false, r.topic()+"_discarded")
		var plain, idempotent []sample
		for _, idem := range idempotenceOrder {
			if idem {
				idempotent = append(idempotent, run(true, r.topic()+"_idempotent"))
			} else {
				plain = append(plain, run(false, r.topic()+"_plain"))
			}
		}
		res.logagent[r.topic()+"_plain"], res.logagent[r.topic()+"_idempotent"] = meanSides(plain, idempotent)
	}
}

// idempotenceOrder is the order of the idempotence rows' measured runs of
// one record size, true for an idempotent run: the first eight terms of
// the Thue-Morse sequence, P I I P I P P I. Each side's runs sit at the
// same mean position (3.5) and the same mean squared position (17.5), so
// a drift of the host that is linear or quadratic in time adds as much to
// one side's mean as to the other's.
var idempotenceOrder = []bool{false, true, true, false, true, false, false, true}

// meanSides returns the mean of each side's runs (records/s, MB/s, p50,
// p99; a failed run counts as the zeros it measured). The idempotent
// side's note gives every run's records/s in the order each side ran them
// and keeps what any run's note said; the commands are the first run's.
func meanSides(plain, idempotent []sample) (plainMean, idempotentMean sample) {
	plainMean, idempotentMean = meanSample(plain), meanSample(idempotent)
	var notes []string
	for _, side := range []struct {
		name string
		runs []sample
	}{{"plain", plain}, {"idempotent", idempotent}} {
		for i, s := range side.runs {
			if s.Note != "" {
				notes = append(notes, fmt.Sprintf("%s run %d: %s", side.name, i+1, s.Note))
			}
		}
	}
	notes = append(notes, fmt.Sprintf("the mean of %d runs per side, run in the order P I I P I P P I (plain, idempotent), a drift of the host linear or quadratic in time weighing on both sides alike; records/s of the plain runs %s, of the idempotent runs %s",
		len(plain), recordsPerSecList(plain), recordsPerSecList(idempotent)))
	plainMean.Note, idempotentMean.Note = "", strings.Join(notes, "; ")
	return plainMean, idempotentMean
}

// meanSample is the mean of runs' figures, with the first run's command
// and setup.
func meanSample(runs []sample) sample {
	if len(runs) == 0 {
		return sample{}
	}
	m := sample{Command: runs[0].Command, Setup: runs[0].Setup}
	var p50, p99 time.Duration
	for _, s := range runs {
		m.RecordsPerSec += s.RecordsPerSec
		m.MBPerSec += s.MBPerSec
		p50 += s.P50
		p99 += s.P99
	}
	n := len(runs)
	m.RecordsPerSec /= float64(n)
	m.MBPerSec /= float64(n)
	m.P50, m.P99 = p50/time.Duration(n), p99/time.Duration(n)
	return m
}

func recordsPerSecList(runs []sample) string {
	figures := make([]string, len(runs))
	for i, s := range runs {
		figures[i] = strconv.FormatFloat(s.RecordsPerSec, 'f', 0, 64)
	}
	return strings.Join(figures, ", ")
}

func (o *options) logagentProduce(ctx context.Context, res *results, c *logagentCluster, group string) {
	for _, r := range produceRows {
		if r.group != group {
			continue
		}
		args := o.produceArgs(c, r)
		o.progress("logagent %s", r.name)
		o.settle()
		o.logagentWarmup(ctx, res, c, args)
		res.logagent[r.topic()] = o.logagentSample(ctx, res, c, args)
	}
}

// settleDelay is how long settle waits after sync(2).
const settleDelay = time.Second

// settle writes out every dirty page (sync(2)) and pauses, before each
// row and its warm-up, so that a row does not pay for the one before it:
// writeback of its data, or the discards of a deleted stream or topic
// (on the build machine's ext4 with online discard, removing 3 GB took
// 0.8 s and held a writer's pwrite up to 0.12 s).
func (o *options) settle() {
	syscall.Sync()
	time.Sleep(settleDelay)
}

// logagentWarmup runs a produce workload's command (e2e: its producers
// alone) for o.warmup and forgets its figures: the measured run then finds
// the topic's replicas in sync, connections open and segments created, as
// JetStream's finds its streams after natsWarmup.
func (o *options) logagentWarmup(ctx context.Context, res *results, c *logagentCluster, args []string) {
	if o.warmup <= 0 {
		return
	}
	warm := slices.Clone(args)
	warm[0] = "produce"
	for i := range warm[:len(warm)-1] {
		if warm[i] == "-duration" {
			warm[i+1] = o.warmup.String()
		}
	}
	var rep logagentReport
	if _, err := runLogagentBench(ctx, c.bin, o.warmup+2*time.Minute, &rep, warm...); err != nil {
		o.note(res, "warm-up: %v", err)
	}
}

// logagentSample runs one logagent bench command and keeps its figures.
func (o *options) logagentSample(ctx context.Context, res *results, c *logagentCluster, args []string) sample {
	s := sample{Command: commandLine(args...), Setup: c.setup}
	if c.hidePrefix != "" {
		s.Command = strings.ReplaceAll(s.Command, c.hidePrefix, "")
	}
	var rep logagentReport
	reported, err := runLogagentBench(ctx, c.bin, o.duration+2*time.Minute, &rep, args...)
	if err != nil {
		s.Note = err.Error()
		o.note(res, "%v", err)
	}
	if !reported {
		return s
	}
	s.RecordsPerSec, s.MBPerSec = rep.RecordsPerSecond, rep.MBPerSecond
	lat := rep.Latency
	if rep.EndToEnd != nil {
		lat = *rep.EndToEnd
	}
	s.P50, s.P99 = micros(lat.P50), micros(lat.P99)
	if rep.ErrorCount > 0 && s.Note == "" {
		s.Note = fmt.Sprintf("%d failed requests %v", rep.ErrorCount, rep.Errors)
	}
	if rep.NotConsumed != nil && *rep.NotConsumed > 0 {
		s.Note = strings.TrimSpace(s.Note + fmt.Sprintf(" %d records not consumed", *rep.NotConsumed))
	}
	o.progress("  %.0f records/s, %.1f MB/s, p50 %v, p99 %v", s.RecordsPerSec, s.MBPerSec, s.P50, s.P99)
	return s
}

func (o *options) logagentConsume(ctx context.Context, res *results, c *logagentCluster) {
	o.progress("logagent consume %s", produceRowFor("produce-r3", 1024).topic())
	o.settle()
	res.logagent["consume"] = o.logagentSample(ctx, res, c, o.consumeArgs(c))
	o.progress("logagent consume %s in %d-byte fetches", produceRowFor("produce-r3", 1024).topic(), replayPrefetchBytes)
	o.settle()
	res.logagent["consume_prefetch"] = o.logagentSample(ctx, res, c, o.consumeArgsWith(c, replayPrefetchBytes))
}

// consumeArgs replay what the 1 KiB RF 3 produce row wrote.
func (o *options) consumeArgs(c *logagentCluster) []string {
	return o.consumeArgsWith(c, consumeFetchBytes)
}

// consumeArgsWith replay it in fetches of at most maxBytes.
func (o *options) consumeArgsWith(c *logagentCluster, maxBytes int) []string {
	args := append([]string{"consume", "-addr", c.clientAddr}, c.clientFlags...)
	return append(args, "-topic", produceRowFor("produce-r3", 1024).topic(), "-max-bytes", fmt.Sprint(maxBytes), "-repeat", "-duration", o.duration.String())
}

// consumeFetchBytes is the max_bytes of logagent's replay fetches: the
// client's default, what a consumer that sets nothing asks for.
const consumeFetchBytes = client.DefaultFetchMaxBytes

// replayPrefetchBytes is what JetStream's replay keeps requested ahead
// (replayPrefetch 1 KiB messages): logagent's replay in fetches of that
// size is shown beside the goal rows. It is slower than in fetches of the
// default size on a 2-core host: three workers' buffers of this size do not
// stay in the cores' caches, so the kernel's copy into them costs about 1.5
// times as much per byte (docs/benchmarks.md, "Fetch: replay of 1 KiB
// records").
const replayPrefetchBytes = replayPrefetch * 1024

// e2eRates are the rates of the e2e rows: half of each system's measured
// RF 3 1 KiB maximum.
func e2eRates(res *results) (jsHalf, ownHalf float64) {
	key := produceRowFor("produce-r3", 1024).topic()
	return res.jetstream[key].RecordsPerSec / 2, res.logagent[key].RecordsPerSec / 2
}

func (o *options) e2eArgs(c *logagentCluster, topic string, rate float64) []string {
	return []string{"e2e", "-addr", c.clientAddr, "-topic", topic, "-create", "-partitions", fmt.Sprint(partitions),
		"-replication-factor", "3", "-min-insync-replicas", "2", "-acks", "all", "-size", "1024",
		"-batch", fmt.Sprint(batchRecords), "-concurrency", fmt.Sprint(2 * workers),
		"-rate", fmt.Sprintf("%.0f", rate), "-duration", o.duration.String()}
}

func (o *options) logagentEndToEnd(ctx context.Context, res *results, c *logagentCluster) {
	jsHalf, ownHalf := e2eRates(res)
	for _, run := range []struct {
		key  string
		rate float64
	}{{"e2e-js-rate", jsHalf}, {"e2e-own-rate", ownHalf}} {
		if run.rate < 1 {
			o.note(res, "logagent %s: no maximum rate was measured, so no e2e run", run.key)
			continue
		}
		o.progress("logagent %s at %.0f records/s", run.key, run.rate)
		args := o.e2eArgs(c, strings.ReplaceAll(run.key, "-", "_"), run.rate)
		o.settle()
		o.logagentWarmup(ctx, res, c, args)
		res.logagent[run.key] = o.logagentSample(ctx, res, c, args)
	}
}

// natsRun is a running nats-server set handed to a body.
type natsRun struct {
	cluster *natsCluster
	label   string
}

func (o *options) runNATS(ctx context.Context, res *results, label string, size int, syncAlways bool, body func(natsRun)) {
	dir, err := os.MkdirTemp(o.work, "nats-")
	if err != nil {
		o.note(res, "nats %s: %v", label, err)
		return
	}
	defer os.RemoveAll(dir)
	o.progress("starting nats-server %s (%d process(es)) in %s", label, size, dir)
	c, err := startNATS(ctx, filepath.Join(o.bin, "nats-server"), dir, size, syncAlways)
	if err != nil {
		o.note(res, "nats %s did not start: %v", label, err)
		return
	}
	body(natsRun{cluster: c, label: label})
	o.progress("stopping nats-server %s", label)
	if err := c.stop(); err != nil {
		o.note(res, "%v", err)
	}
}

func (o *options) jsWorkload(name string, replicas, size int, rate float64) jsWorkload {
	return jsWorkload{Name: name, Streams: partitions, Replicas: replicas, RecordBytes: size, MaxPending: maxPending,
		Duration: o.duration, Rate: rate, Clock: labench.SystemClock{}}
}

// natsWarmup publishes w's load for o.warmup and forgets its figures (see
// logagentWarmup).
func (o *options) natsWarmup(ctx context.Context, res *results, nc natsRun, w jsWorkload) {
	if o.warmup <= 0 {
		return
	}
	w.Duration = o.warmup
	if _, err := jsPublish(ctx, nc.cluster.conn, w); err != nil {
		o.note(res, "JetStream warm-up: %v", err)
	}
}

// jsSample describes how a JetStream side ran: benchrun drives it
// in-process, so its command is benchrun's own.
func jsSample(out *jsOutcome, group, label string, w jsWorkload, what string) sample {
	s := out.sample()
	s.Command = fmt.Sprintf("bin/benchrun -only %s -duration %v", group, w.Duration)
	s.Setup = fmt.Sprintf("nats-server %s, %d file-storage streams with %d replica(s); nats.go %s, %d B payloads, at most %d pending acks",
		label, w.Streams, w.Replicas, what, w.RecordBytes, w.MaxPending)
	return s
}

// natsProduce runs the JetStream side of a produce group; with keep, the
// 1 KiB streams stay for the replay, which runs right after.
func (o *options) natsProduce(ctx context.Context, res *results, nc natsRun, group string, replay bool) {
	js, err := jetstream.New(nc.cluster.conn)
	if err != nil {
		o.note(res, "jetstream: %v", err)
		return
	}
	for _, r := range produceRows {
		if r.group != group {
			continue
		}
		w := o.jsWorkload(r.topic(), r.jsReplicas, r.size, 0)
		o.progress("JetStream %s: %s", nc.label, r.name)
		if err := createStreams(ctx, js, w); err != nil {
			o.note(res, "%v", err)
			continue
		}
		o.settle()
		o.natsWarmup(ctx, res, nc, w)
		out, err := jsPublish(ctx, nc.cluster.conn, w)
		if err != nil {
			o.note(res, "JetStream %s: %v", r.name, err)
		} else {
			s := jsSample(out, group, nc.label, w, "PublishAsync")
			res.jetstream[r.topic()] = s
			o.progress("  %.0f records/s, %.1f MB/s, p50 %v, p99 %v", s.RecordsPerSec, s.MBPerSec, s.P50, s.P99)
		}
		if replay && r.size == 1024 {
			o.progress("JetStream %s: ordered consumer replay", nc.label)
			o.settle()
			if out, err := jsReplay(ctx, nc.cluster.conn, w, o.duration); err != nil {
				o.note(res, "JetStream replay: %v", err)
			} else {
				s := jsSample(out, "consume", nc.label, w, fmt.Sprintf("ordered consumer replay of the produce row's streams, %d-message prefetch", replayPrefetch))
				s.P50, s.P99 = 0, 0
				res.jetstream["consume"] = s
				o.progress("  %.0f records/s, %.1f MB/s", s.RecordsPerSec, s.MBPerSec)
			}
		}
		if err := deleteStreams(ctx, js, w); err != nil {
			o.note(res, "%v", err)
		}
	}
}

func (o *options) natsEndToEnd(ctx context.Context, res *results, nc natsRun) {
	jsHalf, _ := e2eRates(res)
	if jsHalf < 1 {
		o.note(res, "JetStream e2e: no maximum rate was measured, so no e2e run")
		return
	}
	js, err := jetstream.New(nc.cluster.conn)
	if err != nil {
		o.note(res, "jetstream: %v", err)
		return
	}
	w := o.jsWorkload("e2e", 3, 1024, jsHalf)
	if err := createStreams(ctx, js, w); err != nil {
		o.note(res, "%v", err)
		return
	}
	sub, err := nats.Connect(nc.cluster.urls[0])
	if err != nil {
		o.note(res, "JetStream e2e: consumer connection: %v", err)
		return
	}
	defer sub.Close()
	o.progress("JetStream %s: e2e at %.0f records/s", nc.label, jsHalf)
	o.settle()
	o.natsWarmup(ctx, res, nc, w)
	out, err := jsEndToEnd(ctx, nc.cluster.conn, sub, w, 10*time.Second)
	if err != nil {
		o.note(res, "JetStream e2e: %v", err)
		return
	}
	s := jsSample(out, "e2e", nc.label, w, fmt.Sprintf("PublishAsync at %.0f msg/s, one ordered consumer per stream", jsHalf))
	res.jetstream["e2e"] = s
	o.progress("  end to end p50 %v, p99 %v; publish to ack p50 %v, p99 %v; %d not consumed",
		s.P50, s.P99, out.Latency.Quantile(0.5), out.Latency.Quantile(0.99), out.NotConsumed)
}

// machineFacts describes the machine for the report.
func machineFacts() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
				break
			}
		}
	}
	mem := "unknown memory"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf("%.1f GiB memory", float64(kb)/(1<<20))
		}
	}
	return fmt.Sprintf("%s, %d cores (nproc), %s, %s %s/%s", cpu, runtime.NumCPU(), mem, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
