package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/logagent/logagent/client"
)

func runStatus(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", stderr)
	addr, timeout, format := addrFlag(fs), timeoutFlag(fs), formatFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkFormat(*format); err != nil {
		return err
	}
	c, ctx, cancel, err := agentCall(addr, *timeout)
	if err != nil {
		return err
	}
	defer cancel()
	st, err := readStatus(ctx, c)
	var apiErr *client.Error
	var done *explained
	if !errors.As(err, &done) && errors.As(err, &apiErr) && clusterNotReady(apiErr.Code) {
		// The other commands' hint for this answer is this command. One
		// readStatus explained already (an agent starting) stays so.
		msg, code := apiErrorParts(apiErr)
		line := fmt.Sprintf("the agent at %s cannot show the cluster now: %s (%s); the agent's log says why", c.Addr(), msg, code)
		if errors.Is(err, context.DeadlineExceeded) {
			line = fmt.Sprintf("gave up retrying after -timeout %s: %s", *timeout, line)
		}
		return &explained{line: line, err: err}
	}
	if err != nil {
		return explain(err, c.Addr(), *timeout)
	}
	if *format == "json" {
		return writeJSON(stdout, st.json())
	}
	return st.write(stdout)
}

// clusterStatus is what status shows: the agent asked, the agents, and
// every topic as that agent describes it.
type clusterStatus struct {
	addr   string
	health *client.Health
	agents []agentState
	topics []client.TopicInfo
}

// agentState is an agent and whether it is up: one Consul reports alive,
// or down: named as a replica in the metadata but not alive.
type agentState struct {
	NodeID string `json:"node_id"`
	Up     bool   `json:"up"`
	// NotPassing: up, but in Consul maintenance mode or with a check in
	// warning, so it takes no new replica.
	NotPassing bool `json:"not_passing,omitempty"`
	// Draining: being drained (logagent node drain), so its replicas move
	// off and it takes no new one.
	Draining bool `json:"draining,omitempty"`
	// Version: the build it registered ("" for a down agent).
	Version       string `json:"version,omitempty"`
	ClientAddress string `json:"client_address"`
	PeerAddress   string `json:"peer_address"`
}

func readStatus(ctx context.Context, c *client.Client) (*clusterStatus, error) {
	health, err := c.Health(ctx)
	var starting *client.Error
	if errors.As(err, &starting) && starting.Code == client.CodeServiceUnavailable {
		// A starting or stopping agent answers its health with 503 and
		// serves no topics yet: say so instead of a bare error.
		return nil, &explained{line: fmt.Sprintf("the agent at %s does not serve yet: %s", c.Addr(), starting.Message), err: err}
	}
	if err != nil {
		return nil, err
	}
	agentStatus, err := c.Status(ctx)
	if err != nil {
		return nil, err
	}
	listed, err := c.ListTopics(ctx)
	if err != nil {
		return nil, err
	}
	st := &clusterStatus{addr: c.Addr(), health: health}
	for _, t := range listed {
		if t.Partitions == nil {
			info, err := c.DescribeTopic(ctx, t.Name)
			if errors.Is(err, client.ErrUnknownTopic) {
				continue // deleted since the list
			}
			if err != nil {
				return nil, err
			}
			t = *info
		}
		st.topics = append(st.topics, t)
	}
	slices.SortFunc(st.topics, func(a, b client.TopicInfo) int { return strings.Compare(a.Name, b.Name) })
	// The agents Consul reports alive, and the replicas the metadata
	// names that are not among them: those are down.
	known := map[string]bool{}
	for _, a := range agentStatus.Agents {
		known[a.NodeID] = true
		st.agents = append(st.agents, agentState{NodeID: a.NodeID, Up: true, NotPassing: a.NotPassing, Draining: a.Draining, Version: a.Version, ClientAddress: a.ClientAddress, PeerAddress: a.PeerAddress})
	}
	for _, t := range st.topics {
		for _, p := range t.Partitions {
			for _, id := range p.Replicas {
				if !known[id] {
					known[id] = true
					st.agents = append(st.agents, agentState{NodeID: id})
				}
			}
		}
	}
	slices.SortFunc(st.agents, func(a, b agentState) int { return strings.Compare(a.NodeID, b.NodeID) })
	return st, nil
}

