package agent

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/logagent/logagent/groupcoord"
	"github.com/logagent/logagent/wire"
)

// groupCall sends a group request through ta's sidecar until it is
// answered other than 503 coordinator_not_available (the offsets topic
// electing its first leaders, or a coordinator moving), and returns the
// status and body.
func (c *testCluster) groupCall(ta *testAgent, method, path, body string) (int, []byte) {
	c.t.Helper()
	var status int
	var answer []byte
	c.waitFor(30*time.Second, method+" "+path+" answered by a coordinator", func() bool {
		status, answer = ta.call(method, path, wire.ContentTypeJSON, []byte(body))
		return status != 503
	})
	return status, answer
}

// TestDeleteGroupOutlivesCoordinatorFailover: DELETE /v1/groups/{group}
// is refused (409 group_not_empty) while the group has a member; once it
// left, it removes the group, so its offsets are gone (404 unknown_group)
// and a second delete is 404. The coordinator (the leader of the one
// offsets partition) then stops: its successor rebuilds from
// __consumer_offsets and finds the offsets gone too, and a join starts a
// new group, with no committed offsets.
func TestDeleteGroupOutlivesCoordinatorFailover(t *testing.T) {
	c := startTestCluster(t, 3, "groups {\n  offsets_partitions = 1\n  offsets_replication_factor = 3\n}\n")
	a := c.agents[0]
	c.createTopic(a, "orders", 1, 3, 1)
	leader, _ := c.waitLeader("orders", 0, 3)
	leader.mustProduce("orders", 0, "a", "b", "c", "d", "e")

	status, body := c.groupCall(a, "POST", "/v1/groups/g/members", `{"topics":["orders"]}`)
	if status != 200 {
		t.Fatalf("join: %d %s", status, body)
	}
	var m groupcoord.MemberResponse
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	commit := fmt.Sprintf(`{"member_id":%q,"member_epoch":%d,"offsets":[{"topic":"orders","partition":0,"offset":3}]}`, m.MemberID, m.MemberEpoch)
	if status, body := c.groupCall(a, "POST", "/v1/groups/g/offsets", commit); status != 200 {
		t.Fatalf("commit: %d %s", status, body)
	}

	if status, body := c.groupCall(a, "DELETE", "/v1/groups/g", ""); status != 409 || errorCode(t, body).Code != wire.CodeGroupNotEmpty {
		t.Fatalf("delete with a member: %d %s, want 409 %s", status, body, wire.CodeGroupNotEmpty)
	}
	if status, body := c.groupCall(a, "DELETE", "/v1/groups/g/members/"+m.MemberID, ""); status != 200 {
		t.Fatalf("leave: %d %s", status, body)
	}
	if status, body := c.groupCall(a, "DELETE", "/v1/groups/g", ""); status != 200 {
		t.Fatalf("delete of the empty group: %d %s", status, body)
	}
	unknown := func(via *testAgent, when string) {
		t.Helper()
		if status, body := c.groupCall(via, "GET", "/v1/groups/g/offsets", ""); status != 404 || errorCode(t, body).Code != wire.CodeUnknownGroup {
			t.Fatalf("%s: offsets %d %s, want 404 %s", when, status, body, wire.CodeUnknownGroup)
		}
	}
	unknown(a, "after the delete")
	if status, body := c.groupCall(a, "DELETE", "/v1/groups/g", ""); status != 404 || errorCode(t, body).Code != wire.CodeUnknownGroup {
		t.Fatalf("second delete: %d %s, want 404 %s", status, body, wire.CodeUnknownGroup)
	}

	coordinator, _ := c.waitLeader(groupcoord.OffsetsTopic, 0, -1)
	if err := coordinator.stop(); err != nil {
		t.Fatal(err)
	}
	successor, _ := c.waitLeader(groupcoord.OffsetsTopic, 0, -1)
	t.Logf("coordinator %s stopped, %s took over", coordinator.nodeID, successor.nodeID)
	unknown(successor, "after the failover")

	status, body = c.groupCall(successor, "POST", "/v1/groups/g/members", `{"topics":["orders"]}`)
	if status != 200 {
		t.Fatalf("join after the delete: %d %s", status, body)
	}
	if err := json.Unmarshal(body, &m); err != nil || m.MemberEpoch != 1 {
		t.Fatalf("join after the delete: %s, %v; want a new group's member epoch 1", body, err)
	}
	status, body = c.groupCall(successor, "GET", "/v1/groups/g/offsets", "")
	var o groupcoord.OffsetsResponse
	if status != 200 || json.Unmarshal(body, &o) != nil || len(o.Offsets) != 0 {
		t.Fatalf("offsets of the new group: %d %s, want none", status, body)
	}
}
