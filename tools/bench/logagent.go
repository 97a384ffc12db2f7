package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/logagent/logagent/client"
	labench "github.com/logagent/logagent/internal/bench"
)

// logagentCluster is a running `logagent dev` cluster.
type logagentCluster struct {
	bin        string
	dev        *process
	clientAddr string
	// clientFlags go with -addr on every command (TLS and token files).
	clientFlags []string
	// setup is how the cluster was started, for the report.
	setup string
	// hidePrefix is cut from the commands in the report: the directory
	// of this run's files.
	hidePrefix string
	// clusterDir is `logagent dev -dir`'s: each agent's data directory
	// is <clusterDir>/<node>/data (internal/devcluster).
	clusterDir string
}

// startLogagent starts `logagent dev` in dir with storage.durability set to
// durability, and the settings in extraHCL, and waits until it says it is
// up.
func startLogagent(ctx context.Context, bin, dir string, portOffset int, durability, extraHCL string) (*logagentCluster, error) {
	configFile := filepath.Join(dir, "bench-"+durability+".hcl")
	config := fmt.Sprintf("storage {\n  durability = %q\n}\n", durability) + extraHCL
	if err := os.WriteFile(configFile, []byte(config), 0o644); err != nil {
		return nil, fmt.Errorf("benchrun: logagent config: %w", err)
	}
	ready := newLineWatch("logagent dev cluster is up")
	dev, err := startProcess("logagent dev", filepath.Join(dir, "dev.out"), ready, bin,
		"dev", "-dir", filepath.Join(dir, "cluster"), "-port-offset", fmt.Sprint(portOffset), "-config", configFile)
	if err != nil {
		return nil, err
	}
	c := &logagentCluster{
		bin: bin, dev: dev, clientAddr: fmt.Sprintf("http://127.0.0.1:%d", 7070+portOffset), clusterDir: filepath.Join(dir, "cluster"),
		setup: fmt.Sprintf("cluster: `bin/logagent dev -port-offset %d -config F` with F holding `storage { durability = %q }`%s", portOffset, durability, setupNote(extraHCL)),
	}
	timer := time.NewTimer(90 * time.Second)
	defer timer.Stop()
	select {
	case <-ready.seen:
		return c, nil
	case <-dev.done:
		return nil, fmt.Errorf("benchrun: logagent dev exited before it was up (%v); see %s", dev.err, filepath.Join(dir, "dev.out"))
	case <-timer.C:
		err = errors.New("benchrun: logagent dev was not up within 90s")
	case <-ctx.Done():
		err = fmt.Errorf("benchrun: logagent dev: %w", ctx.Err())
	}
	return nil, errors.Join(err, dev.stop(time.Minute))
}

func (c *logagentCluster) stop() error { return c.dev.stop(time.Minute) }

// dropTopic deletes topic and waits, up to timeout, until no agent's data
// directory holds a file of it (neither its partition directories nor
// what the deletion moves into deleting/ are left), so that its pages have
// left the page cache when the next run starts.
func (c *logagentCluster) dropTopic(ctx context.Context, topic string, timeout time.Duration) error {
	dataDirs, err := filepath.Glob(filepath.Join(c.clusterDir, "*", "data"))
	if err != nil || len(dataDirs) == 0 {
		return fmt.Errorf("benchrun: no agent data directory under %s: %v", c.clusterDir, err)
	}
	cl, err := client.New(c.clientAddr)
	if err != nil {
		return fmt.Errorf("benchrun: delete topic %s: %w", topic, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := cl.DeleteTopic(ctx, topic); err != nil {
		return fmt.Errorf("benchrun: delete topic %s: %w", topic, err)
	}
	for {
		left := 0
		for _, d := range dataDirs {
			partitions, _ := filepath.Glob(filepath.Join(d, topic+"-*"))
			deleting, _ := os.ReadDir(filepath.Join(d, "deleting"))
			left += len(partitions) + len(deleting)
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("benchrun: topic %s deleted, but %d of its directories still on disk after %v", topic, left, timeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// logagentReport is the part of `logagent bench -json` output that the
// tables use (internal/bench.Result.WriteJSON).
type logagentReport struct {
	RecordsPerSecond float64                 `json:"records_per_second"`
	MBPerSecond      float64                 `json:"mb_per_second"`
	ErrorCount       int64                   `json:"error_count"`
	Errors           map[string]int64        `json:"errors"`
	Latency          labench.LatencySummary  `json:"latency_us"`
	EndToEnd         *labench.LatencySummary `json:"end_to_end_latency_us"`
	NotConsumed      *int64                  `json:"not_consumed"`
}

// limitReport is one element of `logagent bench limits -json`.
type limitReport struct {
	Name        string                 `json:"name"`
	WriteBytes  int                    `json:"write_bytes"`
	MBPerSecond float64                `json:"mb_per_second"`
	Latency     labench.LatencySummary `json:"write_latency_us"`
}

// runLogagentBench runs `logagent bench args...` with -json appended, within
// timeout, and decodes its report into out. A run that printed a report but
// exited non-zero (too many errors) still fills out (reported is true), and
// the error says why it failed.
func runLogagentBench(ctx context.Context, bin string, timeout time.Duration, out any, args ...string) (reported bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	full := append([]string{"bench"}, append(args, "-json")...)
	cmd := exec.CommandContext(ctx, bin, full...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	decodeErr := json.Unmarshal(stdout.Bytes(), out)
	if runErr != nil {
		return decodeErr == nil, fmt.Errorf("benchrun: logagent bench %s: %w: %s", args[0], runErr, strings.TrimSpace(stderr.String()))
	}
	if decodeErr != nil {
		return false, fmt.Errorf("benchrun: logagent bench %s printed no report: %w", args[0], decodeErr)
	}
	return true, nil
}

// commandLine is how a row's command is printed in the report.
func commandLine(args ...string) string {
	return "bin/logagent bench " + strings.Join(args, " ") + " -json"
}

// setupNote describes extra settings of a cluster in a row's setup line.
func setupNote(extraHCL string) string {
	if extraHCL == "" {
		return ""
	}
	return " and `" + strings.Join(strings.Fields(extraHCL), " ") + "`"
}
