package testcluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/testseed"
)

// readSyscalls is the number of read-side system calls a process made
// (syscr in /proc/<pid>/io). sendfile(2) counts one per call, however many
// bytes it moves; read(2) and pread(2) count one per call too, and copying
// through a user-space buffer takes one per buffer (4 KiB in fasthttp).
func readSyscalls(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		t.Fatalf("I/O accounting of pid %d: %v", pid, err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "syscr: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no syscr in /proc/%d/io", pid)
	return 0
}

// TestReplicaFetchUsesSendfile: a follower catching up 64 MiB fetches it in
// 8 MiB answers; the leader serves them with sendfile(2), which its read
// system call count shows: copying through user space would take one read
// per 4 KiB (16384 in all), sendfile takes a few calls per answer.
//
// LOGAGENT_STRACE=1 also attaches `strace -f -e trace=sendfile` to the
// leader during the catch-up and logs what it saw.
func TestReplicaFetchUsesSendfile(t *testing.T) {
	const topic, batchBytes, batches = "zerocopy", 1 << 20, 64
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 3))
	c := Start(t, Options{HCL: `replication { fetch_max_bytes = "8MiB" }`})
	leader, _ := createReplicatedTopic(t, c, topic)
	var lagging *Agent
	for _, a := range c.Agents {
		if a != leader {
			lagging = a
		}
	}
	lagging.Kill()
	value := make([]byte, batchBytes-4096)
	for i := range value {
		value[i] = byte(rng.Uint32())
	}
	for range batches {
		if _, err := leader.Produce(topic, 0, ContentTypeBatch, buildBatch(t, [][]byte{value}), "1", 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	p, err := leader.DescribePartition(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	end := *p.LogEndOffset

	var strace *exec.Cmd
	var straceOut bytes.Buffer
	if os.Getenv("LOGAGENT_STRACE") != "" {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		strace = exec.CommandContext(ctx, "strace", "-f", "-e", "trace=sendfile", "-p", strconv.Itoa(leader.PID()))
		strace.Stdout, strace.Stderr = &straceOut, &straceOut
		if err := strace.Start(); err != nil {
			t.Fatalf("strace: %v", err)
		}
		time.Sleep(500 * time.Millisecond) // attached to every thread
	}
	before := readSyscalls(t, leader.PID())
	start := time.Now()
	lagging.Restart()
	c.WaitFor(30*time.Second, lagging.NodeID+" caught up", func() bool {
		p, err := lagging.DescribePartition(topic, 0)
		return err == nil && p.LogEndOffset != nil && *p.LogEndOffset == end
	})
	elapsed := time.Since(start)
	reads := readSyscalls(t, leader.PID()) - before
	if strace != nil {
		_ = strace.Process.Signal(os.Interrupt)
		_ = strace.Wait()
		t.Logf("strace -f -e trace=sendfile -p %d:\n%s", leader.PID(), straceOut.String())
	}
	total := int64(batches * batchBytes)
	t.Logf("follower caught up %d MiB in %s; the leader made %d read-side system calls meanwhile (a 4 KiB copy loop needs %d)",
		total>>20, elapsed.Round(time.Millisecond), reads, total/4096)
	if limit := total / (256 << 10); reads > limit {
		t.Fatalf("%d read-side system calls for %d bytes of replica fetches (limit %d): the bodies are copied through user space, not sent with sendfile",
			reads, total, limit)
	}
}
