package kafkabroker

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/kafka"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/segstore"
	"github.com/logagent/logagent/wire"
)

// leaderLogSidecar serves one partition that this agent has no replica of:
// its reads go to the leader, whose committed log is batches.
type leaderLogSidecar struct {
	Sidecar
	batches [][]byte
	hw      int64
	// lso is the leader's log start (0: the first batch's base); trimTo,
	// when not 0, is where its retention moves it once the positions were
	// answered.
	lso    int64
	trimTo int64
	// readBytes, when not 0, bounds each read below the maxBytes asked,
	// so that a scan takes several.
	readBytes int64
}

func (s *leaderLogSidecar) Serving() error { return nil }

func (s *leaderLogSidecar) LookupTopic(name string) (*election.TopicMeta, bool) {
	return &election.TopicMeta{Config: election.TopicConfig{Name: name}, Partitions: make([]election.PartitionMeta, 1)}, name == "t"
}

func (s *leaderLogSidecar) FetchReplica(topic string, p int) (*partition.Replica, *reply.APIError) {
	return nil, reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeNotLeader, "no replica here", true)
}

// LeaderFetch answers whole batches from the one holding offset, at least
// one and then up to maxBytes.
func (s *leaderLogSidecar) LeaderFetch(_ string, _ int, offset string, _ int32, maxBytes int64, _ time.Duration) ([]byte, LogPositions, error) {
	if s.lso == 0 && len(s.batches) > 0 {
		s.lso = record.Header(s.batches[0]).BaseOffset()
	}
	if s.readBytes != 0 {
		maxBytes = min(maxBytes, s.readBytes)
	}
	pos := LogPositions{HW: s.hw, LSO: s.lso}
	if offset == "latest" {
		if s.trimTo != 0 {
			s.lso = s.trimTo
		}
		return nil, pos, nil
	}
	from, err := strconv.ParseInt(offset, 10, 64)
	if err != nil {
		return nil, pos, err
	}
	if from < s.lso {
		lso, hw := s.lso, s.hw
		e := reply.NewAPIError(fasthttp.StatusRequestedRangeNotSatisfiable, wire.CodeOffsetOutOfRange, "offset "+offset+" is outside the log", false)
		e.LogStartOffset, e.HighWatermark = &lso, &hw
		return nil, LogPositions{}, e
	}
	var out []byte
	for _, b := range s.batches {
		h := record.Header(b)
		if h.BaseOffset() < s.lso || h.NextOffset() <= from || h.NextOffset() > s.hw {
			continue
		}
		if len(out) > 0 && int64(len(out)+len(b)) > maxBytes {
			break
		}
		out = append(out, b...)
	}
	return out, pos, nil
}

// testBatch is a batch at base of records with the timestamps ts, in the
// leader epoch epoch, whose max_timestamp is maxTS when not 0.
func testBatch(t *testing.T, base int64, epoch int32, maxTS int64, ts ...int64) []byte {
	t.Helper()
	var b record.Builder
	for _, x := range ts {
		if err := b.Add(x, nil, []byte("v"), nil); err != nil {
			t.Fatal(err)
		}
	}
	batch, err := b.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	record.SetBaseOffset(batch, base)
	record.SetLeaderEpoch(batch, epoch)
	if maxTS != 0 {
		record.SetMaxTimestamp(batch, maxTS)
	}
	return batch
}

// TestListOffsetByTimestamp: ListOffsets by timestamp answers the earliest
// offset whose record's timestamp is at or after the target, with that
// record's timestamp and its batch's epoch, as Kafka does: the first batch
// whose max_timestamp reaches the target and then the first record in it
// that does, and the next batch when none does (a max_timestamp a client
// set above every record, which the leader did not rewrite before: the
// answer was that batch's base offset and its claimed timestamp, records
// before the target, or an offset where the log had none at or after it).
// Timestamps may go back from batch to batch and within one.
func TestListOffsetByTimestamp(t *testing.T) {
	s := &leaderLogSidecar{
		batches: [][]byte{
			testBatch(t, 10, 1, 1000, 100, 200), // claims 1000, holds nothing after 200
			testBatch(t, 12, 2, 0, 500, 300),
			testBatch(t, 14, 3, 0, 50, 700),
		},
		hw: 16,
	}
	decoders := &sync.Pool{New: func() any { return record.NewDecoder(record.Limits{MaxBatchBytes: 1 << 20}) }}
	b := New(Config{Sidecar: s, Decoders: decoders})
	none := kafka.OffsetAt{Offset: -1, Timestamp: -1, LeaderEpoch: -1}
	tests := []struct {
		name string
		ts   int64
		want kafka.OffsetAt
	}{
		{"earliest", -2, kafka.OffsetAt{Offset: 10, Timestamp: -1, LeaderEpoch: -1}},
		{"latest", -1, kafka.OffsetAt{Offset: 16, Timestamp: -1, LeaderEpoch: -1}},
		{"before everything", 0, kafka.OffsetAt{Offset: 10, Timestamp: 100, LeaderEpoch: 1}},
		{"second record", 150, kafka.OffsetAt{Offset: 11, Timestamp: 200, LeaderEpoch: 1}},
		{"past the records of a batch whose max_timestamp reaches it", 300, kafka.OffsetAt{Offset: 12, Timestamp: 500, LeaderEpoch: 2}},
		{"after a timestamp that went back", 600, kafka.OffsetAt{Offset: 15, Timestamp: 700, LeaderEpoch: 3}},
		{"only a claimed max_timestamp reaches it", 1000, none},
		{"after everything", 2000, none},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := b.ListOffset(context.Background(), "t", 0, -1, tt.ts)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("ListOffset(%d) = %+v, want %+v", tt.ts, got, tt.want)
			}
		})
	}
}

