package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/logagent/logagent/client"
	"github.com/logagent/logagent/internal/bench"
)

// The bench commands are the load generator (package bench): they parse
// flags, prepare the topic, run one workload and print its report. A run
// exits 1 when more than -max-error-ratio of its requests failed (default
// 0.1 %; 0 fails on any error), and an e2e run with acks other than 0 also
// when an acknowledged record was not read back.

var benchSubcommands = []subcommand[func(ctx context.Context, args []string, stdout, stderr io.Writer) error]{
	{"produce", "write batches at a rate (open loop) or as fast as N workers go: bench produce -topic T [-rate R]", benchProduce},
	{"consume", "read partitions from the earliest offset as fast as fetches go: bench consume -topic T", benchConsume},
	{"e2e", "produce at a rate and time each record until a consumer reads it: bench e2e -topic T -rate R", benchEndToEnd},
	{"limits", "measure loopback TCP and file write (+fsync) throughput as baselines", benchLimits},
	{"groups", "consumer groups: commits/s of one coordinator vs acks=all produce, and rebalance settle times", benchGroups},
}

// benchGroups is `bench groups`; internal/bench has its flags and report.
func benchGroups(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench groups", stderr)
	f := bench.NewGroupsFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := f.Config()
	if err != nil {
		return workloadError(err)
	}
	for _, a := range cfg.Addrs {
		c, err := client.New(a)
		if err != nil {
			return fmt.Errorf("%w: -addr: %v", errUsage, err)
		}
		if err := checkAgent(ctx, c, 0); err != nil {
			return err
		}
	}
	res, err := bench.Groups(ctx, cfg)
	if err != nil {
		return explain(workloadError(err), strings.Join(cfg.Addrs, ","), 0)
	}
	return f.Report(res, stdout)
}

func runBench(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signalContext()
	defer stop()
	return benchCommand(ctx, args, stdout, stderr)
}

func benchCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	run, err := findSubcommand("bench", benchSubcommands, args, stderr)
	if err != nil {
		return err
	}
	return run(ctx, args[1:], stdout, stderr)
}

// loadFlags are the flags of the workloads that produce.
type loadFlags struct {
	topic, acks                     *string
	create                          *bool
	partitions, replication, minISR *int
	concurrency, size, batch, keys  *int
	rate                            *float64
	duration, timeout               *time.Duration
	requests                        *int64
	seed                            *uint64
	report                          *reportFlags
	addr                            *agentFlags
	idempotent                      *bool
}

func newLoadFlags(fs *flag.FlagSet, defaultRate float64) *loadFlags {
	return &loadFlags{
		topic:       fs.String("topic", "", "the topic to write to (required)"),
		create:      fs.Bool("create", false, "create the topic if it does not exist, with -partitions, -replication-factor, -min-insync-replicas"),
		partitions:  fs.Int("partitions", 0, "with -create: partitions (default: the agents' topic_defaults)"),
		replication: fs.Int("replication-factor", 0, "with -create: replicas per partition (default: topic_defaults)"),
		minISR:      fs.Int("min-insync-replicas", 0, "with -create: in-sync replicas an acks=all write needs (default: topic_defaults)"),
		concurrency: fs.Int("concurrency", 4, "workers, each with at most one request in flight"),
		size:        fs.Int("size", 1024, "bytes of each record's value"),
		batch:       fs.Int("batch", 100, "records per request (one batch to one partition)"),
		acks:        fs.String("acks", "all", "all, 1 or 0"),
		idempotent:  fs.Bool("idempotent", true, "with -acks all: idempotent producers, as the client's default (false: plain requests)"),
		rate:        fs.Float64("rate", defaultRate, "target records/s, an open loop (0: closed loop, as fast as the workers go)"),
		duration:    fs.Duration("duration", 10*time.Second, "issue requests for this long"),
		requests:    fs.Int64("requests", 0, "stop after this many requests (0: no count bound)"),
		keys:        fs.Int("keys", 0, "distinct record keys (0: no keys, partitions in turn)"),
		seed:        fs.Uint64("seed", 1, "seed of the record values and key choice"),
		timeout:     fs.Duration("timeout", 0, "hard cap on the whole run, drain included (default -duration + 30s)"),
		report:      newReportFlags(fs),
		addr:        addrFlag(fs),
	}
}

func (f *loadFlags) produceConfig() (bench.ProduceConfig, error) {
	if *f.topic == "" {
		return bench.ProduceConfig{}, fmt.Errorf("%w: -topic is required", errUsage)
	}
	acks, err := client.ParseAcks(*f.acks)
	if err != nil {
		return bench.ProduceConfig{}, usageError(err)
	}
	if *f.partitions < 0 || *f.replication < 0 || *f.minISR < 0 {
		return bench.ProduceConfig{}, fmt.Errorf("%w: -partitions, -replication-factor and -min-insync-replicas must not be negative", errUsage)
	}
	return bench.ProduceConfig{
		Topic:            *f.topic,
		Concurrency:      *f.concurrency,
		RecordBytes:      *f.size,
		BatchRecords:     *f.batch,
		Acks:             acks,
		Idempotent:       *f.idempotent && acks == client.AcksAll,
		Keys:             *f.keys,
		RecordsPerSecond: *f.rate,
		Duration:         *f.duration,
		Requests:         *f.requests,
		HardCap:          *f.timeout,
		Seed:             *f.seed,
	}, nil
}

