package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/logagent/logagent/client"
)

func runStatus(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", stderr)
	addr, timeout := addrFlag(fs), timeoutFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, ctx, cancel, err := agentCall(addr, *timeout)
	if err != nil {
		return err
	}
	defer cancel()

	health, err := c.Health(ctx)
	if err != nil {
		return fmt.Errorf("agent %s: %w", c.Addr(), err)
	}
	fmt.Fprintf(stdout, "agent %s: node %s, %s\n", c.Addr(), health.NodeID, health.Status)

	listed, err := c.ListTopics(ctx)
	if err != nil {
		return err
	}
	topics := make([]client.TopicInfo, 0, len(listed))
	for _, t := range listed {
		if t.Partitions == nil {
			info, err := c.DescribeTopic(ctx, t.Name)
			if errors.Is(err, client.ErrUnknownTopic) {
				continue // deleted since the list
			}
			if err != nil {
				return err
			}
			t = *info
		}
		topics = append(topics, t)
	}
	slices.SortFunc(topics, func(a, b client.TopicInfo) int { return strings.Compare(a.Name, b.Name) })
	if len(topics) == 0 {
		fmt.Fprintln(stdout, "no topics")
		return nil
	}
	fmt.Fprintln(stdout)
	if err := writePartitionTable(stdout, topics, true); err != nil {
		return err
	}
	partitions, states, moved := 0, map[string]int{}, 0
	for _, t := range topics {
		minISR := configInt(t.Config, "min_insync_replicas")
		for _, p := range t.Partitions {
			partitions++
			states[partitionState(p, minISR)]++
			if notPreferred(p) {
				moved++
			}
		}
	}
	summary := fmt.Sprintf("\n%d topic(s), %d partition(s)", len(topics), partitions)
	for _, s := range []string{"offline", "below-min-isr", "under-replicated"} {
		if states[s] > 0 {
			summary += fmt.Sprintf(", %d %s", states[s], s)
		}
	}
	if moved > 0 {
		summary += fmt.Sprintf(", %d not led by their preferred replica", moved)
	}
	fmt.Fprintln(stdout, summary)
	return nil
}
