// Command logagent is the logagent agent and its command-line tools
// (docs/design.md §11). It only parses arguments and calls the packages that do the
// work; exit codes are 0 for success, 1 for failure and 2 for bad usage.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// errUsage marks an error as bad usage (exit 2).
var errUsage = errors.New("usage")

type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"agent", "run the agent daemon", runAgent},
		{"dev", "run a local cluster: Consul and three agents (-agents N)", runDev},
		{"validate", "check configuration files", runValidate},
		{"topic", "create, list, describe or delete topics", runTopic},
		{"produce", "write records from stdin, one per line", runProduce},
		{"consume", "print the records of a topic, a partition, or what a consumer group gives", runConsume},
		{"group", "list, describe or delete consumer groups, reset their offsets", runGroup},
		{"partition", "move a partition's replicas to other agents", runPartition},
		{"node", "drain an agent: move its replicas and leaderships to others", runNode},
		{"rebalance", "even out replicas and preferred leaders over the agents (dry run; -execute)", runRebalance},
		{"status", "show topics and partitions: leaders, epochs, ISR, high watermarks", runStatus},
		{"bench", "load generator: produce, consume, e2e latency, machine limits", runBench},
		{"version", "print the version", runVersion},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || isHelp(args[0]) {
		usage(stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(args[1:], stdout, stderr)
		switch {
		case err == nil:
			return exitOK
		case errors.Is(err, flag.ErrHelp):
			return exitOK
		case errors.Is(err, errUsage):
			fmt.Fprintf(stderr, "logagent %s: %v\n", c.name, err)
			return exitUsage
		default:
			fmt.Fprintf(stderr, "logagent %s: %v\n", c.name, err)
			return exitFailure
		}
	}
	fmt.Fprintf(stderr, "logagent: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: logagent <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'logagent <command> -h' for a command's flags.")
}

// isHelp reports whether arg, where a command or subcommand is expected,
// asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// subcommand is one subcommand of a command (topic, bench); F is how it
// runs.
type subcommand[F any] struct {
	name, summary string
	run           F
}

// runSubcommand runs the subcommand of command that args name, with the
// arguments after its name.
func runSubcommand(command string, subs []subcommand[func(args []string, stdout, stderr io.Writer) error], args []string, stdout, stderr io.Writer) error {
	run, err := findSubcommand(command, subs, args, stderr)
	if err != nil {
		return err
	}
	return run(args[1:], stdout, stderr)
}

// findSubcommand returns how to run the subcommand of command that args[0]
// names. Without args, or with a help argument, it prints the subcommands
// to stderr and returns a usage error or flag.ErrHelp.
func findSubcommand[F any](command string, subs []subcommand[F], args []string, stderr io.Writer) (F, error) {
	var none F
	names := make([]string, len(subs))
	width := 0
	for i, s := range subs {
		names[i] = s.name
		width = max(width, len(s.name)+1)
	}
	if len(args) == 0 || isHelp(args[0]) {
		fmt.Fprintf(stderr, "Usage: logagent %s <%s> [flags]\n", command, strings.Join(names, "|"))
		for _, s := range subs {
			fmt.Fprintf(stderr, "  %-*s %s\n", width, s.name, s.summary)
		}
		if len(args) == 0 {
			return none, fmt.Errorf("%w: name a subcommand", errUsage)
		}
		return none, flag.ErrHelp
	}
	for _, s := range subs {
		if s.name == args[0] {
			return s.run, nil
		}
	}
	last := len(names) - 1
	return none, fmt.Errorf("%w: unknown subcommand %q (want %s or %s)", errUsage, args[0], strings.Join(names[:last], ", "), names[last])
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("logagent "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args and refuses positional arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	return nil
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func runVersion(args []string, stdout, stderr io.Writer) error {
	if err := parseFlags(newFlagSet("version", stderr), args); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "logagent %s\n", version)
	return nil
}
