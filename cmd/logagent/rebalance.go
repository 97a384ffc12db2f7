package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// rebalancePlan is GET /v1/rebalance (docs/api.md, "Rebalancing").
type rebalancePlan struct {
	Agents []struct {
		Node                  string `json:"node"`
		Replicas              int    `json:"replicas"`
		PreferredLeaders      int    `json:"preferred_leaders"`
		ReplicasAfter         int    `json:"replicas_after"`
		PreferredLeadersAfter int    `json:"preferred_leaders_after"`
	} `json:"agents"`
	Moves []struct {
		Topic     string   `json:"topic"`
		Partition int      `json:"partition"`
		Replicas  []string `json:"replicas"`
		Target    []string `json:"target"`
	} `json:"moves"`
}

func runRebalance(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("rebalance", stderr)
	execute := fs.Bool("execute", false, "start the planned moves, one partition at a time, waiting for each; by default only print the plan")
	interval := fs.Duration("interval", 200*time.Millisecond, "how often a move in flight is checked")
	addr := addrFlag(fs)
	timeout := fs.Duration("timeout", time.Hour, "give up after this long (a move in flight goes on)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *interval <= 0 {
		return fmt.Errorf("%w: -interval must be positive", errUsage)
	}
	api, err := newRawAgent(addr)
	if err != nil {
		return err
	}
	ctx, cancel := timedContext(*timeout)
	defer cancel()
	var plan rebalancePlan
	if err := api.do(ctx, http.MethodGet, api.base, "/v1/rebalance", nil, &plan); err != nil {
		return explain(err, api.base, *timeout)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tREPLICAS\tPREFERRED LEADERS\tAFTER: REPLICAS\tPREFERRED LEADERS")
	for _, a := range plan.Agents {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", a.Node, a.Replicas, a.PreferredLeaders, a.ReplicasAfter, a.PreferredLeadersAfter)
	}
	tw.Flush()
	if len(plan.Moves) == 0 {
		fmt.Fprintln(stdout, "balanced: nothing to move")
		return nil
	}
	fmt.Fprintln(stdout)
	tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tREPLICAS\tTARGET")
	for _, m := range plan.Moves {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", m.Topic, m.Partition, strings.Join(m.Replicas, ","), strings.Join(m.Target, ","))
	}
	tw.Flush()
	if !*execute {
		fmt.Fprintf(stdout, "%d moves planned; logagent rebalance -execute starts them\n", len(plan.Moves))
		return nil
	}
	ticker := time.NewTicker(*interval)
	defer ticker.Stop()
	out := newProgressOut(stdout)
	for i, m := range plan.Moves {
		name := m.Topic + "/" + strconv.Itoa(m.Partition)
		path := reassignPath(m.Topic, m.Partition)
		body, _ := json.Marshal(map[string][]string{"replicas": m.Target})
		start := time.Now()
		var r reassignment
		if err := api.do(ctx, http.MethodPost, api.base, path, body, &r); err != nil {
			return fmt.Errorf("[%d/%d] move of %s to %s: %w", i+1, len(plan.Moves), name, strings.Join(m.Target, ","), explain(err, api.base, *timeout))
		}
		var eta etas
		var err error
		for r.Move != nil {
			select {
			case <-ctx.Done():
				return fmt.Errorf("stopped waiting for %s (its move goes on; run logagent rebalance again for the rest): %w", name, ctx.Err())
			case <-ticker.C:
			}
			if out.tty {
				r, err = moveWithProgress(ctx, api, m.Topic, m.Partition)
			} else {
				err = api.do(ctx, http.MethodGet, api.base, path, nil, &r)
			}
			if err != nil {
				return explain(err, api.base, *timeout)
			}
			if r.Move != nil {
				b := barOf(name, r)
				eta.fill(&b, time.Now())
				out.update(fmt.Sprintf("[%d/%d]", i+1, len(plan.Moves)), []moveBar{b}, "")
			}
		}
		out.println(fmt.Sprintf("[%d/%d] %s now on %s (%s)", i+1, len(plan.Moves), name, strings.Join(r.Replicas, ","), time.Since(start).Round(time.Millisecond)))
	}
	fmt.Fprintln(stdout, "done; leaderships follow the preferred leaders after replication.leader_rebalance_delay")
	return nil
}
