package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

var nodeSubcommands = []subcommand[func(args []string, stdout, stderr io.Writer) error]{
	{"drain", "move every replica and leadership off an agent: node drain nX [-no-wait] [-cancel]", runNodeDrain},
}

func runNode(args []string, stdout, stderr io.Writer) error {
	return runSubcommand("node", nodeSubcommands, args, stdout, stderr)
}

// drainState is the agent's answer about a drain (docs/api.md, "Draining
// an agent").
type drainState struct {
	Node        string `json:"node"`
	Draining    bool   `json:"draining"`
	Replicas    int    `json:"replicas"`
	Leaderships int    `json:"leaderships"`
	Partitions  []struct {
		Topic     string   `json:"topic"`
		Partition int      `json:"partition"`
		Replicas  []string `json:"replicas"`
		Leader    string   `json:"leader"`
		Moving    bool     `json:"moving"`
	} `json:"partitions"`
}

func runNodeDrain(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("node drain", stderr)
	var node string
	noWait := fs.Bool("no-wait", false, "start the drain and return; by default wait until no replica is left on the agent, showing progress")
	cancelDrain := fs.Bool("cancel", false, "stop draining the agent (moves in flight finish; the agent may take replicas again)")
	interval := fs.Duration("interval", time.Second, "how often progress is shown while waiting")
	addr := addrFlag(fs)
	timeout := fs.Duration("timeout", time.Hour, "give up waiting after this long (the drain goes on)")
	if err := parseFlagsWithArg(fs, args, &node, "agent", "node drain", "nX"); err != nil {
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
	path := "/v1/nodes/" + url.PathEscape(node) + "/drain"
	method := http.MethodPost
	if *cancelDrain {
		method = http.MethodDelete
	}
	var st drainState
	if err := api.do(ctx, method, api.base, path, nil, &st); err != nil {
		return explain(err, api.base, *timeout)
	}
	if *cancelDrain {
		fmt.Fprintf(stdout, "%s is no longer drained; %d replicas left on it\n", node, st.Replicas)
		return nil
	}
	fmt.Fprintf(stdout, "draining %s: %d replicas, %d leaderships to move\n", node, st.Replicas, st.Leaderships)
	if *noWait {
		return nil
	}
	ticker := time.NewTicker(*interval)
	defer ticker.Stop()
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
			bars = drainBars(ctx, api, st, &eta)
		}
		out.update(fmt.Sprintf("%d replicas, %d leaderships left on %s", st.Replicas, st.Leaderships, node), bars, drainLine(st))
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped waiting (the drain goes on; logagent node drain %s shows it): %w", node, ctx.Err())
		case <-ticker.C:
		}
		if err := api.do(ctx, http.MethodGet, api.base, path, nil, &st); err != nil {
			return explain(err, api.base, *timeout)
		}
	}
}

// drainBars are the bars of the drain's moves in flight; a move whose
// state cannot be read is left out until the next update.
func drainBars(ctx context.Context, api *rawAgent, st drainState, eta *etas) []moveBar {
	var bars []moveBar
	for _, p := range st.Partitions {
		if !p.Moving {
			continue
		}
		r, err := moveWithProgress(ctx, api, p.Topic, p.Partition)
		if err != nil || r.Move == nil {
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
func drainLine(st drainState) string {
	var moving []string
	for _, p := range st.Partitions {
		if p.Moving {
			moving = append(moving, fmt.Sprintf("%s/%d", p.Topic, p.Partition))
		}
	}
	return fmt.Sprintf("  %d replicas, %d leaderships left; moving %s", st.Replicas, st.Leaderships, joinOrDash(moving))
}