func (st *clusterStatus) write(w io.Writer) error {
	fmt.Fprintf(w, "agent %s: node %s, %s\n\n", st.addr, st.health.NodeID, st.health.Status)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tSTATE\tCLIENT-ADDRESS\tPEER-ADDRESS")
	down, notPassing, draining := 0, 0, 0
	for _, a := range st.agents {
		state := "up"
		switch {
		case !a.Up:
			state, down = "DOWN", down+1
		case a.NotPassing:
			state, notPassing = "up, not-passing", notPassing+1
		}
		if a.Up && a.Draining {
			state, draining = state+", draining", draining+1
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.NodeID, state, orDash(a.ClientAddress), orDash(a.PeerAddress))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	summary := fmt.Sprintf("\n%d agent(s), %d up", len(st.agents), len(st.agents)-down)
	if down > 0 {
		summary += fmt.Sprintf(", %d DOWN", down)
	}
	if notPassing > 0 {
		summary += fmt.Sprintf(", %d not passing every Consul check (maintenance mode, a warning: no new replicas there)", notPassing)
	}
	if draining > 0 {
		summary += fmt.Sprintf(", %d being drained (no new replicas there)", draining)
	}
	summary += versionsRunning(st.agents)
	if len(st.topics) == 0 {
		_, err := fmt.Fprintln(w, summary+"; no topics")
		return err
	}
	fmt.Fprintln(w)
	if err := writePartitionTable(w, st.topics, true); err != nil {
		return err
	}
	partitions, states, moved, moving := 0, map[string]int{}, 0, 0
	for _, t := range st.topics {
		minISR := configInt(t.Config, "min_insync_replicas")
		for _, p := range t.Partitions {
			partitions++
			states[partitionState(p, minISR)]++
			if notPreferred(p) {
				moved++
			}
			if p.Reassignment != nil {
				moving++
			}
		}
	}
	summary += fmt.Sprintf("; %d topic(s), %d partition(s)", len(st.topics), partitions)
	for _, s := range []string{"offline", "below-min-isr", "under-replicated"} {
		if states[s] > 0 {
			summary += fmt.Sprintf(", %d %s", states[s], s)
		}
	}
	if moved > 0 {
		summary += fmt.Sprintf(", %d not led by their preferred replica", moved)
	}
	if moving > 0 {
		summary += fmt.Sprintf(", %d being moved", moving)
	}
	_, err := fmt.Fprintln(w, summary)
	return err
}

// statusJSON is status -format json.
type statusJSON struct {
	Agent struct {
		Address string `json:"address"`
		NodeID  string `json:"node_id"`
		Status  string `json:"status"`
	} `json:"agent"`
	Agents []agentState `json:"agents"`
	Topics []topicJSON  `json:"topics"`
}

func (st *clusterStatus) json() statusJSON {
	var out statusJSON
	out.Agent.Address, out.Agent.NodeID, out.Agent.Status = st.addr, st.health.NodeID, st.health.Status
	out.Agents = append([]agentState{}, st.agents...)
	out.Topics = []topicJSON{}
	for _, t := range st.topics {
		out.Topics = append(out.Topics, toTopicJSON(t))
	}
	return out
}

// versionsRunning says which agents run which build when the agents up run
// more than one (a rolling upgrade under way), "" otherwise.
func versionsRunning(agents []agentState) string {
	byVersion := map[string][]string{}
	for _, a := range agents {
		if a.Up {
			v := a.Version
			if v == "" {
				v = "unknown"
			}
			byVersion[v] = append(byVersion[v], a.NodeID)
		}
	}
	if len(byVersion) < 2 {
		return ""
	}
	var parts []string
	for _, v := range slices.Sorted(maps.Keys(byVersion)) {
		parts = append(parts, fmt.Sprintf("%s on %s", v, strings.Join(byVersion[v], ",")))
	}
	return fmt.Sprintf(", %d versions running (%s)", len(byVersion), strings.Join(parts, "; "))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
