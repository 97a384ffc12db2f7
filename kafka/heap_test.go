package kafka

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// craftedRequest builds a request of a key whose arrays hold n elements of
// (about) the least wire size each: what a buggy or hostile client sends to
// turn a frame into as many Go structs as it can.
type craftedRequest struct {
	name  string
	key   int16
	build func(n int) kmsg.Request
}

var craftedRequests = []craftedRequest{
	{"Metadata v12 topic ids", 3, func(n int) kmsg.Request {
		r := kmsg.NewPtrMetadataRequest()
		r.SetVersion(12)
		r.Topics = make([]kmsg.MetadataRequestTopic, n)
		for i := range r.Topics {
			binary.BigEndian.PutUint32(r.Topics[i].TopicID[:], uint32(i))
		}
		return r
	}},
	{"Metadata v4 one topic named again and again", 3, func(n int) kmsg.Request {
		r := kmsg.NewPtrMetadataRequest()
		r.SetVersion(4)
		r.Topics = make([]kmsg.MetadataRequestTopic, n)
		for i := range r.Topics {
			r.Topics[i].Topic = kmsg.StringPtr("t")
		}
		return r
	}},
	{"ListOffsets v1 partitions", 2, func(n int) kmsg.Request {
		r := kmsg.NewPtrListOffsetsRequest()
		r.SetVersion(1)
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "t"
		rt.Partitions = make([]kmsg.ListOffsetsRequestTopicPartition, n)
		r.Topics = []kmsg.ListOffsetsRequestTopic{rt}
		return r
	}},
	{"Fetch v12 topics", 1, func(n int) kmsg.Request {
		r := kmsg.NewPtrFetchRequest()
		r.SetVersion(12)
		r.Topics = make([]kmsg.FetchRequestTopic, n)
		return r
	}},
	{"Fetch v12 partitions", 1, func(n int) kmsg.Request {
		r := kmsg.NewPtrFetchRequest()
		r.SetVersion(12)
		r.MaxBytes = 1 << 20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "t"
		rt.Partitions = make([]kmsg.FetchRequestTopicPartition, n)
		for i := range rt.Partitions {
			rt.Partitions[i].Partition, rt.Partitions[i].FetchOffset = 0, 1<<40
		}
		r.Topics = []kmsg.FetchRequestTopic{rt}
		return r
	}},
	{"Produce v9 partitions without records", 0, func(n int) kmsg.Request {
		r := kmsg.NewPtrProduceRequest()
		r.SetVersion(9)
		r.Acks, r.TimeoutMillis = -1, 1000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "t"
		rt.Partitions = make([]kmsg.ProduceRequestTopicPartition, n)
		r.Topics = []kmsg.ProduceRequestTopic{rt}
		return r
	}},
	{"OffsetCommit v8 partitions", 8, func(n int) kmsg.Request {
		r := kmsg.NewPtrOffsetCommitRequest()
		r.SetVersion(8)
		r.Group, r.Generation = "g", -1
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = "t"
		rt.Partitions = make([]kmsg.OffsetCommitRequestTopicPartition, n)
		r.Topics = []kmsg.OffsetCommitRequestTopic{rt}
		return r
	}},
	{"OffsetFetch v8 one group named again and again", 9, func(n int) kmsg.Request {
		r := kmsg.NewPtrOffsetFetchRequest()
		r.SetVersion(8)
		r.Groups = make([]kmsg.OffsetFetchRequestGroup, n)
		for i := range r.Groups {
			r.Groups[i].Group = "g"
		}
		return r
	}},
	{"OffsetFetch v7 partitions", 9, func(n int) kmsg.Request {
		r := kmsg.NewPtrOffsetFetchRequest()
		r.SetVersion(7)
		r.Group = "g"
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic = "t"
		rt.Partitions = make([]int32, n)
		r.Topics = []kmsg.OffsetFetchRequestTopic{rt}
		return r
	}},
	{"DescribeConfigs v4 one topic named again and again", 32, func(n int) kmsg.Request {
		r := kmsg.NewPtrDescribeConfigsRequest()
		r.SetVersion(4)
		r.Resources = make([]kmsg.DescribeConfigsRequestResource, n)
		for i := range r.Resources {
			r.Resources[i].ResourceType, r.Resources[i].ResourceName = kmsg.ConfigResourceTypeTopic, "t"
		}
		return r
	}},
	{"FindCoordinator v4 keys", 10, func(n int) kmsg.Request {
		r := kmsg.NewPtrFindCoordinatorRequest()
		r.SetVersion(4)
		r.CoordinatorKeys = make([]string, n)
		return r
	}},
	{"DescribeGroups v5 groups", 15, func(n int) kmsg.Request {
		r := kmsg.NewPtrDescribeGroupsRequest()
		r.SetVersion(5)
		r.Groups = make([]string, n)
		return r
	}},
	{"OffsetForLeaderEpoch v4 partitions", 23, func(n int) kmsg.Request {
		r := kmsg.NewPtrOffsetForLeaderEpochRequest()
		r.SetVersion(4)
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = "t"
		rt.Partitions = make([]kmsg.OffsetForLeaderEpochRequestTopicPartition, n)
		r.Topics = []kmsg.OffsetForLeaderEpochRequestTopic{rt}
		return r
	}},
	{"DeleteTopics v6 topic ids", 20, func(n int) kmsg.Request {
		r := kmsg.NewPtrDeleteTopicsRequest()
		r.SetVersion(6)
		r.Topics = make([]kmsg.DeleteTopicsRequestTopic, n)
		return r
	}},
	{"CreateTopics v7 topics", 19, func(n int) kmsg.Request {
		r := kmsg.NewPtrCreateTopicsRequest()
		r.SetVersion(7)
		r.ValidateOnly = true
		r.Topics = make([]kmsg.CreateTopicsRequestTopic, n)
		return r
	}},
	{"JoinGroup v9 protocols", 11, func(n int) kmsg.Request {
		r := kmsg.NewPtrJoinGroupRequest()
		r.SetVersion(9)
		r.Group, r.ProtocolType, r.SessionTimeoutMillis, r.RebalanceTimeoutMillis = "g", "consumer", 10000, 10000
		r.Protocols = make([]kmsg.JoinGroupRequestProtocol, n)
		return r
	}},
	{"SyncGroup v5 assignments", 14, func(n int) kmsg.Request {
		r := kmsg.NewPtrSyncGroupRequest()
		r.SetVersion(5)
		r.Group, r.MemberID = "g", "m"
		r.GroupAssignment = make([]kmsg.SyncGroupRequestGroupAssignment, n)
		return r
	}},
	{"LeaveGroup v5 members", 13, func(n int) kmsg.Request {
		r := kmsg.NewPtrLeaveGroupRequest()
		r.SetVersion(5)
		r.Group = "g"
		r.Members = make([]kmsg.LeaveGroupRequestMember, n)
		return r
	}},
	{"ListGroups v4 states", 16, func(n int) kmsg.Request {
		r := kmsg.NewPtrListGroupsRequest()
		r.SetVersion(4)
		r.StatesFilter = make([]string, n)
		return r
	}},
	{"IncrementalAlterConfigs v1 resources", 44, func(n int) kmsg.Request {
		r := kmsg.NewPtrIncrementalAlterConfigsRequest()
		r.SetVersion(1)
		r.ValidateOnly = true
		r.Resources = make([]kmsg.IncrementalAlterConfigsRequestResource, n)
		for i := range r.Resources {
			r.Resources[i].ResourceType, r.Resources[i].ResourceName = kmsg.ConfigResourceTypeTopic, "t"
		}
		return r
	}},
	{"CreatePartitions v3 topics", 37, func(n int) kmsg.Request {
		r := kmsg.NewPtrCreatePartitionsRequest()
		r.SetVersion(3)
		r.ValidateOnly = true
		r.Topics = make([]kmsg.CreatePartitionsRequestTopic, n)
		for i := range r.Topics {
			r.Topics[i].Topic, r.Topics[i].Count = "t", 100
		}
		return r
	}},
}

