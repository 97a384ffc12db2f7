package election

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/logagent/logagent/internal/testseed"
)

func TestAssignReplicasProperties(t *testing.T) {
	rng := testseed.Rand(t)
	for range 200 {
		n := 1 + rng.IntN(9)
		rf := 1 + rng.IntN(n)
		partitions := 1 + rng.IntN(60)
		nodes := make([]string, n)
		for i := range nodes {
			nodes[i] = fmt.Sprintf("n%02d", i)
		}
		rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
		got, err := AssignReplicas(nodes, partitions, rf)
		if err != nil {
			t.Fatalf("AssignReplicas(%d nodes, %d, %d): %v", n, partitions, rf, err)
		}
		if len(got) != partitions {
			t.Fatalf("%d partitions assigned, want %d", len(got), partitions)
		}
		leaders := map[string]int{}
		replicas := map[string]int{}
		for p, rs := range got {
			if len(rs) != rf {
				t.Fatalf("partition %d: %v, want %d replicas", p, rs, rf)
			}
			if len(slices.Compact(slices.Sorted(slices.Values(rs)))) != rf {
				t.Fatalf("partition %d: repeated replica in %v", p, rs)
			}
			leaders[rs[0]]++
			for _, r := range rs {
				replicas[r]++
			}
		}
		if spread := spreadOf(leaders, nodes, partitions >= n); spread > 1 {
			t.Fatalf("n=%d rf=%d p=%d: preferred leaders spread %d (%v)", n, rf, partitions, spread, leaders)
		}
		if spread := spreadOf(replicas, nodes, partitions*rf >= n); spread > rf {
			t.Fatalf("n=%d rf=%d p=%d: replicas spread %d (%v)", n, rf, partitions, spread, replicas)
		}
		again, _ := AssignReplicas(nodes, partitions, rf)
		if fmt.Sprint(again) != fmt.Sprint(got) {
			t.Fatal("AssignReplicas is not deterministic")
		}
	}
}

// spreadOf is max-min of per-node counts (nodes with none count as 0 only
// when every node should have some).
func spreadOf(counts map[string]int, nodes []string, all bool) int {
	lo, hi := int(^uint(0)>>1), 0
	for _, n := range nodes {
		c, ok := counts[n]
		if !ok && !all {
			continue
		}
		lo, hi = min(lo, c), max(hi, c)
	}
	return hi - lo
}

func TestAssignReplicasErrors(t *testing.T) {
	tests := []struct {
		name               string
		nodes              []string
		partitions, rf     int
		want               error
		wantFirstPartition []string
	}{
		{name: "rf above agents", nodes: []string{"a", "b"}, partitions: 3, rf: 3, want: ErrNotEnoughAgents},
		{name: "duplicates do not count twice", nodes: []string{"a", "a", "b"}, partitions: 1, rf: 3, want: ErrNotEnoughAgents},
		{name: "no partitions", nodes: []string{"a"}, partitions: 0, rf: 1, want: ErrInvalidTopic},
		{name: "sorted round robin", nodes: []string{"c", "a", "b"}, partitions: 3, rf: 3, wantFirstPartition: []string{"a", "b", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := AssignReplicas(tt.nodes, tt.partitions, tt.rf)
			if !errors.Is(err, tt.want) {
				t.Fatalf("error = %v, want %v", err, tt.want)
			}
			if tt.wantFirstPartition != nil && !slices.Equal(got[0], tt.wantFirstPartition) {
				t.Fatalf("partition 0 = %v, want %v", got[0], tt.wantFirstPartition)
			}
		})
	}
}

