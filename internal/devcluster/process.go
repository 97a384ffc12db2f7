package devcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// child is one process that the cluster started.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done closes
}

// startChild runs path with args, its output appended to logPath. The child
// gets its own process group, so a terminal's Ctrl-C reaches only the dev
// command, which then stops children in order; and the kernel kills it if the
// dev command dies without cleaning up.
func startChild(name, logPath, path string, args ...string) (*child, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("devcluster: open %s: %w", logPath, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("devcluster: start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		logf.Close()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the child's process group and waits up to grace for
// it to exit, then sends SIGKILL. It returns once the child is gone.
func (c *child) stop(grace time.Duration) error {
	if c.exited() {
		return nil
	}
	c.signalGroup(syscall.SIGTERM)
	select {
	case <-c.done:
		return nil
	case <-time.After(grace):
	}
	c.signalGroup(syscall.SIGKILL)
	<-c.done
	return fmt.Errorf("devcluster: %s (pid %d) did not stop within %s and was killed", c.name, c.pid(), grace)
}

// kill ends the child's process group at once.
func (c *child) kill() {
	if !c.exited() {
		c.signalGroup(syscall.SIGKILL)
		<-c.done
	}
}

func (c *child) signalGroup(sig syscall.Signal) {
	// The negative PID addresses the process group this child leads; only
	// processes we started are in it.
	if err := syscall.Kill(-c.pid(), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = c.cmd.Process.Signal(sig)
	}
}
