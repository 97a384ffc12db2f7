package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/logagent/logagent/client"
	"github.com/logagent/logagent/config"
)

var topicSubcommands = []subcommand[func(args []string, stdout, stderr io.Writer) error]{
	{"create", "create a topic: topic create -name T [-partitions N -replication-factor R -min-insync-replicas M]", runTopicCreate},
	{"list", "list the topics' names", runTopicList},
	{"describe", "show a topic's configuration and partitions: topic describe T", runTopicDescribe},
	{"alter", "add partitions, change settings: topic alter T [-partitions N -min-insync-replicas M -retention 72h|default -retention-bytes 10GiB|default]", runTopicAlter},
	{"delete", "delete a topic and its records: topic delete T", runTopicDelete},
}

func runTopic(args []string, stdout, stderr io.Writer) error {
	return runSubcommand("topic", topicSubcommands, args, stdout, stderr)
}

// shippedReplicationFactor is topic_defaults.replication_factor in
// config/defaults.hcl: a topic created without -replication-factor gets
// it, capped by the agents that are live (agent topic creation), unless
// the agents' configuration says otherwise.
const shippedReplicationFactor = 3

// leaderPollInterval is how often topic create looks for the leaders.
const leaderPollInterval = 200 * time.Millisecond

func runTopicCreate(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("topic create", stderr)
	name := fs.String("name", "", "the topic's name (or give it as the argument)")
	partitions := fs.Int("partitions", 0, "number of partitions (default: the agents' topic_defaults)")
	replication := fs.Int("replication-factor", 0, "replicas per partition (default: topic_defaults, capped by the live agents)")
	minISR := fs.Int("min-insync-replicas", 0, "in-sync replicas an acks=all write needs (default: topic_defaults, capped by the replication factor)")
	wait := fs.Bool("wait", true, "wait, within -timeout, until every partition has a leader")
	addr, timeout := addrFlag(fs), timeoutFlag(fs)
	timeoutUsage := fs.Lookup("timeout")
	timeoutUsage.Usage, timeoutUsage.DefValue = "give up after this long (default 10s plus 10ms per partition: the agents answer a creation within 5s plus 3ms per partition, and 10,000 partitions took 26s to 1m39s to get their leaders)", "0s"
	if err := parseFlagsWithName(fs, args, name); err != nil {
		return err
	}
	if *partitions < 0 || *replication < 0 || *minISR < 0 {
		return fmt.Errorf("%w: -partitions, -replication-factor and -min-insync-replicas must not be negative", errUsage)
	}
	if !flagGiven(fs, "timeout") {
		*timeout = topicCreateTimeout(*partitions)
	}
	c, ctx, cancel, err := agentCall(addr, *timeout)
	if err != nil {
		return err
	}
	defer cancel()
	fail := func(err error) error { return explain(usageError(err), c.Addr(), *timeout) }
	spec := client.TopicSpec{Name: *name, Partitions: *partitions, ReplicationFactor: *replication, MinInsyncReplicas: *minISR}
	if err := c.CreateTopic(ctx, spec); err != nil {
		return changeFailed(err, c.Addr(), *timeout, "create", *name)
	}
	// The agent answers once its metadata has the topic: its description
	// says what was created, defaults filled in.
	info, err := c.DescribeTopic(ctx, *name)
	if err != nil {
		return fail(err)
	}
	rf, isr := configInt(info.Config, "replication_factor"), configInt(info.Config, "min_insync_replicas")
	fmt.Fprintf(stdout, "created topic %s: %d partition(s), replication factor %d, min_insync_replicas %d\n", info.Name, len(info.Partitions), rf, isr)
	if warning := lowReplication(ctx, c, *replication, rf); warning != "" {
		fmt.Fprintln(stderr, warning)
		if isr == rf && rf > 1 {
			fmt.Fprintf(stderr, "WARNING: min_insync_replicas %d of %d replicas: acks=all writes are refused while any of them is down.\n", isr, rf)
		}
	}
	if !*wait {
		return nil
	}
	return fail(waitLeaders(ctx, c, info, "created", stdout, stderr))
}

// topicCreateTimeout is topic create's -timeout when none is given: the
// shared 10s, plus what a topic of many partitions takes to be created
// and led.
func topicCreateTimeout(partitions int) time.Duration {
	return 10*time.Second + time.Duration(partitions)*10*time.Millisecond
}

