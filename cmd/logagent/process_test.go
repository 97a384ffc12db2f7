package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// These tests run the real logagent binary: the one `make` built
// (LOGAGENT_BIN), or one built here once per test process.

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

func logagentBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LOGAGENT_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("LOGAGENT_BIN=%s: %v (run `make build`)", p, err)
		}
		return p
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "logagent-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "logagent")
		out, err := exec.Command("go", "build", "-o", builtBin, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// proc is a logagent process started by a test; it is killed by PID when
// the test ends, and its output is logged when the test failed.
type proc struct {
	t       *testing.T
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
}

func startProc(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "out.log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(logagentBin(t), args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	p := &proc{t: t, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.killGroup()
		if t.Failed() {
			t.Logf("output of logagent %s (pid %d):\n%s", strings.Join(args, " "), cmd.Process.Pid, p.output())
		}
	})
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) output() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v to pid %d: %v", sig, p.pid(), err)
	}
}

// killGroup ends the process and any child it started, by process group.
func (p *proc) killGroup() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	<-p.done
}

// wait returns the exit code, failing the test after timeout.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("pid %d still running after %s", p.pid(), timeout)
	}
	var exitErr *exec.ExitError
	if errors.As(p.err, &exitErr) {
		return exitErr.ExitCode()
	}
	if p.err != nil {
		p.t.Fatalf("wait: %v", p.err)
	}
	return 0
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// waitUntil polls cond every 20ms until it holds or timeout passes.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func httpGet(url string) (int, string) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, string(b)
}
