package kafkabroker

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/kafka"
	"github.com/logagent/logagent/segstore"
)

// alterSidecar is the part of Sidecar an IncrementalAlterConfigs uses: it
// records the change the broker asks for.
type alterSidecar struct {
	Sidecar
	topic  election.TopicMeta
	change *TopicChange
}

func (s *alterSidecar) Serving() error { return nil }

func (s *alterSidecar) LookupTopic(name string) (*election.TopicMeta, bool) {
	return &s.topic, name == s.topic.Config.Name
}

func (s *alterSidecar) AlterTopic(_ string, c TopicChange) error {
	s.change = &c
	return nil
}

// TestKafkaRetentionConfigs: a Kafka retention.ms or retention.bytes, at
// a topic's creation (CreateTopics) and altered (IncrementalAlterConfigs),
// means what it means to a Kafka broker. A retention.ms beyond what a
// time.Duration holds (Long.MAX_VALUE, a common "forever") is no bound:
// it wrapped around to -1 ms, which took every replica of the topic
// offline (storage settings it cannot apply), or to a bound of under a
// millisecond, which deleted every sealed segment. Kafka's 0 is the
// smallest bound logagent has, 1 ms or 1 byte: it was logagent's 0, no
// bound, the opposite of what the client asked (a purge kept everything).
func TestKafkaRetentionConfigs(t *testing.T) {
	tests := []struct {
		name  string
		value string
		// want is the topic's own bound: in ms (retention.ms) or bytes.
		want int64
	}{
		{"retention.ms", "-1", 0},
		{"retention.ms", "0", 1}, // Kafka's 0 keeps nothing past its segment; logagent's 0 is no bound
		{"retention.bytes", "0", 1},
		{"retention.ms", "60000", 60000},
		{"retention.ms", "9223372036854", 9223372036854},
		{"retention.ms", "9223372036855", 0},
		{"retention.ms", "18446744073710", 0},
		{"retention.ms", "9223372036854775807", 0},
		{"retention.bytes", "-1", 0},
		{"retention.bytes", "1048576", 1 << 20},
		{"retention.bytes", "9223372036854775807", 9223372036854775807},
	}
	for _, tt := range tests {
		t.Run(tt.name+"="+tt.value, func(t *testing.T) {
			// CreateTopics: the storage settings, as a replica applies them.
			_, storage, err := topicSettings(kafka.TopicSpec{Name: "t", Configs: map[string]string{tt.name: tt.value}})
			if err != nil {
				t.Fatal(err)
			}
			base := segstore.Options{Retention: 168 * time.Hour, RetentionBytes: 1 << 40}
			opts, err := partition.LogOptionsFor(base, election.TopicConfig{Name: "t", Storage: json.RawMessage(storage)})
			if err != nil {
				t.Fatalf("created with %s: %v", storage, err)
			}
			if tt.name == "retention.ms" && opts.Retention != time.Duration(tt.want)*time.Millisecond {
				t.Errorf("created with %s: retention %v, want %d ms", storage, opts.Retention, tt.want)
			}
			if tt.name == "retention.bytes" && opts.RetentionBytes != tt.want {
				t.Errorf("created with %s: retention bytes %d, want %d", storage, opts.RetentionBytes, tt.want)
			}

			// IncrementalAlterConfigs: the change handed to the topic API.
			s := &alterSidecar{topic: election.TopicMeta{Config: election.TopicConfig{Name: "t", ReplicationFactor: 3}}}
			b := New(Config{Sidecar: s})
			v := tt.value
			if err := b.AlterTopicConfigs(context.Background(), "t", []kafka.ConfigChange{{Name: tt.name, Value: &v}}, false); err != nil {
				t.Fatal(err)
			}
			var got int64
			switch {
			case s.change == nil:
				t.Fatal("no change")
			case tt.name == "retention.ms" && s.change.Retention != nil:
				if *s.change.Retention < 0 || *s.change.Retention%time.Millisecond != 0 || *s.change.Retention > time.Duration(tt.want)*time.Millisecond {
					t.Fatalf("altered to retention %v", *s.change.Retention)
				}
				got = s.change.Retention.Milliseconds()
			case tt.name == "retention.bytes" && s.change.RetentionBytes != nil:
				got = *s.change.RetentionBytes
			default:
				t.Fatalf("change %+v", *s.change)
			}
			if got != tt.want {
				t.Errorf("altered to %d, want %d", got, tt.want)
			}
		})
	}
}
