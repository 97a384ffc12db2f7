package kafkabroker

import (
	"encoding/json"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/kafka"
)

func TestKafkaTopicSettings(t *testing.T) {
	i64 := func(n int64) *int64 { return &n }
	tests := []struct {
		name    string
		configs map[string]string
		minISR  int // 0: not set
		storage *partition.TopicStorage
		code    int16
	}{
		{"none", nil, 0, nil, 0},
		{"min isr", map[string]string{"min.insync.replicas": "2"}, 2, nil, 0},
		{"delete policy, no unclean election", map[string]string{"cleanup.policy": "delete", "unclean.leader.election.enable": "false"}, 0, nil, 0},
		{"storage", map[string]string{"segment.bytes": "1048576", "retention.ms": "60000", "retention.bytes": "-1"}, 0,
			&partition.TopicStorage{SegmentBytes: 1 << 20, RetentionMS: i64(60000), RetentionBytes: i64(0)}, 0},
		{"compaction", map[string]string{"cleanup.policy": "compact"}, 0, nil, kerr.InvalidConfig.Code},
		{"unclean election", map[string]string{"unclean.leader.election.enable": "true"}, 0, nil, kerr.InvalidConfig.Code},
		{"unknown", map[string]string{"compression.type": "zstd"}, 0, nil, kerr.InvalidConfig.Code},
		{"tiny segments", map[string]string{"segment.bytes": "100"}, 0, nil, kerr.InvalidConfig.Code},
		{"bad min isr", map[string]string{"min.insync.replicas": "0"}, 0, nil, kerr.InvalidConfig.Code},
		{"bad retention", map[string]string{"retention.ms": "-2"}, 0, nil, kerr.InvalidConfig.Code},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, storage, err := topicSettings(kafka.TopicSpec{Name: "t", Partitions: 3, Configs: tt.configs})
			if code := kafka.ErrorCode(err); code != tt.code {
				t.Fatalf("code %d (%v), want %d", code, err, tt.code)
			}
			if tt.code != 0 {
				return
			}
			if req.Name != "t" || req.Partitions == nil || *req.Partitions != 3 || req.ReplicationFactor != nil {
				t.Errorf("request %+v", req)
			}
			if (req.MinInsyncReplicas == nil) != (tt.minISR == 0) || (req.MinInsyncReplicas != nil && *req.MinInsyncReplicas != tt.minISR) {
				t.Errorf("min ISR %v, want %d", req.MinInsyncReplicas, tt.minISR)
			}
			var want []byte
			if tt.storage != nil {
				want, _ = json.Marshal(tt.storage)
			}
			if string(storage) != string(want) {
				t.Errorf("storage %s, want %s", storage, want)
			}
		})
	}
}

func TestKafkaNodeIDIsStableAndPositive(t *testing.T) {
	seen := map[int32]string{}
	for _, n := range []string{"n1", "n2", "n3", "host-1", "a"} {
		id := NodeID(n)
		if id < 0 || id != NodeID(n) {
			t.Errorf("%s: id %d", n, id)
		}
		if o, ok := seen[id]; ok {
			t.Errorf("%s and %s share id %d", n, o, id)
		}
		seen[id] = n
	}
}
