package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/logagent/logagent/config"
)

// parseConfigFlags parses the flags of a command that reads the agent's
// configuration (agent, validate): -config, required, so that the agent
// never runs on the built-in defaults alone, and validate checks what the
// agent would run.
func parseConfigFlags(name string, args []string, stderr io.Writer) ([]string, error) {
	fs := newFlagSet(name, stderr)
	var paths stringList
	fs.Var(&paths, "config", "a configuration file or directory of *.hcl files (repeatable, merged in order; required)")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w: -config is required", errUsage)
	}
	return paths, nil
}

func runValidate(args []string, stdout, stderr io.Writer) error {
	paths, err := parseConfigFlags("validate", args, stderr)
	if err != nil {
		return err
	}
	cfg, err := config.Load(paths...)
	var diags *config.DiagnosticsError
	if errors.As(err, &diags) {
		for _, d := range diags.Diags {
			fmt.Fprintln(stderr, config.FormatDiagnostic(d))
		}
		return fmt.Errorf("%d problem(s) in the configuration", len(diags.Diags))
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "configuration valid: node %s, data_dir %s, client %s, peer %s (advertised %s), durability %s, %d file(s)\n",
		cfg.NodeID, cfg.DataDir, cfg.Client.Address, cfg.Peer.Address, cfg.Peer.AdvertiseAddress, cfg.Storage.Durability, len(cfg.Sources))
	// Valid, so the exit code stays 0, but loudly: the agent logs the same
	// at start.
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	return nil
}
