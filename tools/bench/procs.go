package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// process is a child program that benchrun started and must stop.
type process struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, set before done closes
}

// startProcess runs bin with args in a process group of its own, with its
// output appended to logPath. When watch is not nil, every output byte
// also goes to watch.
func startProcess(name, logPath string, watch io.Writer, bin string, args ...string) (*process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("benchrun: %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	var out io.Writer = log
	if watch != nil {
		out = io.MultiWriter(log, watch)
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Pdeathsig ends the child if benchrun dies without stopping it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("benchrun: start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return p, nil
}

// stop sends SIGINT to the process, waits up to grace for it to exit, and
// then kills its whole process group.
func (p *process) stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	pid := p.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("benchrun: interrupt %s (pid %d): %w", p.name, pid, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("benchrun: kill %s (pid %d): %w", p.name, pid, err)
	}
	<-p.done
	return fmt.Errorf("benchrun: %s (pid %d) did not exit within %v of SIGINT and was killed", p.name, pid, grace)
}

// lineWatch is an io.Writer that closes seen once its input has contained
// want.
type lineWatch struct {
	want []byte
	seen chan struct{}

	mu   sync.Mutex
	tail []byte
	once sync.Once
}

func newLineWatch(want string) *lineWatch {
	return &lineWatch{want: []byte(want), seen: make(chan struct{})}
}

func (w *lineWatch) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tail = append(w.tail, b...)
	if bytes.Contains(w.tail, w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	// Keep only what a match spanning two writes could need.
	if keep := len(w.want); len(w.tail) > keep {
		w.tail = append(w.tail[:0], w.tail[len(w.tail)-keep:]...)
	}
	return len(b), nil
}