// craftedFrame is the frame of c (its 4-byte size included) with n
// elements.
func craftedFrame(c craftedRequest, n int) []byte {
	return kmsg.NewRequestFormatter(kmsg.FormatterClientID("crafted")).AppendRequest(nil, c.build(n), 1)
}

// craftedSized is the number of elements of c that a frame of at most
// size bytes (after its 4-byte size) holds, and that frame.
func craftedSized(c craftedRequest, size int) (int, []byte) {
	base := len(craftedFrame(c, 0))
	per := float64(len(craftedFrame(c, 1000))-base) / 1000
	n := int(float64(size+4-base) / per)
	frame := craftedFrame(c, n)
	for len(frame)-4 > size {
		n -= int(float64(len(frame)-4-size)/per) + 1
		frame = craftedFrame(c, n)
	}
	return n, frame
}

// sinkConn is a net.Conn that swallows what is written to it.
type sinkConn struct{ net.Conn }

func (sinkConn) Write(p []byte) (int, error)      { return len(p), nil }
func (sinkConn) SetReadDeadline(time.Time) error  { return nil }
func (sinkConn) SetWriteDeadline(time.Time) error { return nil }

// servedHeap serves one frame on s as a connection does (serveOne: the
// frame read, decoded, handled, answered into a sink) and returns the
// bytes of heap allocated meanwhile, and whether the connection stays
// open.
func servedHeap(s *Server, frame []byte) (uint64, bool) {
	c := &conn{nc: sinkConn{}, r: bufio.NewReaderSize(bytes.NewReader(frame), connBufferSize), w: bufio.NewWriterSize(io.Discard, connBufferSize), remote: "crafted"}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := s.serveOne(c)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, err == nil
}

