package main

import (
	"fmt"
	"io"
	"time"

	"github.com/logagent/logagent/client"
)

var nodeSubcommands = []subcommand[func(args []string, stdout, stderr io.Writer) error]{
	{"drain", "move every replica and leadership off an agent: node drain nX [-no-wait] [-cancel]", runNodeDrain},
}

func runNode(args []string, stdout, stderr io.Writer) error {
	return runSubcommand("node", nodeSubcommands, args, stdout, stderr)
}

func runNodeDrain(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("node drain", stderr)
	var node string
	noWait := fs.Bool("no-wait", false, "start the drain and return; by default wait until no replica is left on the agent, showing progress")
	cancelDrain := fs.Bool("cancel", false, "stop draining the agent (moves in flight finish; the agent may take replicas again)")
	wf := addWaitFlags(fs, time.Second, "how often progress is shown while waiting", "give up waiting after this long (the drain goes on)")
	if err := parseFlagsWithArg(fs, args, &node, "agent", "node drain", "nX"); err != nil {
		return err
	}
	m, stop, err := wf.start()
	if err != nil {
		return err
	}
	defer stop()
	if *cancelDrain {
		st, err := m.c.CancelDrain(m.ctx, node)
		if err != nil {
			return m.fail(err)
		}
		fmt.Fprintf(stdout, "%s is no longer drained; %d replicas left on it\n", node, st.Replicas)
		return nil
	}
	st, err := m.c.DrainNode(m.ctx, node)
	if err != nil {
		return m.fail(err)
	}
	fmt.Fprintf(stdout, "draining %s: %d replicas, %d leaderships to move\n", node, st.Replicas, st.Leaderships)
	if *noWait {
		return nil
	}
	out := newProgressOut(stdout)
	var eta etas
	for {
		if st.Replicas == 0 {
			out.println(fmt.Sprintf("done: %s holds no replica and leads nothing", node))
			return nil
		}
		if !st.Draining {
			return fmt.Errorf("%s is no longer being drained (logagent node drain -cancel?): %d replicas left on it", node, st.Replicas)
		}
		var bars []moveBar
		if out.tty {
			// A bar per move in flight; a pipe gets the plain line only,
			// so it costs no request per move.
			bars = drainBars(m, st, &eta)
		}
		out.update(fmt.Sprintf("%d replicas, %d leaderships left on %s", st.Replicas, st.Leaderships, node), bars, drainLine(st))
		if err := m.tick(); err != nil {
			return fmt.Errorf("stopped waiting (the drain goes on; logagent node drain %s shows it): %w", node, err)
		}
		if st, err = m.c.NodeDrain(m.ctx, node); err != nil {
			return m.fail(err)
		}
	}
}

// drainBars are the bars of the drain's moves in flight; a move whose
// state cannot be read is left out until the next update.
func drainBars(m *movesCall, st *client.DrainStatus, eta *etas) []moveBar {
	var bars []moveBar
	for _, p := range st.Partitions {
		if !p.Moving {
			continue
		}
		r, err := m.moveWithProgress(p.Topic, p.Partition)
		if err != nil || r.Reassignment == nil {
			continue
		}
		b := barOf(fmt.Sprintf("%s/%d", p.Topic, p.Partition), r)
		eta.fill(&b, time.Now())
		bars = append(bars, b)
	}
	return bars
}

// drainLine is one line of a drain's progress: what is left, and the
// partitions being moved.
func drainLine(st *client.DrainStatus) string {
	var moving []string
	for _, p := range st.Partitions {
		if p.Moving {
			moving = append(moving, fmt.Sprintf("%s/%d", p.Topic, p.Partition))
		}
	}
	return fmt.Sprintf("  %d replicas, %d leaderships left; moving %s", st.Replicas, st.Leaderships, joinOrDash(moving))
}
