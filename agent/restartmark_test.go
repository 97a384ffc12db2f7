package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/internal/consultest"
	"github.com/logagent/logagent/internal/testenv"
	"github.com/logagent/logagent/segstore"
)

// TestStopDuringStartAfterCrashIsNotClean: an agent that crashed (no
// clean_shutdown) is started again under the same boot and stopped
// (SIGTERM) while it still waits for Consul, before it opened, recovered
// or synced a single partition. Its stop must not write clean_shutdown:
// the partitions still hold what the crashed agent never fsynced (with
// durability = "replicated", acknowledged records), and a power loss now
// must still be seen as a lost page cache at the next start, which marks
// every replica as having lost data. Today the stop writes the marker, the
// next start after the reboot trusts every log, and a replica that lost
// acknowledged records may lead.
func TestStopDuringStartAfterCrashIsNotClean(t *testing.T) {
	bootID, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		testenv.SkipUnlessCI(t, "needs the kernel boot id: %v", err)
	}
	dataDir := filepath.Join(t.TempDir(), "data")
	// What the crashed agent left: its data directory, without
	// clean_shutdown, under this boot, and one partition.
	d, err := partition.OpenDataDir(segstore.OSFS{}, dataDir, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.RecordBoot(false); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	part := filepath.Join(dataDir, "orders-0")
	if err := os.MkdirAll(part, 0o750); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(part, "replica.json"), `{"topic":"orders","partition":0,"topic_id":"t1","data_loss":false}`+"\n")

	// Consul is not there: the agent waits for it until stopped.
	ports := consultest.FreePorts(t, 3)
	dir := t.TempDir()
	cfgPath := writeTestFile(t, filepath.Join(dir, "a.hcl"), fmt.Sprintf(
		"node_id = \"n1\"\ndata_dir = %q\nstorage { durability = \"replicated\" }\nclient { address = \"127.0.0.1:%d\" }\npeer { address = \"127.0.0.1:%d\" }\nconsul { address = \"127.0.0.1:%d\" }\n",
		dataDir, ports[0], ports[1], ports[2]))
	cancel, done := startWaitingForConsul(t, cfgPath)
	time.Sleep(200 * time.Millisecond)
	cancel() // SIGTERM while starting
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not stop within 30s")
	}

	// The host loses power now, before the kernel wrote the crashed
	// agent's pages back; it boots under another id.
	writeTestFile(t, filepath.Join(dataDir, "boot_id"), anotherBootID(string(bootID))+"\n")
	d, err = partition.OpenDataDir(segstore.OSFS{}, dataDir, "n1")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	t.Logf("after the reboot: clean_shutdown=%t lost_page_cache=%t", d.CleanShutdown, d.LostPageCache)
	if !d.LostPageCache {
		t.Fatalf("a stop during the start that followed a crash wrote clean_shutdown (clean_shutdown=%t): after a power loss the next start trusts logs no agent ever synced, and no replica is marked as having lost data", d.CleanShutdown)
	}
}

// TestPowerLossUnderReplicatedIsMarkedAfterSwitchToFsync: an agent ran
// with durability = "replicated" (acknowledging records no fsync covered)
// when the host lost power; the operator, having just seen why, sets
// durability = "fsync" before the agent comes back. The start after the
// reboot must still mark every replica as having lost data: the records
// acknowledged under "replicated" may be gone whatever this start's
// setting. Today the marks depend on the new setting only, and the new
// boot id is recorded, so the loss is forgotten for good.
func TestPowerLossUnderReplicatedIsMarkedAfterSwitchToFsync(t *testing.T) {
	bootID, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		testenv.SkipUnlessCI(t, "needs the kernel boot id: %v", err)
	}
	dataDir := filepath.Join(t.TempDir(), "data")
	part := filepath.Join(dataDir, "orders-0")
	if err := os.MkdirAll(part, 0o750); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(part, "replica.json"), `{"topic":"orders","partition":0,"topic_id":"t1","data_loss":false}`+"\n")

	// runUntilConsul runs an agent with durability until it waits for
	// Consul (there is none), then stops it.
	runUntilConsul := func(durability string) {
		t.Helper()
		ports := consultest.FreePorts(t, 3)
		cfgPath := writeTestFile(t, filepath.Join(t.TempDir(), "a.hcl"), fmt.Sprintf(
			"node_id = \"n1\"\ndata_dir = %q\nstorage { durability = %q }\nclient { address = \"127.0.0.1:%d\" }\npeer { address = \"127.0.0.1:%d\" }\nconsul { address = \"127.0.0.1:%d\" }\n",
			dataDir, durability, ports[0], ports[1], ports[2]))
		cancel, done := startWaitingForConsul(t, cfgPath)
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
	// The agent under "replicated" (its boot id recorded)...
	runUntilConsul("replicated")
	// ...went down with the host: no clean_shutdown, another boot now.
	os.Remove(filepath.Join(dataDir, "clean_shutdown"))
	recorded, err := os.ReadFile(filepath.Join(dataDir, "boot_id"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(recorded), "\n")
	writeTestFile(t, filepath.Join(dataDir, "boot_id"), anotherBootID(string(bootID))+"\n"+rest)
	t.Logf("boot_id was %q", recorded)
	// It comes back under "fsync".
	runUntilConsul("fsync")

	b, err := os.ReadFile(filepath.Join(part, "replica.json"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("replica.json after the start under fsync: %s", b)
	if !strings.Contains(string(b), `"data_loss":true`) {
		t.Fatalf("the first start after a power loss that hit an agent running durability = \"replicated\" did not mark the replica (the new setting is \"fsync\"); its boot id is recorded now, so no later start will: the replica may lead without records acknowledged before the power loss")
	}
}

// startWaitingForConsul runs an agent of the configuration at cfgPath
// (whose Consul does not answer) until it waits for Consul; cancel stops
// it, done gives Run's error.
func startWaitingForConsul(t *testing.T, cfgPath string) (context.CancelFunc, chan error) {
	t.Helper()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "n1", Level: hclog.Debug, Output: newTestLogs(t)})
	coord, err := NewCoordinator(cfg, "", logger.Named("election"))
	if err != nil {
		t.Fatal(err)
	}
	a := New(cfg, logger.Named("agent"), coord)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, nil) }()
	deadline := time.Now().Add(10 * time.Second)
	for a.waitingFor.Load() != "waiting for Consul" {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("agent not waiting for Consul after 10s: %v", a.waitingFor.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cancel, done
}

// anotherBootID returns a boot id that is not current, the kernel's.
func anotherBootID(current string) string {
	for _, id := range []string{"11111111-2222-3333-4444-555555555555", "66666666-7777-8888-9999-000000000000"} {
		if id+"\n" != current {
			return id
		}
	}
	panic("unreachable: two distinct ids")
}
