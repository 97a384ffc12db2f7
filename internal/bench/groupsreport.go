package bench

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/logagent/logagent/client"
)

// GroupsFlags are the flags of `logagent bench groups`.
type GroupsFlags struct {
	addrs                                         *string
	topic, group, profile                         *string
	create, skipCommits, skipSettle, asJSON       *bool
	partitions, replication, minISR               *int
	members, concurrency, size, seed              *int
	settleMembers, rounds                         *int
	duration, warmup, session, wait, settleTimout *time.Duration
	maxErrorRatio                                 *float64
}

// NewGroupsFlags registers the flags on fs.
func NewGroupsFlags(fs *flag.FlagSet) *GroupsFlags {
	return &GroupsFlags{
		addrs:         fs.String("addr", "", "comma-separated client APIs of agents; member i uses the i-th, in turn (default $"+client.AddrEnv+" or "+client.DefaultAddr+")"),
		topic:         fs.String("topic", "groups_bench", "the topic the groups consume"),
		create:        fs.Bool("create", false, "create the topic if it does not exist, with -partitions, -replication-factor, -min-insync-replicas"),
		partitions:    fs.Int("partitions", 12, "with -create: partitions"),
		replication:   fs.Int("replication-factor", 3, "with -create: replicas per partition"),
		minISR:        fs.Int("min-insync-replicas", 2, "with -create: in-sync replicas an acks=all write needs"),
		group:         fs.String("group", "bench", "prefix of the groups' names (each run adds a suffix of its own)"),
		members:       fs.Int("members", 12, "members of the commit group, one partition each (at most the partitions)"),
		concurrency:   fs.Int("concurrency", 4, "commit workers per member, each with one request in flight; the baseline has as many produce workers"),
		size:          fs.Int("size", 50, "bytes of each baseline record's value (a commit record is about as large)"),
		seed:          fs.Int("seed-records", 100, "records written to each partition first; commits cycle through offsets 1 to this"),
		duration:      fs.Duration("duration", 10*time.Second, "length of each measured throughput run"),
		warmup:        fs.Duration("warmup", 2*time.Second, "unmeasured run of the same load before each measured one"),
		session:       fs.Duration("session-timeout", 10*time.Second, "session_timeout_ms of every member (the agents' default is 10s)"),
		wait:          fs.Duration("heartbeat-wait", 5*time.Second, "wait_ms of each heartbeat (the long poll; the agent holds at most a third of the session timeout)"),
		settleMembers: fs.Int("settle-members", 3, "members of the settle group"),
		rounds:        fs.Int("rounds", 3, "rounds of the settle events"),
		settleTimout:  fs.Duration("settle-timeout", time.Minute, "fail when a group has not settled within this"),
		skipCommits:   fs.Bool("skip-commits", false, "leave out the commit throughput runs"),
		skipSettle:    fs.Bool("skip-settle", false, "leave out the settle rounds"),
		profile:       fs.String("coordinator-profile", "", "write a CPU profile of the commit group's coordinator during the measured commit run to this file (the agents need client { pprof = true })"),
		asJSON:        fs.Bool("json", false, "print the result as JSON"),
		maxErrorRatio: fs.Float64("max-error-ratio", 0.001, "exit 1 when more than this fraction of a throughput run's requests failed (0: any error)"),
	}
}

// Config returns the configuration the flags say, validated.
func (f *GroupsFlags) Config() (GroupsConfig, error) {
	if r := *f.maxErrorRatio; !(r >= 0 && r <= 1) {
		return GroupsConfig{}, fmt.Errorf("%w: -max-error-ratio %v: want a fraction in [0, 1]", ErrInvalidConfig, r)
	}
	addrs := *f.addrs
	if addrs == "" {
		addrs = os.Getenv(client.AddrEnv)
	}
	if addrs == "" {
		addrs = client.DefaultAddr
	}
	var list []string
	for _, a := range strings.Split(addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			list = append(list, a)
		}
	}
	cfg := GroupsConfig{
		Addrs: list, Topic: *f.topic, Create: *f.create,
		Partitions: *f.partitions, ReplicationFactor: *f.replication, MinInsync: *f.minISR,
		Group: *f.group, Members: *f.members, Concurrency: *f.concurrency,
		RecordBytes: *f.size, SeedRecords: *f.seed, Duration: *f.duration, Warmup: *f.warmup,
		SessionTimeout: *f.session, HeartbeatWait: *f.wait,
		SettleMembers: *f.settleMembers, Rounds: *f.rounds, SettleTimeout: *f.settleTimout,
		SkipCommits: *f.skipCommits, SkipSettle: *f.skipSettle, CoordinatorProfile: *f.profile,
	}
	return cfg, cfg.Validate()
}

// Report prints the result (a table, or JSON with -json) and says whether
// the run failed: too many failed requests in a throughput run.
func (f *GroupsFlags) Report(res *GroupsResult, w io.Writer) error {
	write := res.WriteTable
	if *f.asJSON {
		write = res.WriteJSON
	}
	if err := write(w); err != nil {
		return err
	}
	if ratio := res.ErrorRatio(); ratio > *f.maxErrorRatio {
		return fmt.Errorf("bench: %.3g%% of a throughput run's requests failed, more than -max-error-ratio %v", 100*ratio, *f.maxErrorRatio)
	}
	return nil
}

