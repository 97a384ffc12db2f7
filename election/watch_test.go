package election

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/logagent/logagent/internal/testseed"
)

// TestSnapshotReuseMatchesFullDecode: a snapshot built from the previous one
// (reusing the partitions whose keys did not change) equals one decoded
// from scratch, over seeded random sequences of writes: states, leader
// locks and releases, reassignments, replicas, corrupt values and repairs,
// topics deleted and created again with a new id, and Consul's index going
// backwards with equal indexes naming other values.
func TestSnapshotReuseMatchesFullDecode(t *testing.T) {
	rng := testseed.Rand(t)
	k := keyspace{prefix: "logagent/"}
	kv := map[string]*api.KVPair{}
	index := uint64(1)
	set := func(key, value, session string) {
		index++
		kv[key] = &api.KVPair{Key: key, Value: []byte(value), Session: session, ModifyIndex: index}
	}
	configFor := func(name, id string, partitions int) string {
		data, err := TopicConfig{ID: id, Name: name, Partitions: partitions, ReplicationFactor: 3, MinInsyncReplicas: 2}.encode()
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	nodes := []string{"n1", "n2", "n3", "n4"}
	create := func(name string, gen int) {
		for key := range kv {
			if len(key) > len(k.topicsRoot()+name+"/") && key[:len(k.topicsRoot()+name+"/")] == k.topicsRoot()+name+"/" {
				delete(kv, key)
			}
		}
		for p := range 4 {
			set(k.replicas(name, p), `["n1","n2","n3"]`, "")
			set(k.state(name, p), `{"leader":"","epoch":0,"isr":["n1","n2","n3"]}`, "")
		}
		set(k.config(name), configFor(name, fmt.Sprintf("ID%s%d", name, gen), 4), "")
	}
	create("a", 0)
	create("b", 0)
	gens := map[string]int{}
	listing := func() api.KVPairs {
		var out api.KVPairs
		for _, pair := range kv {
			out = append(out, pair)
		}
		return out
	}
	prev := buildSnapshot(k, index, listing())
	reusedPartitions := 0
	for step := range 2000 {
		topic := []string{"a", "b"}[rng.IntN(2)]
		p := rng.IntN(4)
		epoch := rng.IntN(50) + 1
		leader := nodes[rng.IntN(3)]
		switch op := rng.IntN(10); op {
		case 0, 1, 2:
			set(k.state(topic, p), fmt.Sprintf(`{"leader":%q,"epoch":%d,"isr":["n1","n2","n3"]}`, leader, epoch), "")
		case 3:
			set(k.leader(topic, p), fmt.Sprintf(`{"node":%q,"epoch":%d}`, leader, epoch), "s-"+leader)
		case 4:
			// A release: the session goes, the value may stay.
			if pair, ok := kv[k.leader(topic, p)]; ok {
				set(pair.Key, string(pair.Value), "")
			}
		case 5:
			set(k.reassign(topic, p), `{"target":["n2","n3","n4"],"original":["n1","n2","n3"]}`, "")
		case 6:
			delete(kv, k.reassign(topic, p))
			index++
		case 7:
			if rng.IntN(4) == 0 {
				set(k.state(topic, p), `{"leader":`, "") // corrupt
			} else {
				set(k.replicas(topic, p), `["n2","n3","n4"]`, "")
			}
		case 8:
			if rng.IntN(10) == 0 {
				gens[topic]++
				create(topic, gens[topic])
			}
		case 9:
			if rng.IntN(20) == 0 {
				// Consul restored from an older state: indexes go back, and a
				// key's index may now equal the one prev decoded, with
				// another value.
				// The state key is written again at the very index prev
				// decoded it at.
				pm, ok := prev.Partition(topic, p)
				if !ok || pm.StateIndex < 2 || pm.StateIndex >= prev.Index {
					break
				}
				index = pm.StateIndex - 1
				for _, pair := range kv {
					pair.ModifyIndex = min(pair.ModifyIndex, index)
				}
				set(k.state(topic, p), fmt.Sprintf(`{"leader":%q,"epoch":%d,"isr":["n1","n2"]}`, leader, epoch+100), "")
			}
		}
		pairs := listing()
		reused := buildSnapshotFrom(prev, k, index, pairs)
		full := buildSnapshot(k, index, pairs)
		if !sameSnapshot(reused, full) {
			t.Fatalf("step %d: the snapshot built from the previous one differs from a full decode:\nreused %s\nfull   %s", step, describeSnapshot(reused), describeSnapshot(full))
		}
		for _, name := range reused.Topics() {
			was, ok := prev.topics[name]
			if !ok {
				continue
			}
			for i, pm := range reused.topics[name].Partitions {
				if i < len(was.Partitions) && len(pm.Replicas) > 0 && len(was.Partitions[i].Replicas) > 0 && &pm.Replicas[0] == &was.Partitions[i].Replicas[0] {
					reusedPartitions++
				}
			}
		}
		prev = reused
	}
	// 8 partitions a step, one or two keys written; a topic with a corrupt
	// key (until a later write repairs it) is decoded whole.
	if reusedPartitions < 4000 {
		t.Fatalf("%d partitions reused over 2000 steps of 8: the reuse path was hardly exercised", reusedPartitions)
	}
	t.Logf("%d of %d partitions reused", reusedPartitions, 2000*8)
}

func sameSnapshot(a, b *Snapshot) bool {
	if a.Index != b.Index || !reflect.DeepEqual(a.deleted, b.deleted) || !reflect.DeepEqual(a.draining, b.draining) || len(a.topics) != len(b.topics) {
		return false
	}
	for name, ta := range a.topics {
		tb, ok := b.topics[name]
		if !ok || (ta.Err == nil) != (tb.Err == nil) || (ta.Err != nil && ta.Err.Error() != tb.Err.Error()) {
			return false
		}
		if !reflect.DeepEqual(ta.Config, tb.Config) || !reflect.DeepEqual(ta.Partitions, tb.Partitions) {
			return false
		}
	}
	return true
}

func describeSnapshot(s *Snapshot) string {
	out := fmt.Sprintf("index %d", s.Index)
	for _, name := range s.Topics() {
		tm := s.topics[name]
		out += fmt.Sprintf("\n  %s id %s err %v", name, tm.Config.ID, tm.Err)
		for _, pm := range tm.Partitions {
			out += fmt.Sprintf("\n    %d %+v", pm.Partition, pm)
		}
	}
	return out
}
