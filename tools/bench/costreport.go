package main

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/image/font/basicfont"
)

// costReport is everything the cost region shows.
type costReport struct {
	Date    time.Time
	Machine string
	// Command is benchrun's command line, its flags as given.
	Command string
	Options costOptions
	Points  []costPoint
	Produce []produceCost
	Took    time.Duration
}

// The acceptance bounds of issue 19 at 10,000 partitions, checked against
// the point of that size when the run has one.
const (
	goalPartitions   = 10000
	goalLed          = 60 * time.Second
	goalIdleCPU      = 5.0 // percent of a core, per agent
	goalRSS          = 1 << 30
	goalFDs          = 10000
	goalFailover     = 10 * time.Second
	costDocCommand   = "make bench-cost"
	costChartFile    = "benchmarks-cost.png"
	costChartColumns = 3
)

func renderCost(r costReport) string {
	var b strings.Builder
	o := r.Options
	fmt.Fprintf(&b, "Measured %s by `%s` (`%s`, %s) on %s.\n\n",
		r.Date.UTC().Format("2006-01-02 15:04 MST"), costDocCommand, r.Command, r.Took.Round(time.Second), r.Machine)
	fmt.Fprintf(&b, "Each point: a Consul server and three agents started afresh with the shipped timing (check_ttl 3s, session_ttl 10s, "+
		"lock_delay 250ms, lag_time_max 10s, fetch_max_wait 500ms), `log_level = \"info\"`, `segment_bytes = \"64MiB\"`, under RLIMIT_NOFILE %d; "+
		"one topic of that many partitions, RF 3, min_insync_replicas 2 (every agent holds a replica of every partition). "+
		"Idle figures are taken over %s with no client traffic (the measurement's own /metrics scrapes are outside the window; what one scrape cost "+
		"is its own column), %s after every partition had a leader (leaderships won by a replica other than the preferred one move back meanwhile). "+
		"\"All in sync\" is from the creation until every partition's ISR held its three replicas, polled each second during that settle; the ISR changes are the agents' "+
		"from the creation to the end of the settle (a new partition's replicas all start in the ISR: each change is a leader dropping a follower that had not fetched within lag_time_max, or taking it back). Then the agent leading the most "+
		"partitions is killed with SIGKILL and every partition it led is written to (acks=all, through another agent, all at once, each on a "+
		"connection of its own that a write before the kill opened, %s before it, as producers already connected; each write with a timeout of %s, the API's default; retried %s after each refusal) until it accepts a write. \"None killed\" is how long those opening writes took, with every agent alive, for the last partition: the probe's own time (each write fsynced on three replicas, every partition at once), to read the failover against. "+
		"The load average (1 minute, at the end of the idle window) says what else the machine ran: figures "+
		"taken at a load well above the 3 agents' own are not the cluster's alone.\n\n", o.nofile, o.idle, o.settle, probeQuiet, probeTimeout, probeRetry)
	b.WriteString("| partitions | create → all led | create → all in sync (ISR changes) | idle CPU per agent (% of a core) | RSS per agent (MiB) | open descriptors per agent | CPU per /metrics scrape | replica fetches/s | replica loop wakes/s | Consul requests/s, idle | kill -9 of (partitions led) | all accept acks=all again after (median; the same writes with none killed) | Consul requests/s during it | Consul 429s | load average |\n")
	b.WriteString("|---:|---:|---:|---|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|\n")
	for _, p := range r.Points {
		if p.Err != "" && len(p.Agents) == 0 {
			fmt.Fprintf(&b, "| %d | %s | failed: %s | | | | | | | | | | | | |\n", p.Partitions, durationOrDash(p.Led), strings.ReplaceAll(p.Err, "|", "/"))
			continue
		}
		var cpu, rss, fds, scrape []string
		for _, a := range p.Agents {
			cpu = append(cpu, fmt.Sprintf("%.1f", a.CPUPercent))
			rss = append(rss, fmt.Sprintf("%.0f", float64(a.RSSBytes)/(1<<20)))
			fds = append(fds, fmt.Sprint(a.FDs))
			scrape = append(scrape, a.ScrapeCPU.String())
		}
		failover := fmt.Sprintf("%s (%s; %s with none killed)", durationOrDash(p.FailoverMax), durationOrDash(p.FailoverMedian), durationOrDash(p.ProbeBaseline))
		if p.Unrecovered > 0 {
			failover += fmt.Sprintf(", %d never", p.Unrecovered)
		}
		inSync := "not within the settle"
		if p.InSync > 0 {
			inSync = durationOrDash(p.InSync)
		}
		fmt.Fprintf(&b, "| %d | %s | %s (%d) | %s | %s | %s | %s | %.0f | %.0f | %.0f | %s (%d) | %s | %.0f | %d | %.1f |\n",
			p.Partitions, durationOrDash(p.Led), inSync, p.ISRChanges, strings.Join(cpu, " / "), strings.Join(rss, " / "), strings.Join(fds, " / "), strings.Join(scrape, " / "),
			p.FetchesPerSecond, p.WakesPerSecond, p.ConsulPerSecond, p.KilledNode, p.FailedOver, failover, p.FailoverConsulPerSec, p.Consul429, p.LoadAverage)
		if p.Err != "" {
			fmt.Fprintf(&b, "| | %d partitions: %s | | | | | | | | | | | | | |\n", p.Partitions, strings.ReplaceAll(p.Err, "|", "/"))
		}
	}
	b.WriteString("\n")
	b.WriteString(costGoals(r.Points))
	b.WriteString("\nProduce, acks=all, 100 B records, 4 workers of 100-record batches (make bench's load shape), one RF 3 topic per row on one more cluster of the same setup, each created, led and settled before its row:\n\n")
	b.WriteString("| partitions | records/s | p99 | command |\n|---:|---:|---:|---|\n")
	for _, p := range r.Produce {
		status := ""
		if p.Err != "" {
			status = " (" + strings.ReplaceAll(p.Err, "|", "/") + ")"
		}
		fmt.Fprintf(&b, "| %d | %s%s | %s | `%s` |\n", p.Partitions, formatRate(p.RecordsPerSec), status, formatLatency(p.P99), p.Command)
	}
	fmt.Fprintf(&b, "\n![cost curves](%s)\n", costChartFile)
	return b.String()
}

