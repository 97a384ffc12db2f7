package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/logagent/logagent/config"
)

func runValidate(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("validate", stderr)
	var paths stringList
	fs.Var(&paths, "config", "a configuration file or directory of *.hcl files (repeatable, merged in order)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if len(paths) == 0 {
		return fmt.Errorf("%w: -config is required", errUsage)
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