// changeFailed explains the failure of a change (create, alter, delete) of
// topic asked of the agent at addr within timeout, as explain does. One
// the agent did not answer may be made all the same (it takes up to 35 s
// to create a topic of 10,000 partitions, docs/api.md), so explain's "is
// the agent running?" alone would have the user believe that nothing was
// done.
func changeFailed(err error, addr string, timeout time.Duration, change, topic string) error {
	var answered *client.Error
	if !errors.Is(err, context.DeadlineExceeded) || errors.As(err, &answered) {
		return explain(usageError(err), addr, timeout)
	}
	return &explained{line: fmt.Sprintf("no answer from the agent at %s within -timeout %s: %s; if it got the request, it may %s topic %s all the same "+
		"(a topic of many partitions takes longer: a larger -timeout waits for it), 'logagent topic describe %s' shows whether it did",
		addr, timeout, reachHint, change, topic, topic), err: err}
}

// lowReplication warns when the topic got fewer replicas than asked, or,
// asked for none, fewer than the shipped default because the agent capped
// it by the live agents: "" when neither.
func lowReplication(ctx context.Context, c *client.Client, asked, got int) string {
	if got >= asked && (asked > 0 || got >= shippedReplicationFactor) {
		return ""
	}
	live := "fewer agents were live"
	if st, err := c.Status(ctx); err == nil {
		// The agent caps the default by the agents that take new replicas
		// (election.PlacementNodes): one in Consul maintenance mode, with a
		// check in warning or being drained is listed, and does not count.
		placeable, notPassing, draining := 0, 0, 0
		for _, a := range st.Agents {
			switch {
			case a.NotPassing:
				notPassing++
			case a.Draining:
				draining++
			default:
				placeable++
			}
		}
		if asked == 0 && placeable > got {
			return "" // not capped: the agents' topic_defaults ask for this
		}
		live = fmt.Sprintf("%d agent(s) were live", placeable)
		var others []string
		if notPassing > 0 {
			others = append(others, fmt.Sprintf("%d more in maintenance mode or with a check in warning", notPassing))
		}
		if draining > 0 {
			others = append(others, fmt.Sprintf("%d more being drained", draining))
		}
		if len(others) > 0 {
			live += fmt.Sprintf(" and taking new replicas (%s)", strings.Join(others, ", "))
		}
	}
	want := asked
	if want == 0 {
		want = shippedReplicationFactor
	}
	return fmt.Sprintf("WARNING: replication factor %d, not %d: %s, and an agent caps the default (topic_defaults.replication_factor) by them.\n"+
		"WARNING: each record is on %d agent(s) only: losing them loses it. Once %d agents are up ('logagent status'), "+
		"delete the topic and create it with -replication-factor %d.", got, want, live, got, want, want)
}

// waitLeaders waits until every partition of info has a leader, saying on
// stderr how many have one whenever that changes.
func waitLeaders(ctx context.Context, c *client.Client, info *client.TopicInfo, done string, stdout, stderr io.Writer) error {
	led := func(t *client.TopicInfo) int {
		n := 0
		for _, p := range t.Partitions {
			if p.Leader != "" {
				n++
			}
		}
		return n
	}
	total, last := len(info.Partitions), -1
	for {
		n := led(info)
		if n == total {
			fmt.Fprintf(stdout, "every partition has a leader\n")
			return nil
		}
		if n != last {
			fmt.Fprintf(stderr, "waiting for leaders: %d of %d partition(s) led\n", n, total)
			last = n
		}
		select {
		case <-ctx.Done():
			return &explained{line: fmt.Sprintf("topic %s is %s, but %d of its %d partition(s) have no leader yet: 'logagent status' shows them",
				info.Name, done, total-n, total), err: ctx.Err()}
		case <-time.After(leaderPollInterval):
		}
		next, err := c.DescribeTopic(ctx, info.Name)
		switch {
		case err == nil:
			info = next
		case ctx.Err() == nil && !client.IsRetriable(err):
			return err
		}
	}
}

func runTopicList(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("topic list", stderr)
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
	topics, err := c.ListTopics(ctx)
	if err != nil {
		return explain(err, c.Addr(), *timeout)
	}
	names := make([]string, 0, len(topics))
	for _, t := range topics {
		names = append(names, t.Name)
	}
	slices.Sort(names)
	if *format == "json" {
		return writeJSON(stdout, names)
	}
	for _, n := range names {
		fmt.Fprintln(stdout, n)
	}
	return nil
}

