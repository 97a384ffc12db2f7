package election

import (
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
)

// TestCampaignWaitsForItsOwnPartition: a campaign waiting on partition 0 of
// topic a is woken by a change of that partition's keys, of its topic's
// config or presence, or by Consul's index going back, and not by the
// writes to other partitions and topics that make up most snapshots (each
// of which woke every campaign of the agent before).
func TestCampaignWaitsForItsOwnPartition(t *testing.T) {
	k := keyspace{prefix: "logagent/"}
	type kvs map[string]*api.KVPair
	config := func(name string, unclean bool) string {
		data, err := TopicConfig{ID: "ID" + name, Name: name, Partitions: 2, ReplicationFactor: 3, MinInsyncReplicas: 2, UncleanLeaderElection: unclean}.encode()
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	base := func() kvs {
		kv := kvs{}
		for _, name := range []string{"a", "b"} {
			for p := range 2 {
				kv[k.replicas(name, p)] = &api.KVPair{Key: k.replicas(name, p), Value: []byte(`["n1","n2","n3"]`), ModifyIndex: 10}
				kv[k.state(name, p)] = &api.KVPair{Key: k.state(name, p), Value: []byte(`{"leader":"n2","epoch":1,"isr":["n1","n2","n3"]}`), ModifyIndex: 11}
				kv[k.leader(name, p)] = &api.KVPair{Key: k.leader(name, p), Value: []byte(`{"node":"n2","epoch":1}`), Session: "s2", ModifyIndex: 12}
			}
			kv[k.config(name)] = &api.KVPair{Key: k.config(name), Value: []byte(config(name, false)), ModifyIndex: 13}
		}
		return kv
	}
	set := func(kv kvs, key, value, session string) {
		kv[key] = &api.KVPair{Key: key, Value: []byte(value), Session: session, ModifyIndex: 100}
	}
	snapOf := func(index uint64, kv kvs) *Snapshot {
		var pairs api.KVPairs
		for _, pair := range kv {
			pairs = append(pairs, pair)
		}
		return buildSnapshot(k, index, pairs)
	}
	tests := []struct {
		name  string
		index uint64 // of the next snapshot; 0: 50
		write func(kvs)
		wake  bool
	}{
		{name: "nothing written", wake: false},
		{name: "another partition's state", write: func(kv kvs) {
			set(kv, k.state("a", 1), `{"leader":"n2","epoch":1,"isr":["n2","n3"]}`, "")
		}, wake: false},
		{name: "another topic's leader key released", write: func(kv kvs) {
			set(kv, k.leader("b", 0), `{"node":"n2","epoch":1}`, "")
		}, wake: false},
		{name: "another topic's config", write: func(kv kvs) { set(kv, k.config("b"), config("b", true), "") }, wake: false},
		{name: "its state", write: func(kv kvs) {
			set(kv, k.state("a", 0), `{"leader":"n2","epoch":1,"isr":["n2","n3"]}`, "")
		}, wake: true},
		{name: "its leader key released", write: func(kv kvs) { set(kv, k.leader("a", 0), `{"node":"n2","epoch":1}`, "") }, wake: true},
		{name: "its leader key gone", write: func(kv kvs) { delete(kv, k.leader("a", 0)) }, wake: true},
		{name: "its replicas", write: func(kv kvs) { set(kv, k.replicas("a", 0), `["n1","n2","n4"]`, "") }, wake: true},
		{name: "its reassignment", write: func(kv kvs) {
			set(kv, k.reassign("a", 0), `{"target":["n2","n3","n4"],"original":["n1","n2","n3"]}`, "")
		}, wake: true},
		{name: "its topic's config", write: func(kv kvs) { set(kv, k.config("a"), config("a", true), "") }, wake: true},
		{name: "its topic corrupt", write: func(kv kvs) { set(kv, k.state("a", 1), `{"leader":`, "") }, wake: true},
		{name: "its topic deleted", write: func(kv kvs) {
			for key := range kv {
				if topic, _, kind := k.parse(key); topic == "a" && kind != kindUnknown {
					delete(kv, key)
				}
			}
		}, wake: true},
		{name: "consul's index went back", index: 20, wake: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Client{log: hclog.NewNullLogger()}
			first := snapOf(30, base())
			c.snapshot.Store(first)
			tm, _ := first.Topic("a")
			wait := c.waitPartitionChange(first, tm.Partitions[0])
			kv := base()
			if tt.write != nil {
				tt.write(kv)
			}
			index := tt.index
			if index == 0 {
				index = 50
			}
			c.publish(snapOf(index, kv))
			if woken := isClosed(wait.changed); woken != tt.wake {
				t.Fatalf("campaign on a/0 woken = %v, want %v", woken, tt.wake)
			}
			_, waiting := c.metaWaits.waits[wait]
			if waiting == tt.wake {
				t.Fatalf("wait still registered = %v after woken = %v", waiting, tt.wake)
			}
			c.stopWaiting(wait)
			if n := len(c.metaWaits.waits); n != 0 {
				t.Fatalf("%d waits left after stopWaiting", n)
			}
		})
	}
}

// TestCampaignWaitOnAStaleSnapshotEndsAtOnce: a campaign that decided on a
// snapshot replaced before it began to wait was not compared with the new
// one, so it must decide again rather than sleep through the change.
func TestCampaignWaitOnAStaleSnapshotEndsAtOnce(t *testing.T) {
	c := &Client{log: hclog.NewNullLogger()}
	stale, current := emptySnapshot(), emptySnapshot()
	stale.Index, current.Index = 1, 2
	c.snapshot.Store(current)
	wait := c.waitPartitionChange(stale, PartitionMeta{Topic: "a"})
	if !isClosed(wait.changed) {
		t.Fatal("a wait registered on a snapshot no longer current did not end at once")
	}
	if n := len(c.metaWaits.waits); n != 0 {
		t.Fatalf("%d waits registered for a stale snapshot", n)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