// costGoals says, for the 10,000-partition point, which of issue 19's
// bounds hold.
func costGoals(points []costPoint) string {
	for _, p := range points {
		if p.Partitions != goalPartitions {
			continue
		}
		if len(p.Agents) == 0 {
			return fmt.Sprintf("Bounds at %d partitions: **missed**, the point failed (%s) before its idle figures.\n", goalPartitions, p.Err)
		}
		var cpu, rss, fds float64
		for _, a := range p.Agents {
			cpu, rss, fds = math.Max(cpu, a.CPUPercent), math.Max(rss, float64(a.RSSBytes)), math.Max(fds, float64(a.FDs))
		}
		check := func(ok bool) string {
			if ok {
				return "met"
			}
			return "**missed**"
		}
		return fmt.Sprintf("Bounds at %d partitions: all led within %.0fs: %s (%s); idle CPU under %.0f %% per agent: %s (at most %.1f %%); "+
			"RSS under 1 GiB: %s (at most %.0f MiB); descriptors under %d per agent: %s (at most %.0f); no Consul 429: %s (%d); "+
			"a killed agent's partitions accept acks=all writes within %s: %s (%s%s).\n",
			goalPartitions, goalLed.Seconds(), check(p.Err == "" && p.Led <= goalLed), durationOrDash(p.Led),
			goalIdleCPU, check(cpu < goalIdleCPU), cpu,
			check(rss < goalRSS), rss/(1<<20),
			goalFDs, check(fds < goalFDs), fds,
			check(p.Consul429 == 0), p.Consul429,
			goalFailover, check(p.Unrecovered == 0 && p.FailoverMax > 0 && p.FailoverMax <= goalFailover), durationOrDash(p.FailoverMax), unrecoveredNote(p.Unrecovered))
	}
	return fmt.Sprintf("No %d-partition point in this run: issue 19's bounds are not checked.\n", goalPartitions)
}

func unrecoveredNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d never", n)
}

