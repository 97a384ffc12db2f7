package testcluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// openFiles counts a process's open descriptors.
func openFiles(t *testing.T, pid int) int {
	t.Helper()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("descriptors of pid %d: %v", pid, err)
	}
	return len(entries)
}

// exhaustClient talks to one agent over one keep-alive connection with a
// short timeout: once the agent is out of descriptors a new connection
// would wait in the listen backlog, and the test must not hang on it.
type exhaustClient struct {
	t    *testing.T
	addr string
	http *http.Client
}

func newExhaustClient(t *testing.T, addr string) *exhaustClient {
	tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}
	t.Cleanup(tr.CloseIdleConnections)
	return &exhaustClient{t: t, addr: addr, http: &http.Client{Transport: tr, Timeout: 5 * time.Second}}
}

func (c *exhaustClient) send(method, path, contentType string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, "http://"+c.addr+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

type exhaustStatus struct {
	Partitions []struct {
		Topic         string `json:"topic"`
		Partition     int    `json:"partition"`
		Role          string `json:"role"`
		OfflineReason string `json:"offline_reason"`
	} `json:"partitions"`
}

func (c *exhaustClient) status() (exhaustStatus, error) {
	var st exhaustStatus
	code, b, err := c.send(http.MethodGet, "/v1/status", "", nil)
	if err != nil {
		return st, err
	}
	if code != http.StatusOK {
		return st, fmt.Errorf("status: %d %s", code, b)
	}
	return st, json.Unmarshal(b, &st)
}

func (c *exhaustClient) produce(topic string, partition int, value string) (int, []byte, error) {
	return c.send(http.MethodPost, fmt.Sprintf("/v1/topics/%s/records?partition=%d&acks=all&timeout=1s", topic, partition),
		ContentTypeNDJSON, []byte(value))
}

// logCount counts the lines of the agent's log that contain s.
func logCount(t *testing.T, a *Agent, s string) int {
	t.Helper()
	b, err := os.ReadFile(a.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte(s))
}

func logHas(t *testing.T, a *Agent, s string) bool {
	t.Helper()
	return logCount(t, a, s) > 0
}

// TestDescriptorExhaustion (acceptance 5): an agent whose RLIMIT_NOFILE is
// too small for its partitions serves those it could open, shows the others
// offline with the reason, answers a retriable error for them, keeps
// descriptors for new connections meanwhile, and its client API, out of
// descriptors, logs the accept errors, stays up and accepts again once
// descriptors are free.
func TestDescriptorExhaustion(t *testing.T) {
	const served, starved = "served", "starved"
	// The agent keeps 32 descriptors free (the least reserve) and holds back
	// what its file cache (a quarter of the limit) may still open. An idle
	// replica of the starved topic holds nothing outside the cache (a
	// replication factor of 1: no connections), so to starve it for good
	// the test holds 24 client connections (the headroom) while it opens.
	const servedPartitions, starvedPartitions, reserve, headroom = 4, 32, 32, 24
	c := Start(t, Options{Agents: 1})
	a := c.Agents[0]
	if err := a.CreateTopic(TopicSpec{Name: served, Partitions: servedPartitions, ReplicationFactor: 1, MinInsyncReplicas: 1}); err != nil {
		t.Fatal(err)
	}
	for p := range servedPartitions {
		c.WaitLeader(served, p, 20*time.Second)
	}
	// The limit: what the agent uses with the served topic, the reserve,
	// and room for a quarter of the starved topic.
	limit := uint64(openFiles(t, a.PID()) + reserve + headroom)
	if code := a.Terminate(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	a.FileLimit = limit
	a.Restart()
	if !logHas(t, a, fmt.Sprintf(`open files limit: soft=%d hard=%d`, limit-1, limit)) &&
		!logHas(t, a, fmt.Sprintf(`open files limit: soft=%d hard=%d`, limit, limit)) {
		t.Errorf("the log does not give the limit %d", limit)
	}
	if !logHas(t, a, "the open files limit is low for the partitions this agent holds") {
		t.Errorf("no warning about the low limit")
	}
	cl := newExhaustClient(t, a.ClientAddr)
	for p := range servedPartitions {
		c.WaitLeader(served, p, 20*time.Second)
	}
	if _, _, err := cl.send(http.MethodGet, "/v1/health", "", nil); err != nil {
		t.Fatal(err)
	}
	before := openFiles(t, a.PID())
	var starving []net.Conn
	defer func() {
		for _, conn := range starving {
			conn.Close()
		}
	}()
	for range headroom {
		conn, err := net.DialTimeout("tcp", a.ClientAddr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", len(starving), err)
		}
		starving = append(starving, conn)
	}
	c.WaitFor(10*time.Second, "the connections accepted", func() bool {
		return openFiles(t, a.PID()) >= before+headroom
	})
	// Over the client's connection, opened while descriptors are free.
	if code, b, err := cl.send(http.MethodPost, "/v1/topics", "application/json",
		fmt.Appendf(nil, `{"name":%q,"partitions":%d,"replication_factor":1,"min_insync_replicas":1}`, starved, starvedPartitions)); err != nil || code != http.StatusCreated {
		t.Fatalf("create %s: %d %s %v", starved, code, b, err)
	}

	// Every starved partition is open or offline for want of descriptors
	// (the reserve, or open(2) failing with EMFILE), and the served ones
	// still lead.
	var offline []int
	c.WaitFor(30*time.Second, "every partition open or offline", func() bool {
		st, err := cl.status()
		if err != nil {
			return false
		}
		offline = offline[:0]
		leading, settled := 0, 0
		for _, p := range st.Partitions {
			switch {
			case p.Topic == served && p.Role == "leader":
				leading++
			case p.Topic == starved && p.Role == "offline" &&
				(strings.Contains(p.OfflineReason, "too few free descriptors") || strings.Contains(p.OfflineReason, "too many open files")):
				offline = append(offline, p.Partition)
				settled++
			case p.Topic == starved && p.Role == "leader":
				settled++
			}
		}
		return leading == servedPartitions && settled == starvedPartitions && len(offline) > 0
	})
	inUse := openFiles(t, a.PID()) - len(starving)
	t.Logf("limit %d: %d of %d starved partitions offline, %d descriptors in use besides %d connections", limit, len(offline), starvedPartitions, inUse, len(starving))
	if inUse > int(limit)-reserve/2 {
		t.Errorf("%d descriptors in use of %d: the opens did not keep the reserve of %d", inUse, limit, reserve)
	}
	if !a.Running() {
		t.Fatal("the agent exited")
	}
	for p := range servedPartitions {
		if code, b, err := cl.produce(served, p, "while starved"); err != nil || code != http.StatusOK {
			t.Errorf("produce to %s/%d while short of descriptors: %d %s %v", served, p, code, b, err)
		}
	}
	// The last stays offline while the connections are held.
	last := offline[len(offline)-1]
	code, b, err := cl.produce(starved, last, "x")
	if err != nil {
		t.Fatal(err)
	}
	apiErr, _ := decodeAPIError(code, b).(*APIError)
	if code != http.StatusServiceUnavailable || apiErr.Code != "leader_not_available" || !apiErr.Retriable || !strings.Contains(apiErr.Message, "offline") {
		t.Errorf("produce to offline %s/%d: %d %s, want 503 leader_not_available, retriable, saying it is offline", starved, last, code, b)
	}
	if !logHas(t, a, "cannot open partition; it stays offline here and is tried again") {
		t.Errorf("the log does not say that partitions could not open")
	}
	// The reserve leaves room for a new connection.
	if code, b, err := newExhaustClient(t, a.ClientAddr).send(http.MethodGet, "/v1/health", "", nil); err != nil || code != http.StatusOK {
		t.Errorf("a new connection while partitions are offline: %d %s %v", code, b, err)
	}
	// The connections gone, the partitions open.
	for _, conn := range starving {
		conn.Close()
	}
	starving = nil
	c.WaitFor(30*time.Second, "the starved partitions open", func() bool {
		st, err := cl.status()
		if err != nil {
			return false
		}
		leading := 0
		for _, p := range st.Partitions {
			if p.Topic == starved && p.Role == "leader" {
				leading++
			}
		}
		return leading == starvedPartitions
	})

	// Deleting the starved topic frees its descriptors; the agent may
	// need a few tries to reach Consul meanwhile.
	c.WaitFor(30*time.Second, "the starved topic deleted", func() bool {
		code, _, err := cl.send(http.MethodDelete, "/v1/topics/"+starved, "", nil)
		return err == nil && (code == http.StatusNoContent || code == http.StatusNotFound)
	})
	c.WaitFor(30*time.Second, "no partition offline", func() bool {
		st, err := cl.status()
		if err != nil {
			return false
		}
		for _, p := range st.Partitions {
			if p.Topic == starved {
				return false
			}
		}
		return len(st.Partitions) == servedPartitions
	})

	// Connections until the client API runs out of descriptors.
	const acceptFailed = "accept4: too many open files"
	acceptFailures := logCount(t, a, acceptFailed)
	var held []net.Conn
	defer func() {
		for _, conn := range held {
			conn.Close()
		}
	}()
	for range 2 * (reserve + headroom) {
		conn, err := net.DialTimeout("tcp", a.ClientAddr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", len(held), err)
		}
		held = append(held, conn)
	}
	c.WaitFor(20*time.Second, "an accept error in the log", func() bool {
		return logCount(t, a, acceptFailed) > acceptFailures
	})
	time.Sleep(500 * time.Millisecond) // a few more failed accepts
	if !a.Running() {
		t.Fatal("the agent exited when its client API ran out of descriptors")
	}
	if !logHas(t, a, "cannot accept connections; retrying") {
		t.Error("the accept errors are not logged as retried")
	}
	for _, conn := range held {
		conn.Close()
	}
	held = nil

	// A new connection is accepted again, and the partitions still serve.
	fresh := newExhaustClient(t, a.ClientAddr)
	c.WaitFor(20*time.Second, "a new connection served", func() bool {
		code, _, err := fresh.send(http.MethodGet, "/v1/health", "", nil)
		return err == nil && code == http.StatusOK
	})
	c.WaitFor(20*time.Second, "produce after the exhaustion", func() bool {
		code, _, err := fresh.produce(served, 0, "after")
		return err == nil && code == http.StatusOK
	})
	if !a.Running() {
		t.Fatal("the agent exited")
	}
}
