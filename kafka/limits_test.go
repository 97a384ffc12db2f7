package kafka

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestTenThousandPartitionsServed: kadm and kgo requests for 10,000
// partitions, in 10,000 topics with 249-byte names (Kafka's longest), are
// served under the agent's frame limit (16 MiB) and the per-key limits:
// Metadata, ListOffsets, Fetch, OffsetCommit, OffsetFetch, DescribeConfigs,
// OffsetForLeaderEpoch, and a JoinGroup whose two protocols each subscribe
// to the 10,000 topics and own their partitions, as the Java consumer's
// default range and cooperative-sticky assignors send it.
func TestTenThousandPartitionsServed(t *testing.T) {
	fg := newFakeGroups()
	t.Cleanup(fg.Close)
	ts := startServer(t, func(c *Config) { c.Groups, c.MaxRequestBytes = fg, 16<<20 })
	const n = 10000
	names := make([]string, n)
	for i := range names {
		prefix := fmt.Sprintf("%05d-", i)
		names[i] = prefix + strings.Repeat("x", 249-len(prefix))
		createTopic(t, ts, names[i], 1)
	}
	cl := ts.client(t, kgo.RequestTimeoutOverhead(time.Minute))
	adm := kadm.NewClient(cl)
	ctx := testContext(t)

	md, err := adm.Metadata(ctx, names...)
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Topics) != n || md.Topics.Error() != nil {
		t.Fatalf("Metadata: %d topics, error %v", len(md.Topics), md.Topics.Error())
	}
	ends, err := adm.ListEndOffsets(ctx, names...)
	if err != nil || ends.Error() != nil {
		t.Fatalf("ListEndOffsets: %v, %v", err, ends.Error())
	}
	offsets := make(kadm.Offsets)
	for _, name := range names {
		offsets.Add(kadm.Offset{Topic: name, Partition: 0, At: 0, LeaderEpoch: -1})
	}
	committed, err := adm.CommitOffsets(ctx, "g", offsets)
	if err != nil || committed.Error() != nil {
		t.Fatalf("CommitOffsets: %v, %v", err, committed.Error())
	}
	fetched, err := adm.FetchOffsets(ctx, "g")
	if err != nil || fetched.Error() != nil {
		t.Fatalf("FetchOffsets: %v, %v", err, fetched.Error())
	}
	if got := len(fetched.Offsets()); got != n {
		t.Fatalf("FetchOffsets: %d topics, want %d", got, n)
	}
	configs, err := adm.DescribeTopicConfigs(ctx, names...)
	if err != nil || len(configs) != n {
		t.Fatalf("DescribeTopicConfigs: %d, %v", len(configs), err)
	}
	var epochs kadm.OffsetForLeaderEpochRequest
	for _, name := range names {
		epochs.Add(name, 0, 0)
	}
	answered, err := adm.OffsetForLeaderEpoch(ctx, epochs)
	if err != nil || len(answered) != n {
		t.Fatalf("OffsetForLeaderEpoch: %d topics, %v", len(answered), err)
	}

	// Fetch and JoinGroup as the clients send them, through kgo.
	fetch := kmsg.NewPtrFetchRequest()
	fetch.MaxBytes = 1 << 20
	for _, name := range names {
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = name
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.PartitionMaxBytes = 1 << 20
		rt.Partitions = []kmsg.FetchRequestTopicPartition{rp}
		fetch.Topics = append(fetch.Topics, rt)
	}
	var meta kmsg.ConsumerMemberMetadata
	meta.Version = 3
	for _, name := range names {
		meta.Topics = append(meta.Topics, name)
		meta.OwnedPartitions = append(meta.OwnedPartitions, kmsg.ConsumerMemberMetadataOwnedPartition{Topic: name, Partitions: []int32{0}})
	}
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.ProtocolType, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = "joined", "consumer", 10000, 10000
	for _, p := range []string{"range", "cooperative-sticky"} {
		jp := kmsg.NewJoinGroupRequestProtocol()
		jp.Name, jp.Metadata = p, meta.AppendTo(nil)
		join.Protocols = append(join.Protocols, jp)
	}
	for _, req := range []kmsg.Request{fetch, join} {
		resp, err := cl.Request(ctx, req)
		if err != nil {
			t.Fatalf("%T: %v", req, err)
		}
		size := len(kmsg.NewRequestFormatter().AppendRequest(nil, req, 1)) - 4
		t.Logf("%T v%d: a frame of %d bytes served", req, req.GetVersion(), size)
		if size <= defaultFrameBytes/2 && req.Key() == join.Key() {
			t.Errorf("the JoinGroup frame is %d bytes: not the size the test means", size)
		}
		if r, ok := resp.(*kmsg.FetchResponse); ok && (len(r.Topics) != n || r.Topics[0].Partitions[0].ErrorCode != 0) {
			t.Errorf("Fetch: %d topics answered", len(r.Topics))
		}
		if r, ok := resp.(*kmsg.JoinGroupResponse); ok && r.MemberID == "" {
			t.Errorf("JoinGroup: answered %d without a member id", r.ErrorCode)
		}
	}
}
