package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/consul/api"
)

// TestTopicDeletedWhileDownIsRemovedAtStart: an agent that was down while
// its topic was deleted (a tombstone names the incarnation) removes the data
// at start instead of moving it aside.
func TestTopicDeletedWhileDownIsRemovedAtStart(t *testing.T) {
	c := startTestCluster(t, 1, "")
	ta := c.agents[0]
	c.createTopic(ta, "gone", 1, 1, 1)
	c.waitLeader("gone", 0, 1)
	ta.mustProduce("gone", 0, "bye")
	dir := partitionDir(ta.dataDir, "gone", 0)
	file, found, err := readReplicaFile(dir)
	if err != nil || !found {
		t.Fatalf("replica.json: %v %v", found, err)
	}
	if err := ta.stop(); err != nil {
		t.Fatal(err)
	}
	c.deleteInConsul("gone", file.TopicID)
	ta.start()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the deleted topic's partition is still there: %v", err)
	}
	if moved, _ := filepath.Glob(filepath.Join(ta.dataDir, orphanedDirName, "gone-0.*")); len(moved) != 0 {
		t.Errorf("moved aside instead of removed: %v", moved)
	}
}

// deleteInConsul deletes a topic the way a deletion leaves Consul (its keys
// gone, a tombstone naming the incarnation topicID), behind the agents'
// backs: for agents that are down.
func (c *testCluster) deleteInConsul(topic, topicID string) {
	c.t.Helper()
	kv := c.consul.Client().KV()
	if _, err := kv.DeleteTree("logagent/topics/"+topic+"/", nil); err != nil {
		c.t.Fatal(err)
	}
	tombstone := &api.KVPair{Key: "logagent/topics/~deleted/" + topicID, Value: fmt.Appendf(nil, `{"topic":%q}`, topic)}
	if _, err := kv.Put(tombstone, nil); err != nil {
		c.t.Fatal(err)
	}
}
