package partition

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/internal/consultest"
)

// TestCancelBackBelowMinISRWaits: a move's way back after a cancel goes to
// the list the move started from, which may be smaller than
// min_insync_replicas if that was raised while the move ran. AlterTopic
// refuses such a raise, but its write is guarded by the config's index
// alone, so an alter that read the partition before a move shrank it and
// another started from the smaller list still writes it (the race's
// outcome is written here by hand). The leader completed the way back:
// Consul's replicas became a set below min_insync_replicas, which the
// leader then refused from every snapshot and on which no leader could
// start. The way back must wait instead, the replicas left as the union,
// until min_insync_replicas is lowered, and then complete.
func TestCancelBackBelowMinISRWaits(t *testing.T) {
	srv := consultest.Start(t)
	startElectionOnly(t, srv, "n2")
	startElectionOnly(t, srv, "n3")
	m, coord := startManager(t, srv, "n1", "", time.Now)
	refused := &logWatch{want: "reassignment completion refused by the leader state"}
	m.deps.Log.(hclog.InterceptLogger).RegisterSink(hclog.NewSinkAdapter(&hclog.LoggerOptions{Level: hclog.Warn, Output: refused}))
	const topic = "cxmin"
	createTopic(t, coord, topic, [][]string{{"n1", "n2", "n3"}}, 1)
	waitLeading(t, m, topic)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	partition := func() election.PartitionMeta {
		pm, _ := coord.Metadata().Partition(topic, 0)
		return pm
	}

	// The partition shrinks to n1, then grows back from there.
	if _, _, err := coord.StartReassign(ctx, topic, 0, []string{"n1"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { pm := partition(); return pm.Reassign == nil && slices.Equal(pm.Replicas, []string{"n1"}) }, "the move to n1 complete")
	if _, _, err := coord.StartReassign(ctx, topic, 0, []string{"n1", "n2"}); err != nil {
		t.Fatal(err)
	}
	// min_insync_replicas 2, as an alter that read the partition before
	// the moves writes it.
	kv := srv.Client().KV()
	key := "logagent/topics/" + topic + "/config"
	pair, _, err := kv.Get(key, nil)
	if err != nil || pair == nil {
		t.Fatalf("read %s: %v, %v", key, pair, err)
	}
	var config map[string]any
	if err := json.Unmarshal(pair.Value, &config); err != nil {
		t.Fatal(err)
	}
	config["min_insync_replicas"] = 2
	value, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := kv.CAS(&api.KVPair{Key: key, Value: value, ModifyIndex: pair.ModifyIndex}, nil); err != nil || !ok {
		t.Fatalf("write %s: %v, %v", key, ok, err)
	}
	waitFor(t, func() bool {
		tm, ok := coord.Metadata().Topic(topic)
		return ok && tm.Config.MinInsyncReplicas == 2
	}, "min_insync_replicas 2 in the metadata")

	// n2 never catches up: the cancel takes the partition back to n1.
	if _, err := coord.CancelReassign(ctx, topic, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		return refused.seen.Load() || slices.Equal(partition().Replicas, []string{"n1"})
	}, "the way back refused by the leader, or completed")
	if pm := partition(); pm.Reassign == nil || !slices.Equal(pm.Replicas, []string{"n1", "n2"}) {
		t.Fatalf("with min_insync_replicas 2, the way back to n1 left replicas %v, move %+v; want it waiting over the union n1, n2", pm.Replicas, pm.Reassign)
	}

	// Lowered again, the way back completes.
	lower := func(tc election.TopicConfig, _ [][]string) (election.TopicConfig, [][]string, error) {
		tc.MinInsyncReplicas = 1
		return tc, nil, nil
	}
	if _, err := coord.AlterTopic(ctx, topic, lower); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { pm := partition(); return pm.Reassign == nil && slices.Equal(pm.Replicas, []string{"n1"}) }, "the way back complete")
}
