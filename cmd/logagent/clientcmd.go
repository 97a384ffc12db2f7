package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/logagent/logagent/client"
	"github.com/logagent/logagent/config"
)

// The data commands (topic, produce, consume, status) talk to an agent's
// client API through package client; this file holds what they share.

// TokenEnv names the environment variable holding the client API token
// when -token-file is not given.
const TokenEnv = "LOGAGENT_TOKEN"

// agentFlags say how to reach an agent's client API: where, with which
// token, and over TLS for an https address.
type agentFlags struct {
	addr, tokenFile, caFile, certFile, keyFile *string
}

// addrFlag registers -addr, the agent to talk to, and the flags of its
// token and TLS.
func addrFlag(fs *flag.FlagSet) *agentFlags {
	return &agentFlags{
		addr:      fs.String("addr", "", "the agent's client API, http://host:port or https://host:port (default $"+client.AddrEnv+" or "+client.DefaultAddr+")"),
		tokenFile: fs.String("token-file", "", "a file holding the client API token (client.token_file; default $"+TokenEnv+", the token itself)"),
		caFile:    fs.String("ca-file", "", "PEM CA certificates that verify an https agent (default the system's)"),
		certFile:  fs.String("cert-file", "", "PEM client certificate, with -key-file, for an agent whose client.tls has a ca_file"),
		keyFile:   fs.String("key-file", "", "the key of -cert-file"),
	}
}

// options turn the flags into client options: the token, and for an
// https address the TLS config (nil when the flags ask for none).
func (f *agentFlags) options() (token string, tlsCfg *tls.Config, err error) {
	token = os.Getenv(TokenEnv)
	if *f.tokenFile != "" {
		b, err := config.ReadToken(*f.tokenFile)
		if err != nil {
			return "", nil, fmt.Errorf("%w: -token-file: %v", errUsage, err)
		}
		token = string(b)
	}
	if *f.caFile == "" && *f.certFile == "" && *f.keyFile == "" {
		return token, nil, nil
	}
	if (*f.certFile == "") != (*f.keyFile == "") {
		return "", nil, fmt.Errorf("%w: -cert-file and -key-file go together", errUsage)
	}
	tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
	if *f.caFile != "" {
		if tlsCfg.RootCAs, err = config.LoadCA(*f.caFile); err != nil {
			return "", nil, fmt.Errorf("%w: -ca-file: %v", errUsage, err)
		}
	}
	if *f.certFile != "" {
		cert, err := tls.LoadX509KeyPair(*f.certFile, *f.keyFile)
		if err != nil {
			return "", nil, fmt.Errorf("%w: -cert-file, -key-file: %v", errUsage, err)
		}
		tlsCfg.Certificates = []tls.Certificate{cert}
	}
	return token, tlsCfg, nil
}

// flagGiven reports whether the command line set the flag name.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// timeoutFlag registers -timeout for commands that make a few requests.
func timeoutFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("timeout", 10*time.Second, "give up after this long")
}

// newAgentClient returns a client of the agent the flags name, sending
// with hc when not nil (its transport gets the TLS config); a bad address
// or TLS file is bad usage.
func newAgentClient(f *agentFlags, hc *http.Client) (*client.Client, error) {
	token, tlsCfg, err := f.options()
	if err != nil {
		return nil, err
	}
	var opts []client.Option
	if token != "" {
		opts = append(opts, client.WithToken(token))
	}
	switch {
	case hc != nil:
		opts = append(opts, client.WithHTTPClient(hc))
	case tlsCfg != nil:
		opts = append(opts, client.WithTLSConfig(tlsCfg))
	}
	c, err := client.New(*f.addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: -addr: %v", errUsage, err)
	}
	if hc != nil {
		// The transport is unused until the first request: set up as the
		// client's own is (client.New), for the address it resolved.
		t, ok := hc.Transport.(*http.Transport)
		if notes, wrapped := hc.Transport.(*retryNotes); wrapped {
			t, ok = notes.next.(*http.Transport)
		}
		if !ok {
			return nil, fmt.Errorf("logagent: cannot set up TLS on a %T transport", hc.Transport)
		}
		t.TLSClientConfig = tlsCfg
		if strings.HasPrefix(c.Addr(), "https://") {
			t.WriteBufferSize = client.TLSWriteBufferSize
		}
	}
	return c, nil
}

// reachTimeout bounds the first call of a command that would otherwise
// retry for long (produce's delivery timeout, consume's polls): an agent
// that does not answer at all is reported at once.
const reachTimeout = 5 * time.Second

