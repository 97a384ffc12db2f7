package jepsen

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/logagent/logagent/internal/checker"
)

// Quantile is the q-quantile (0 < q <= 1) of ds by the nearest rank: the
// smallest value that at least q of them do not exceed. It is 0 for no
// values.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(ds))
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// recoveries splits every cycle's recoveries into the partitions the
// killed agent led and those it followed.
func (r *Result) recoveries() (led, followed []Recovery) {
	for _, m := range r.Measures {
		for _, rc := range m.Recoveries {
			if rc.Led {
				led = append(led, rc)
			} else {
				followed = append(followed, rc)
			}
		}
	}
	return led, followed
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// recoveryFigure is one partition's wait; one with no acknowledgement
// before the restart reads "> wait".
func recoveryFigure(rc Recovery) string {
	if !rc.Acked {
		return "> " + seconds(rc.FirstAck) + " (none while dead)"
	}
	return seconds(rc.FirstAck)
}

// recoveryList is one class of a cycle's partitions with their waits.
func recoveryList(rs []Recovery, led bool) string {
	var parts []string
	for _, rc := range rs {
		if rc.Led == led {
			parts = append(parts, fmt.Sprintf("p%d %s", rc.Partition, recoveryFigure(rc)))
		}
	}
	if len(parts) == 0 {
		return "–"
	}
	return strings.Join(parts, ", ")
}

// recoveryStats is the median, p99 and max of one class's waits. A wait
// cut short by the restart counts with its lower bound, and is reported.
func recoveryStats(rs []Recovery) string {
	if len(rs) == 0 {
		return "–"
	}
	var ds []time.Duration
	unacked := 0
	for _, rc := range rs {
		ds = append(ds, rc.FirstAck)
		if !rc.Acked {
			unacked++
		}
	}
	s := durationStats(ds)
	if unacked > 0 {
		s += fmt.Sprintf(", %d with no acknowledgement while dead (counted as the time to the restart)", unacked)
	}
	return s
}

// RecoveryTable is the per-cycle table of a run that killed agents
// (DeadAgent), in Markdown for docs/reliability.md, under a line naming
// the run; it is empty for other runs.
func (r *Result) RecoveryTable() string {
	led, followed := r.recoveries()
	if len(led)+len(followed) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(r.tableTitle())
	b.WriteString("| cycle | killed | new epoch | first ack, partitions it led | first ack, partitions it followed |\n")
	b.WriteString("|---|---|---|---|---|\n")
	for _, m := range r.Measures {
		epoch := "–"
		if m.FailoverSeen {
			epoch = seconds(m.Failover)
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s |\n", m.Cycle+1, m.Killed, epoch, recoveryList(m.Recoveries, true), recoveryList(m.Recoveries, false))
	}
	fmt.Fprintf(&b, "| median / p99 | | | %s | %s |", recoveryStats(led), recoveryStats(followed))
	return b.String()
}

// restartGaps sets every rolling restart's window and gaps: a restart's
// window ends at the next one's SIGTERM, the last one's at end (the
// clients' stop).
func restartGaps(measures []Measure, ops []Op, partitions int, end time.Duration) {
	var all []*Restart
	for i := range measures {
		for j := range measures[i].Restarts {
			all = append(all, &measures[i].Restarts[j])
		}
	}
	for i, rs := range all {
		rs.Until = end
		if i+1 < len(all) {
			rs.Until = all[i+1].Stopped
		}
		rs.Gaps = make([]time.Duration, partitions)
		for p := range partitions {
			rs.Gaps[p] = WindowGap(ops, p, rs.Stopped, rs.Until)
		}
	}
}

// restartGaps lists every restart's gap of every partition.
func (r *Result) restartGaps() []time.Duration {
	var gaps []time.Duration
	for _, m := range r.Measures {
		for _, rs := range m.Restarts {
			gaps = append(gaps, rs.Gaps...)
		}
	}
	return gaps
}

// gapList is one restart's gaps, partition by partition.
func gapList(gaps []time.Duration) string {
	parts := make([]string, len(gaps))
	for p, g := range gaps {
		parts[p] = fmt.Sprintf("p%d %s", p, seconds(g))
	}
	return strings.Join(parts, ", ")
}

// durationStats is the median, p99 and max of ds.
func durationStats(ds []time.Duration) string {
	return fmt.Sprintf("%s / %s, max %s (n %d)", seconds(Quantile(ds, 0.5)), seconds(Quantile(ds, 0.99)), seconds(Quantile(ds, 1)), len(ds))
}

// tableTitle is the line naming the run above its Markdown tables.
func (r *Result) tableTitle() string {
	verdict := "VALID"
	if !r.Report.Valid() {
		verdict = "INVALID"
	}
	return fmt.Sprintf("scenario %s, %s, seed %d, %d cycles, checker %s (%d writes, %d acknowledged, %d lost):\n",
		r.Scenario, r.Timings, r.Seed, len(r.Measures), verdict, r.Report.Writes, r.Report.Acknowledged, r.Report.Counts[checker.KindLost])
}

// RestartTable is the per-restart table of a rolling restart run, in
// Markdown for docs/reliability.md, under a line naming the run; it is
// empty for other runs.
func (r *Result) RestartTable() string {
	gaps := r.restartGaps()
	if len(gaps) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(r.tableTitle())
	b.WriteString("| cycle | restarted | SIGTERM to exit | longest without an ack, per partition |\n")
	b.WriteString("|---|---|---|---|\n")
	for _, m := range r.Measures {
		for _, rs := range m.Restarts {
			fmt.Fprintf(&b, "| %d | %s | %s | %s |\n", m.Cycle+1, rs.Agent, seconds(rs.Exited-rs.Stopped), gapList(rs.Gaps))
		}
	}
	fmt.Fprintf(&b, "| median / p99 | | | %s |", durationStats(gaps))
	return b.String()
}
