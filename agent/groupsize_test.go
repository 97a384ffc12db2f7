package agent

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/wire"
)

// oneOffsetsPartition makes a one-agent cluster's offsets topic fit it.
const oneOffsetsPartition = "groups {\n  offsets_partitions = 1\n  offsets_replication_factor = 1\n}\n"

// TestGroupOfManyPartitionsIsStored: a group over 800 partitions of a
// topic with the longest name, joined by a member with the longest id,
// is stored and described. Its plain state takes about 480 KB, more than
// one Consul transaction holds, and the join was refused 400 as too large
// to store; the compact form (groupcoord/statecodec.go) takes a few
// hundred bytes.
func TestGroupOfManyPartitionsIsStored(t *testing.T) {
	c := startTestClusterWith(t, 1, oneOffsetsPartition, nil)
	topic := strings.Repeat("t", 249)
	c.createTopic(c.agents[0], topic, 800, 1, 1)
	member := strings.Repeat("m", 255)
	status, body := c.agents[0].call("POST", "/v1/groups/g/members?timeout=10s", wire.ContentTypeJSON,
		[]byte(`{"topics":["`+topic+`"],"member_id":"`+member+`","session_timeout_ms":60000}`))
	if status != 200 {
		t.Fatalf("join of a group over 800 partitions of a 249-byte topic name: %d %s, want 200", status, body)
	}
	status, body = c.agents[0].call("GET", "/v1/groups/g", "", nil)
	var d struct {
		Members []struct {
			Assigned []json.RawMessage `json:"assigned"`
		} `json:"members"`
	}
	if status != 200 || json.Unmarshal(body, &d) != nil || len(d.Members) != 1 || len(d.Members[0].Assigned) != 800 {
		t.Fatalf("describe: %d %.300s; want one member owning the 800 partitions", status, body)
	}
}

// TestGroupTooLargeToStoreIsRefused: a join whose group state would be
// larger than one Consul transaction holds, even in the compact form
// (members with the longest ids, each subscribed to eight topics with the
// longest names: about 1 KB a member and topic), is refused at once, 400
// invalid_request saying so, and the group stays as stored. Before, Consul
// refused the write ("Request body too large"), the coordinator answered
// 503 coordinator unavailable, and the sidecar and the client retried the
// same refused write until their timeouts.
func TestGroupTooLargeToStoreIsRefused(t *testing.T) {
	c := startTestClusterWith(t, 1, oneOffsetsPartition, nil)
	var topics []string
	for i := range 8 {
		topic := fmt.Sprintf("%c%s", 'a'+i, strings.Repeat("t", 248))
		c.createTopic(c.agents[0], topic, 1, 1, 1)
		topics = append(topics, `"`+topic+`"`)
	}
	subscription := strings.Join(topics, ",")
	for i := range 200 {
		member := fmt.Sprintf("%03d%s", i, strings.Repeat("m", 252))
		status, body := c.agents[0].call("POST", "/v1/groups/g/members?timeout=10s", wire.ContentTypeJSON,
			[]byte(`{"topics":[`+subscription+`],"member_id":"`+member+`","session_timeout_ms":60000}`))
		if status == 200 {
			continue
		}
		if status != 400 || !strings.Contains(string(body), wire.CodeInvalidRequest) || !strings.Contains(string(body), "the group store holds") {
			t.Fatalf("join %d: %d %s; want 200, or 400 invalid_request saying the state is too large", i, status, body)
		}
		if i == 0 {
			t.Fatalf("the first join was refused as too large: %s", body)
		}
		t.Logf("join %d refused: %s", i, body)
		status, body = c.agents[0].call("GET", "/v1/groups/g", "", nil)
		var d struct {
			Members []json.RawMessage `json:"members"`
		}
		if status != 200 || json.Unmarshal(body, &d) != nil || len(d.Members) != i {
			t.Fatalf("describe after the refused join %d: %d %.200s; want the %d members stored before it", i, status, body, i)
		}
		return
	}
	t.Fatalf("200 members with 255-byte ids subscribed to 8 topics with 249-byte names were all stored, within %d bytes?", election.MaxGroupStateBytes)
}
