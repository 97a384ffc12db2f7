package segstore

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

const (
	rssChildEnv = "SEGSTORE_RSS_CHILD_DIR"
	rssBytesEnv = "SEGSTORE_RSS_BYTES"
	rssLimit    = 64 << 20
)

// TestAppendRSS appends SEGSTORE_RSS_BYTES (default 256 MiB; 2 GiB for the
// figure in docs/benchmarks.md) in a child process and checks the child's
// peak RSS (VmHWM) stays under 64 MiB, also under the race detector (whose
// shadow memory roughly triples it). A child keeps the other tests' memory
// out of the figure.
func TestAppendRSS(t *testing.T) {
	total := int64(envInt(t, rssBytesEnv, 256<<20))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), rssChildEnv+"="+t.TempDir(), fmt.Sprintf("%s=%d", rssBytesEnv, total))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	start := time.Now()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, out.String())
	}
	var hwm int64 = -1
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM_KB="); ok {
			hwm, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if hwm < 0 {
		t.Fatalf("child did not report VmHWM:\n%s", out.String())
	}
	t.Logf("appended %d MiB in %v; peak RSS (VmHWM) %.1f MiB",
		total>>20, time.Since(start).Round(time.Millisecond), float64(hwm)/1024)
	if hwm*1024 >= rssLimit {
		t.Fatalf("peak RSS %d KiB, limit %d KiB", hwm, rssLimit>>10)
	}
}

// rssChild appends in this process and prints its peak RSS.
func rssChild(dir string) int {
	total, err := strconv.ParseInt(os.Getenv(rssBytesEnv), 10, 64)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	l, err := Open(OSFS{}, filepath.Join(dir, "p0"), Options{Logger: hclog.NewNullLogger()})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	batch := makeBatch(rand.New(rand.NewPCG(3, 3)), batchSpec{records: 16, payload: 16<<10 - 61})
	var sinceSync int64
	for written := int64(0); written < total; written += int64(len(batch)) {
		if _, _, err := l.AppendLeader(batch, 1); err != nil {
			fmt.Println(err)
			return 1
		}
		if sinceSync += int64(len(batch)); sinceSync >= 64<<20 {
			if _, err := l.Sync(); err != nil {
				fmt.Println(err)
				return 1
			}
			sinceSync = 0
		}
	}
	if err := l.Close(); err != nil {
		fmt.Println(err)
		return 1
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			fmt.Printf("VmHWM_KB=%s\n", strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return 0
		}
	}
	fmt.Println("no VmHWM in /proc/self/status")
	return 1
}
