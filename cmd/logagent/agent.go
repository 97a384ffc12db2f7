package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/agent"
	"github.com/logagent/logagent/config"
)

func runAgent(args []string, stdout, stderr io.Writer) error {
	paths, err := parseConfigFlags("agent", args, stderr)
	if err != nil {
		return err
	}
	cfg, err := config.Load(paths...)
	if err != nil {
		return err
	}

	output := newLogOutput(stderr)
	defer output.Close()
	logger := hclog.New(&hclog.LoggerOptions{
		Name:       "logagent",
		Level:      hclog.LevelFromString(cfg.LogLevel),
		JSONFormat: cfg.LogJSON,
		Output:     output,
	})
	logger.Info("starting", "version", version, "node_id", cfg.NodeID, "config", cfg.Sources)

	reg, err := agent.NewCoordinator(cfg, version, logger.Named("election"))
	if err != nil {
		return err
	}
	a := agent.New(cfg, logger.Named("agent"), reg)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(signals)
	// The handler runs until Run has returned, so that a second signal
	// during the graceful stop still exits at once.
	var handler sync.WaitGroup
	handlerDone := make(chan struct{})
	handler.Go(func() {
		handleSignals(signals, handlerDone, cancel, func() { reload(paths, cfg, logger, a) }, logger, output.Close)
	})
	defer handler.Wait()
	defer close(handlerDone)

	if err := a.Run(ctx, nil); err != nil {
		if errors.Is(err, agent.ErrDataDirLocked) {
			return fmt.Errorf("%w (is another agent running with data_dir %s?)", err, cfg.DataDir)
		}
		return err
	}
	return nil
}

// handleSignals turns the first SIGINT or SIGTERM into a graceful stop and a
// second one into an immediate exit, after closeLog has written out the
// log; SIGHUP calls reload. It returns once done is closed.
func handleSignals(signals <-chan os.Signal, done <-chan struct{}, stop context.CancelFunc, reload func(), logger hclog.Logger, closeLog func()) {
	stopping := false
	for {
		var sig os.Signal
		select {
		case <-done:
			return
		case sig = <-signals:
		}
		if sig == syscall.SIGHUP {
			reload()
			continue
		}
		if stopping {
			logger.Warn("second signal: exiting at once", "signal", sig.String())
			closeLog()
			os.Exit(exitFailure)
		}
		stopping = true
		logger.Info("signal received: stopping gracefully (send it again to exit at once)", "signal", sig.String())
		stop()
	}
}

// reload re-reads the configuration and applies its log_level and the TLS
// files it names. A configuration that does not validate (a certificate
// that does not parse, a key that is not the certificate's) changes
// nothing. The settings it changes from started, the configuration the
// agent started with, that a reload does not apply are named in a warning:
// they take effect at the next start.
func reload(paths []string, started *config.Config, logger hclog.Logger, a *agent.Agent) {
	cfg, err := config.Load(paths...)
	if err != nil {
		logger.Error("reload: configuration invalid; keeping the running one", "error", err)
		return
	}
	applyLogLevel(cfg, logger)
	a.ReloadTLS(cfg)
	if ignored := needRestart(started, cfg); len(ignored) > 0 {
		logger.Warn("reload: settings changed since the start that take effect only after a restart; the agent keeps running with the values it started with",
			"settings", strings.Join(ignored, ", "))
	}
}

// needRestart lists the settings that differ between started and loaded
// and that reload does not apply: all but log_level and the TLS blocks
// (whose files ReloadTLS loads, and which warns itself about a block turned
// on or off).
func needRestart(started, loaded *config.Config) []string {
	var out []string
	for _, key := range config.Changed(started, loaded) {
		if key == "log_level" || strings.HasPrefix(key, "client.tls") || strings.HasPrefix(key, "peer.tls") {
			continue
		}
		out = append(out, key)
	}
	return out
}

func applyLogLevel(cfg *config.Config, logger hclog.Logger) {
	level := hclog.LevelFromString(cfg.LogLevel)
	if level == logger.GetLevel() {
		logger.Info("reload: log level unchanged", "log_level", cfg.LogLevel)
		return
	}
	logger.SetLevel(level)
	logger.Info("reload: log level changed", "log_level", cfg.LogLevel)
}
