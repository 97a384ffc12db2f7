package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/logagent/logagent/client"
)

func runRebalance(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("rebalance", stderr)
	execute := fs.Bool("execute", false, "start the planned moves, one partition at a time, waiting for each; by default only print the plan")
	wf := addWaitFlags(fs, 200*time.Millisecond, "how often a move in flight is checked", "give up after this long (a move in flight goes on)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	m, stop, err := wf.start()
	if err != nil {
		return err
	}
	defer stop()
	plan, err := m.c.Rebalance(m.ctx)
	if err != nil {
		return m.fail(err)
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
	for _, mv := range plan.Moves {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", mv.Topic, mv.Partition, strings.Join(mv.Replicas, ","), strings.Join(mv.Target, ","))
	}
	tw.Flush()
	if !*execute {
		fmt.Fprintf(stdout, "%d moves planned; logagent rebalance -execute starts them\n", len(plan.Moves))
		return nil
	}
	out := newProgressOut(stdout)
	var missed []string
	for i, mv := range plan.Moves {
		name := mv.Topic + "/" + strconv.Itoa(mv.Partition)
		if i > 0 {
			// The moves before took time: a drain, a self-healing move or
			// another operator may have changed what this one should be.
			// Start it only as a fresh plan still has it.
			fresh, err := m.c.Rebalance(m.ctx)
			if err != nil {
				return m.fail(err)
			}
			j := slices.IndexFunc(fresh.Moves, func(f client.RebalanceMove) bool {
				return f.Topic == mv.Topic && f.Partition == mv.Partition && slices.Equal(f.Replicas, mv.Replicas)
			})
			if j < 0 {
				out.println(fmt.Sprintf("[%d/%d] %s skipped: the plan no longer moves it (run logagent rebalance again)", i+1, len(plan.Moves), name))
				continue
			}
			mv = fresh.Moves[j]
		}
		start := time.Now()
		r, err := m.c.MovePartition(m.ctx, mv.Topic, mv.Partition, mv.Target)
		if err != nil {
			return fmt.Errorf("[%d/%d] move of %s to %s: %w", i+1, len(plan.Moves), name, strings.Join(mv.Target, ","), m.fail(err))
		}
		var eta etas
		for r.Reassignment != nil {
			if err := m.tick(); err != nil {
				return fmt.Errorf("stopped waiting for %s (its move goes on; run logagent rebalance again for the rest): %w", name, err)
			}
			if out.tty {
				r, err = m.moveWithProgress(mv.Topic, mv.Partition)
			} else {
				r, err = m.c.Reassignment(m.ctx, mv.Topic, mv.Partition)
			}
			if err != nil {
				return m.fail(err)
			}
			if r.Reassignment != nil {
				b := barOf(name, r)
				eta.fill(&b, time.Now())
				out.update(fmt.Sprintf("[%d/%d]", i+1, len(plan.Moves)), []moveBar{b}, "")
			}
		}
		if err := notOnTarget(name, r.Replicas, mv.Target); err != nil {
			out.println(fmt.Sprintf("[%d/%d] %v", i+1, len(plan.Moves), err))
			missed = append(missed, name)
			continue
		}
		out.println(fmt.Sprintf("[%d/%d] %s now on %s (%s)", i+1, len(plan.Moves), name, strings.Join(r.Replicas, ","), time.Since(start).Round(time.Millisecond)))
	}
	if len(missed) > 0 {
		return fmt.Errorf("%d of %d moves did not reach their target (%s); run logagent rebalance again", len(missed), len(plan.Moves), strings.Join(missed, ", "))
	}
	fmt.Fprintln(stdout, "done; leaderships follow the preferred leaders after replication.leader_rebalance_delay")
	return nil
}
