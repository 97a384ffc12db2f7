package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/logagent/logagent/client"
)

var topicSubcommands = []subcommand[func(args []string, stdout, stderr io.Writer) error]{
	{"create", "create a topic: topic create -name T [-partitions N -replication-factor R -min-insync-replicas M]", runTopicCreate},
	{"list", "list the topics' names", runTopicList},
	{"describe", "show a topic's configuration and partitions: topic describe T", runTopicDescribe},
	{"delete", "delete a topic and its records: topic delete T", runTopicDelete},
}

func runTopic(args []string, stdout, stderr io.Writer) error {
	run, err := findSubcommand("topic", topicSubcommands, args, stderr)
	if err != nil {
		return err
	}
	return run(args[1:], stdout, stderr)
}

func runTopicCreate(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("topic create", stderr)
	name := fs.String("name", "", "the topic's name (or give it as the argument)")
	partitions := fs.Int("partitions", 0, "number of partitions (default: the agents' topic_defaults)")
	replication := fs.Int("replication-factor", 0, "replicas per partition (default: topic_defaults)")
	minISR := fs.Int("min-insync-replicas", 0, "in-sync replicas an acks=all write needs (default: topic_defaults)")
	addr, timeout := addrFlag(fs), timeoutFlag(fs)
	if err := parseFlagsWithName(fs, args, name); err != nil {
		return err
	}
	if *partitions < 0 || *replication < 0 || *minISR < 0 {
		return fmt.Errorf("%w: -partitions, -replication-factor and -min-insync-replicas must not be negative", errUsage)
	}
	c, ctx, cancel, err := agentCall(addr, *timeout)
	if err != nil {
		return err
	}
	defer cancel()
	spec := client.TopicSpec{Name: *name, Partitions: *partitions, ReplicationFactor: *replication, MinInsyncReplicas: *minISR}
	if err := c.CreateTopic(ctx, spec); err != nil {
		return usageError(err)
	}
	fmt.Fprintf(stdout, "created topic %s\n", *name)
	return nil
}

func runTopicList(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("topic list", stderr)
	addr, timeout := addrFlag(fs), timeoutFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, ctx, cancel, err := agentCall(addr, *timeout)
	if err != nil {
		return err
	}
	defer cancel()
	topics, err := c.ListTopics(ctx)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(topics))
	for _, t := range topics {
		names = append(names, t.Name)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintln(stdout, n)
	}
	return nil
}

func runTopicDescribe(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("topic describe", stderr)
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
	info, err := c.DescribeTopic(ctx, *name)
	if err != nil {
		return usageError(err)
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
		return usageError(err)
	}
	fmt.Fprintf(stdout, "deleted topic %s\n", *name)
	return nil
}
