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
		// Beyond a Duration: CreateTopics stored a Kafka retention.ms as
		// given, and the conversion wrapped around (to -1 ms for
		// Long.MAX_VALUE, which failed the log's open; to 448 µs here,
		// which deleted every sealed segment).
		{"retention of Long.MAX_VALUE ms", `{"retention_ms":9223372036854775807}`, segstore.Options{SegmentBytes: base.SegmentBytes, RetentionBytes: base.RetentionBytes}, false},
		{"retention of 2^64 ns in ms", `{"retention_ms":18446744073710}`, segstore.Options{SegmentBytes: base.SegmentBytes, RetentionBytes: base.RetentionBytes}, false},
		{"largest retention", `{"retention_ms":9223372036854}`, segstore.Options{SegmentBytes: base.SegmentBytes, Retention: 9223372036854 * time.Millisecond, RetentionBytes: base.RetentionBytes}, false},
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
