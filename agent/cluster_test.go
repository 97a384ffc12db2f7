package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/internal/consultest"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/segstore"

	"github.com/logagent/logagent/wire"
)

// These tests run agents in the test process, against a real Consul, so
// the race detector sees the agent's own goroutines. internal/testcluster
// runs the real binary for crashes and the acceptance figures.

// testClusterHCL is every in-process agent's timing: quick failover, a
// lagging follower out of the ISR in two seconds.
const testClusterHCL = `
log_level = "debug"
consul {
  session_ttl = "5s"
  check_ttl   = "2s"
  lock_delay  = "100ms"
}
replication {
  lag_time_max   = "2s"
  fetch_max_wait = "250ms"
}
storage {
  segment_bytes = "1MiB"
}
`

// testLogs sends the agents' logs to t.Log until the test ends, and keeps
// them for contains; an agent that did not stop in time writes nowhere
// after it.
type testLogs struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
	kept strings.Builder
}

// contains says whether any agent logged s.
func (l *testLogs) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.kept.String(), s)
}

func newTestLogs(t *testing.T) *testLogs {
	l := &testLogs{t: t}
	t.Cleanup(func() {
		l.mu.Lock()
		l.done = true
		l.mu.Unlock()
	})
	return l
}

func (l *testLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.t.Log(strings.TrimRight(string(p), "\n"))
		l.kept.Write(p)
	}
	return len(p), nil
}

type testCluster struct {
	t      *testing.T
	consul *consultest.Server
	logs   *testLogs
	agents []*testAgent
	http   *http.Client
	setup  func(*Agent)
}

func startTestCluster(t *testing.T, n int, extraHCL string) *testCluster {
	t.Helper()
	c := newTestCluster(t, n, extraHCL, nil)
	for _, ta := range c.agents {
		ta.start()
	}
	return c
}

// startTestClusterWith is startTestCluster with setup applied to every
// Agent between New and Run (a test's clock, for instance).
func startTestClusterWith(t *testing.T, n int, extraHCL string, setup func(*Agent)) *testCluster {
	c := newTestCluster(t, n, extraHCL, setup)
	for _, ta := range c.agents {
		ta.start()
	}
	return c
}

// newTestCluster is startTestClusterWith without the start, for a test that
// sets up its agents first (their file system, say).
func newTestCluster(t *testing.T, n int, extraHCL string, setup func(*Agent)) *testCluster {
	t.Helper()
	logs := newTestLogs(t)
	c := &testCluster{t: t, consul: consultest.Start(t), logs: logs, http: &http.Client{Timeout: 30 * time.Second}, setup: setup}
	for i := range n {
		ports := consultest.FreePorts(t, 2)
		ta := &testAgent{
			c:       c,
			nodeID:  fmt.Sprintf("n%d", i+1),
			dataDir: filepath.Join(t.TempDir(), "data"),
			client:  fmt.Sprintf("127.0.0.1:%d", ports[0]),
			peer:    fmt.Sprintf("127.0.0.1:%d", ports[1]),
		}
		dir := t.TempDir()
		ta.configs = []string{
			writeTestFile(t, filepath.Join(dir, "1.hcl"), testClusterHCL),
			writeTestFile(t, filepath.Join(dir, "2.hcl"), fmt.Sprintf(
				"node_id = %q\ndata_dir = %q\nclient { address = %q }\npeer { address = %q }\nconsul { address = %q }\n",
				ta.nodeID, ta.dataDir, ta.client, ta.peer, c.consul.HTTPAddr())),
			writeTestFile(t, filepath.Join(dir, "3.hcl"), extraHCL),
		}
		c.agents = append(c.agents, ta)
	}
	return c
}

