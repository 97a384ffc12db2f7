package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes the test binary act as a child program for
// TestProcessStop instead of running tests.
const helperEnv = "BENCHRUN_TEST_HELPER"

func init() {
	switch os.Getenv(helperEnv) {
	case "":
		return
	case "exit-on-interrupt":
		interrupts := make(chan os.Signal, 1)
		signal.Notify(interrupts, os.Interrupt)
		fmt.Println("started")
		<-interrupts
		os.Exit(0)
	case "ignore-interrupt":
		signal.Ignore(os.Interrupt)
		// A grandchild in the same process group, which only the group
		// kill reaches.
		grandchild := exec.Command(os.Args[0])
		grandchild.Env = append(os.Environ(), helperEnv+"=sleep")
		if err := grandchild.Start(); err != nil {
			fmt.Println("grandchild:", err)
			os.Exit(1)
		}
		fmt.Println("started")
		time.Sleep(time.Minute)
		os.Exit(0)
	case "sleep":
		signal.Ignore(os.Interrupt)
		time.Sleep(time.Minute)
		os.Exit(0)
	}
}

func TestProcessStop(t *testing.T) {
	tests := []struct {
		mode       string
		grace      time.Duration
		wantKilled bool
	}{
		// A generous grace: a race-enabled binary on a loaded machine can
		// take a while to exit.
		{"exit-on-interrupt", 10 * time.Second, false},
		{"ignore-interrupt", 300 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv(helperEnv, tt.mode)
			ready := newLineWatch("started")
			p, err := startProcess("helper", filepath.Join(dir, "out.log"), ready, os.Args[0])
			if err != nil {
				t.Fatal(err)
			}
			pid := p.cmd.Process.Pid
			t.Cleanup(func() {
				syscall.Kill(-pid, syscall.SIGKILL)
				<-p.done
			})
			select {
			case <-ready.seen:
			case <-p.done:
				t.Fatalf("helper exited at start: %v", p.err)
			case <-time.After(20 * time.Second):
				t.Fatal("helper printed nothing")
			}
			err = p.stop(tt.grace)
			if killed := err != nil && strings.Contains(err.Error(), "was killed"); killed != tt.wantKilled {
				t.Errorf("stop: %v; want killed %v", err, tt.wantKilled)
			}
			// Nothing of the group may be left once its orphans are reaped.
			gone := false
			for deadline := time.Now().Add(5 * time.Second); !gone && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				gone = syscall.Kill(-pid, 0) == syscall.ESRCH
			}
			if !gone {
				t.Errorf("process group %d still exists 5s after stop", pid)
			}
		})
	}
}