// heapServer is a Server with the agent's default frame limit (the
// configuration's limits.max_request_bytes, 16 MiB) over a fake Broker
// with a topic "t" of 100 partitions, and fake groups with a group "g"
// holding a committed offset of each.
func heapServer(t *testing.T) *Server {
	broker := newFakeBroker()
	if err := broker.CreateTopic(context.Background(), TopicSpec{Name: "t", Partitions: 100}); err != nil {
		t.Fatal(err)
	}
	groups := newFakeGroups()
	t.Cleanup(groups.Close)
	cr := CommitRequest{Group: "g", Generation: -1}
	for p := range int32(100) {
		cr.Offsets = append(cr.Offsets, OffsetCommit{Topic: "t", Partition: p, Metadata: strings.Repeat("m", 100)})
	}
	if err := groups.CommitOffsets(context.Background(), cr); err != nil {
		t.Fatal(err)
	}
	s := NewServer(Config{Broker: broker, Groups: groups, MaxRequestBytes: 16 << 20, NodeID: 1, Host: "127.0.0.1", Port: 9092,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})})
	t.Cleanup(func() { s.Close() })
	return s
}

// maxCraftedHeap is the most heap one request may take: 216 MiB were
// measured for the largest, a JoinGroup at its 12 MiB limit.
const maxCraftedHeap = 256 << 20

// TestCraftedRequestHeap serves each crafted request in the largest frame
// its key's limit lets through, and with the most items maxRequestItems
// lets through, and reports the heap each takes: at most maxCraftedHeap.
// One more item is refused once decoded, a frame over the key's limit
// before it is read. Before the limits (and before repeated names were
// answered once) a 1 MiB frame took from 17 MB (Fetch of partitions) to
// 35 GB (OffsetFetch v8 naming a group of 100 offsets again and again) of
// heap, and every key but Produce took 16 MiB frames (the agent's
// limits.max_request_bytes).
//
// It measures heap, which the race detector's instrumentation doubles (a
// JoinGroup at its limit: 417 MiB, 216 without), and building the frames
// at each limit under it took from 13 s to 10 min: `make test` runs it on
// its own without -race, and the -race run of the package leaves it out.
func TestCraftedRequestHeap(t *testing.T) {
	if raceEnabled {
		t.Skip("measured without the race detector: make test runs it so (go test -count=1 -run '^TestCraftedRequestHeap$' ./kafka)")
	}
	s := heapServer(t)
	type served struct {
		name    string
		frame   []byte
		refused bool
	}
	for _, c := range craftedRequests {
		t.Run(c.name, func(t *testing.T) {
			limit := int(s.frameLimit(c.key))
			n, atLimit := craftedSized(c, limit)
			frames := []served{{name: "frame limit", frame: atLimit}}
			if items := maxRequestItems - countItems(reflect.ValueOf(c.build(0)), 0); items <= n {
				frames = append(frames, served{"item limit", craftedFrame(c, items), false}, served{"one item over", craftedFrame(c, items+1), true})
			}
			over := atLimit
			for len(over)-4 <= limit {
				n += 64
				over = craftedFrame(c, n)
			}
			frames = append(frames, served{"over the frame limit", over, true})
			for _, f := range frames {
				heap, open := servedHeap(s, f.frame)
				t.Logf("%s: frame of %d bytes: heap %.1f MiB (%.1fx the frame), connection open %v", f.name, len(f.frame)-4, float64(heap)/(1<<20), float64(heap)/float64(len(f.frame)-4), open)
				switch {
				case heap > maxCraftedHeap:
					t.Errorf("%s: a frame of %d bytes took %d MiB of heap, more than %d MiB", f.name, len(f.frame)-4, heap>>20, maxCraftedHeap>>20)
				case f.refused && open:
					t.Errorf("%s: a frame of %d bytes was served; want it refused", f.name, len(f.frame)-4)
				case f.name == "item limit" && !open:
					t.Errorf("%s: a frame of %d bytes was refused; want it served", f.name, len(f.frame)-4)
				case f.name == "over the frame limit" && heap > 1<<20:
					t.Errorf("%s: a frame of %d bytes took %d bytes of heap; want it refused unread", f.name, len(f.frame)-4, heap)
				}
			}
		})
	}
}
