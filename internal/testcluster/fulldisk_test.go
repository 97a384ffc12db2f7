package testcluster

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/testenv"
	"github.com/logagent/logagent/internal/testseed"
)

// mountTmpfs mounts a tmpfs of size bytes at dir (created) and unmounts it
// when the test ends, after the agents it holds have stopped (cleanups run
// last registered first, and the cluster's are registered after this one).
func mountTmpfs(t *testing.T, dir string, size int64) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.FormatInt(size, 10)); err != nil {
		if os.Geteuid() != 0 {
			testenv.SkipUnlessCI(t, "SKIPPED, NOT PASSED: mounting a tmpfs needs root (euid %d): %v", os.Geteuid(), err)
		}
		t.Fatalf("mount tmpfs at %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
			if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
				t.Errorf("lazy unmount %s: %v", dir, err)
			}
		}
	})
}

// fillFile writes a file of size bytes of zeros.
func fillFile(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatalf("fill %s: %v", path, err)
	}
}

// fillToBrim writes path until the file system has no block left.
func fillToBrim(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", path, err)
			}
			return
		}
	}
}

// TestFullDiskLosesNothing (issue 12): the agents' data directories are
// small tmpfs mounts, the leader's the fullest. acks=all writes of 64 KiB
// go until the leader's disk refuses them with 507 insufficient_storage.
// While it is full every acknowledged record can be read from every
// replica, the agents stay healthy and no election happens; a follower
// that crashes with its disk full to the last block starts again and
// serves them too; once the filler files are deleted, writes resume
// without a restart.
func TestFullDiskLosesNothing(t *testing.T) {
	const (
		mountSize      = 32 << 20
		leaderFiller   = 12 << 20
		followerFiller = 4 << 20
		valueSize      = 64 << 10
		topic          = "full"
	)
	dir := t.TempDir()
	for i := 1; i <= 3; i++ {
		mountTmpfs(t, filepath.Join(dir, "n"+strconv.Itoa(i), "data"), mountSize)
	}
	c := Start(t, Options{Dir: dir})
	leader, epoch := createReplicatedTopic(t, c, topic)
	for _, a := range c.Agents {
		size := int64(followerFiller)
		if a == leader {
			size = leaderFiller
		}
		fillFile(t, filepath.Join(a.DataDir, "filler"), size)
	}

	rng := rand.New(rand.NewPCG(testseed.Seed(t), 12))
	acked := map[int64][]byte{}
	seq := 0
	produce := func(a *Agent) error {
		t.Helper()
		v := valuesOf(rng, 0, seq, 1, valueSize)[0]
		seq++
		p, err := a.Produce(topic, 0, ContentTypeBatch, buildBatch(t, [][]byte{v}), "all", 10*time.Second)
		if err == nil {
			acked[*p.BaseOffset] = v
		}
		return err
	}
	var refused *APIError
	for refused == nil {
		err := produce(leader)
		if err == nil {
			if seq > mountSize/valueSize {
				t.Fatalf("%d writes of %d bytes acknowledged on a %d-byte disk", seq, valueSize, mountSize)
			}
			continue
		}
		if !asAPIError(err, &refused) || refused.Status != 507 || refused.Code != "insufficient_storage" || !refused.Retriable {
			t.Fatalf("write %d: %v, want a retriable 507 insufficient_storage", seq, err)
		}
	}
	t.Logf("%d writes acknowledged, then: %v", len(acked), refused)

	// At once, before its next checkpoint, a follower's disk fills to the
	// last block and it crashes: started again, it opens its partition
	// (recovery has no room for new checkpoints and keeps those it
	// finds), catches up and serves every acknowledged record itself.
	follower := c.Agents[0]
	if follower == leader {
		follower = c.Agents[1]
	}
	brim := filepath.Join(follower.DataDir, "brim")
	fillToBrim(t, brim)
	follower.Kill()
	follower.Restart()
	hw := int64(len(acked))
	c.WaitFor(20*time.Second, follower.NodeID+" back in sync on its full disk", func() bool {
		p, err := follower.DescribePartition(topic, 0)
		return err == nil && p.Role == "follower" && p.HighWatermark != nil && *p.HighWatermark == hw &&
			*p.LogEndOffset == hw && slices.Contains(p.ISR, follower.NodeID)
	})
	checkAckedEverywhere(t, c, topic, acked)

	// Full for longer than a checkpoint interval: still refused, nothing
	// fails, nobody campaigns.
	for start := time.Now(); time.Since(start) < 7*time.Second; time.Sleep(250 * time.Millisecond) {
		for _, a := range c.Agents {
			var e *APIError
			if err := produce(a); !asAPIError(err, &e) || e.Status != 507 {
				t.Fatalf("write through %s to the full leader: %v, want 507", a.NodeID, err)
			}
		}
	}
	checkAckedEverywhere(t, c, topic, acked)
	for _, a := range c.Agents {
		if !a.Running() {
			t.Fatalf("%s exited while its disk was full", a.NodeID)
		}
		p, err := a.DescribePartition(topic, 0)
		if err != nil {
			t.Fatal(err)
		}
		if p.Epoch != epoch || p.Leader != leader.NodeID || len(p.ISR) != 3 {
			t.Fatalf("%s sees %+v while the disk is full, want %s leading epoch %d with all in sync", a.NodeID, p, leader.NodeID, epoch)
		}
	}

	// Space comes back.
	for _, f := range []string{filepath.Join(leader.DataDir, "filler"), brim} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		if err := produce(c.Agents[i%3]); err != nil {
			t.Fatalf("write %d after space came back: %v", i, err)
		}
	}
	hw = int64(len(acked))
	waitReplicasAt(t, c, topic, 0, hw, 20*time.Second)
	compareReplicas(t, c.Agents, topic, 0, hw)
	checkAckedEverywhere(t, c, topic, acked)
	if _, last := c.WaitLeader(topic, 0, time.Second); last != epoch {
		t.Fatalf("epoch went from %d to %d", epoch, last)
	}
}

// checkAckedEverywhere fetches the partition from every agent (each serves
// its own replica while in sync) and checks every acknowledged record.
func checkAckedEverywhere(t *testing.T, c *Cluster, topic string, acked map[int64][]byte) {
	t.Helper()
	for _, a := range c.Agents {
		got := map[int64][]byte{}
		for off := int64(0); off < int64(len(acked)); {
			f, err := a.Fetch(topic, 0, off, 4<<20, 0)
			if err != nil {
				t.Fatalf("fetch from %s at %d: %v", a.NodeID, off, err)
			}
			if len(f.Batches) == 0 {
				t.Fatalf("%s serves nothing at %d, its high watermark is %d", a.NodeID, off, f.HighWatermark)
			}
			for o, v := range decodeRecords(t, f.Batches) {
				got[o] = v
				off = max(off, o+1)
			}
		}
		for off, v := range acked {
			if !bytes.Equal(got[off], v) {
				t.Fatalf("%s: acknowledged record %d missing or different", a.NodeID, off)
			}
		}
	}
}
