package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
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

// reassignment is the agent's answer about a partition's move
// (docs/api.md, "Moving a partition's replicas").
type reassignment struct {
	Topic         string        `json:"topic"`
	Partition     int           `json:"partition"`
	Replicas      []string      `json:"replicas"`
	ISR           []string      `json:"isr"`
	Leader        string        `json:"leader"`
	LeaderAddress string        `json:"leader_address"`
	Move          *reassignMove `json:"reassignment"`
}

type reassignMove struct {
	Target               []string        `json:"target"`
	Adding               []string        `json:"adding"`
	Removing             []string        `json:"removing"`
	Progress             []progressEntry `json:"progress"`
	LeaderLogStartOffset *int64          `json:"leader_log_start_offset"`
	LeaderLogEndOffset   *int64          `json:"leader_log_end_offset"`
	Cancelled            bool            `json:"cancelled"`
}

type progressEntry struct {
	Node         string `json:"node"`
	LogEndOffset int64  `json:"log_end_offset"`
	Lag          int64  `json:"lag"`
	InSync       bool   `json:"in_sync"`
	CatchUpBytes int64  `json:"catch_up_bytes"`
}

func runPartitionMove(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("partition move", stderr)
	topic := fs.String("topic", "", "the topic")
	part := fs.Int("partition", -1, "the partition")
	replicas := fs.String("replicas", "", "the new replica list, comma-separated node ids; the first is the preferred leader")
	cancelMove := fs.Bool("cancel", false, "cancel the move in flight instead: the partition goes back to the replicas it had, the ones the move added delete their data")
	noWait := fs.Bool("no-wait", false, "start the move (or the cancel) and return; by default wait until it is done, showing progress (a bar on a terminal)")
	interval := fs.Duration("interval", time.Second, "how often progress is shown while waiting")
	addr := addrFlag(fs)
	timeout := fs.Duration("timeout", time.Hour, "give up waiting after this long (the move goes on)")
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
	case *interval <= 0:
		return fmt.Errorf("%w: -interval must be positive", errUsage)
	}
	for i, n := range target {
		if slices.Contains(target[:i], n) {
			return fmt.Errorf("%w: -replicas names %s twice", errUsage, n)
		}
	}
	api, err := newRawAgent(addr)
	if err != nil {
		return err
	}
	ctx, cancel := timedContext(*timeout)
	defer cancel()
	path := reassignPath(*topic, *part)
	name := *topic + "/" + strconv.Itoa(*part)
	if *cancelMove {
		var back reassignment
		if err := api.do(ctx, http.MethodDelete, api.base, path, nil, &back); err != nil {
			return explain(err, api.base, *timeout)
		}
		fmt.Fprintf(stdout, "cancelling the move of %s: back to %s, removing %s\n", name, strings.Join(back.Move.Target, ","), joinOrDash(back.Move.Removing))
	} else {
		body, _ := json.Marshal(map[string][]string{"replicas": target})
		var started reassignment
		if err := api.do(ctx, http.MethodPost, api.base, path, body, &started); err != nil {
			return explain(err, api.base, *timeout)
		}
		if started.Move == nil {
			fmt.Fprintf(stdout, "%s already has replicas %s: nothing to move\n", name, strings.Join(started.Replicas, ","))
			return nil
		}
		fmt.Fprintf(stdout, "moving %s to %s: adding %s, removing %s\n", name, strings.Join(started.Move.Target, ","),
			joinOrDash(started.Move.Adding), joinOrDash(started.Move.Removing))
	}
	if *noWait {
		return nil
	}
	ticker := time.NewTicker(*interval)
	defer ticker.Stop()
	out := newProgressOut(stdout)
	var eta etas
	for {
		now, err := moveWithProgress(ctx, api, *topic, *part)
		if err != nil {
			return explain(err, api.base, *timeout)
		}
		if now.Move == nil {
			out.println(fmt.Sprintf("done: %s has replicas %s, ISR %s", name, strings.Join(now.Replicas, ","), joinOrDash(now.ISR)))
			return nil
		}
		bar := barOf(name, now)
		eta.fill(&bar, time.Now())
		out.update("", []moveBar{bar}, progressLine(now))
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped waiting (the move or its cancel goes on; logagent status shows it): %w", ctx.Err())
		case <-ticker.C:
		}
	}
}

// moveWithProgress is the partition's move as the agent answers, with its
// progress from the partition's leader when the agent does not lead it:
// only the leader sees its followers' progress.
func moveWithProgress(ctx context.Context, api *rawAgent, topic string, partition int) (reassignment, error) {
	path := reassignPath(topic, partition)
	var now reassignment
	if err := api.do(ctx, http.MethodGet, api.base, path, nil, &now); err != nil {
		return now, err
	}
	if now.Move != nil && len(now.Move.Progress) == 0 && now.LeaderAddress != "" {
		var fromLeader reassignment
		if err := api.do(ctx, http.MethodGet, api.schemeOf(now.LeaderAddress), path, nil, &fromLeader); err == nil && fromLeader.Move != nil {
			now.Move.Progress = fromLeader.Move.Progress
			now.Move.LeaderLogStartOffset, now.Move.LeaderLogEndOffset = fromLeader.Move.LeaderLogStartOffset, fromLeader.Move.LeaderLogEndOffset
		}
	}
	return now, nil
}

func reassignPath(topic string, partition int) string {
	return "/v1/topics/" + url.PathEscape(topic) + "/partitions/" + strconv.Itoa(partition) + "/reassignment"
}

// progressLine is one line of a move's progress.
func progressLine(r reassignment) string {
	parts := []string{"leader " + orDash(r.Leader), "isr " + joinOrDash(r.ISR)}
	for _, p := range r.Move.Progress {
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

// rawAgent calls client API endpoints that package client has no call for,
// with the same address, token and TLS flags.
type rawAgent struct {
	base  string
	token string
	hc    *http.Client
}

func newRawAgent(f *agentFlags) (*rawAgent, error) {
	token, tlsCfg, err := f.options()
	if err != nil {
		return nil, err
	}
	c, err := client.New(*f.addr)
	if err != nil {
		return nil, fmt.Errorf("%w: -addr: %v", errUsage, err)
	}
	return &rawAgent{base: c.Addr(), token: token, hc: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}}, nil
}

// schemeOf is another agent's client address (host:port) with this
// agent's scheme.
func (a *rawAgent) schemeOf(hostPort string) string {
	scheme, _, _ := strings.Cut(a.base, "://")
	return scheme + "://" + hostPort
}

// do sends one request and decodes a 2xx answer into out; an error answer
// of 400 or 404 is bad usage (exit 2), any other a failure.
func (a *rawAgent) do(ctx context.Context, method, base, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		// The caller explains it (explain.go), with its time limit.
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &e) == nil && e.Error.Code != "" {
			msg = e.Error.Code + ": " + e.Error.Message
		}
		err := fmt.Errorf("%s %s: %d %s", method, base+path, resp.StatusCode, msg)
		if resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusConflict {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		return err
	}
	return json.Unmarshal(data, out)
}
