package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/logagent/logagent/internal/devcluster"
)

func runDev(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("dev", stderr)
	dir := fs.String("dir", ".logagent-dev", "directory for the cluster's state and logs")
	consulAddr := fs.String("consul", "", "use this running Consul (host:port) instead of starting one")
	consulBin := fs.String("consul-bin", "", "the Consul binary to start (default: bin/consul, beside logagent, or on PATH)")
	var extra stringList
	fs.Var(&extra, "config", "more agent configuration (file or directory; repeatable), merged over the dev settings")
	agents := fs.Int("agents", devcluster.DefaultAgents, fmt.Sprintf("how many agents to run (1 to %d)", devcluster.MaxAgents))
	portOffset := fs.Int("port-offset", 0, "add this to every port (agent i from 0: client 7070+i, peer 7171+i, Kafka 9092+i; Consul 18300-18302 and 18500)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// Refused before anything starts, as bad usage: the ports follow from
	// the flags alone.
	if _, err := devcluster.Ports(*agents, *portOffset, *consulAddr == ""); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	opts := devcluster.Options{Logagent: exe, Agents: *agents, ConsulAddr: *consulAddr, ConsulBin: *consulBin, PortOffset: *portOffset, Out: stdout}
	for _, p := range extra {
		abs, err := filepath.Abs(p)
		if err != nil {
			return err
		}
		opts.ExtraConfig = append(opts.ExtraConfig, abs)
	}
	if opts.Dir, err = filepath.Abs(*dir); err != nil {
		return err
	}
	if opts.ConsulAddr == "" && opts.ConsulBin == "" {
		if opts.ConsulBin, err = devcluster.FindConsul(exe); err != nil {
			return err
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kill := make(chan struct{})
	// The cluster must be stopped in order even when the terminal or a pipe
	// reading our output has gone away: a write then fails instead of
	// killing us with SIGPIPE before the children are stopped.
	signal.Ignore(syscall.SIGPIPE)
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(signals)
	go func() {
		<-signals
		cancel()
		<-signals
		close(kill)
	}()
	return devcluster.Run(ctx, kill, opts)
}
