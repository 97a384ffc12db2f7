package testcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// alterTopic sends PATCH /v1/topics/{topic} with body through a.
func alterTopic(a *Agent, topic, body string) (topicConfig, error) {
	var desc struct {
		Config topicConfig `json:"config"`
	}
	err := a.do(http.MethodPatch, a.url("/v1/topics/"+topic, nil), "application/json", []byte(body), &desc)
	return desc.Config, err
}

// topicConfig is the config of a topic description.
type topicConfig struct {
	Partitions        int      `json:"partitions"`
	MinInsyncReplicas int      `json:"min_insync_replicas"`
	Retention         string   `json:"retention"`
	RetentionBytes    int64    `json:"retention_bytes"`
	AgentDefaults     []string `json:"agent_defaults"`
}

func wantAPIError(t *testing.T, what string, err error, status int, code string) {
	t.Helper()
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != status || apiErr.Code != code {
		t.Fatalf("%s: %v, want %d %s", what, err, status, code)
	}
	t.Logf("%s: %v", what, err)
}

// keyedWrite is a write the sidecar placed by its key.
type keyedWrite struct {
	key, value string
	partition  int
	offset     int64
	// sent and at are when the write was sent and acknowledged.
	sent, at time.Time
}

// TestTopicAlterAddsPartitions (issue 18): a 3-partition RF 3 topic under
// acks=all load, unkeyed to each partition and keyed through the
// sidecar's partitioner, is altered to 6 partitions with logagent topic
// alter. Every partition gets a leader, its preferred replica, so the
// leaders spread two per agent; the new partitions take writes and serve
// them; nothing acknowledged on the old ones is lost, and none of them goes
// 1 s without an acknowledged write; keyed writes go by the new count once
// the agent they go through has answered the alter. Refusals come with
// their codes.
func TestTopicAlterAddsPartitions(t *testing.T) {
	const topic = "grow"
	c := Start(t, Options{})
	if err := c.Agents[0].CreateTopic(TopicSpec{Name: topic, Partitions: 3, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	for p := range 3 {
		c.WaitLeader(topic, p, 30*time.Second)
		c.WaitISR(topic, p, []string{"n1", "n2", "n3"}, 30*time.Second)
	}
	via := c.Agents
	load, stopLoad := runTopicLoad(t, via, topic, 3)

	// Keyed writes through n2, fifty keys in turn.
	var keyedMu sync.Mutex
	var keyed []keyedWrite
	keyedFails := 0
	stopKeyed := make(chan struct{})
	var keyedWG sync.WaitGroup
	keyedWG.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stopKeyed:
				return
			default:
			}
			w := keyedWrite{key: fmt.Sprintf("key-%d", i%50), value: fmt.Sprintf("keyed-%d", i), sent: time.Now()}
			q := url.Values{"key": {w.key}, "acks": {"all"}, "timeout": {"5s"}}
			var res Produced
			err := via[1].do(http.MethodPost, via[1].url("/v1/topics/"+topic+"/records", q), "application/octet-stream", []byte(w.value), &res)
			keyedMu.Lock()
			if err == nil && res.BaseOffset != nil {
				w.partition, w.offset, w.at = res.Partition, *res.BaseOffset, time.Now()
				keyed = append(keyed, w)
			} else {
				keyedFails++
			}
			keyedMu.Unlock()
		}
	})
	haltKeyed := sync.OnceFunc(func() { close(stopKeyed); keyedWG.Wait() })
	t.Cleanup(haltKeyed)

	time.Sleep(time.Second)
	from := time.Now()
	out := runCLI(t, "", "topic", "alter", topic, "-partitions", "6", "-addr", "http://"+via[1].ClientAddr, "-timeout", "25s")
	altered := time.Now()
	t.Logf("logagent topic alter %s -partitions 6 (%s):\n%s", topic, altered.Sub(from).Round(time.Millisecond), out)
	if !strings.Contains(out, "partitions: 3 -> 6") || !strings.Contains(out, "every partition has a leader") {
		t.Fatalf("topic alter did not say what changed and that every partition is led:\n%s", out)
	}
	// Every partition led by its preferred replica: two leaders per agent.
	c.WaitFor(30*time.Second, "every partition led by its first replica", func() bool {
		desc, err := via[0].Describe(topic)
		if err != nil || len(desc.Partitions) != 6 {
			return false
		}
		for _, pm := range desc.Partitions {
			if pm.Leader == "" || pm.Leader != pm.Replicas[0] {
				return false
			}
		}
		return true
	})
	desc, err := via[0].Describe(topic)
	if err != nil {
		t.Fatal(err)
	}
	leads := map[string]int{}
	for _, pm := range desc.Partitions {
		leads[pm.Leader]++
		t.Logf("%s/%d: replicas %v, leader %s", topic, pm.Partition, pm.Replicas, pm.Leader)
	}
	if len(leads) != 3 || leads["n1"] != 2 || leads["n2"] != 2 || leads["n3"] != 2 {
		t.Errorf("leaders per agent %v, want 2 each", leads)
	}
	// The new partitions take acks=all writes and serve them.
	for p := 3; p < 6; p++ {
		c.WaitISR(topic, p, desc.Partitions[p].Replicas, 30*time.Second)
		value := fmt.Sprintf("new-%d", p)
		res, err := via[0].Produce(topic, p, ContentTypeBatch, buildBatch(t, [][]byte{[]byte(value)}), "all", 5*time.Second)
		if err != nil {
			t.Fatalf("produce to new partition %d: %v", p, err)
		}
		leader, _ := c.WaitLeader(topic, p, 10*time.Second)
		f, err := leader.Fetch(topic, p, *res.BaseOffset, 1<<20, 0)
		if err != nil || string(decodeRecords(t, f.Batches)[*res.BaseOffset]) != value {
			t.Fatalf("read back %s/%d at %d: %v", topic, p, *res.BaseOffset, err)
		}
	}
	time.Sleep(time.Second)
	haltKeyed()
	stopLoad()
	until := time.Now()

	n := load.checkAcked(t, c, topic)
	gap := time.Duration(0)
	for p := range 3 {
		gap = max(gap, load.gap([]int{p}, from, until))
	}
	t.Logf("old partitions: %d writes acknowledged, %d not; longest stretch without an acknowledged write to one of them %s",
		n, load.fails, gap.Round(time.Millisecond))
	if gap > time.Second {
		t.Errorf("an old partition went %s without an acknowledged write, want at most 1 s", gap)
	}

	// Keyed writes: by 3 when acknowledged before the alter began, by 6
	// when sent after n2, the agent they go through, answered it (its
	// metadata has it then); each acknowledged one is where it was placed.
	partitionOf := func(key string, partitions int) int {
		h := fnv.New32a()
		h.Write([]byte(key))
		return int(h.Sum32() % uint32(partitions))
	}
	moved, onNew := 0, 0
	byPartition := map[int]map[int64]string{}
	for _, w := range keyed {
		switch {
		case w.at.Before(from) && w.partition != partitionOf(w.key, 3):
			t.Errorf("before the alter key %s went to partition %d, want %d", w.key, w.partition, partitionOf(w.key, 3))
		case w.sent.After(altered) && w.partition != partitionOf(w.key, 6):
			t.Errorf("after the alter key %s went to partition %d, want %d", w.key, w.partition, partitionOf(w.key, 6))
		}
		if w.sent.After(altered) && w.partition != partitionOf(w.key, 3) {
			moved++
		}
		if w.partition >= 3 {
			onNew++
		}
		if byPartition[w.partition] == nil {
			byPartition[w.partition] = map[int64]string{}
		}
		byPartition[w.partition][w.offset] = w.value
	}
	if moved == 0 || onNew == 0 {
		t.Errorf("no keyed write went to another partition after the alter (%d keyed writes)", len(keyed))
	}
	for p, want := range byPartition {
		leader, _ := c.WaitLeader(topic, p, 10*time.Second)
		got := map[int64][]byte{}
		for offset := int64(0); ; {
			f, err := leader.Fetch(topic, p, offset, 1<<20, 0)
			if err != nil {
				t.Fatal(err)
			}
			for off, v := range decodeRecords(t, f.Batches) {
				got[off], offset = v, max(offset, off+1)
			}
			if offset >= f.HighWatermark || len(f.Batches) == 0 {
				break
			}
		}
		for offset, value := range want {
			if string(got[offset]) != value {
				t.Errorf("keyed write %s acknowledged at %s/%d offset %d, which holds %q", value, topic, p, offset, got[offset])
			}
		}
	}
	t.Logf("%d keyed writes acknowledged (%d not), %d to the new partitions, %d moved from their key's partition at 3",
		len(keyed), keyedFails, onNew, moved)

	// Refusals.
	_, err = alterTopic(via[0], topic, `{"partitions":4}`)
	wantAPIError(t, "shrink to 4", err, http.StatusBadRequest, "invalid_request")
	_, err = alterTopic(via[0], topic, `{"partitions":6}`)
	wantAPIError(t, "alter to the same 6", err, http.StatusBadRequest, "invalid_request")
	_, err = alterTopic(via[0], "nosuch", `{"partitions":6}`)
	wantAPIError(t, "unknown topic", err, http.StatusNotFound, "unknown_topic")
	_, err = alterTopic(via[0], topic, `{"min_insync_replicas":4}`)
	wantAPIError(t, "min_insync_replicas 4 above RF 3", err, http.StatusBadRequest, "invalid_request")
	_, err = alterTopic(via[0], topic, `{"replication_factor":2}`)
	wantAPIError(t, "an unknown field", err, http.StatusBadRequest, "invalid_request")
	_, err = alterTopic(via[0], topic, `{}`)
	wantAPIError(t, "nothing to change", err, http.StatusBadRequest, "invalid_request")
	if desc, err := via[2].Describe(topic); err != nil || len(desc.Partitions) != 6 {
		t.Fatalf("after the refusals: %d partitions, %v", len(desc.Partitions), err)
	}
}

