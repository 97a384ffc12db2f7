package main

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"
)

// sample is one system's figures in one row.
type sample struct {
	RecordsPerSec, MBPerSec float64
	// P50 and P99 are zero when the row has no latency.
	P50, P99 time.Duration
	// Command is how to run this side of the row again, and Setup what it
	// ran against.
	Command, Setup string
	// Note says what went wrong (errors, records not consumed), if anything,
	// and how the figure was chosen when it is one of several runs.
	Note string
}

// metric is what a row's ratio compares.
type metric int

const (
	// byRecords is ours/theirs records per second.
	byRecords metric = iota
	// byMB is ours/theirs MB/s.
	byMB
	// byP99 is theirs/ours p99 latency, so above 1 means ours is lower.
	byP99
)

// comparison is one row: logagent (Ours) against JetStream or a machine
// limit (Theirs).
type comparison struct {
	Group string
	Name  string
	// TheirsName labels the other side: "JetStream R3" or "loopback TCP";
	// empty for a row that only shows logagent.
	TheirsName   string
	Ours, Theirs sample
	Metric       metric
	// Goal is the ratio the row must reach; 0 means it has none.
	Goal float64
	// MinRate, when set instead of Goal, is the records/s Ours must reach
	// (an absolute goal, such as commits/s); the ratio is then only shown.
	MinRate float64
}

// ratio is the row's ratio as Metric defines it; ok is false when a side
// has no figure to divide.
func (c comparison) ratio() (r float64, ok bool) {
	switch c.Metric {
	case byRecords:
		r, ok = c.Ours.RecordsPerSec/c.Theirs.RecordsPerSec, c.Theirs.RecordsPerSec > 0
	case byMB:
		r, ok = c.Ours.MBPerSec/c.Theirs.MBPerSec, c.Theirs.MBPerSec > 0
	case byP99:
		r, ok = float64(c.Theirs.P99)/float64(c.Ours.P99), c.Ours.P99 > 0 && c.Theirs.P99 > 0
	}
	return r, ok
}

// verdict is "met", "missed", "no goal" or "no figure".
func (c comparison) verdict() string {
	r, ok := c.ratio()
	switch {
	case c.TheirsName == "":
		return "–"
	case c.MinRate > 0 && c.Ours.RecordsPerSec <= 0:
		return "no figure"
	case c.MinRate > 0 && c.Ours.RecordsPerSec >= c.MinRate:
		return "met"
	case c.MinRate > 0:
		return "missed"
	case !ok:
		return "no figure"
	case c.Goal == 0:
		return "no goal"
	case r >= c.Goal:
		return "met"
	default:
		return "missed"
	}
}

func (c comparison) ratioText() string {
	r, ok := c.ratio()
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.2fx", r)
}

func (c comparison) goalText() string {
	if c.MinRate > 0 {
		return fmt.Sprintf("≥ %.0f/s", c.MinRate)
	}
	if c.Goal == 0 {
		return "–"
	}
	return fmt.Sprintf("≥ %gx", c.Goal)
}