// TestListOffsetScanOvertakenByRetention: retention that deletes the
// segments ahead of a lookup by timestamp while it scans (between reading
// the log start and reading from it, or between two reads) moves the scan
// to the new log start: the lookup answered OFFSET_OUT_OF_RANGE, which a
// Kafka broker, reading the segments it listed, never does.
func TestListOffsetScanOvertakenByRetention(t *testing.T) {
	tests := []struct {
		name   string
		ts     int64
		trimTo int64
		want   kafka.OffsetAt
	}{
		{"found after the new start", 150, 12, kafka.OffsetAt{Offset: 12, Timestamp: 500, LeaderEpoch: 2}},
		{"found later", 600, 14, kafka.OffsetAt{Offset: 15, Timestamp: 700, LeaderEpoch: 3}},
		{"not found", 2000, 14, kafka.OffsetAt{Offset: -1, Timestamp: -1, LeaderEpoch: -1}},
		{"everything deleted", 0, 16, kafka.OffsetAt{Offset: -1, Timestamp: -1, LeaderEpoch: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &leaderLogSidecar{
				batches: [][]byte{
					testBatch(t, 10, 1, 0, 100, 200),
					testBatch(t, 12, 2, 0, 500, 300),
					testBatch(t, 14, 3, 0, 50, 700),
				},
				hw:     16,
				trimTo: tt.trimTo,
			}
			decoders := &sync.Pool{New: func() any { return record.NewDecoder(record.Limits{MaxBatchBytes: 1 << 20}) }}
			b := New(Config{Sidecar: s, Decoders: decoders})
			got, err := b.ListOffset(context.Background(), "t", 0, -1, tt.ts)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("ListOffset(%d) = %+v, want %+v", tt.ts, got, tt.want)
			}
		})
	}
}