// checkAgent asks the agent's health once, so that a command aimed at an
// agent that is not running fails fast, saying where it looked and how to
// look elsewhere. An agent that answers, even "starting", is reachable.
// It waits reachTimeout at most, or the command's timeout when shorter
// (0: none).
func checkAgent(ctx context.Context, c *client.Client, timeout time.Duration) error {
	limit, within := reachTimeout, reachTimeout.String()
	if timeout > 0 && timeout <= reachTimeout {
		limit, within = timeout, "-timeout "+timeout.String()
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	_, err := c.Health(ctx)
	var answered *client.Error
	if err == nil || errors.As(err, &answered) {
		return nil
	}
	return explainWithin(err, c.Addr(), within)
}

// agentCall returns a client of addr and a context bounded by timeout, for
// the commands that make one round of requests. A timeout that is not
// positive is bad usage: the requests would fail at once, as if the agent
// did not answer.
func agentCall(addr *agentFlags, timeout time.Duration) (*client.Client, context.Context, context.CancelFunc, error) {
	if timeout <= 0 {
		return nil, nil, nil, fmt.Errorf("%w: -timeout %v: want a positive duration", errUsage, timeout)
	}
	c, err := newAgentClient(addr, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := timedContext(timeout)
	return c, ctx, cancel, nil
}

// signalContext ends at SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// timedContext ends after d, or at SIGINT or SIGTERM.
func timedContext(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, stop := signalContext()
	ctx, cancel := context.WithTimeout(ctx, d)
	return ctx, func() { cancel(); stop() }
}

// parseFlagsWithName parses args that may hold one positional topic name,
// before or after the flags, as an alternative to -name.
func parseFlagsWithName(fs *flag.FlagSet, args []string, name *string) error {
	return parseFlagsWithArg(fs, args, name, "topic", "-name", "T")
}

// parseFlagsWithArg parses args that may hold one positional argument, the
// what (say "topic"), before or after the flags, as an alternative to the
// flag (say "-name") that fills *name; placeholder stands for it in
// messages.
func parseFlagsWithArg(fs *flag.FlagSet, args []string, name *string, what, flagName, placeholder string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if rest := fs.Args(); len(rest) > 0 {
		if *name != "" {
			return fmt.Errorf("%w: the %s is named twice: %s %q and %q", errUsage, what, flagName, *name, rest[0])
		}
		*name = rest[0]
		if err := parseFlags(fs, rest[1:]); err != nil {
			return err
		}
	}
	if *name == "" {
		return fmt.Errorf("%w: name the %s: %s %s, or %s as the argument", errUsage, what, flagName, placeholder, placeholder)
	}
	return nil
}

// usageError turns the client's errors about bad arguments into bad usage
// (exit 2); anything else is a failure (exit 1).
func usageError(err error) error {
	if errors.Is(err, client.ErrInvalidTopicName) || errors.Is(err, client.ErrInvalidOption) || errors.Is(err, client.ErrInvalidGroupID) {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return err
}

// writePartitionTable prints one row per partition of topics, with a TOPIC
// column when withTopic. HW, LOG-START and UNCOMMITTED are the positions of
// the answering agent's replica, "-" where it holds none (a note under the
// table says so): UNCOMMITTED is LEO - HW, records appended to that
// replica but not yet committed (on the leader, how far the slowest
// in-sync follower trails). STATE is offline (no leader), below-min-isr
// (acks=all writes are refused), under-replicated (ISR smaller than the
// replicas) or ok.
func writePartitionTable(w io.Writer, topics []client.TopicInfo, withTopic bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := "PARTITION\tLEADER\tEPOCH\tREPLICAS\tISR\tHW\tLOG-START\tUNCOMMITTED\tSTATE"
	if withTopic {
		header = "TOPIC\t" + header
	}
	fmt.Fprintln(tw, header)
	elsewhere := 0
	for _, t := range topics {
		minISR := configInt(t.Config, "min_insync_replicas")
		for _, p := range t.Partitions {
			if withTopic {
				fmt.Fprintf(tw, "%s\t", t.Name)
			}
			leader, uncommitted := p.Leader, "-"
			if leader == "" {
				leader = "-"
			}
			if p.LogEndOffset != nil && p.HighWatermark >= 0 {
				uncommitted = strconv.FormatInt(*p.LogEndOffset-p.HighWatermark, 10)
			}
			if p.HighWatermark < 0 {
				elsewhere++
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Partition, leader, p.Epoch,
				joinOrDash(p.Replicas), joinOrDash(p.ISR), offsetOrDash(p.HighWatermark), offsetOrDash(p.LogStartOffset), uncommitted, stateColumn(p, minISR))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if elsewhere > 0 {
		_, err := fmt.Fprintf(w, "(HW, LOG-START, UNCOMMITTED: this agent's replica's; - where it holds none: -addr another agent for those)\n")
		return err
	}
	return nil
}

// offsetOrDash is an offset, "-" when unknown (-1).
func offsetOrDash(o int64) string {
	if o < 0 {
		return "-"
	}
	return strconv.FormatInt(o, 10)
}

// topicJSON and partitionJSON are a topic as -format json prints it: the
// positions null where the answering agent holds no replica.
type topicJSON struct {
	Name       string                     `json:"name"`
	Config     map[string]json.RawMessage `json:"config"`
	Partitions []partitionJSON            `json:"partitions"`
}

type partitionJSON struct {
	Partition      int      `json:"partition"`
	Leader         string   `json:"leader"`
	Epoch          int32    `json:"epoch"`
	Replicas       []string `json:"replicas"`
	ISR            []string `json:"isr"`
	HighWatermark  *int64   `json:"high_watermark"`
	LogStartOffset *int64   `json:"log_start_offset"`
	LogEndOffset   *int64   `json:"log_end_offset"`
	// State is the STATE column's worst condition; NotPreferred that the
	// leader is not the preferred replica.
	State        string `json:"state"`
	NotPreferred bool   `json:"not_preferred"`
	// Reassignment is the move in flight, absent when there is none.
	Reassignment *client.Reassignment `json:"reassignment,omitempty"`
}

func toTopicJSON(t client.TopicInfo) topicJSON {
	out := topicJSON{Name: t.Name, Config: t.Config, Partitions: []partitionJSON{}}
	if out.Config == nil {
		out.Config = map[string]json.RawMessage{}
	}
	minISR := configInt(t.Config, "min_insync_replicas")
	for _, p := range t.Partitions {
		out.Partitions = append(out.Partitions, partitionJSON{
			Partition: p.Partition, Leader: p.Leader, Epoch: p.Epoch, Replicas: orEmpty(p.Replicas), ISR: orEmpty(p.ISR),
			HighWatermark: knownOffset(p.HighWatermark), LogStartOffset: knownOffset(p.LogStartOffset), LogEndOffset: p.LogEndOffset,
			State: partitionState(p, minISR), NotPreferred: notPreferred(p), Reassignment: p.Reassignment,
		})
	}
	return out
}

func knownOffset(o int64) *int64 {
	if o < 0 {
		return nil
	}
	return &o
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// formatFlag registers -format for the commands that print text or JSON.
func formatFlag(fs *flag.FlagSet) *string {
	return fs.String("format", "text", "text or json")
}

// checkFormat refuses a -format other than text or json.
func checkFormat(format string) error {
	if format != "text" && format != "json" {
		return fmt.Errorf("%w: -format %q: want text or json", errUsage, format)
	}
	return nil
}

// stateColumn is partitionState, marked not-preferred when the leader is
// not the partition's preferred replica (the first of its replicas): the
// leadership moves back once that replica is in sync, unless
// replication.auto_leader_rebalance is off.
func stateColumn(p client.PartitionInfo, minISR int) string {
	var marks []string
	if state := partitionState(p, minISR); state != "ok" {
		marks = append(marks, state)
	}
	if notPreferred(p) {
		marks = append(marks, "not-preferred")
	}
	if p.Reassignment != nil {
		// Its replicas are moving: the union is listed, and the ISR
		// lacks the replicas being added until they catch up.
		marks = append(marks, "moving")
	}
	if len(marks) == 0 {
		return "ok"
	}
	return strings.Join(marks, ",")
}

// notPreferred says a partition has a leader other than its preferred
// replica.
func notPreferred(p client.PartitionInfo) bool {
	return p.Leader != "" && len(p.Replicas) > 0 && p.Leader != p.Replicas[0]
}

// partitionState is the partition's worst condition.
func partitionState(p client.PartitionInfo, minISR int) string {
	switch {
	case p.Leader == "":
		return "offline"
	case minISR > 0 && len(p.ISR) < minISR:
		return "below-min-isr"
	case len(p.ISR) < len(p.Replicas):
		return "under-replicated"
	}
	return "ok"
}

func joinOrDash(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}

// configInt reads an integer topic setting, 0 when absent or not a number.
func configInt(config map[string]json.RawMessage, key string) int {
	var v int
	if raw, ok := config[key]; ok && json.Unmarshal(raw, &v) == nil {
		return v
	}
	return 0
}