// groupTitles orders the report's sections and names them.
var groupTitles = []struct{ key, title, reading string }{
	{"produce-r1", "Produce, one replica: logagent RF 1 acks=1 vs JetStream R1",
		"Ratio = logagent records/s ÷ JetStream records/s. No goal; logagent runs with durability \"replicated\" (no fsync before the ack), JetStream with its default (fsync every 2 min). logagent's 3 partitions are led by the dev cluster's 3 agents; JetStream R1 is one server holding 3 streams."},
	{"produce-r3", "Produce, three replicas, matched durability: logagent RF 3 acks=all durability=\"replicated\" vs JetStream R3 default",
		"Ratio = logagent records/s ÷ JetStream records/s; goal ≥ 1.5x. Neither side fsyncs before acknowledging: an ack means the record is in the memory of a quorum."},
	{"produce-r3-fsync", "Produce, three replicas, fsync before ack: logagent RF 3 acks=all durability=\"fsync\" vs JetStream R3 sync_interval always",
		"Ratio = logagent records/s ÷ JetStream records/s; goal ≥ 2x."},
	{"consume", "Consume: logagent zero-copy fetch vs JetStream ordered-consumer replay, and vs raw loopback TCP",
		"Ratio = logagent MB/s ÷ the other side's MB/s; goals ≥ 5x JetStream and ≥ 0.5x loopback TCP. Both read the 1 KiB RF 3 / R3 data that the produce rows (and their warm-ups) wrote, logagent in fetches of at most 1 MiB (the client's default; 3 partitions, so at most 3 MiB requested at a time), JetStream with 4096 messages (4 MiB) requested ahead on each of its 3 streams. The last row replays the same data in fetches of 4 MiB, what the rows before used until 2026-12-05: on a 2-core host the kernel's copy into three 4 MiB buffers costs about 1.5 times as much per byte as into three of 1 MiB (docs/benchmarks.md, \"Fetch: replay of 1 KiB records\"). JetStream's replay reads it once (several seconds); logagent reads it in well under a second, so it starts over from the first offset until the row's duration passes (-repeat), for a steady figure. Latency is per fetch for logagent (JetStream's prefetching iterator has no per-request latency)."},
	{"e2e", "End-to-end latency (produce to delivery) at a fixed rate",
		"Ratio = JetStream p99 ÷ logagent p99 at the same rate (above 1: logagent is lower); goal ≥ 1x. The rate is half of JetStream's measured RF 3 maximum; the last row runs logagent at half of its own maximum, without a JetStream counterpart. logagent's e2e uses 8 workers (an open loop needs spare ones); JetStream keeps at most 400 publishes unacknowledged."},
	{"idempotence", "The cost of idempotence: logagent RF 3 acks=all durability=\"replicated\", idempotent producers vs plain ones",
		"Ratio = idempotent records/s ÷ plain records/s on one cluster, each the mean of four runs, after a plain run that is not counted; the eight runs go in the order P I I P I P P I (plain, idempotent: the Thue-Morse sequence), so that a drift of this host that is linear or quadratic in time weighs on both sides alike, and the note under the commands gives every run's figure. Each run's topic is deleted after it, and the next run starts once its files are gone, so that the group's own writes do not fill the memory with page cache part way (after which this host writes faster); goal ≥ 0.95x (at most 5 % fewer). The agents run with producer.sidecar_idempotence = false, so the plain rows are idempotent nowhere; the idempotent rows are the Go client's default (a producer id, sequences, the leader's duplicate checks)."},
	{"groups", "Consumer groups: commits/s of one coordinator vs acks=all produce of one record, and settle times",
		"Commit rows: logagent records/s = commit requests/s (first row) or offsets/s (second row) of one group, hence one coordinator; the other side is the same workers sending acks=all produce requests of one 50 B record to the same topic's partitions on the same cluster (run before and after the commits, merged). Ratio = commit figure ÷ produce figure; the goal of the first row is 20,000 commits/s, an absolute rate. Settle rows: p50 = median and p99 = max over the rounds of the time until the group settled (every partition owned, balanced, no revocation pending), as the members learnt it from their heartbeats; the kill rows set it against the session timeout (ratio = session timeout ÷ max, so 1x would be no delay beyond the timeout), the others have no counterpart. The cluster runs the shipped default durability \"fsync\"."},
	{"tls", "The cost of TLS: logagent RF 3 durability=\"replicated\" with TLS on both listeners vs plaintext",
		"Ratio = over TLS ÷ plaintext, on two dev clusters of the same run (the plaintext side is produce-r3's and consume's logagent rows). The TLS cluster has peer.tls (mutual TLS between agents: follower fetches and forwarded produces) and client.tls, with a client and a peer token; the load generator talks https to it. Fetch bodies leave through the TLS writer instead of sendfile(2). No goal: this is what TLS costs on loopback, where sendfile's CPU saving on a real network barely shows (docs/operations.md, \"TLS\")."},
	{"kafka", "The Kafka listener: franz-go kgo through the sidecar's Kafka listener vs logagent's own client over HTTP",
		"Ratio = Kafka records/s ÷ HTTP records/s (produce; goal ≥ 1x) and Kafka MB/s ÷ HTTP MB/s (replay; goal ≥ 0.9x), on the same dev cluster of the same run: the HTTP side is produce-r3's and consume's logagent rows. The kgo producer runs in benchrun with the client's defaults (idempotent, acks=all, 10 ms linger, 1 MB batches) and at most 10,000 records buffered, on a topic of its own (3 partitions, RF 3, min.insync.replicas 2); it talks to one agent's listener, which answers one request per connection at a time, where the HTTP side has 4 workers with a request each. Its latency runs from Produce to the record's promise, so it includes the time in kgo's buffer. The replays read produce-r3's 1 KiB topic, which consume read over HTTP just before, in fetches of at most 16 MiB per partition on both sides (logagent's client reads it once more for this); the goal is the one kgo client's, and one client per partition, as a group of three members would read, is shown beside it; no latency (kgo fetches ahead)."},
	{"limits", "Machine limits: logagent produce with fsync vs a raw sequential write with the same fsync pattern",
		"Ratio = logagent MB/s ÷ raw file write + fsync MB/s, one fsync per batch-sized write. No goal: a ceiling to read the fsync rows against."},
}

// reportInput is everything the benchmark region shows.
type reportInput struct {
	Date     time.Time
	Machine  string
	Duration time.Duration
	// Warmup is the unmeasured run before each produce and e2e row.
	Warmup time.Duration
	Rows   []comparison
	// Notes are run-wide remarks (a row that failed, a skipped group).
	Notes []string
}