// prepare returns a client of the agent and makes sure the topic exists
// (creating it with -create) with a leader for every partition.
func (f *loadFlags) prepare(ctx context.Context) (*client.Client, error) {
	c, err := newBenchClient(f.addr, *f.concurrency)
	if err != nil {
		return nil, err
	}
	if err := checkAgent(ctx, c, 0); err != nil {
		return nil, err
	}
	spec := client.TopicSpec{Name: *f.topic, Partitions: *f.partitions, ReplicationFactor: *f.replication, MinInsyncReplicas: *f.minISR}
	ctx, cancel := context.WithTimeout(ctx, prepareTimeout)
	defer cancel()
	if _, err := bench.EnsureTopic(ctx, c, spec, *f.create, nil); err != nil {
		if errors.Is(err, bench.ErrNoTopic) {
			return nil, fmt.Errorf("%w (add -create to create it)", err)
		}
		return nil, explain(usageError(err), c.Addr(), prepareTimeout)
	}
	return c, nil
}

// prepareTimeout bounds the wait for the topic and its leaders before a
// run.
const prepareTimeout = 30 * time.Second

// newBenchClient returns a client whose connection pool fits the workers
// and the consumers.
func newBenchClient(addr *agentFlags, workers int) (*client.Client, error) {
	return newAgentClient(addr, bench.HTTPClient(workers+64))
}

// reportFlags say how a run reports and when it counts as failed.
type reportFlags struct {
	json          *bool
	maxErrorRatio *float64
	cpuProfile    *string
}

func newReportFlags(fs *flag.FlagSet) *reportFlags {
	return &reportFlags{
		json:          fs.Bool("json", false, "print the result as JSON"),
		maxErrorRatio: fs.Float64("max-error-ratio", 0.001, "exit 1 when more than this fraction of requests failed (0: any error)"),
		cpuProfile:    fs.String("cpuprofile", "", "write a CPU profile of this process (the load generator) during the run to this file, for go tool pprof"),
	}
}

// profile starts the -cpuprofile profile, if asked for; stop ends it and
// closes the file.
func (f *reportFlags) profile() (stop func() error, err error) {
	if *f.cpuProfile == "" {
		return func() error { return nil }, nil
	}
	file, err := os.Create(*f.cpuProfile)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(file); err != nil {
		file.Close()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return file.Close()
	}, nil
}

// measure runs one workload under the -cpuprofile profile, with the
// progress line (given to the workload through *progress), and reports its
// result as finish does.
func (f *reportFlags) measure(stdout io.Writer, progress *func(bench.Progress), run func() (*bench.Result, error), mustConsumeAll bool) error {
	stop, err := f.profile()
	if err != nil {
		return workloadError(err)
	}
	var clear func()
	*progress, clear = f.progress(stdout)
	res, err := run()
	if stopErr := stop(); err == nil && stopErr != nil {
		err = stopErr
	}
	clear()
	if err != nil {
		return workloadError(err)
	}
	return f.finish(res, stdout, mustConsumeAll)
}

func (f *reportFlags) validate() error {
	if r := *f.maxErrorRatio; !(r >= 0 && r <= 1) {
		return fmt.Errorf("%w: -max-error-ratio %v: want a fraction in [0, 1]", errUsage, r)
	}
	return nil
}

// progress returns a progress line for the run when stdout is a terminal
// and the report is not JSON, and a function that clears it.
func (f *reportFlags) progress(stdout io.Writer) (func(bench.Progress), func()) {
	if file, ok := stdout.(*os.File); ok && !*f.json {
		if st, err := file.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			return bench.ProgressPrinter(file)
		}
	}
	return nil, func() {}
}

// finish prints the result and says whether the run failed.
func (f *reportFlags) finish(res *bench.Result, stdout io.Writer, mustConsumeAll bool) error {
	write := res.WriteTable
	if *f.json {
		write = res.WriteJSON
	}
	if err := write(stdout); err != nil {
		return err
	}
	if ratio := res.ErrorRatio(); ratio > *f.maxErrorRatio {
		return fmt.Errorf("%d of %d requests failed (%.3g%%), more than -max-error-ratio %v",
			res.ErrorCount(), res.ErrorCount()+res.Requests, 100*ratio, *f.maxErrorRatio)
	}
	if mustConsumeAll && res.NotConsumed > 0 {
		return fmt.Errorf("%d acknowledged record(s) were not consumed within the drain", res.NotConsumed)
	}
	return nil
}

