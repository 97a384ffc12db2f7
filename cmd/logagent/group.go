package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/logagent/logagent/client"
)

var groupSubcommands = []subcommand[func(args []string, stdout, stderr io.Writer) error]{
	{"list", "list the consumer groups: epoch and members", runGroupList},
	{"describe", "show a group's partitions (owner, committed offset, HW, lag) and members: group describe G", runGroupDescribe},
	{"reset-offsets", "set a group's committed offsets of a topic: group reset-offsets G -topic T -to earliest|latest|N", runGroupResetOffsets},
	{"delete", "delete a group without members and its committed offsets: group delete G", runGroupDelete},
}

func runGroup(args []string, stdout, stderr io.Writer) error {
	return runSubcommand("group", groupSubcommands, args, stdout, stderr)
}

// groupError says what to do next about the errors a group command can
// meet at addr: bad arguments are bad usage, a group that is not empty a
// failure saying whose consumers to stop (those of topic, or all of them
// when topic is ""), the rest as explain says.
func groupError(err error, addr string, timeout time.Duration, group, topic string) error {
	var e *client.Error
	if errors.Is(err, client.ErrGroupNotEmpty) && errors.As(err, &e) {
		whose := "the group's consumers"
		if topic != "" {
			whose += " of topic " + topic
		}
		return &explained{line: fmt.Sprintf("%s: stop %s first ('logagent group describe %s' shows who owns what)", e.Message, whose, group), err: err}
	}
	return explain(usageError(err), addr, timeout)
}

func runGroupList(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("group list", stderr)
	addr, timeout := addrFlag(fs), timeoutFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, ctx, cancel, err := agentCall(addr, *timeout)
	if err != nil {
		return err
	}
	defer cancel()
	groups, err := c.ListGroups(ctx)
	if err != nil {
		return explain(err, c.Addr(), *timeout)
	}
	if len(groups) == 0 {
		fmt.Fprintln(stdout, "no consumer groups")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tEPOCH\tMEMBERS")
	for _, g := range groups {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", g.Group, g.Epoch, g.Members)
	}
	return tw.Flush()
}

func runGroupDescribe(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("group describe", stderr)
	group := fs.String("group", "", "the group's id (or give it as the argument)")
	addr, timeout := addrFlag(fs), timeoutFlag(fs)
	if err := parseFlagsWithArg(fs, args, group, "group", "-group", "G"); err != nil {
		return err
	}
	c, ctx, cancel, err := agentCall(addr, *timeout)
	if err != nil {
		return err
	}
	defer cancel()
	d, err := c.DescribeGroup(ctx, *group)
	if err != nil {
		return groupError(err, c.Addr(), *timeout, *group, "")
	}
	return writeGroupDescription(stdout, d)
}

// writeGroupDescription prints a group: a line about it, a row per
// partition (COMMITTED "-" when nothing is committed, OWNER "-" when no
// member owns it), and a row per member.
func writeGroupDescription(w io.Writer, d *client.GroupDescription) error {
	coordinator := d.Coordinator
	if coordinator == "" {
		coordinator = "-"
	}
	fmt.Fprintf(w, "group %s: epoch %d, coordinator %s, %d member(s)\n", d.Group, d.Epoch, coordinator, len(d.Members))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tOWNER\tCOMMITTED\tHW\tLAG")
	for _, p := range d.Partitions {
		owner, committed := p.Owner, "-"
		if owner == "" {
			owner = "-"
		}
		if p.Committed >= 0 {
			committed = strconv.FormatInt(p.Committed, 10)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\n", p.Topic, p.Partition, owner, committed, p.HighWatermark, p.Lag)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(d.Members) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tEPOCH\tTOPICS\tSESSION-TIMEOUT\tASSIGNED\tREVOKING")
	for _, m := range d.Members {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%v\t%s\t%s\n", m.MemberID, m.MemberEpoch, joinOrDash(m.Topics),
			time.Duration(m.SessionTimeoutMS)*time.Millisecond, joinPartitions(m.Assigned), joinPartitions(m.Revoking))
	}
	return tw.Flush()
}

func joinPartitions(tps []client.TopicPartition) string {
	s := make([]string, len(tps))
	for i, tp := range tps {
		s[i] = tp.String()
	}
	return joinOrDash(s)
}

func runGroupResetOffsets(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("group reset-offsets", stderr)
	group := fs.String("group", "", "the group's id (or give it as the argument)")
	topic := fs.String("topic", "", "the topic whose committed offsets to set, every partition (required)")
	to := fs.String("to", "", "earliest (log start), latest (high watermark) or an offset (required)")
	addr, timeout := addrFlag(fs), timeoutFlag(fs)
	if err := parseFlagsWithArg(fs, args, group, "group", "-group", "G"); err != nil {
		return err
	}
	if *topic == "" {
		return fmt.Errorf("%w: -topic is required", errUsage)
	}
	if *to != "earliest" && *to != "latest" {
		if n, err := strconv.ParseInt(*to, 10, 64); err != nil || n < 0 {
			return fmt.Errorf("%w: -to %q: want earliest, latest or an offset", errUsage, *to)
		}
	}
	c, ctx, cancel, err := agentCall(addr, *timeout)
	if err != nil {
		return err
	}
	defer cancel()
	offsets, err := c.ResetOffsets(ctx, *group, *topic, *to)
	if err != nil {
		return groupError(err, c.Addr(), *timeout, *group, *topic)
	}
	fmt.Fprintf(stdout, "reset group %s, topic %s to %s:\n", *group, *topic, *to)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tOFFSET")
	for _, o := range offsets {
		fmt.Fprintf(tw, "%d\t%d\n", o.Partition, o.Offset)
	}
	return tw.Flush()
}

func runGroupDelete(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("group delete", stderr)
	group := fs.String("group", "", "the group's id (or give it as the argument)")
	addr, timeout := addrFlag(fs), timeoutFlag(fs)
	if err := parseFlagsWithArg(fs, args, group, "group", "-group", "G"); err != nil {
		return err
	}
	c, ctx, cancel, err := agentCall(addr, *timeout)
	if err != nil {
		return err
	}
	defer cancel()
	if err := c.DeleteGroup(ctx, *group); err != nil {
		return groupError(err, c.Addr(), *timeout, *group, "")
	}
	fmt.Fprintf(stdout, "deleted group %s\n", *group)
	return nil
}