// renderRegion writes the markdown between the bench markers.
func renderRegion(in reportInput) string {
	var b strings.Builder
	b.WriteString("## logagent vs NATS JetStream (`make bench`)\n\n")
	warmup := ""
	if in.Warmup > 0 {
		warmup = fmt.Sprintf(" Each produce and e2e row ran after an unmeasured %v of the same produce load on both systems "+
			"(the topic's replicas are then in sync and connections open).", in.Warmup)
	}
	fmt.Fprintf(&b, "Generated by `tools/bench` (`make bench`) on %s: %s. Each row ran for %v on loopback, "+
		"one system at a time.%s p50/p99 are request latency (produce: to the ack; e2e: due time to delivery), "+
		"from internal/bench's histogram for both systems. MB are 10^6 bytes of record values. "+
		"A topic of P partitions faces P streams; logagent's 4 workers × batches of 100 records in flight face "+
		"one async publisher with at most 400 unacknowledged messages. Before each row benchrun runs sync(2) and waits 1 s, "+
		"so no row pays for the writeback or the deletions of the one before. The chart `benchmarks.png` shows every ratio.\n\n",
		in.Date.UTC().Format("2006-01-02 15:04 MST"), in.Machine, in.Duration, warmup)
	for _, g := range groupTitles {
		var rows []comparison
		for _, r := range in.Rows {
			if r.Group == g.key {
				rows = append(rows, r)
			}
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(&b, "### %s\n\n%s\n\n", g.title, g.reading)
		b.WriteString("| row | logagent records/s | MB/s | p50 | p99 | other side | records/s | MB/s | p50 | p99 | ratio | goal | result |\n")
		b.WriteString("|-----|------:|------:|------:|------:|-----|------:|------:|------:|------:|------:|-----:|--------|\n")
		for _, r := range rows {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
				r.Name, formatRate(r.Ours.RecordsPerSec), formatMB(r.Ours.MBPerSec), formatLatency(r.Ours.P50), formatLatency(r.Ours.P99),
				cmp.Or(r.TheirsName, "–"), formatRate(r.Theirs.RecordsPerSec), formatMB(r.Theirs.MBPerSec), formatLatency(r.Theirs.P50), formatLatency(r.Theirs.P99),
				r.ratioText(), r.goalText(), r.verdict())
		}
		b.WriteString("\nCommands:\n\n")
		for _, r := range rows {
			fmt.Fprintf(&b, "- %s\n  - logagent: %s\n", r.Name, commandText(r.Ours))
			if r.TheirsName != "" {
				fmt.Fprintf(&b, "  - %s: %s\n", r.TheirsName, commandText(r.Theirs))
			}
			for _, note := range []string{r.Ours.Note, r.Theirs.Note} {
				if note != "" {
					fmt.Fprintf(&b, "  - note: %s\n", note)
				}
			}
		}
		b.WriteString("\n")
	}
	if len(in.Notes) > 0 {
		b.WriteString("Run notes:\n\n")
		for _, n := range in.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func commandText(s sample) string {
	if s.Command == "" {
		return "not run"
	}
	if s.Setup == "" {
		return "`" + s.Command + "`"
	}
	return fmt.Sprintf("`%s` (%s)", s.Command, s.Setup)
}

func formatRate(v float64) string {
	if v <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", v)
}

func formatMB(v float64) string {
	if v <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", v)
}

func formatLatency(d time.Duration) string {
	switch {
	case d <= 0:
		return "–"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	case d >= time.Second:
		// Settle times after a session timeout.
		return fmt.Sprintf("%.2f s", d.Seconds())
	default:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	}
}

const (
	beginMarker = "<!-- bench:begin -->"
	endMarker   = "<!-- bench:end -->"
)

// errMarkers is a document whose markers are not one begin followed by one
// end.
var errMarkers = errors.New("benchrun: markers out of order or repeated")

// replaceRegion puts region between the bench markers of doc, leaving every
// other byte as it was. Without markers, both are appended at the end.
func replaceRegion(doc, region string) (string, error) {
	return replaceBetween(doc, beginMarker, endMarker, region)
}

// replaceBetween puts region between the begin and end markers of doc;
// without them, it appends both markers and the region at the end.
func replaceBetween(doc, begin, end, region string) (string, error) {
	begins, ends := strings.Count(doc, begin), strings.Count(doc, end)
	if begins == 0 && ends == 0 {
		if doc != "" && !strings.HasSuffix(doc, "\n") {
			doc += "\n"
		}
		if doc != "" {
			doc += "\n"
		}
		return doc + begin + "\n" + region + end + "\n", nil
	}
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if begins != 1 || ends != 1 || j < i {
		return "", fmt.Errorf("%w: %d %s, %d %s", errMarkers, begins, begin, ends, end)
	}
	return doc[:i+len(begin)] + "\n" + region + doc[j:], nil
}
