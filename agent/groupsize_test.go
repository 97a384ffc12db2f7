package agent

import (
	"strings"
	"testing"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/wire"
)

// TestGroupTooLargeToStoreIsRefused: a join whose group state would be
// larger than one Consul transaction holds (a member assigned 800
// partitions of a topic with the longest name: about 600 bytes each) is
// refused at once, 400 invalid_request saying so, and the group stays as
// stored. Before, Consul refused the write ("Request body too large"), the
// coordinator answered 503 coordinator unavailable, and the sidecar and the
// client retried the same refused write until their timeouts.
func TestGroupTooLargeToStoreIsRefused(t *testing.T) {
	c := startTestClusterWith(t, 1, "groups {\n  offsets_partitions = 1\n  offsets_replication_factor = 1\n}\n", nil)
	topic := strings.Repeat("t", 249)
	c.createTopic(c.agents[0], topic, 800, 1, 1)
	status, body := c.agents[0].call("POST", "/v1/groups/g/members?timeout=10s", wire.ContentTypeJSON,
		[]byte(`{"topics":["`+topic+`"],"session_timeout_ms":60000}`))
	if status != 400 || !strings.Contains(string(body), wire.CodeInvalidRequest) || !strings.Contains(string(body), "the group store holds") {
		t.Fatalf("join of a group whose state exceeds %d bytes: %d %s; want 400 invalid_request saying the state is too large",
			election.MaxGroupStateBytes, status, body)
	}
	if status, body := c.agents[0].call("GET", "/v1/groups/g", "", nil); status != 404 {
		t.Errorf("describe after the refused join: %d %s, want 404: nothing stored", status, body)
	}
}
