package main

import (
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
	last := ""
	for {
		if st.Replicas == 0 {
			fmt.Fprintf(stdout, "done: %s holds no replica and leads nothing\n", node)
			return nil
		}
		if !st.Draining {
			return fmt.Errorf("%s is no longer being drained (logagent node drain -cancel?): %d replicas left on it", node, st.Replicas)
		}
		if line := drainLine(st); line != last {
			fmt.Fprintln(stdout, line)
			last = line
		}
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
