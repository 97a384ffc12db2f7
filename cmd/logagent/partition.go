package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/logagent/logagent/client"
)

var partitionSubcommands = []subcommand[func(args []string, stdout, stderr io.Writer) error]{
	{"move", "move a partition to a new replica list: partition move -topic T -partition P -replicas n1,n2,n4 [-no-wait]; -cancel instead of -replicas cancels the move in flight", runPartitionMove},
}

func runPartition(args []string, stdout, stderr io.Writer) error {
	return runSubcommand("partition", partitionSubcommands, args, stdout, stderr)
}

func runPartitionMove(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("partition move", stderr)
	topic := fs.String("topic", "", "the topic")
	part := fs.Int("partition", -1, "the partition")
	replicas := fs.String("replicas", "", "the new replica list, comma-separated node ids; the first is the preferred leader")
	cancelMove := fs.Bool("cancel", false, "cancel the move in flight instead: the partition goes back to the replicas it had, the ones the move added delete their data")
	noWait := fs.Bool("no-wait", false, "start the move (or the cancel) and return; by default wait until it is done, showing progress (a bar on a terminal)")
	wf := addWaitFlags(fs, time.Second, "how often progress is shown while waiting", "give up waiting after this long (the move goes on)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	target := strings.Split(*replicas, ",")
	switch {
	case *topic == "":
		return fmt.Errorf("%w: name the topic: -topic T", errUsage)
	case *part < 0:
		return fmt.Errorf("%w: name the partition: -partition P (from 0)", errUsage)
	case *cancelMove && *replicas != "":
		return fmt.Errorf("%w: -cancel takes no -replicas: it goes back to the replicas the partition had", errUsage)
	case !*cancelMove && (*replicas == "" || slices.Contains(target, "")):
		return fmt.Errorf("%w: -replicas must list node ids separated by commas, such as n1,n2,n4", errUsage)
	}
	for i, n := range target {
		if slices.Contains(target[:i], n) {
			return fmt.Errorf("%w: -replicas names %s twice", errUsage, n)
		}
	}
	m, stop, err := wf.start()
	if err != nil {
		return err
	}
	defer stop()
	name := *topic + "/" + strconv.Itoa(*part)
	if *cancelMove {
		back, err := m.c.CancelMove(m.ctx, *topic, *part)
		if err != nil {
			return m.fail(err)
		}
		target = back.Reassignment.Target
		fmt.Fprintf(stdout, "cancelling the move of %s: back to %s, removing %s\n", name, strings.Join(back.Reassignment.Target, ","), joinOrDash(back.Reassignment.Removing))
	} else {
		started, err := m.c.MovePartition(m.ctx, *topic, *part, target)
		if err != nil {
			return m.fail(err)
		}
		if started.Reassignment == nil {
			fmt.Fprintf(stdout, "%s already has replicas %s: nothing to move\n", name, strings.Join(started.Replicas, ","))
			return nil
		}
		fmt.Fprintf(stdout, "moving %s to %s: adding %s, removing %s\n", name, strings.Join(started.Reassignment.Target, ","),
			joinOrDash(started.Reassignment.Adding), joinOrDash(started.Reassignment.Removing))
	}
	if *noWait {
		return nil
	}
	out := newProgressOut(stdout)
	var eta etas
	for {
		now, err := m.moveWithProgress(*topic, *part)
		if err != nil {
			return m.fail(err)
		}
		if now.Reassignment == nil {
			if err := notOnTarget(name, now.Replicas, target); err != nil {
				return err
			}
			out.println(fmt.Sprintf("done: %s has replicas %s, ISR %s", name, strings.Join(now.Replicas, ","), joinOrDash(now.ISR)))
			return nil
		}
		bar := barOf(name, now)
		eta.fill(&bar, time.Now())
		out.update("", []moveBar{bar}, progressLine(now))
		if err := m.tick(); err != nil {
			return fmt.Errorf("stopped waiting (the move or its cancel goes on; logagent status shows it): %w", err)
		}
	}
}

// notOnTarget is the error of a wait for a move that ended (no move in
// flight) with the partition on other replicas than target: the move was
// cancelled (partition move -cancel, DELETE .../reassignment) before it
// completed, or another move came after it. Nil when it is on target.
func notOnTarget(name string, replicas, target []string) error {
	if slices.Equal(replicas, target) {
		return nil
	}
	return fmt.Errorf("%s is on %s, not on %s: the move was cancelled before it completed, or another move followed it",
		name, strings.Join(replicas, ","), strings.Join(target, ","))
}

// progressLine is one line of a move's progress.
func progressLine(r *client.MoveStatus) string {
	parts := []string{"leader " + orDash(r.Leader), "isr " + joinOrDash(r.ISR)}
	for _, p := range r.Reassignment.Progress {
		state := fmt.Sprintf("lag %d, %s sent", p.Lag, formatBytes(p.CatchUpBytes))
		if p.InSync {
			state = "in sync"
		}
		parts = append(parts, fmt.Sprintf("%s: %s", p.Node, state))
	}
	return "  " + strings.Join(parts, "; ")
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
