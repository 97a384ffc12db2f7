package partition

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/segstore"
)

func TestLogOptionsForTopicStorage(t *testing.T) {
	base := segstore.Options{SegmentBytes: 1 << 30, Retention: 168 * time.Hour, RetentionBytes: 1 << 40}
	tests := []struct {
		name    string
		storage string
		want    segstore.Options
		wantErr bool
	}{
		{"none", "", base, false},
		{"offsets topic", `{"segment_bytes":16777216,"no_retention":true}`, segstore.Options{SegmentBytes: 16 << 20}, false},
		{"segment only", `{"segment_bytes":1024}`, segstore.Options{SegmentBytes: 1024, Retention: base.Retention, RetentionBytes: base.RetentionBytes}, false},
		{"retention", `{"retention_ms":5000,"retention_bytes":1048576}`, segstore.Options{SegmentBytes: base.SegmentBytes, Retention: 5 * time.Second, RetentionBytes: 1 << 20}, false},
		{"retention off", `{"retention_ms":0,"retention_bytes":0}`, segstore.Options{SegmentBytes: base.SegmentBytes}, false},
		{"negative retention", `{"retention_ms":-1}`, segstore.Options{}, true},
		{"unknown setting", `{"cleanup_policy":"compact"}`, segstore.Options{}, true},
		{"negative", `{"segment_bytes":-1}`, segstore.Options{}, true},
		{"not JSON", `x`, segstore.Options{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := election.TopicConfig{Name: "t"}
			if tt.storage != "" {
				tc.Storage = json.RawMessage(tt.storage)
			}
			got, err := LogOptionsFor(base, tc)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && (got.SegmentBytes != tt.want.SegmentBytes || got.Retention != tt.want.Retention || got.RetentionBytes != tt.want.RetentionBytes) {
				t.Fatalf("options %+v, want %+v", got, tt.want)
			}
		})
	}
}
