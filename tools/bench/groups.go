package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	labench "github.com/logagent/logagent/internal/bench"
)

// The groups group (issue 15): `logagent bench groups` against a dev
// cluster with the shipped default durability, members spread over the
// three agents' client APIs.
const (
	groupsPartitions = 12
	// groupsWorkersPerMember keeps enough commits in flight for the
	// coordinator's batching to show (12 members × 16 = 192 workers); the
	// baseline has as many produce workers.
	groupsWorkersPerMember = 16
	groupsRounds           = 3
	// groupsCommitGoal is issue 15's goal for one coordinator.
	groupsCommitGoal = 20000
	// groupsSessionTimeout is the agents' default session timeout.
	groupsSessionTimeout = 10 * time.Second
)

// groupsSettleRows are the settle events reported, in order, with their
// row names; the kill rows are set against the session timeout.
var groupsSettleRows = []struct {
	event, name string
	vsTimeout   bool
}{
	{labench.EventKill, "kill (no leave) → survivors own all 12, right after a heartbeat answer", true},
	{labench.EventKillMidPoll, "kill (no leave) while its heartbeat is held", true},
	{labench.EventLeave, "graceful leave → the others own all 12", false},
	{labench.EventJoin, "a member joins → all own their share", false},
}

func (o *options) groupsArgs(c *logagentCluster) []string {
	addrs := make([]string, 3)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("http://127.0.0.1:%d", 7070+i+o.portOffset)
	}
	return []string{"groups", "-addr", strings.Join(addrs, ","), "-topic", "groups_bench", "-create",
		"-partitions", fmt.Sprint(groupsPartitions), "-replication-factor", "3", "-min-insync-replicas", "2",
		"-members", fmt.Sprint(groupsPartitions), "-concurrency", fmt.Sprint(groupsWorkersPerMember),
		"-duration", o.duration.String(), "-warmup", o.warmup.String(), "-rounds", fmt.Sprint(groupsRounds)}
}

// logagentGroups runs the groups benchmark and keeps its figures as
// samples: commit rows by records/s (requests/s for the one-offset
// commits, offsets/s for the all-partition ones), settle rows with the
// median as P50 and the max as P99.
func (o *options) logagentGroups(ctx context.Context, res *results, c *logagentCluster) {
	args := o.groupsArgs(c)
	o.progress("logagent consumer groups: commits and settle times")
	o.settle()
	var rep labench.GroupsReport
	timeout := 6*(o.duration+o.warmup) + groupsRounds*2*time.Minute + 2*time.Minute
	reported, err := runLogagentBench(ctx, c.bin, timeout, &rep, args...)
	note := ""
	if err != nil {
		note = err.Error()
		o.note(res, "%v", err)
	}
	if !reported {
		return
	}
	if len(rep.Notes) > 0 {
		note = strings.TrimSpace(note + " " + strings.Join(rep.Notes, "; "))
	}
	cmd := commandLine(args...)
	base := sample{Command: cmd, Setup: c.setup, Note: note}
	if rep.Commit != nil && rep.CommitAllPartitions != nil && rep.ProduceBaseline != nil {
		s := base
		s.RecordsPerSec, s.P50, s.P99 = rep.Commit.RequestsPerSecond, micros(rep.Commit.LatencyMicros.P50), micros(rep.Commit.LatencyMicros.P99)
		res.logagent["groups-commit"] = s
		s = base
		s.RecordsPerSec, s.P50, s.P99 = rep.CommitAllPartitions.RecordsPerSecond, micros(rep.CommitAllPartitions.LatencyMicros.P50), micros(rep.CommitAllPartitions.LatencyMicros.P99)
		res.logagent["groups-commit-all"] = s
		s = base
		s.Note = ""
		s.RecordsPerSec, s.P50, s.P99 = rep.ProduceBaseline.RequestsPerSecond, micros(rep.ProduceBaseline.LatencyMicros.P50), micros(rep.ProduceBaseline.LatencyMicros.P99)
		s.MBPerSec = rep.ProduceBaseline.MBPerSecond
		res.logagent["groups-produce"] = s
		o.progress("  commits %.0f/s (p99 %v), all-partition commits %.0f offsets/s, produce baseline %.0f requests/s",
			rep.Commit.RequestsPerSecond, micros(rep.Commit.LatencyMicros.P99), rep.CommitAllPartitions.RecordsPerSecond, rep.ProduceBaseline.RequestsPerSecond)
	}
	for _, st := range rep.Settle {
		s := base
		s.Note = ""
		s.P50, s.P99 = time.Duration(st.MedianMS*float64(time.Millisecond)), time.Duration(st.MaxMS*float64(time.Millisecond))
		res.logagent["groups-"+st.Event] = s
		o.progress("  settle %s: median %v, max %v over %d runs", st.Event, s.P50, s.P99, len(st.RunsMS))
	}
}

// groupRows are the groups group's rows.
func groupRows(res *results) []comparison {
	produce := res.logagent["groups-produce"]
	produceSide := "acks=all produce, one 50 B record per request, the same workers"
	rows := []comparison{
		{Group: "groups", Name: fmt.Sprintf("commits, 1 offset per request (12 members × %d workers)", groupsWorkersPerMember),
			TheirsName: produceSide, Ours: res.logagent["groups-commit"], Theirs: produce, Metric: byRecords, MinRate: groupsCommitGoal},
		{Group: "groups", Name: "commits of all 12 offsets per request (one member owns all), offsets/s",
			TheirsName: produceSide, Ours: res.logagent["groups-commit-all"], Theirs: produce, Metric: byRecords},
	}
	timeout := sample{P50: groupsSessionTimeout, P99: groupsSessionTimeout, Command: "the members' session_timeout_ms (the agents' default)"}
	for _, r := range groupsSettleRows {
		row := comparison{Group: "groups", Name: r.name, Ours: res.logagent["groups-"+r.event], Metric: byP99}
		if r.vsTimeout {
			row.TheirsName, row.Theirs = "the session timeout", timeout
		}
		rows = append(rows, row)
	}
	return rows
}
