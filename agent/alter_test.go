package agent

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/logagent/logagent/agent/kafkabroker"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/wire"
)

func TestParseAlter(t *testing.T) {
	d := func(d time.Duration) *time.Duration { return &d }
	n := func(n int64) *int64 { return &n }
	i := func(i int) *int { return &i }
	tests := []struct {
		body string
		want kafkabroker.TopicChange
		code string // the refusal's, "" when accepted
	}{
		{body: `{"partitions":6}`, want: kafkabroker.TopicChange{Partitions: i(6)}},
		{body: `{"min_insync_replicas":2}`, want: kafkabroker.TopicChange{MinInsyncReplicas: i(2)}},
		{body: `{"retention":"72h","retention_bytes":"10GiB"}`, want: kafkabroker.TopicChange{Retention: d(72 * time.Hour), RetentionBytes: n(10 << 30)}},
		{body: `{"retention":"0s","retention_bytes":0}`, want: kafkabroker.TopicChange{Retention: d(0), RetentionBytes: n(0)}},
		{body: `{"retention_bytes":1048576}`, want: kafkabroker.TopicChange{RetentionBytes: n(1 << 20)}},
		{body: `{"retention_bytes":"4096"}`, want: kafkabroker.TopicChange{RetentionBytes: n(4096)}},
		{body: `{"retention":"default","retention_bytes":"default"}`, want: kafkabroker.TopicChange{ResetRetention: true, ResetRetentionBytes: true}},
		{body: `{}`, code: wire.CodeInvalidRequest},
		{body: `{"partitions":0}`, code: wire.CodeInvalidRequest},
		{body: `{"partitions":10001}`, code: wire.CodeInvalidRequest},
		{body: `{"min_insync_replicas":0}`, code: wire.CodeInvalidRequest},
		{body: `{"retention":"-1h"}`, code: wire.CodeInvalidRequest},
		{body: `{"retention":"1.5ms"}`, code: wire.CodeInvalidRequest},
		{body: `{"retention":"a week"}`, code: wire.CodeInvalidRequest},
		{body: `{"retention_bytes":-1}`, code: wire.CodeInvalidRequest},
		{body: `{"retention_bytes":"10 gallons"}`, code: wire.CodeInvalidRequest},
		{body: `{"retention_bytes":true}`, code: wire.CodeInvalidRequest},
		{body: `{"retention_bytes":1.5}`, code: wire.CodeInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.body, func(t *testing.T) {
			var req alterTopicRequest
			if err := reply.DecodeOneObject([]byte(tt.body), &req); err != nil {
				t.Fatal(err)
			}
			got, err := parseAlter(req)
			switch {
			case tt.code != "" && (err == nil || err.Code != tt.code):
				t.Fatalf("parseAlter = %+v, %v; want %s", got, err, tt.code)
			case tt.code == "" && err != nil:
				t.Fatalf("parseAlter: %v", err)
			case tt.code == "" && describeChange(got) != describeChange(tt.want):
				t.Fatalf("parseAlter = %s, want %s", describeChange(got), describeChange(tt.want))
			}
		})
	}
	var req alterTopicRequest
	if err := reply.DecodeOneObject([]byte(`{"partitions":6,"replication_factor":2}`), &req); err == nil {
		t.Fatal("a field an alter cannot change was accepted")
	}
}

// describeChange prints a kafkabroker.TopicChange's values, not its pointers.
func describeChange(c kafkabroker.TopicChange) string {
	b, _ := json.Marshal(map[string]any{
		"partitions": c.Partitions, "min_insync_replicas": c.MinInsyncReplicas,
		"retention": c.Retention, "retention_bytes": c.RetentionBytes,
		"reset_retention": c.ResetRetention, "reset_retention_bytes": c.ResetRetentionBytes,
	})
	return string(b)
}

// TestApplyChangeStorage: retention changes edit the topic's storage
// settings, keeping the ones they do not touch; "default" removes the
// topic's own value, and settings this agent does not know are not
// rewritten.
func TestApplyChangeStorage(t *testing.T) {
	ms := func(d time.Duration) *time.Duration { return &d }
	n := func(n int64) *int64 { return &n }
	tests := []struct {
		name, storage string
		change        kafkabroker.TopicChange
		want          string // "" for none
		refused       bool
	}{
		{name: "set both", change: kafkabroker.TopicChange{Retention: ms(time.Hour), RetentionBytes: n(1024)}, want: `{"retention_ms":3600000,"retention_bytes":1024}`},
		{name: "keeps segment_bytes", storage: `{"segment_bytes":4096,"retention_bytes":5}`, change: kafkabroker.TopicChange{Retention: ms(0)}, want: `{"segment_bytes":4096,"retention_ms":0,"retention_bytes":5}`},
		{name: "back to the agent's", storage: `{"retention_ms":5,"retention_bytes":5}`, change: kafkabroker.TopicChange{ResetRetention: true, ResetRetentionBytes: true}, want: ""},
		{name: "one back", storage: `{"retention_ms":5,"retention_bytes":5}`, change: kafkabroker.TopicChange{ResetRetentionBytes: true}, want: `{"retention_ms":5}`},
		{name: "unknown setting", storage: `{"compaction":true}`, change: kafkabroker.TopicChange{RetentionBytes: n(1)}, refused: true},
	}
	a := &Agent{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := election.TopicConfig{Name: "t", Partitions: 1, ReplicationFactor: 1, MinInsyncReplicas: 1}
			if tt.storage != "" {
				tc.Storage = json.RawMessage(tt.storage)
			}
			got, added, err := a.applyChange(t.Context(), tc, [][]string{{"n1"}}, tt.change)
			switch {
			case tt.refused && err == nil:
				t.Fatalf("storage %s changed to %s, want a refusal", tt.storage, got.Storage)
			case !tt.refused && (err != nil || string(got.Storage) != tt.want || added != nil):
				t.Fatalf("applyChange = %s, %v, %v; want %s", got.Storage, added, err, tt.want)
			}
		})
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 72 * time.Hour: "72h", 10 * time.Minute: "10m", 90 * time.Minute: "1h30m",
		30 * time.Second: "30s", time.Hour + 5*time.Second: "1h0m5s", 1500 * time.Millisecond: "1.5s",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%s) = %q, want %q", d, got, want)
		}
	}
}