func runTopicDescribe(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("topic describe", stderr)
	name := fs.String("name", "", "the topic's name (or give it as the argument)")
	addr, timeout, format := addrFlag(fs), timeoutFlag(fs), formatFlag(fs)
	if err := parseFlagsWithName(fs, args, name); err != nil {
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
	info, err := c.DescribeTopic(ctx, *name)
	if err != nil {
		return explain(usageError(err), c.Addr(), *timeout)
	}
	if *format == "json" {
		return writeJSON(stdout, toTopicJSON(*info))
	}
	fmt.Fprintf(stdout, "topic %s: %d partition(s)\n", info.Name, len(info.Partitions))
	if len(info.Config) > 0 {
		keys := make([]string, 0, len(info.Config))
		for k := range info.Config {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		settings := make([]string, len(keys))
		for i, k := range keys {
			settings[i] = k + "=" + string(info.Config[k])
		}
		fmt.Fprintf(stdout, "config: %s\n", strings.Join(settings, " "))
	}
	return writePartitionTable(stdout, []client.TopicInfo{*info}, false)
}

func runTopicAlter(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("topic alter", stderr)
	name := fs.String("name", "", "the topic's name (or give it as the argument)")
	partitions := fs.Int("partitions", 0, "raise the number of partitions to N (partitions are only ever added; keyed records may move partition)")
	minISR := fs.Int("min-insync-replicas", 0, "in-sync replicas an acks=all write needs, 1 to the replication factor")
	retention := fs.String("retention", "", "keep records this long (\"72h\"; \"0s\": no time bound; \"default\": the agents' storage.retention)")
	retentionBytes := fs.String("retention-bytes", "", "keep at most this much per partition (\"10GiB\"; \"0\": no size bound; \"default\": the agents' storage.retention_bytes)")
	wait := fs.Bool("wait", true, "wait, within -timeout, until every partition has a leader")
	addr, timeout := addrFlag(fs), timeoutFlag(fs)
	if err := parseFlagsWithName(fs, args, name); err != nil {
		return err
	}
	changes := client.TopicChanges{Partitions: *partitions, MinInsyncReplicas: *minISR, Retention: *retention, RetentionBytes: *retentionBytes}
	switch {
	case *partitions < 0 || *minISR < 0:
		return fmt.Errorf("%w: -partitions and -min-insync-replicas must not be negative", errUsage)
	case changes == client.TopicChanges{}:
		return fmt.Errorf("%w: nothing to change: give -partitions, -min-insync-replicas, -retention or -retention-bytes", errUsage)
	}
	c, ctx, cancel, err := agentCall(addr, *timeout)
	if err != nil {
		return err
	}
	defer cancel()
	fail := func(err error) error { return explain(usageError(err), c.Addr(), *timeout) }
	after, err := c.AlterTopic(ctx, *name, changes)
	if err != nil {
		return changeFailed(err, c.Addr(), *timeout, "alter", *name)
	}
	fmt.Fprintf(stdout, "altered topic %s:\n", after.Name)
	lines := []string{"(the agent's answer does not say what the topic had before: an older agent)"}
	if after.PreviousConfig != nil {
		lines = topicChangeLines(after.PreviousConfig, after.Config)
	}
	for _, line := range lines {
		fmt.Fprintf(stdout, "  %s\n", line)
	}
	if !*wait || (after.PreviousConfig != nil && configInt(after.Config, "partitions") == configInt(after.PreviousConfig, "partitions")) {
		return nil
	}
	return fail(waitLeaders(ctx, c, after, "altered", stdout, stderr))
}

// topicChangeLines says what an alter changed, from the config it
// replaced to the new one, a setting that comes from the agents' storage
// block marked so; "nothing changed" when it changed nothing.
func topicChangeLines(before, after map[string]json.RawMessage) []string {
	value := func(cfg map[string]json.RawMessage, key string) string {
		v := string(cfg[key])
		if key == "retention" {
			v = strings.Trim(v, `"`)
		}
		if key == "retention_bytes" {
			if n := configInt(cfg, key); n > 0 {
				v = config.FormatSize(int64(n))
			}
		}
		var defaults []string
		if json.Unmarshal(cfg["agent_defaults"], &defaults) == nil && slices.Contains(defaults, key) {
			v += " (agent default)"
		}
		return v
	}
	var lines []string
	for _, key := range []string{"partitions", "min_insync_replicas", "retention", "retention_bytes"} {
		if old, now := value(before, key), value(after, key); old != now {
			lines = append(lines, fmt.Sprintf("%s: %s -> %s", key, old, now))
		}
	}
	if len(lines) == 0 {
		lines = append(lines, "nothing changed")
	}
	return lines
}

func runTopicDelete(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("topic delete", stderr)
	name := fs.String("name", "", "the topic's name (or give it as the argument)")
	addr, timeout := addrFlag(fs), timeoutFlag(fs)
	if err := parseFlagsWithName(fs, args, name); err != nil {
		return err
	}
	c, ctx, cancel, err := agentCall(addr, *timeout)
	if err != nil {
		return err
	}
	defer cancel()
	if err := c.DeleteTopic(ctx, *name); err != nil {
		return changeFailed(err, c.Addr(), *timeout, "delete", *name)
	}
	fmt.Fprintf(stdout, "deleted topic %s\n", *name)
	return nil
}
