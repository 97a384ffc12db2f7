package kafka

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// seedRequests are valid requests of every advertised key and version,
// encoded as kgo would send them, with a little content where an empty
// request would not reach the handler's loops.
func seedRequests(t testing.TB) [][]byte {
	batch := batchOf(t, "a", "b")
	var frames [][]byte
	formatter := kmsg.NewRequestFormatter(kmsg.FormatterClientID("seed"))
	for _, a := range apis {
		for v := a.min; v <= a.max; v++ {
			req := kmsg.RequestForKey(a.key)
			if d, ok := req.(interface{ Default() }); ok {
				d.Default()
			}
			req.SetVersion(v)
			switch r := req.(type) {
			case *kmsg.ProduceRequest:
				r.Acks, r.TimeoutMillis = -1, 1000
				rt := kmsg.NewProduceRequestTopic()
				rt.Topic = "t"
				rp := kmsg.NewProduceRequestTopicPartition()
				rp.Records = batch
				rt.Partitions = []kmsg.ProduceRequestTopicPartition{rp}
				r.Topics = []kmsg.ProduceRequestTopic{rt}
			case *kmsg.FetchRequest:
				r.MaxBytes, r.MinBytes, r.MaxWaitMillis = 1<<20, 1, 10
				rt := kmsg.NewFetchRequestTopic()
				rt.Topic = "t"
				rp := kmsg.NewFetchRequestTopicPartition()
				rp.PartitionMaxBytes = 1 << 20
				rt.Partitions = []kmsg.FetchRequestTopicPartition{rp}
				r.Topics = []kmsg.FetchRequestTopic{rt}
			case *kmsg.MetadataRequest:
				rt := kmsg.NewMetadataRequestTopic()
				rt.Topic = kmsg.StringPtr("t")
				r.Topics = []kmsg.MetadataRequestTopic{rt}
			case *kmsg.CreateTopicsRequest:
				rt := kmsg.NewCreateTopicsRequestTopic()
				rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "new", 2, -1
				r.Topics = []kmsg.CreateTopicsRequestTopic{rt}
			case *kmsg.ListOffsetsRequest:
				rt := kmsg.NewListOffsetsRequestTopic()
				rt.Topic = "t"
				rp := kmsg.NewListOffsetsRequestTopicPartition()
				rp.Timestamp = -1
				rt.Partitions = []kmsg.ListOffsetsRequestTopicPartition{rp}
				r.Topics = []kmsg.ListOffsetsRequestTopic{rt}
			case *kmsg.DescribeConfigsRequest:
				rr := kmsg.NewDescribeConfigsRequestResource()
				rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "t"
				r.Resources = []kmsg.DescribeConfigsRequestResource{rr}
			case *kmsg.FindCoordinatorRequest:
				r.CoordinatorKey, r.CoordinatorKeys = "g", []string{"g", "h"}
			}
			frames = append(frames, formatter.AppendRequest(nil, req, int32(v)))
		}
	}
	return frames
}

// FuzzRequest drives frame reading, header parsing and body decoding with
// arbitrary bytes, then the handler (against a fake Broker, under an ended
// context so that no long poll waits) and the reply's encoding. Nothing
// may panic, and a frame is never read past the limit.
func FuzzRequest(f *testing.F) {
	seeds := seedRequests(f)
	for _, s := range seeds {
		f.Add(s)
	}
	f.Add(bytes.Join(seeds, nil)) // pipelined
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})

	const limit = 1 << 16
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	f.Fuzz(func(t *testing.T, data []byte) {
		broker := newFakeBroker()
		if err := broker.CreateTopic(context.Background(), TopicSpec{Name: "t", Partitions: 2}); err != nil {
			t.Fatal(err)
		}
		broker.Produce(context.Background(), ProduceRequest{Topic: "t", Batch: batchOf(t, "x"), Records: 1, Acks: -1})
		s := NewServer(Config{Broker: broker, MaxRequestBytes: limit, NodeID: 1, Host: "127.0.0.1", Port: 9092})
		defer s.Close()
		r := bytes.NewReader(data)
		var buf []byte
		for {
			frame, err := readFrame(r, limit, s.frameLimit, buf)
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, ErrFrameSize) {
					t.Fatalf("readFrame: %v", err)
				}
				return
			}
			if len(frame) > limit {
				t.Fatalf("frame of %d bytes past the limit", len(frame))
			}
			buf = frame[:0]
			_, req, a, err := s.decodeRequest(frame)
			if err != nil {
				continue
			}
			rep, err := a.handle(s, ended, req)
			if err != nil || rep == nil {
				continue
			}
			bc := &bufConn{}
			if err := rep.writeTo(&conn{nc: bc, w: bufio.NewWriter(bc)}, 1); err != nil {
				t.Fatalf("write reply: %v", err)
			}
		}
	})
}