func durationOrDash(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	if d < 10*time.Second {
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// writeCostOutputs rewrites the cost region of dir/benchmarks.md and draws
// dir/benchmarks-cost.png.
func writeCostOutputs(dir, region string, points []costPoint) error {
	mdPath := filepath.Join(dir, "benchmarks.md")
	doc, err := os.ReadFile(mdPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("benchrun cost: %w", err)
	}
	updated, err := replaceBetween(string(doc), costBeginMarker, costEndMarker, region)
	if err != nil {
		return fmt.Errorf("benchrun cost: %s: %w", mdPath, err)
	}
	var chart bytes.Buffer
	if err := drawCostChart(&chart, points); err != nil {
		return fmt.Errorf("benchrun cost: chart: %w", err)
	}
	if err := os.WriteFile(mdPath, []byte(updated), 0o644); err != nil {
		return fmt.Errorf("benchrun cost: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, costChartFile), chart.Bytes(), 0o644); err != nil {
		return fmt.Errorf("benchrun cost: %w", err)
	}
	return nil
}

// costCurve is one panel of the cost chart: a value per point.
type costCurve struct {
	title string
	value func(costPoint) (float64, bool)
	text  func(float64) string
}

var costCurves = []costCurve{
	{"create -> all led (s)", func(p costPoint) (float64, bool) { return p.Led.Seconds(), p.Led > 0 }, func(v float64) string { return fmt.Sprintf("%.1f", v) }},
	{"idle CPU, busiest agent (% core)", func(p costPoint) (float64, bool) {
		return maxAgent(p, func(a agentCost) float64 { return a.CPUPercent })
	},
		func(v float64) string { return fmt.Sprintf("%.1f", v) }},
	{"RSS, largest agent (MiB)", func(p costPoint) (float64, bool) {
		return maxAgent(p, func(a agentCost) float64 { return float64(a.RSSBytes) / (1 << 20) })
	}, func(v float64) string { return fmt.Sprintf("%.0f", v) }},
	{"open descriptors, most of an agent", func(p costPoint) (float64, bool) {
		return maxAgent(p, func(a agentCost) float64 { return float64(a.FDs) })
	},
		func(v float64) string { return fmt.Sprintf("%.0f", v) }},
	{"replica fetches/s, idle cluster", func(p costPoint) (float64, bool) { return p.FetchesPerSecond, len(p.Agents) > 0 },
		func(v float64) string { return fmt.Sprintf("%.0f", v) }},
	{"replica loop wakes/s, idle cluster", func(p costPoint) (float64, bool) { return p.WakesPerSecond, len(p.Agents) > 0 },
		func(v float64) string { return fmt.Sprintf("%.0f", v) }},
	{"kill -9: all acks=all again (s)", func(p costPoint) (float64, bool) { return p.FailoverMax.Seconds(), p.FailoverMax > 0 },
		func(v float64) string { return fmt.Sprintf("%.1f", v) }},
}

func maxAgent(p costPoint, f func(agentCost) float64) (float64, bool) {
	v := 0.0
	for _, a := range p.Agents {
		v = math.Max(v, f(a))
	}
	return v, len(p.Agents) > 0
}

// The cost chart: one panel per curve, partitions on a logarithmic x axis,
// the value on a linear y axis from 0, each point marked and labelled.
//
//	+---------------------+---------------------+---------------------+
//	| create -> all led   | idle CPU ...        | RSS ...             |
//	|            o 41.0   |                     |                     |
//	|     o 4.2           |                     |                     |
//	| o 0.9               |                     |                     |
//	+-100---1000---10000--+---------------------+---------------------+
const (
	costPanelW   = 320
	costPanelH   = 200
	costPanelPad = 34
)

var colorCurve = color.RGBA{0x1f, 0x5f, 0xa8, 0xff}

func drawCostChart(w io.Writer, points []costPoint) error {
	rows := (len(costCurves) + costChartColumns - 1) / costChartColumns
	img := image.NewRGBA(image.Rect(0, 0, costChartColumns*costPanelW, rows*costPanelH))
	draw.Draw(img, img.Bounds(), image.NewUniform(colorBackgnd), image.Point{}, draw.Src)
	face := basicfont.Face7x13
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range points {
		lo, hi = math.Min(lo, math.Log10(float64(p.Partitions))), math.Max(hi, math.Log10(float64(p.Partitions)))
	}
	if hi <= lo {
		lo, hi = lo-0.5, hi+0.5
	}
	for i, c := range costCurves {
		ox, oy := (i%costChartColumns)*costPanelW, (i/costChartColumns)*costPanelH
		left, right := ox+costPanelPad, ox+costPanelW-costPanelPad
		top, bottom := oy+costPanelPad-10, oy+costPanelH-costPanelPad
		label(img, face, ox+8, oy+16, c.title)
		fill(img, image.Rect(left, top, left+1, bottom), colorAxis)
		fill(img, image.Rect(left, bottom, right, bottom+1), colorAxis)
		ymax := 0.0
		for _, p := range points {
			if v, ok := c.value(p); ok {
				ymax = math.Max(ymax, v)
			}
		}
		if ymax == 0 {
			ymax = 1
		}
		ymax *= 1.15
		x := func(n int) int {
			return left + int(math.Round((math.Log10(float64(n))-lo)/(hi-lo)*float64(right-left-20))) + 10
		}
		y := func(v float64) int { return bottom - int(math.Round(v/ymax*float64(bottom-top))) }
		prev := image.Point{X: -1}
		for _, p := range points {
			label(img, face, x(p.Partitions)-3*len(fmt.Sprint(p.Partitions)), bottom+14, fmt.Sprint(p.Partitions))
			v, ok := c.value(p)
			if !ok {
				prev = image.Point{X: -1}
				continue
			}
			pt := image.Pt(x(p.Partitions), y(v))
			if prev.X >= 0 {
				line(img, prev, pt, colorCurve)
			}
			fill(img, image.Rect(pt.X-3, pt.Y-3, pt.X+4, pt.Y+4), colorCurve)
			label(img, face, pt.X+5, pt.Y-4, c.text(v))
			prev = pt
		}
	}
	return png.Encode(w, img)
}

// line draws a one-pixel line from a to b.
func line(img draw.Image, a, b image.Point, c color.Color) {
	steps := max(abs(b.X-a.X), abs(b.Y-a.Y), 1)
	for s := 0; s <= steps; s++ {
		img.Set(a.X+(b.X-a.X)*s/steps, a.Y+(b.Y-a.Y)*s/steps, c)
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