// SettleReport is one settle event in the JSON report, in milliseconds.
type SettleReport struct {
	Event       string    `json:"event"`
	Description string    `json:"description"`
	RunsMS      []float64 `json:"runs_ms"`
	MedianMS    float64   `json:"median_ms"`
	MaxMS       float64   `json:"max_ms"`
	// AfterSessionTimeout*: the kill events' figures minus the session
	// timeout.
	AfterSessionTimeoutMedianMS *float64 `json:"after_session_timeout_median_ms,omitempty"`
	AfterSessionTimeoutMaxMS    *float64 `json:"after_session_timeout_max_ms,omitempty"`
}

// GroupsReport is the shape of GroupsResult.WriteJSON's output.
type GroupsReport struct {
	Workload            string         `json:"workload"`
	Config              map[string]any `json:"config"`
	ProduceBaseline     *jsonReport    `json:"produce_baseline,omitempty"`
	Commit              *jsonReport    `json:"commit,omitempty"`
	CommitAllPartitions *jsonReport    `json:"commit_all_partitions,omitempty"`
	// CommitRatio is commit requests/s ÷ baseline produce requests/s;
	// CommitAllRatio is that variant's offsets/s ÷ baseline records/s.
	CommitRatio    float64        `json:"commit_ratio,omitempty"`
	CommitAllRatio float64        `json:"commit_all_offsets_ratio,omitempty"`
	Settle         []SettleReport `json:"settle,omitempty"`
	Notes          []string       `json:"notes,omitempty"`
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e5) / 10 }

// Report returns the result in the JSON report's shape.
func (r *GroupsResult) Report() GroupsReport {
	rep := GroupsReport{Workload: "groups", Config: r.Config, Notes: r.Notes,
		CommitRatio: math.Round(r.CommitRatio()*1000) / 1000, CommitAllRatio: math.Round(r.CommitAllRatio()*1000) / 1000}
	for _, x := range []struct {
		res *Result
		out **jsonReport
	}{{r.ProduceBaseline, &rep.ProduceBaseline}, {r.Commit, &rep.Commit}, {r.CommitAll, &rep.CommitAllPartitions}} {
		if x.res != nil {
			j := x.res.report()
			*x.out = &j
		}
	}
	for _, s := range r.Settle {
		sr := SettleReport{Event: s.Event, Description: eventDescriptions[s.Event], MedianMS: ms(s.Median()), MaxMS: ms(s.Max())}
		for _, d := range s.Runs {
			sr.RunsMS = append(sr.RunsMS, ms(d))
		}
		if s.AfterTimeout {
			med, mx := ms(s.Median()-r.SessionTimeout), ms(s.Max()-r.SessionTimeout)
			sr.AfterSessionTimeoutMedianMS, sr.AfterSessionTimeoutMaxMS = &med, &mx
		}
		rep.Settle = append(rep.Settle, sr)
	}
	return rep
}

// WriteJSON writes Report as indented JSON.
func (r *GroupsResult) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r.Report())
}

// WriteTable writes the result for people.
func (r *GroupsResult) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "workload  groups  %s\n\n", configLine(r.Config))
	if r.Commit != nil {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "run\trequests/s\toffsets or records/s\tp50\tp99\tok\tfailed")
		for _, x := range []struct {
			name string
			res  *Result
		}{{"produce acks=all, 1 record (baseline)", r.ProduceBaseline}, {"commit, 1 offset", r.Commit},
			{fmt.Sprintf("commit, %v offsets", r.CommitAll.Config["offsets_per_request"]), r.CommitAll}} {
			fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%s\t%s\t%d\t%d %s\n", x.name, x.res.RequestsPerSecond(), x.res.RecordsPerSecond(),
				roundDuration(x.res.Latency.Quantile(0.5)), roundDuration(x.res.Latency.Quantile(0.99)),
				x.res.Requests, x.res.ErrorCount(), errorLine(x.res.Errors))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(w, "\ncommits/s ÷ produce requests/s: %.2fx; offsets/s of the all-partitions commits ÷ produce records/s: %.2fx\n\n",
			r.CommitRatio(), r.CommitAllRatio())
	}
	if len(r.Settle) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "settle (session timeout %v)\truns\tmedian\tmax\tmedian - session timeout\tmax - session timeout\n", r.SessionTimeout)
		for _, s := range r.Settle {
			after := "\t"
			if s.AfterTimeout {
				after = fmt.Sprintf("%v\t%v", (s.Median() - r.SessionTimeout).Round(time.Millisecond), (s.Max() - r.SessionTimeout).Round(time.Millisecond))
			}
			fmt.Fprintf(tw, "%s\t%d\t%v\t%v\t%s\n", s.Event, len(s.Runs), s.Median().Round(time.Millisecond), s.Max().Round(time.Millisecond), after)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	for _, x := range []*Result{r.ProduceBaseline, r.Commit, r.CommitAll} {
		if x == nil {
			continue
		}
		for kind, ex := range x.Examples {
			fmt.Fprintf(w, "first %s error (%s): %s\n", kind, x.Workload, ex)
		}
	}
	return nil
}