// workloadError turns a workload's refusal of its configuration into bad
// usage (exit 2).
func workloadError(err error) error {
	if errors.Is(err, bench.ErrInvalidConfig) {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return usageError(err)
}

func benchProduce(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench produce", stderr)
	f := newLoadFlags(fs, 0)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := f.report.validate(); err != nil {
		return err
	}
	cfg, err := f.produceConfig()
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return workloadError(err)
	}
	c, err := f.prepare(ctx)
	if err != nil {
		return err
	}
	return f.report.measure(stdout, &cfg.Progress, func() (*bench.Result, error) { return bench.Produce(ctx, c, cfg) }, false)
}

func benchEndToEnd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench e2e", stderr)
	f := newLoadFlags(fs, 0)
	fetchWait := fs.Duration("fetch-wait", time.Second, "long-poll wait of each consumer fetch")
	drain := fs.Duration("drain", 10*time.Second, "how long consumers may take to read every acknowledged record once producing stops")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := f.report.validate(); err != nil {
		return err
	}
	produceCfg, err := f.produceConfig()
	if err != nil {
		return err
	}
	cfg := bench.EndToEndConfig{Produce: produceCfg, FetchWait: *fetchWait, Drain: *drain}
	if err := cfg.Validate(); err != nil {
		return workloadError(err)
	}
	c, err := f.prepare(ctx)
	if err != nil {
		return err
	}
	return f.report.measure(stdout, &cfg.Produce.Progress, func() (*bench.Result, error) { return bench.EndToEnd(ctx, c, cfg) },
		cfg.Produce.Acks != client.AcksNone)
}

func benchConsume(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench consume", stderr)
	topic := fs.String("topic", "", "the topic to read (required)")
	partition := fs.Int("partition", -1, "the partition to read (-1: all, one worker each)")
	maxBytes := fs.Int("max-bytes", client.DefaultFetchMaxBytes, "max_bytes of each fetch")
	duration := fs.Duration("duration", time.Minute, "stop after this long even if not every record was read")
	repeat := fs.Bool("repeat", false, "read each partition again from its start when done, until -duration passes")
	timeout := fs.Duration("timeout", 0, "hard cap on the whole run (default -duration + 30s)")
	report := newReportFlags(fs)
	addr := addrFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *topic == "" {
		return fmt.Errorf("%w: -topic is required", errUsage)
	}
	if err := report.validate(); err != nil {
		return err
	}
	cfg := bench.ConsumeConfig{Topic: *topic, Partition: *partition, FetchMaxBytes: *maxBytes, Duration: *duration, Repeat: *repeat, HardCap: *timeout}
	if err := cfg.Validate(); err != nil {
		return workloadError(err)
	}
	c, err := newBenchClient(addr, 0)
	if err != nil {
		return err
	}
	if err := checkAgent(ctx, c, 0); err != nil {
		return err
	}
	return report.measure(stdout, &cfg.Progress, func() (*bench.Result, error) { return bench.Consume(ctx, c, cfg) }, false)
}

func benchLimits(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench limits", stderr)
	duration := fs.Duration("duration", 3*time.Second, "how long each baseline runs")
	sizes := intListFlag(fs, "size", "1024", "record value sizes, comma-separated: each file write is one batch")
	batches := intListFlag(fs, "batch", "100", "records per batch, comma-separated")
	tcpWrite := fs.Int("tcp-write-bytes", 1<<20, "size of each loopback TCP write")
	dir := fs.String("dir", "", "where to write the files (default the system's temporary directory; use the data disk)")
	asJSON := fs.Bool("json", false, "print the results as a JSON array")
	keepFiles := fs.Bool("keep-files", false, "keep every 64 MiB file until the end of a file baseline, so that each write lands in pages not used before, as a log's appends do (default: each file is deleted when the next starts)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	results := []*bench.LimitResult{}
	res, err := bench.LoopbackTCP(ctx, bench.LoopbackConfig{Duration: *duration, WriteBytes: *tcpWrite})
	if err != nil {
		return workloadError(err)
	}
	results = append(results, res)
	for _, size := range *sizes {
		for _, batch := range *batches {
			writeBytes, err := bench.BatchBytes(size, batch)
			if err != nil {
				return workloadError(err)
			}
			for _, fsync := range []bool{false, true} {
				res, err := bench.FileWrite(ctx, bench.FileWriteConfig{Dir: *dir, WriteBytes: writeBytes, Fsync: fsync, Duration: *duration, KeepFiles: *keepFiles})
				if err != nil {
					return workloadError(err)
				}
				results = append(results, res)
			}
		}
	}
	if *asJSON {
		return bench.WriteLimitsJSON(stdout, results)
	}
	return bench.WriteLimitsTable(stdout, results)
}

// intListFlag registers a flag holding comma-separated integers.
func intListFlag(fs *flag.FlagSet, name, value, usage string) *intList {
	l := &intList{}
	if err := l.Set(value); err != nil {
		panic("bad default for -" + name)
	}
	fs.Var(l, name, usage)
	return l
}

type intList []int

func (l *intList) String() string {
	parts := make([]string, len(*l))
	for i, v := range *l {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

func (l *intList) Set(s string) error {
	var out intList
	for _, part := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil {
			return fmt.Errorf("%q is not an integer", part)
		}
		out = append(out, v)
	}
	*l = out
	return nil
}