func TestTopicConfigValidation(t *testing.T) {
	valid := TopicConfig{Name: "orders", Partitions: 3, ReplicationFactor: 3, MinInsyncReplicas: 2}
	tests := []struct {
		name   string
		mutate func(*TopicConfig)
		ok     bool
	}{
		{name: "valid", mutate: func(*TopicConfig) {}, ok: true},
		{name: "dot name", mutate: func(tc *TopicConfig) { tc.Name = "." }},
		{name: "dotdot name", mutate: func(tc *TopicConfig) { tc.Name = ".." }},
		{name: "slash in name", mutate: func(tc *TopicConfig) { tc.Name = "a/b" }},
		{name: "long name", mutate: func(tc *TopicConfig) { tc.Name = string(make([]byte, 250)) }},
		{name: "zero partitions", mutate: func(tc *TopicConfig) { tc.Partitions = 0 }},
		{name: "min isr above rf", mutate: func(tc *TopicConfig) { tc.MinInsyncReplicas = 4 }},
		{name: "negative unclean delay", mutate: func(tc *TopicConfig) { tc.UncleanDelay = -time.Second }},
		{name: "storage not json", mutate: func(tc *TopicConfig) { tc.Storage = json.RawMessage("{") }},
		{name: "storage json", mutate: func(tc *TopicConfig) { tc.Storage = json.RawMessage(`{"segment_bytes":1024}`) }, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := valid
			tt.mutate(&tc)
			if err := tc.validate(); (err == nil) != tt.ok {
				t.Fatalf("validate() = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

func TestTopicConfigRoundTrip(t *testing.T) {
	tc := TopicConfig{ID: "abc", Name: "orders", Partitions: 2, ReplicationFactor: 3, MinInsyncReplicas: 2,
		UncleanLeaderElection: true, UncleanDelay: 30 * time.Second, Storage: json.RawMessage(`{"retention":"168h"}`)}
	data, err := tc.encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeTopicConfig("k", data)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(tc) {
		t.Fatalf("round trip = %+v, want %+v", got, tc)
	}
	var wire map[string]any
	if err := json.Unmarshal(data, &wire); err != nil {
		t.Fatal(err)
	}
	if wire["unclean_delay"] != "30s" || wire["replication_factor"] != 3.0 {
		t.Fatalf("stored form %s lacks the documented fields", data)
	}
}

func TestKeyspaceParse(t *testing.T) {
	k := keyspace{prefix: "logagent/"}
	tests := []struct {
		key       string
		topic     string
		partition int
		kind      keyKind
	}{
		{key: k.config("t"), topic: "t", kind: kindConfig},
		{key: k.replicas("t", 12), topic: "t", partition: 12, kind: kindReplicas},
		{key: k.state("t.x", 0), topic: "t.x", kind: kindState},
		{key: k.leader("t", 3), topic: "t", partition: 3, kind: kindLeader},
		{key: "logagent/topics/t/01/state", kind: kindUnknown},
		{key: "logagent/topics/t/-1/state", kind: kindUnknown},
		{key: "logagent/topics/t/0/other", kind: kindUnknown},
		{key: "logagent/groups/g/offsets", kind: kindUnknown},
		{key: "other/topics/t/config", kind: kindUnknown},
	}
	for _, tt := range tests {
		topic, p, kind := k.parse(tt.key)
		if kind != tt.kind || (kind != kindUnknown && (topic != tt.topic || p != tt.partition)) {
			t.Errorf("parse(%q) = %q, %d, %v; want %q, %d, %v", tt.key, topic, p, kind, tt.topic, tt.partition, tt.kind)
		}
	}
}

func TestBuildSnapshot(t *testing.T) {
	k := keyspace{prefix: "logagent/"}
	config := func(name string, partitions int) *api.KVPair {
		data, err := TopicConfig{Name: name, Partitions: partitions, ReplicationFactor: 2, MinInsyncReplicas: 1}.encode()
		if err != nil {
			t.Fatal(err)
		}
		return &api.KVPair{Key: k.config(name), Value: data}
	}
	kv := func(key, value string) *api.KVPair {
		return &api.KVPair{Key: key, Value: []byte(value), ModifyIndex: 7}
	}
	pairs := api.KVPairs{
		config("good", 2),
		kv(k.replicas("good", 0), `["a","b"]`),
		kv(k.state("good", 0), `{"leader":"a","epoch":4,"isr":["a","b"]}`),
		{Key: k.leader("good", 0), Value: []byte(`{"node":"a","epoch":4}`), Session: "s-a"},
		kv(k.replicas("good", 1), `["b","a"]`),
		kv(k.state("good", 1), `{"leader":"","epoch":0,"isr":["b","a"]}`),
		config("missing", 1),
		kv(k.replicas("missing", 0), `["a","b"]`),
		config("garbled", 1),
		kv(k.replicas("garbled", 0), `["a","b"]`),
		kv(k.state("garbled", 0), `{"leader":`),
		// Partition keys without a config: a creation in progress.
		kv(k.replicas("creating", 0), `["a"]`),
		kv("logagent/topics/good/future-key", `x`),
	}
	snap := buildSnapshot(k, 9, pairs)
	if got := snap.Topics(); !slices.Equal(got, []string{"garbled", "good", "missing"}) {
		t.Fatalf("Topics() = %v", got)
	}
	good, _ := snap.Topic("good")
	if good.Err != nil {
		t.Fatalf("good topic error: %v", good.Err)
	}
	p0, ok := snap.Partition("good", 0)
	if !ok || p0.LeaderSession != "s-a" || p0.State.Epoch != 4 || p0.StateIndex != 7 || !slices.Equal(p0.Replicas, []string{"a", "b"}) {
		t.Fatalf("good/0 = %+v", p0)
	}
	if _, ok := snap.Partition("good", 2); ok {
		t.Fatal("good/2 should not exist")
	}
	for _, name := range []string{"missing", "garbled"} {
		tm, _ := snap.Topic(name)
		if !errors.Is(tm.Err, ErrCorruptMetadata) {
			t.Fatalf("%s: Err = %v, want ErrCorruptMetadata", name, tm.Err)
		}
	}
}

func TestDecodeStateRejectsImpossibleValues(t *testing.T) {
	for _, value := range []string{`{"epoch":-1,"isr":["a"]}`, `{"epoch":1,"isr":[]}`, `[]`, `{"epoch":"x"}`} {
		if _, err := decodeState("k", []byte(value)); !errors.Is(err, ErrCorruptMetadata) {
			t.Errorf("decodeState(%s) = %v, want ErrCorruptMetadata", value, err)
		}
	}
}

// TestDecodeStateReadsTheISRAsASet: an ISR naming a member twice (an
// operator's edit) is read without the repeat. Passed on, the leader's
// state machine refused it and every election met it again (agent/partition
// TestRepeatedMemberInConsulISRIsHarmless), and a clean election counted
// the repeat towards min_insync_replicas: [a a b] less the dead leader b
// was written as [a a], two members for one.
func TestDecodeStateReadsTheISRAsASet(t *testing.T) {
	tests := []struct {
		value string
		isr   []string
		// clean is the ISR a's clean election writes, b dead, min ISR 2.
		clean []string
	}{
		{`{"leader":"b","epoch":3,"isr":["a","a","b"]}`, []string{"a", "b"}, []string{"a", "b"}},
		{`{"leader":"b","epoch":3,"isr":["b","a","b","c","a"]}`, []string{"b", "a", "c"}, []string{"a", "c"}},
		{`{"leader":"b","epoch":3,"isr":["a","b","c"]}`, []string{"a", "b", "c"}, []string{"a", "c"}},
	}
	for _, tt := range tests {
		st, err := decodeState("k", []byte(tt.value))
		if err != nil {
			t.Fatalf("decodeState(%s): %v", tt.value, err)
		}
		if !slices.Equal(st.ISR, tt.isr) {
			t.Errorf("decodeState(%s).ISR = %v, want %v", tt.value, st.ISR, tt.isr)
		}
		if got := st.cleanElectionISR("a", true, 2); !slices.Equal(got, tt.clean) {
			t.Errorf("decodeState(%s).cleanElectionISR(a, leader dead, min 2) = %v, want %v", tt.value, got, tt.clean)
		}
	}
}

// TestDecodeReplicas: a replicas key naming a replica twice is read as
// the set, in first-seen order (the preferred leader stays first); one
// holding an empty id, or none, is corrupt.
func TestDecodeReplicas(t *testing.T) {
	tests := []struct {
		value   string
		want    []string
		corrupt bool
	}{
		{`["a","b","c"]`, []string{"a", "b", "c"}, false},
		{`["a","b","b","c"]`, []string{"a", "b", "c"}, false},
		{`["b","a","b"]`, []string{"b", "a"}, false},
		{`["a","","c"]`, nil, true},
		{`[]`, nil, true},
		{`{"a":1}`, nil, true},
	}
	for _, tt := range tests {
		got, err := decodeReplicas("k", []byte(tt.value))
		if tt.corrupt {
			if !errors.Is(err, ErrCorruptMetadata) {
				t.Errorf("decodeReplicas(%s) = %v, %v; want ErrCorruptMetadata", tt.value, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("decodeReplicas(%s) = %v, %v; want %v", tt.value, got, err, tt.want)
		}
	}
}

func TestKeyspaceParsesTombstones(t *testing.T) {
	k := keyspace{prefix: "logagent/"}
	id, _, kind := k.parse(k.tombstone("ABC123"))
	if kind != kindTombstone || id != "ABC123" {
		t.Fatalf("parse(%q) = %q, %v", k.tombstone("ABC123"), id, kind)
	}
	if ValidTopicName(deletedDir) {
		t.Fatalf("%q must not be a valid topic name, or a topic could clash with the tombstones", deletedDir)
	}
	if _, _, kind := k.parse("logagent/topics/~deleted/"); kind != kindUnknown {
		t.Fatalf("an empty tombstone id parsed as %v", kind)
	}
}

// TestSnapshotHasDrainingAgents: a drain key is in the watched prefix, so
// the snapshot carries it; it never clashes with a topic, and a key that
// names no valid node is ignored, not taken for a topic.
func TestSnapshotHasDrainingAgents(t *testing.T) {
	k := keyspace{prefix: "logagent/"}
	if ValidTopicName(drainingDir) {
		t.Fatalf("%q must not be a valid topic name, or a topic could clash with the drain keys", drainingDir)
	}
	pairs := api.KVPairs{
		{Key: k.draining("n2"), Value: []byte(`{"node":"n2"}`), ModifyIndex: 3},
		{Key: k.draining("n4"), Value: []byte(`{"node":"n4"}`), ModifyIndex: 4},
		{Key: "logagent/topics/~draining/bad id", Value: []byte(`{}`), ModifyIndex: 5},
		{Key: "logagent/topics/~draining/", Value: []byte(`{}`), ModifyIndex: 6},
	}
	snap := buildSnapshot(k, 9, pairs)
	if got := snap.Draining(); !slices.Equal(got, []string{"n2", "n4"}) {
		t.Fatalf("Draining() = %v, want [n2 n4]", got)
	}
	if !snap.IsDraining("n2") || snap.IsDraining("n1") {
		t.Fatalf("IsDraining(n2), IsDraining(n1) = %v, %v", snap.IsDraining("n2"), snap.IsDraining("n1"))
	}
	if got := snap.Topics(); len(got) != 0 {
		t.Fatalf("drain keys taken for topics: %v", got)
	}
}