// TestListOffsetMaxTimestamp: ListOffsets by max timestamp (KIP-734, -3)
// answers the first record with the largest timestamp below the high
// watermark, with that timestamp and its batch's epoch, as Kafka's
// UnifiedLog.fetchOffsetByTimestamp does (the first batch whose
// max_timestamp is the largest, then the first of its records with that
// timestamp): over one read or several, past a batch whose max_timestamp
// overstates its records, from the new log start when retention overtakes
// the scan; an empty log has no record (-1, -1), a log whose records have
// no timestamp its first record at -1, as Kafka answers them.
func TestListOffsetMaxTimestamp(t *testing.T) {
	none := kafka.OffsetAt{Offset: -1, Timestamp: -1, LeaderEpoch: -1}
	tests := []struct {
		name    string
		batches func(t *testing.T) [][]byte
		lso, hw int64
		// readBytes bounds each read (one batch of these is about 80
		// bytes); trimTo is where retention moves the log start once the
		// positions were read.
		readBytes, trimTo int64
		want              kafka.OffsetAt
	}{
		{"empty log", func(*testing.T) [][]byte { return nil }, 10, 10, 0, 0, none},
		{"one batch", func(t *testing.T) [][]byte {
			return [][]byte{testBatch(t, 10, 1, 0, 100, 300, 200)}
		}, 0, 13, 0, 0, kafka.OffsetAt{Offset: 11, Timestamp: 300, LeaderEpoch: 1}},
		{"a tie in a batch: the first record", func(t *testing.T) [][]byte {
			return [][]byte{testBatch(t, 10, 1, 0, 100, 300, 300)}
		}, 0, 13, 0, 0, kafka.OffsetAt{Offset: 11, Timestamp: 300, LeaderEpoch: 1}},
		{"a tie between batches: the first batch", func(t *testing.T) [][]byte {
			return [][]byte{testBatch(t, 10, 1, 0, 300, 100), testBatch(t, 12, 2, 0, 300), testBatch(t, 13, 3, 0, 200)}
		}, 0, 14, 0, 0, kafka.OffsetAt{Offset: 10, Timestamp: 300, LeaderEpoch: 1}},
		{"timestamps that go back", func(t *testing.T) [][]byte {
			return [][]byte{testBatch(t, 10, 1, 0, 100, 200), testBatch(t, 12, 2, 0, 900, 300), testBatch(t, 14, 3, 0, 50, 700)}
		}, 0, 16, 0, 0, kafka.OffsetAt{Offset: 12, Timestamp: 900, LeaderEpoch: 2}},
		{"the largest in an earlier read", func(t *testing.T) [][]byte {
			return [][]byte{testBatch(t, 10, 1, 0, 100), testBatch(t, 11, 2, 0, 900), testBatch(t, 12, 3, 0, 200), testBatch(t, 13, 4, 0, 900)}
		}, 0, 14, 1, 0, kafka.OffsetAt{Offset: 11, Timestamp: 900, LeaderEpoch: 2}},
		{"the largest in the last read", func(t *testing.T) [][]byte {
			return [][]byte{testBatch(t, 10, 1, 0, 100), testBatch(t, 11, 2, 0, 200), testBatch(t, 12, 3, 0, 300, 900)}
		}, 0, 14, 1, 0, kafka.OffsetAt{Offset: 13, Timestamp: 900, LeaderEpoch: 3}},
		{"records without timestamps: the first record", func(t *testing.T) [][]byte {
			return [][]byte{testBatch(t, 10, 1, 0, -1, -1), testBatch(t, 12, 2, 0, -1)}
		}, 0, 13, 0, 0, kafka.OffsetAt{Offset: 10, Timestamp: -1, LeaderEpoch: 1}},
		{"records without timestamps before one with", func(t *testing.T) [][]byte {
			return [][]byte{testBatch(t, 10, 1, 0, -1, -1), testBatch(t, 12, 2, 0, -1, 5)}
		}, 0, 14, 0, 0, kafka.OffsetAt{Offset: 13, Timestamp: 5, LeaderEpoch: 2}},
		{"a batch that overstates: the largest record elsewhere", func(t *testing.T) [][]byte {
			return [][]byte{testBatch(t, 10, 1, 1000, 100, 200), testBatch(t, 12, 2, 0, 500, 300), testBatch(t, 14, 3, 0, 50, 700)}
		}, 0, 16, 0, 0, kafka.OffsetAt{Offset: 15, Timestamp: 700, LeaderEpoch: 3}},
		{"a batch that overstates: the largest record in it", func(t *testing.T) [][]byte {
			return [][]byte{testBatch(t, 10, 1, 0, 100), testBatch(t, 11, 2, 1000, 200, 800), testBatch(t, 13, 3, 0, 700)}
		}, 0, 14, 0, 0, kafka.OffsetAt{Offset: 12, Timestamp: 800, LeaderEpoch: 2}},
		{"a batch that overstates, in a tie with a later one: the first", func(t *testing.T) [][]byte {
			return [][]byte{testBatch(t, 10, 1, 1000, 700), testBatch(t, 11, 2, 0, 700), testBatch(t, 12, 3, 1000, 300)}
		}, 0, 13, 1, 0, kafka.OffsetAt{Offset: 10, Timestamp: 700, LeaderEpoch: 1}},
		{"a larger timestamp above the high watermark", func(t *testing.T) [][]byte {
			return [][]byte{testBatch(t, 10, 1, 0, 100, 200), testBatch(t, 12, 2, 0, 900)}
		}, 0, 12, 0, 0, kafka.OffsetAt{Offset: 11, Timestamp: 200, LeaderEpoch: 1}},
		{"the largest deleted by retention during the scan", func(t *testing.T) [][]byte {
			return [][]byte{testBatch(t, 10, 1, 0, 900), testBatch(t, 11, 2, 0, 100), testBatch(t, 12, 3, 0, 300)}
		}, 0, 13, 0, 11, kafka.OffsetAt{Offset: 12, Timestamp: 300, LeaderEpoch: 3}},
		{"everything deleted by retention during the scan", func(t *testing.T) [][]byte {
			return [][]byte{testBatch(t, 10, 1, 0, 900), testBatch(t, 11, 2, 0, 100)}
		}, 0, 12, 0, 12, none},
	}
	decoders := &sync.Pool{New: func() any { return record.NewDecoder(record.Limits{MaxBatchBytes: 1 << 20}) }}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &leaderLogSidecar{batches: tt.batches(t), lso: tt.lso, hw: tt.hw, readBytes: tt.readBytes, trimTo: tt.trimTo}
			b := New(Config{Sidecar: s, Decoders: decoders})
			got, err := b.ListOffset(context.Background(), "t", 0, -1, kafka.MaxTimestamp)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("ListOffset(max timestamp) = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestListOffsetEarliestLocal: earliest local (KIP-405, -4) is the log
// start, as earliest is: logagent has no tiered storage.
func TestListOffsetEarliestLocal(t *testing.T) {
	s := &leaderLogSidecar{batches: [][]byte{testBatch(t, 10, 1, 0, 100), testBatch(t, 11, 2, 0, 200)}, lso: 11, hw: 12}
	b := New(Config{Sidecar: s})
	for _, ts := range []int64{kafka.EarliestTimestamp, kafka.EarliestLocalTimestamp} {
		got, err := b.ListOffset(context.Background(), "t", 0, -1, ts)
		if want := (kafka.OffsetAt{Offset: 11, Timestamp: -1, LeaderEpoch: -1}); err != nil || got != want {
			t.Errorf("ListOffset(%d) = %+v, %v; want %+v", ts, got, err, want)
		}
	}
}

// segstoreSidecar serves one partition from a segstore log, each read as
// the local path reads it (ReadLocal's region, then readBatches'
// io.ReadAll), through LeaderFetch: the local path needs a whole replica.
type segstoreSidecar struct {
	Sidecar
	log *segstore.Log
}

func (s *segstoreSidecar) Serving() error { return nil }

func (s *segstoreSidecar) LookupTopic(name string) (*election.TopicMeta, bool) {
	return (&leaderLogSidecar{}).LookupTopic(name)
}

func (s *segstoreSidecar) FetchReplica(topic string, p int) (*partition.Replica, *reply.APIError) {
	return (&leaderLogSidecar{}).FetchReplica(topic, p)
}

func (s *segstoreSidecar) LeaderFetch(_ string, _ int, offset string, _ int32, maxBytes int64, _ time.Duration) ([]byte, LogPositions, error) {
	pos := LogPositions{HW: s.log.HighWatermark(), LSO: s.log.LogStartOffset()}
	if offset == "latest" {
		return nil, pos, nil
	}
	from, err := strconv.ParseInt(offset, 10, 64)
	if err != nil {
		return nil, pos, err
	}
	region, err := s.log.Read(from, maxBytes, pos.HW)
	if err != nil {
		return nil, pos, err
	}
	defer region.Close()
	data, err := io.ReadAll(region)
	return data, pos, err
}

// TestKgoListMaxTimestamp: a franz-go client asking the listener for the
// max timestamp offset (kgo sends ListOffsets at the highest version the
// listener advertises) gets the first record with the largest committed
// timestamp of a segstore log, read as the sidecar reads its replicas:
// with ListOffsets advertised up to v6, the request went at v6 and was
// refused.
func TestKgoListMaxTimestamp(t *testing.T) {
	l, err := segstore.Open(segstore.OSFS{}, t.TempDir(), segstore.Options{SegmentBytes: 200, MaxBatchBytes: 1 << 20, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i, ts := range [][]int64{{100, 200}, {900, 300}, {50}, {900}, {400}, {5000}} {
		if _, _, err := l.AppendLeader(testBatch(t, 0, 0, 0, ts...), int32(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	// Segments of 200 bytes, two or three batches each. The last batch,
	// 5000 at offset 7, is not committed.
	if err := l.SetHighWatermark(7); err != nil {
		t.Fatal(err)
	}
	decoders := &sync.Pool{New: func() any { return record.NewDecoder(record.Limits{MaxBatchBytes: 1 << 20}) }}
	cl := kgoAgainst(t, New(Config{Sidecar: &segstoreSidecar{log: l}, Decoders: decoders}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "t"
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Timestamp = kafka.MaxTimestamp
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := cl.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	p := resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	t.Logf("ListOffsets v%d: error %d, offset %d, timestamp %d, leader epoch %d", req.Version, p.ErrorCode, p.Offset, p.Timestamp, p.LeaderEpoch)
	if p.ErrorCode != 0 || p.Offset != 2 || p.Timestamp != 900 || p.LeaderEpoch != 2 {
		t.Errorf("ListOffsets v%d of the max timestamp: error %d, offset %d, timestamp %d, leader epoch %d; want offset 2, timestamp 900, leader epoch 2",
			req.Version, p.ErrorCode, p.Offset, p.Timestamp, p.LeaderEpoch)
	}
}

// kgoAgainst serves b (and its groups) on a Kafka listener on loopback until the test ends
// and returns a kgo client of it, closed first.
func kgoAgainst(t *testing.T, b *Broker) *kgo.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := kafka.NewServer(kafka.Config{Broker: b, Groups: b.Groups(), NodeID: 1, Host: "127.0.0.1",
		Port: int32(ln.Addr().(*net.TCPAddr).Port), ClusterID: "c"})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
		if err := <-served; err != nil {
			t.Error(err)
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(ln.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
