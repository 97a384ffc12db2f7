package main

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/logagent/logagent/client"
)

func TestTopicChangeLines(t *testing.T) {
	info := func(partitions int, config string) *client.TopicInfo {
		var c map[string]json.RawMessage
		if err := json.Unmarshal([]byte(config), &c); err != nil {
			t.Fatal(err)
		}
		return &client.TopicInfo{Name: "t", Config: c, Partitions: make([]client.PartitionInfo, partitions)}
	}
	agentDefaults := `{"min_insync_replicas":2,"retention":"168h","retention_bytes":0,"agent_defaults":["retention","retention_bytes"]}`
	tests := []struct {
		name          string
		before, after *client.TopicInfo
		want          []string
	}{
		{"nothing", info(3, agentDefaults), info(3, agentDefaults), []string{"nothing changed"}},
		{"partitions and min ISR", info(3, agentDefaults),
			info(6, `{"min_insync_replicas":3,"retention":"168h","retention_bytes":0,"agent_defaults":["retention","retention_bytes"]}`),
			[]string{"partitions: 3 -> 6", "min_insync_replicas: 2 -> 3"}},
		{"retention set", info(3, agentDefaults),
			info(3, `{"min_insync_replicas":2,"retention":"72h","retention_bytes":10737418240,"agent_defaults":[]}`),
			[]string{"retention: 168h (agent default) -> 72h", "retention_bytes: 0 (agent default) -> 10GiB"}},
		{"the same value, now the agent's", info(3, `{"min_insync_replicas":2,"retention":"168h","retention_bytes":0,"agent_defaults":["retention_bytes"]}`),
			info(3, agentDefaults), []string{"retention: 168h -> 168h (agent default)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := topicChangeLines(tt.before, tt.after); !slices.Equal(got, tt.want) {
				t.Fatalf("topicChangeLines = %q, want %q", got, tt.want)
			}
		})
	}
}
