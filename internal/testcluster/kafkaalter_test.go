package testcluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaAlterTopic (issue 18): franz-go's kadm adds partitions
// (CreatePartitions) and changes min.insync.replicas and retention
// (IncrementalAlterConfigs) through one agent's Kafka listener; the
// topic API shows the changes, DescribeConfigs shows the new values, a kgo producer writes to a new partition, and the refusals
// carry Kafka's codes.
func TestKafkaAlterTopic(t *testing.T) {
	const topic = "kalter"
	c := Start(t, Options{Kafka: true})
	a := c.Agents[0]
	adm := kadm.NewClient(kgoClient(t, a))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if created, err := adm.CreateTopic(ctx, 3, 3, nil, topic); err != nil || created.Err != nil {
		t.Fatalf("kadm create topic: %v %v", err, created.Err)
	}
	for p := range 3 {
		c.WaitLeader(topic, p, 20*time.Second)
	}

	if resp, err := adm.UpdatePartitions(ctx, 5, topic); err != nil || resp[topic].Err != nil {
		t.Fatalf("kadm update partitions to 5: %v %v", err, resp[topic].Err)
	}
	for p := 3; p < 5; p++ {
		c.WaitLeader(topic, p, 20*time.Second)
	}
	prod := kgoClient(t, a, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	r := &kgo.Record{Topic: topic, Partition: 4, Value: []byte("on a new partition")}
	if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatalf("kgo produce to new partition 4: %v", err)
	}

	alters := []kadm.AlterConfig{
		{Name: "min.insync.replicas", Value: kadm.StringPtr("3")},
		{Name: "retention.bytes", Value: kadm.StringPtr("8192")},
		{Name: "retention.ms", Value: kadm.StringPtr("-1")},
	}
	if resp, err := adm.AlterTopicConfigs(ctx, alters, topic); err != nil || resp[0].Err != nil {
		t.Fatalf("kadm alter topic configs: %v %v", err, resp)
	}
	var desc struct {
		Config topicConfig `json:"config"`
	}
	if err := a.do("GET", a.url("/v1/topics/"+topic, nil), "", nil, &desc); err != nil {
		t.Fatal(err)
	}
	if cfg := desc.Config; cfg.Partitions != 5 || cfg.MinInsyncReplicas != 3 || cfg.RetentionBytes != 8192 || cfg.Retention != "0s" || len(cfg.AgentDefaults) != 0 {
		t.Fatalf("the topic API describes %+v after the Kafka alters", cfg)
	}
	described, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil || described[0].Err != nil {
		t.Fatalf("kadm describe configs: %v %v", err, described)
	}
	want := map[string]string{"min.insync.replicas": "3", "retention.bytes": "8192", "retention.ms": "-1"}
	for _, cfg := range described[0].Configs {
		if v, ok := want[cfg.Key]; ok {
			if cfg.MaybeValue() != v {
				t.Errorf("DescribeConfigs %s = %q, want %q", cfg.Key, cfg.MaybeValue(), v)
			}
			delete(want, cfg.Key)
		}
	}
	if len(want) > 0 {
		t.Errorf("DescribeConfigs lacks %v", want)
	}
	// A delete goes back to the agents' storage block.
	if resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: "retention.bytes"}}, topic); err != nil || resp[0].Err != nil {
		t.Fatalf("kadm delete retention.bytes: %v %v", err, resp)
	}
	if err := a.do("GET", a.url("/v1/topics/"+topic, nil), "", nil, &desc); err != nil {
		t.Fatal(err)
	}
	if cfg := desc.Config; len(cfg.AgentDefaults) != 1 || cfg.AgentDefaults[0] != "retention_bytes" {
		t.Fatalf("after deleting retention.bytes: %+v", cfg)
	}

	for _, tt := range []struct {
		name   string
		alters []kadm.AlterConfig
		want   error
	}{
		{"min.insync.replicas above RF", []kadm.AlterConfig{{Name: "min.insync.replicas", Value: kadm.StringPtr("4")}}, kerr.InvalidConfig},
		{"segment.bytes", []kadm.AlterConfig{{Name: "segment.bytes", Value: kadm.StringPtr("4096")}}, kerr.InvalidConfig},
		{"min.insync.replicas deleted", []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: "min.insync.replicas"}}, kerr.InvalidConfig},
	} {
		if resp, _ := adm.AlterTopicConfigs(ctx, tt.alters, topic); !errors.Is(resp[0].Err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, resp[0].Err, tt.want)
		}
	}
	if resp, _ := adm.UpdatePartitions(ctx, 4, topic); !errors.Is(resp[topic].Err, kerr.InvalidPartitions) {
		t.Errorf("5 -> 4 partitions: %v, want INVALID_PARTITIONS", resp[topic].Err)
	}
	if resp, _ := adm.ValidateUpdatePartitions(ctx, 8, topic); resp[topic].Err != nil {
		t.Errorf("validate 5 -> 8: %v", resp[topic].Err)
	}
	if err := a.do("GET", a.url("/v1/topics/"+topic, nil), "", nil, &desc); err != nil || desc.Config.Partitions != 5 || desc.Config.MinInsyncReplicas != 3 {
		t.Fatalf("after the refusals and the validation: %+v, %v", desc.Config, err)
	}
}
