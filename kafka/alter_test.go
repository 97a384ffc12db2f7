package kafka

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCreatePartitionsAndAlterConfigs drives CreatePartitions and
// IncrementalAlterConfigs with kadm against the fake broker: the changes
// reach the Broker, validate_only changes nothing, and the listener's own
// refusals (a manual assignment, a topic named twice, list operations,
// broker configs) come with their codes.
func TestCreatePartitionsAndAlterConfigs(t *testing.T) {
	ts := startServer(t)
	ctx := testContext(t)
	cl := ts.client(t)
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 2, -1, nil, "events"); err != nil {
		t.Fatal(err)
	}
	if resp, err := adm.ValidateCreatePartitions(ctx, 4, "events"); err != nil || resp["events"].Err != nil {
		t.Fatalf("validate 2 -> 4: %v %v", err, resp["events"].Err)
	}
	if n := len(ts.broker.topics["events"].partitions); n != 2 {
		t.Fatalf("validate_only left %d partitions, want 2", n)
	}
	if resp, err := adm.UpdatePartitions(ctx, 4, "events"); err != nil || resp["events"].Err != nil {
		t.Fatalf("2 -> 4: %v %v", err, resp["events"].Err)
	}
	if n := len(ts.broker.topics["events"].partitions); n != 4 {
		t.Fatalf("%d partitions after the update, want 4", n)
	}
	if resp, _ := adm.UpdatePartitions(ctx, 3, "events"); !errors.Is(resp["events"].Err, kerr.InvalidPartitions) {
		t.Fatalf("4 -> 3: %v, want INVALID_PARTITIONS", resp["events"].Err)
	}

	cp := kmsg.NewPtrCreatePartitionsRequest()
	for range 2 {
		rt := kmsg.NewCreatePartitionsRequestTopic()
		rt.Topic, rt.Count = "events", 6
		cp.Topics = append(cp.Topics, rt)
	}
	assigned := kmsg.NewCreatePartitionsRequestTopic()
	assigned.Topic, assigned.Count = "other", 2
	assigned.Assignment = []kmsg.CreatePartitionsRequestTopicAssignment{{Replicas: []int32{7}}, {Replicas: []int32{7}}}
	cp.Topics = append(cp.Topics, assigned)
	cpResp, err := cp.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int16{kerr.InvalidRequest.Code, kerr.InvalidRequest.Code, kerr.InvalidReplicaAssignment.Code} {
		if got := cpResp.Topics[i].ErrorCode; got != want {
			t.Errorf("CreatePartitions topic %d: code %d, want %d", i, got, want)
		}
	}

	set := kadm.AlterConfig{Name: "retention.ms", Value: kadm.StringPtr("1000")}
	if resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{set}, "events"); err != nil || resp[0].Err != nil {
		t.Fatalf("set retention.ms: %v %v", err, resp)
	}
	if got := ts.broker.topics["events"].configs["retention.ms"]; got != "1000" {
		t.Fatalf("retention.ms %q after the alter, want 1000", got)
	}
	del := kadm.AlterConfig{Op: kadm.DeleteConfig, Name: "retention.ms"}
	if resp, err := adm.ValidateAlterTopicConfigs(ctx, []kadm.AlterConfig{del}, "events"); err != nil || resp[0].Err != nil {
		t.Fatalf("validate delete: %v %v", err, resp)
	}
	if got := ts.broker.topics["events"].configs["retention.ms"]; got != "1000" {
		t.Fatalf("validate_only changed retention.ms to %q", got)
	}
	if resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{del}, "events"); err != nil || resp[0].Err != nil {
		t.Fatalf("delete retention.ms: %v %v", err, resp)
	}
	dc := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, "events"
	dc.Resources = append(dc.Resources, res)
	dcResp, err := dc.RequestWith(ctx, cl)
	if err != nil || len(dcResp.Resources) != 1 || len(dcResp.Resources[0].Configs) != 1 {
		t.Fatalf("describe configs: %+v, %v", dcResp, err)
	}
	if c := dcResp.Resources[0].Configs[0]; c.Name != "retention.ms" || c.ReadOnly {
		t.Fatalf("DescribeConfigs shows %s read-only %v, want retention.ms writable", c.Name, c.ReadOnly)
	}
	appendOp := kadm.AlterConfig{Op: kadm.AppendConfig, Name: "retention.ms", Value: kadm.StringPtr("1")}
	if resp, _ := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{appendOp}, "events"); !errors.Is(resp[0].Err, kerr.InvalidConfig) {
		t.Fatalf("APPEND: %v, want INVALID_CONFIG", resp[0].Err)
	}
	if resp, _ := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{set, set}, "events"); !errors.Is(resp[0].Err, kerr.InvalidRequest) {
		t.Fatalf("a config named twice: %v, want INVALID_REQUEST", resp[0].Err)
	}
	if resp, _ := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{set}, 7); !errors.Is(resp[0].Err, kerr.InvalidRequest) {
		t.Fatalf("a broker config: %v, want INVALID_REQUEST", resp[0].Err)
	}
}