func writeTestFile(t *testing.T, path, body string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// testAgent is one in-process agent; it can be stopped (gracefully) and
// started again on its data.
type testAgent struct {
	c       *testCluster
	nodeID  string
	dataDir string
	client  string
	peer    string
	configs []string
	// fs, when set, is the file system the agent's partitions use.
	fs segstore.FS

	agent  *Agent
	coord  *election.Client
	cancel context.CancelFunc
	done   chan error
}

func (ta *testAgent) start() {
	t := ta.c.t
	t.Helper()
	cfg, err := config.Load(ta.configs...)
	if err != nil {
		t.Fatal(err)
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: ta.nodeID, Level: hclog.LevelFromString(cfg.LogLevel), Output: ta.c.logs})
	coord, err := NewCoordinator(cfg, "test-"+cfg.NodeID, logger.Named("election"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ta.agent, ta.coord = New(cfg, logger.Named("agent"), coord), coord
	if ta.fs != nil {
		ta.agent.fs = ta.fs
	}
	if ta.c.setup != nil {
		ta.c.setup(ta.agent)
	}
	ta.cancel, ta.done = cancel, make(chan error, 1)
	ready := make(chan struct{})
	go runLabelled(ctx, ta.nodeID, func(ctx context.Context) { ta.done <- ta.agent.Run(ctx, func() { close(ready) }) })
	t.Cleanup(func() { ta.stopQuietly() })
	select {
	case <-ready:
	case err := <-ta.done:
		ta.done <- err
		t.Fatalf("%s stopped while starting: %v", ta.nodeID, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s not ready after 30s", ta.nodeID)
	}
}

// stop stops the agent gracefully and returns Run's error; the test fails
// if a goroutine the agent started outlives Run.
// useFaultFS gives the agent, before its start, a FaultFS over its data
// directory and returns it.
func (ta *testAgent) useFaultFS() *segstore.FaultFS {
	t := ta.c.t
	t.Helper()
	if err := os.MkdirAll(ta.dataDir, 0o750); err != nil {
		t.Fatal(err)
	}
	fsys, err := segstore.NewFaultFS(ta.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	ta.fs = fsys
	return fsys
}

func (ta *testAgent) stop() error {
	ta.cancel()
	select {
	case err := <-ta.done:
		ta.done <- err
		checkNoLeftoverGoroutines(ta.c.t, ta.nodeID)
		return err
	case <-time.After(30 * time.Second):
		ta.c.t.Fatalf("%s did not stop within 30s", ta.nodeID)
		return nil
	}
}

func (ta *testAgent) stopQuietly() {
	if err := ta.stop(); err != nil {
		ta.c.t.Errorf("%s: %v", ta.nodeID, err)
	}
}

// call sends a client API request and returns the status and body.
func (ta *testAgent) call(method, path, contentType string, body []byte) (int, []byte) {
	return ta.c.callAddr(ta.client, method, path, contentType, body, nil)
}

func (c *testCluster) callAddr(addr, method, path, contentType string, body []byte, header http.Header) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, b
}

// errorCode decodes an error body's code.
func errorCode(t *testing.T, body []byte) reply.APIError {
	t.Helper()
	var e struct {
		Error reply.APIError `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("not an error body: %s", body)
	}
	return e.Error
}

func (ta *testAgent) describe(topic string) topicDescription {
	t := ta.c.t
	t.Helper()
	d, err := ta.tryDescribe(topic)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// tryDescribe describes a topic that this agent's metadata may not have
// yet.
func (ta *testAgent) tryDescribe(topic string) (topicDescription, error) {
	status, body := ta.call("GET", "/v1/topics/"+topic, "", nil)
	if status != 200 {
		return topicDescription{}, fmt.Errorf("describe %s on %s: %d %s", topic, ta.nodeID, status, body)
	}
	var d topicDescription
	err := json.Unmarshal(body, &d)
	return d, err
}

func (c *testCluster) createTopic(via *testAgent, name string, partitions, rf, minISR int) {
	c.t.Helper()
	body := fmt.Sprintf(`{"name":%q,"partitions":%d,"replication_factor":%d,"min_insync_replicas":%d}`, name, partitions, rf, minISR)
	if status, b := via.call("POST", "/v1/topics", "application/json", []byte(body)); status != 201 {
		c.t.Fatalf("create %s: %d %s", name, status, b)
	}
}

func (c *testCluster) waitFor(timeout time.Duration, what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// running lists the agents that are not stopped.
func (c *testCluster) running() []*testAgent {
	var out []*testAgent
	for _, ta := range c.agents {
		select {
		case err := <-ta.done:
			ta.done <- err
		default:
			out = append(out, ta)
		}
	}
	return out
}

// waitLeader waits until a running agent leads the partition with an ISR
// of isrSize (any size for -1), by its own account, and returns it and its
// view.
func (c *testCluster) waitLeader(topic string, partition, isrSize int) (*testAgent, partitionDescription) {
	c.t.Helper()
	var leader *testAgent
	var pd partitionDescription
	c.waitFor(20*time.Second, fmt.Sprintf("a leader of %s/%d with %d in sync", topic, partition, isrSize), func() bool {
		for _, ta := range c.running() {
			d, err := ta.tryDescribe(topic)
			if err != nil {
				continue
			}
			if p := d.Partitions[partition]; p.Role == "leader" && (isrSize < 0 || len(p.ISR) == isrSize) {
				leader, pd = ta, p
				return true
			}
		}
		return false
	})
	return leader, pd
}

// waitCaughtUp waits until every running replica has high watermark and
// log end offset at end, and knows itself in the ISR.
func (c *testCluster) waitCaughtUp(topic string, partition int, end int64) {
	c.t.Helper()
	c.waitFor(20*time.Second, fmt.Sprintf("every replica of %s/%d at %d", topic, partition, end), func() bool {
		for _, ta := range c.running() {
			d, err := ta.tryDescribe(topic)
			if err != nil {
				return false
			}
			p := d.Partitions[partition]
			if p.HighWatermark == nil || *p.HighWatermark != end || *p.LogEndOffset != end || !slices.Contains(p.ISR, ta.nodeID) {
				return false
			}
		}
		return true
	})
}

func (ta *testAgent) produce(topic string, partition int, query, contentType string, body []byte) (int, []byte) {
	return ta.call("POST", fmt.Sprintf("/v1/topics/%s/records?partition=%d&%s", topic, partition, query), contentType, body)
}

func (ta *testAgent) mustProduce(topic string, partition int, lines ...string) produceResponse {
	t := ta.c.t
	t.Helper()
	status, body := ta.produce(topic, partition, "acks=all", wire.ContentTypeNDJSON, []byte(strings.Join(lines, "\n")))
	if status != 200 {
		t.Fatalf("produce to %s: %d %s", ta.nodeID, status, body)
	}
	var r produceResponse
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// fetchValues reads a partition from offset to its high watermark on an
// agent's replica and decodes the records' values by offset.
func (ta *testAgent) fetchValues(topic string, partition int, offset int64) map[int64]string {
	t := ta.c.t
	t.Helper()
	return readValues(t, offset, func(offset int64) []byte {
		status, body := ta.call("GET", fmt.Sprintf("/v1/topics/%s/partitions/%d/records?offset=%d&max_bytes=%d", topic, partition, offset, 64<<20), "", nil)
		if status != 200 {
			t.Fatalf("fetch from %s at %d: %d %s", ta.nodeID, offset, status, body)
		}
		return body
	})
}

// readValues decodes the values of every record from offset on, calling read
// until it answers nothing: a read answers from one segment at most, as a
// Kafka fetch does, and a truncation (a leader change) makes the next append
// start a segment, so one read is not the whole log.
func readValues(t *testing.T, offset int64, read func(offset int64) []byte) map[int64]string {
	t.Helper()
	out := map[int64]string{}
	for {
		batches := read(offset)
		if len(batches) == 0 {
			return out
		}
		next := decodeValuesInto(t, out, batches)
		if next <= offset {
			t.Fatalf("a read at %d answered batches ending before it, at %d", offset, next)
		}
		offset = next
	}
}

func decodeValues(t *testing.T, batches []byte) map[int64]string {
	t.Helper()
	out := map[int64]string{}
	decodeValuesInto(t, out, batches)
	return out
}

// decodeValuesInto adds the values of batches' records to out by offset and
// returns the offset after the last batch.
func decodeValuesInto(t *testing.T, out map[int64]string, batches []byte) (next int64) {
	t.Helper()
	split, err := record.SplitBatches(batches, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := record.NewDecoder(record.Limits{})
	for _, b := range split {
		it, err := d.Records(b)
		if err != nil {
			t.Fatal(err)
		}
		for it.Next() {
			out[it.Record().Offset] = string(it.Record().Value)
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		next = it.Header().NextOffset()
	}
	return next
}

func sortedKeys(m map[int64]string) []int64 {
	keys := make([]int64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