// TestTopicAlterMinInsyncReplicas (issue 18): an RF 3 topic at
// min_insync_replicas 2 with one follower stopped takes acks=all writes;
// altered to 3, they are refused not_enough_replicas, and back at 2 they
// pass again, each within a bounded time (logged), no agent restarted.
func TestTopicAlterMinInsyncReplicas(t *testing.T) {
	const topic, bound = "minisr", 5 * time.Second
	c := Start(t, Options{})
	if err := c.Agents[0].CreateTopic(TopicSpec{Name: topic, Partitions: 1, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	leader, _ := c.WaitLeader(topic, 0, 30*time.Second)
	c.WaitISR(topic, 0, []string{"n1", "n2", "n3"}, 30*time.Second)
	var stopped *Agent
	for _, a := range c.Agents {
		if a != leader {
			stopped = a
			break
		}
	}
	pids := map[string]int{}
	for _, a := range c.Agents {
		pids[a.NodeID] = a.PID()
	}
	stopped.Terminate()
	var rest []string
	for _, a := range c.Agents {
		if a != stopped {
			rest = append(rest, a.NodeID)
		}
	}
	slices.Sort(rest)
	c.WaitISR(topic, 0, rest, 30*time.Second)
	produce := func(timeout time.Duration) error {
		_, err := leader.Produce(topic, 0, ContentTypeBatch, buildBatch(t, [][]byte{[]byte("x")}), "all", timeout)
		return err
	}
	if err := produce(5 * time.Second); err != nil {
		t.Fatalf("acks=all with ISR %v at min_insync_replicas 2: %v", rest, err)
	}

	// waitOutcome measures how long after the alter produce's outcome
	// becomes what want says.
	waitOutcome := func(what string, want func(error) bool) time.Duration {
		t.Helper()
		from := time.Now()
		for {
			err := produce(time.Second)
			if want(err) {
				took := time.Since(from)
				t.Logf("%s %s after the alter was answered (%v)", what, took.Round(time.Millisecond), err)
				if took > bound {
					t.Errorf("%s only %s after the alter, want within %s", what, took, bound)
				}
				return took
			}
			if time.Since(from) > 30*time.Second {
				t.Fatalf("%s: still %v 30 s after the alter", what, err)
			}
		}
	}
	cfg, err := alterTopic(c.Agents[0], topic, `{"min_insync_replicas":3}`)
	if err != nil || cfg.MinInsyncReplicas != 3 {
		t.Fatalf("alter to min_insync_replicas 3: %+v, %v", cfg, err)
	}
	waitOutcome("acks=all refused not_enough_replicas", func(err error) bool {
		var apiErr *APIError
		return errors.As(err, &apiErr) && apiErr.Code == "not_enough_replicas"
	})
	if _, err := leader.Produce(topic, 0, ContentTypeBatch, buildBatch(t, [][]byte{[]byte("one")}), "1", 5*time.Second); err != nil {
		t.Fatalf("acks=1 at min_insync_replicas 3 with two in sync: %v", err)
	}
	if cfg, err = alterTopic(c.Agents[0], topic, `{"min_insync_replicas":2}`); err != nil || cfg.MinInsyncReplicas != 2 {
		t.Fatalf("alter back to min_insync_replicas 2: %+v, %v", cfg, err)
	}
	waitOutcome("acks=all acknowledged again", func(err error) bool { return err == nil })
	for _, a := range c.Agents {
		if a != stopped && a.PID() != pids[a.NodeID] {
			t.Errorf("%s restarted (pid %d, was %d)", a.NodeID, a.PID(), pids[a.NodeID])
		}
	}
}

// TestTopicAlterRetention (issue 18): with 4 KiB segments, a partition of
// several segments is altered to retention_bytes 8 KiB: the log start moves
// forward on every replica, leader and followers, within the retention
// check interval (a minute; the alter applies it at once, the time is
// logged), and a consumer below it gets offset_out_of_range. The
// description shows the topic's own value, and "default" the agent's
// again.
func TestTopicAlterRetention(t *testing.T) {
	const topic = "retain"
	c := Start(t, Options{HCL: `
storage {
  segment_bytes = "4KiB"
}
`})
	if err := c.Agents[0].CreateTopic(TopicSpec{Name: topic, Partitions: 1, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	leader, _ := c.WaitLeader(topic, 0, 30*time.Second)
	c.WaitISR(topic, 0, []string{"n1", "n2", "n3"}, 30*time.Second)
	value := []byte(strings.Repeat("r", 900))
	for range 60 {
		if _, err := leader.Produce(topic, 0, ContentTypeBatch, buildBatch(t, [][]byte{value}), "all", 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	var desc struct {
		Config topicConfig `json:"config"`
	}
	if err := leader.do(http.MethodGet, leader.url("/v1/topics/"+topic, nil), "", nil, &desc); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(desc.Config.AgentDefaults, []string{"retention", "retention_bytes"}) {
		t.Fatalf("before the alter the settings are %+v, want both from the agent", desc.Config)
	}
	// Every follower has the whole log before the alter.
	hw := *mustDescribe(t, leader, topic).HighWatermark
	c.WaitFor(30*time.Second, "every replica at the leader's high watermark", func() bool {
		for _, a := range c.Agents {
			pm := mustDescribe(t, a, topic)
			if pm.HighWatermark == nil || *pm.HighWatermark < hw || *pm.LogStartOffset != 0 {
				return false
			}
		}
		return true
	})

	from := time.Now()
	cfg, err := alterTopic(c.Agents[1], topic, `{"retention_bytes":"8KiB"}`)
	if err != nil || cfg.RetentionBytes != 8<<10 || slices.Contains(cfg.AgentDefaults, "retention_bytes") {
		t.Fatalf("alter retention_bytes: %+v, %v", cfg, err)
	}
	starts := map[string]int64{}
	c.WaitFor(70*time.Second, "the log start forward on every replica", func() bool {
		for _, a := range c.Agents {
			if pm := mustDescribe(t, a, topic); pm.LogStartOffset != nil && *pm.LogStartOffset > 0 {
				if _, ok := starts[a.NodeID]; !ok {
					starts[a.NodeID] = *pm.LogStartOffset
					t.Logf("%s (%s): log start %d, %s after the alter", a.NodeID, pm.Role, *pm.LogStartOffset, time.Since(from).Round(time.Millisecond))
				}
			}
		}
		return len(starts) == len(c.Agents)
	})
	if took := time.Since(from); took > time.Minute {
		t.Errorf("the log start moved on every replica %s after the alter, beyond the retention check interval (1 m)", took)
	}
	f, err := leader.Fetch(topic, 0, 0, 1<<20, 0)
	wantAPIError(t, "fetch at 0 below the new log start", err, http.StatusRequestedRangeNotSatisfiable, "offset_out_of_range")
	if f, err = leader.Fetch(topic, 0, starts[leader.NodeID], 1<<20, 0); err != nil || len(f.Batches) == 0 {
		t.Fatalf("fetch at the new log start %d: %d bytes, %v", starts[leader.NodeID], len(f.Batches), err)
	}

	cfg, err = alterTopic(c.Agents[2], topic, `{"retention_bytes":"default","retention":"72h"}`)
	if err != nil || cfg.Retention != "72h" || !slices.Equal(cfg.AgentDefaults, []string{"retention_bytes"}) {
		t.Fatalf("alter retention_bytes default, retention 72h: %+v, %v", cfg, err)
	}
	out := runCLI(t, "", "topic", "alter", topic, "-retention", "default", "-addr", "http://"+c.Agents[0].ClientAddr)
	t.Logf("logagent topic alter %s -retention default:\n%s", topic, out)
	if !strings.Contains(out, "retention: 72h -> ") || !strings.Contains(out, "(agent default)") {
		t.Fatalf("topic alter -retention default did not say what changed:\n%s", out)
	}
	var raw map[string]json.RawMessage
	if err := leader.do(http.MethodGet, leader.url("/v1/topics/"+topic, nil), "", nil, &struct {
		Config *map[string]json.RawMessage `json:"config"`
	}{&raw}); err != nil {
		t.Fatal(err)
	}
	if string(raw["agent_defaults"]) != `["retention","retention_bytes"]` {
		t.Fatalf("after both went back to the agent's: config %s", raw)
	}
}

func mustDescribe(t *testing.T, a *Agent, topic string) Partition {
	t.Helper()
	pm, err := a.DescribePartition(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	return pm
}

// TestUnknownStorageSettingTakesReplicasOffline (issue 18): storage
// settings an agent does not know, written into a topic's config while its
// replicas run (as a newer agent version could), take every replica
// offline rather than being ignored; settings it knows again bring them
// back, the log as it was.
func TestUnknownStorageSettingTakesReplicasOffline(t *testing.T) {
	const topic = "future"
	c := Start(t, Options{})
	if err := c.Agents[0].CreateTopic(TopicSpec{Name: topic, Partitions: 1, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	leader, _ := c.WaitLeader(topic, 0, 30*time.Second)
	res, err := leader.Produce(topic, 0, ContentTypeBatch, buildBatch(t, [][]byte{[]byte("kept")}), "all", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	kv := c.Consul.Client().KV()
	key := "logagent/topics/" + topic + "/config"
	setStorage := func(storage string) {
		t.Helper()
		pair, _, err := kv.Get(key, nil)
		if err != nil || pair == nil {
			t.Fatalf("read %s: %v", key, err)
		}
		var config map[string]json.RawMessage
		if err := json.Unmarshal(pair.Value, &config); err != nil {
			t.Fatal(err)
		}
		delete(config, "storage")
		if storage != "" {
			config["storage"] = json.RawMessage(storage)
		}
		pair.Value, _ = json.Marshal(config)
		if ok, _, err := kv.CAS(pair, nil); err != nil || !ok {
			t.Fatalf("write %s: %v, %v", key, ok, err)
		}
	}
	setStorage(`{"retention_bytes":4096,"compaction_lag_ms":1000}`)
	c.WaitFor(30*time.Second, "every replica offline", func() bool {
		for _, a := range c.Agents {
			if pm, err := a.DescribePartition(topic, 0); err != nil || pm.Role != "offline" {
				return false
			}
		}
		return true
	})
	_, err = leader.Produce(topic, 0, ContentTypeBatch, buildBatch(t, [][]byte{[]byte("refused")}), "all", 500*time.Millisecond)
	wantAPIError(t, "produce with every replica offline", err, http.StatusServiceUnavailable, "leader_not_available")

	setStorage(`{"retention_bytes":4096}`)
	leader, _ = c.WaitLeader(topic, 0, 30*time.Second)
	// A new leader starts from its checkpointed high watermark, which may
	// trail the record until its followers' next fetches: wait for it.
	f, err := leader.Fetch(topic, 0, *res.BaseOffset, 1<<20, 10*time.Second)
	if err != nil || string(decodeRecords(t, f.Batches)[*res.BaseOffset]) != "kept" {
		t.Fatalf("read back the record written before: %v", err)
	}
	if _, err := leader.Produce(topic, 0, ContentTypeBatch, buildBatch(t, [][]byte{[]byte("again")}), "all", 5*time.Second); err != nil {
		t.Fatalf("produce once the settings are known again: %v", err)
	}
}
