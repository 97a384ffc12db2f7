package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/logagent/logagent/record"
)

// listOffsetsRequest asks for one timestamp of partition 0 of topic.
func listOffsetsRequest(version int16, topic string, timestamp int64) *kmsg.ListOffsetsRequest {
	req := kmsg.NewPtrListOffsetsRequest()
	req.Version = version
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Timestamp = timestamp
	rt.Partitions = []kmsg.ListOffsetsRequestTopicPartition{rp}
	req.Topics = []kmsg.ListOffsetsRequestTopic{rt}
	return req
}

// TestListOffsetsSpecialTimestamps: each special timestamp is answered
// from the version that brought it, max timestamp (-3) from v7 and
// earliest local (-4) from v8, and below it, or when the listener does not
// know it, is UNSUPPORTED_VERSION, as Kafka's ReplicaManager answers
// (v6 was the highest advertised, and -3 was INVALID_REQUEST).
func TestListOffsetsSpecialTimestamps(t *testing.T) {
	ts := startServer(t)
	createTopic(t, ts, "t", 1)
	for _, tsMs := range []int64{100, 900, 300} {
		var b record.Builder
		if err := b.Add(tsMs, nil, []byte("v"), nil); err != nil {
			t.Fatal(err)
		}
		batch, err := b.AppendTo(nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ts.broker.Produce(context.Background(), ProduceRequest{Topic: "t", Partition: 0, Batch: batch, Records: 1, Acks: -1}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		version   int16
		timestamp int64
		code      int16
		offset    int64
		at        int64
	}{
		{1, EarliestTimestamp, 0, 0, -1},
		{1, LatestTimestamp, 0, 3, -1},
		{6, 200, 0, 1, 900},
		{6, MaxTimestamp, kerr.UnsupportedVersion.Code, -1, -1},
		{7, MaxTimestamp, 0, 1, 900},
		{8, MaxTimestamp, 0, 1, 900},
		{7, EarliestLocalTimestamp, kerr.UnsupportedVersion.Code, -1, -1},
		{8, EarliestLocalTimestamp, 0, 0, -1},
		{8, -5, kerr.UnsupportedVersion.Code, -1, -1}, // latest tiered, v9
		{8, -6, kerr.UnsupportedVersion.Code, -1, -1},
	}
	for _, tt := range tests {
		c := dialRaw(t, ts.addr)
		c.send(c.frame(listOffsetsRequest(tt.version, "t", tt.timestamp)))
		resp := kmsg.NewPtrListOffsetsResponse()
		resp.Version = tt.version
		c.read(resp)
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != tt.code || p.Offset != tt.offset || p.Timestamp != tt.at {
			t.Errorf("v%d timestamp %d: error %d, offset %d, timestamp %d; want error %d, offset %d, timestamp %d",
				tt.version, tt.timestamp, p.ErrorCode, p.Offset, p.Timestamp, tt.code, tt.offset, tt.at)
		}
	}
}

// TestKadmListMaxTimestampOffsets: kadm's ListMaxTimestampOffsets (KIP-734,
// which kgo sends at the highest version the broker advertises) answers
// the record with the largest timestamp, and an empty partition -1, -1;
// with ListOffsets advertised up to v6 the client got an error.
func TestKadmListMaxTimestampOffsets(t *testing.T) {
	ts := startServer(t)
	ctx := testContext(t)
	createTopic(t, ts, "t", 2)
	producer := ts.client(t, kgo.DefaultProduceTopic("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for _, ms := range []int64{100, 900, 300, 900} {
		if err := producer.ProduceSync(ctx, &kgo.Record{Partition: 0, Timestamp: time.UnixMilli(ms), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	listed, err := kadm.NewClient(ts.client(t)).ListMaxTimestampOffsets(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32][2]int64{0: {1, 900}, 1: {-1, -1}}
	for p, w := range want {
		o, ok := listed.Lookup("t", p)
		if !ok || o.Err != nil || o.Offset != w[0] || o.Timestamp != w[1] {
			t.Errorf("partition %d: %+v (listed %v), want offset %d, timestamp %d", p, o, ok, w[0], w[1])
		}
	}
}
