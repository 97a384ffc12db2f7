package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/logagent/logagent/wire"
)

// status reads GET /v1/status.
func (ta *testAgent) status() statusResponse {
	t := ta.c.t
	t.Helper()
	status, body := ta.call("GET", "/v1/status", "", nil)
	if status != 200 {
		t.Fatalf("status: %d %s", status, body)
	}
	var st statusResponse
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// statusOf reads one partition's entry in GET /v1/status, if it has one.
func (ta *testAgent) statusOf(topic string, partition int) (statusPartition, bool) {
	ta.c.t.Helper()
	for _, p := range ta.status().Partitions {
		if p.Topic == topic && p.Partition == partition {
			return p, true
		}
	}
	return statusPartition{}, false
}

// TestPartitionThatCannotOpenStaysOfflineAndRetries: a partition whose log
// cannot be opened leaves the rest serving, shows as offline with the
// reason in /v1/status, answers a retriable error, is opened again with
// backoff and serves once the cause is gone, without a metadata change.
func TestPartitionThatCannotOpenStaysOfflineAndRetries(t *testing.T) {
	c := startTestCluster(t, 1, "")
	ta := c.agents[0]
	c.createTopic(ta, "t", 2, 1, 1)
	for p := range 2 {
		c.waitLeader("t", p, 1)
		ta.mustProduce("t", p, fmt.Sprintf("before-%d", p))
	}
	if err := ta.stop(); err != nil {
		t.Fatal(err)
	}
	// A directory where replica.json should be: reading it fails, as an
	// open does without descriptors, until the test puts the file back.
	file := filepath.Join(partitionDir(ta.dataDir, "t", 1), replicaFileName)
	if err := os.Rename(file, file+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(file, 0o755); err != nil {
		t.Fatal(err)
	}
	ta.start()

	c.waitLeader("t", 0, 1)
	ta.mustProduce("t", 0, "during")
	sp, ok := ta.statusOf("t", 1)
	if !ok || sp.Role != roleOffline || !strings.Contains(sp.OfflineReason, "is a directory") || sp.OpenAttempts < 1 || sp.HighWatermark != nil {
		t.Fatalf("status of t/1 = %+v (listed %v), want offline with the reason and no positions", sp, ok)
	}
	if d := ta.describe("t"); d.Partitions[1].Role != roleOffline {
		t.Errorf("describe t/1 role = %q, want %q", d.Partitions[1].Role, roleOffline)
	}
	// Nobody leads t/1: the alert LogagentPartitionWithoutLeader,
	// max by (topic, partition) (logagent_partition_leader) == 0, needs an
	// agent with a replica to export 0 for it. The collector skipped
	// offline replicas: no series of t/1 anywhere, and the alert silent.
	if status, body := ta.call("GET", "/metrics", "", nil); status != 200 ||
		!strings.Contains(string(body), `logagent_partition_leader{partition="1",topic="t"} 0`) ||
		!strings.Contains(string(body), `logagent_partition_under_min_isr{partition="1",topic="t"}`) ||
		strings.Contains(string(body), `logagent_partition_high_watermark{partition="1",topic="t"}`) {
		t.Errorf("metrics of the offline, leaderless t/1: %d; want logagent_partition_leader 0 and under_min_isr, no offsets", status)
	}
	status, body := ta.produce("t", 1, "acks=all&timeout=200ms", wire.ContentTypeNDJSON, []byte("x"))
	if e := errorCode(t, body); status != 503 || e.Code != wire.CodeLeaderNotAvailable || !e.Retriable || !strings.Contains(e.Message, "offline") {
		t.Errorf("produce to the offline partition: %d %s, want 503 %s, retriable, saying it is offline", status, body, wire.CodeLeaderNotAvailable)
	}
	status, body = ta.call("GET", "/v1/topics/t/partitions/1/records?offset=0", "", nil)
	if e := errorCode(t, body); status != 503 || e.Code != wire.CodeLeaderNotAvailable || !e.Retriable || !strings.Contains(e.Message, "offline") {
		t.Errorf("fetch from the offline partition: %d %s, want 503 %s, retriable, saying it is offline", status, body, wire.CodeLeaderNotAvailable)
	}
	c.waitFor(5*time.Second, "a second open attempt", func() bool {
		sp, _ := ta.statusOf("t", 1)
		return sp.OpenAttempts >= 2
	})

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".aside", file); err != nil {
		t.Fatal(err)
	}
	c.waitLeader("t", 1, 1)
	ta.mustProduce("t", 1, "after")
	if got := ta.fetchValues("t", 1, 0); got[0] != "before-1" || got[1] != "after" {
		t.Errorf("t/1 after it opened = %v, want before-1 and after", got)
	}
	if sp, _ := ta.statusOf("t", 1); sp.Role == roleOffline || sp.OfflineReason != "" {
		t.Errorf("status of t/1 once open = %+v", sp)
	}
}
