package kafka

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// bufConn is a net.Conn that collects what is written to it.
type bufConn struct {
	net.Conn
	buf bytes.Buffer
}

func (c *bufConn) Write(p []byte) (int, error) { return c.buf.Write(p) }

// TestFetchWriterMatchesKmsg writes a fetch answer by hand, for every
// advertised version, and checks it byte for byte against kmsg's encoding
// of the same response, which kmsg then decodes: records in memory, an
// empty partition, a failed one, a diverging one (its diverging_epoch
// tag from v12), both kinds of aborted-transaction lists.
func TestFetchWriterMatchesKmsg(t *testing.T) {
	batch1, batch2 := batchOf(t, "a", "b"), batchOf(t, "c")
	var fetchAPI api
	for _, a := range apis {
		if a.key == 1 {
			fetchAPI = a
		}
	}
	for v := fetchAPI.min; v <= fetchAPI.max; v++ {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			rep := &fetchReply{version: v, topics: []fetchTopic{
				{name: "one", partitions: []fetchPartition{
					{partition: 0, highWatermark: 10, logStartOffset: 2, nullAborted: true, records: &memRecords{b: append(append([]byte{}, batch1...), batch2...)}},
					{partition: 1, highWatermark: 5, logStartOffset: 0, nullAborted: true},
				}},
				{name: "two", partitions: []fetchPartition{
					{partition: 3, errorCode: kerr.OffsetOutOfRange.Code, highWatermark: -1, logStartOffset: -1},
					{partition: 4, highWatermark: 1, records: &memRecords{b: batch2}},
					{partition: 5, highWatermark: 9, logStartOffset: 1, nullAborted: true, diverging: &EpochEndOffset{Epoch: 4, EndOffset: 6}},
				}},
			}}
			// kmsg's encoding of the same answer, built first: writeTo
			// releases the Records.
			resp := kmsg.NewPtrFetchResponse()
			resp.Version = v
			for _, ft := range rep.topics {
				rt := kmsg.NewFetchResponseTopic()
				rt.Topic = ft.name
				for _, fp := range ft.partitions {
					rp := kmsg.NewFetchResponseTopicPartition()
					rp.Partition, rp.ErrorCode = fp.partition, fp.errorCode
					rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = fp.highWatermark, fp.highWatermark, fp.logStartOffset
					if !fp.nullAborted {
						rp.AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{}
					}
					rp.RecordBatches = []byte{}
					if fp.diverging != nil {
						rp.DivergingEpoch.Epoch, rp.DivergingEpoch.EndOffset = fp.diverging.Epoch, fp.diverging.EndOffset
					}
					if fp.records != nil {
						rp.RecordBatches = fp.records.(*memRecords).b
					}
					rt.Partitions = append(rt.Partitions, rp)
				}
				resp.Topics = append(resp.Topics, rt)
			}
			want := binary.BigEndian.AppendUint32(make([]byte, 4), 42)
			if resp.IsFlexible() {
				want = append(want, 0)
			}
			want = resp.AppendTo(want)
			binary.BigEndian.PutUint32(want, uint32(len(want)-4))
			bc := &bufConn{}
			c := &conn{nc: bc, w: bufio.NewWriter(bc)}
			if err := rep.writeTo(c, 42); err != nil {
				t.Fatal(err)
			}
			got := bc.buf.Bytes()
			if !bytes.Equal(got, want) {
				t.Fatalf("hand-written answer differs from kmsg's:\n got %x\nwant %x", got, want)
			}

			body := got[8:]
			if resp.IsFlexible() {
				body = body[1:]
			}
			back := kmsg.NewPtrFetchResponse()
			back.Version = v
			if err := back.ReadFrom(body); err != nil {
				t.Fatal(err)
			}
			if p := back.Topics[0].Partitions[0]; !bytes.Equal(p.RecordBatches, append(append([]byte{}, batch1...), batch2...)) || p.HighWatermark != 10 {
				t.Fatalf("decoded partition %+v", p)
			}
			if p := back.Topics[1].Partitions[2]; v >= 12 && (p.DivergingEpoch.Epoch != 4 || p.DivergingEpoch.EndOffset != 6) {
				t.Fatalf("decoded diverging partition %+v", p)
			}
			for _, ft := range rep.topics {
				for _, fp := range ft.partitions {
					if fp.records != nil {
						t.Fatal("a Records was not released")
					}
				}
			}
		})
	}
}

// TestFetchLastFetchedEpoch sends Fetch requests as bytes with a
// partition's last fetched epoch (v12+) and reads the answers: the epoch
// reaches the Broker, and where it ends before the fetch offset (or is
// not in the log) the partition is answered its diverging_epoch, the
// largest epoch at most it and where that ends, with no records, at once
// (no long poll); an epoch above every one of the log is
// OFFSET_OUT_OF_RANGE, as Kafka answers (Partition.readRecords). Before
// v12 there is no such field.
func TestFetchLastFetchedEpoch(t *testing.T) {
	ts := startServer(t)
	createTopic(t, ts, "t", 1)
	ctx := context.Background()
	for range 4 {
		if _, err := ts.broker.Produce(ctx, ProduceRequest{Topic: "t", Batch: batchOf(t, "a", "b"), Records: 2, Acks: -1}); err != nil {
			t.Fatal(err)
		}
	}
	// Offsets 0-7: epoch 1 from 0, 2 from 2, 4 from 6 (3 had no records).
	ts.broker.mu.Lock()
	ts.broker.topics["t"].epochs = map[int32][]fakeEpoch{0: {{1, 0}, {2, 2}, {4, 6}}}
	ts.broker.mu.Unlock()
	none := EpochEndOffset{Epoch: -1, EndOffset: -1} // kmsg's default: no tag
	tests := []struct {
		name        string
		version     int16
		lastEpoch   int32
		offset      int64
		code        int16
		diverging   EpochEndOffset
		wantRecords bool
	}{
		{"none sent", 12, -1, 6, 0, none, true},
		{"the epoch ends at the offset", 12, 2, 6, 0, none, true},
		{"the latest epoch", 12, 4, 7, 0, none, true},
		{"the latest epoch at the log end", 12, 4, 8, 0, none, false},
		{"the epoch ends before the offset", 12, 2, 7, 0, EpochEndOffset{Epoch: 2, EndOffset: 6}, false},
		{"an epoch the log does not have", 12, 3, 6, 0, EpochEndOffset{Epoch: 2, EndOffset: 6}, false},
		{"an epoch below the first", 12, 0, 2, 0, EpochEndOffset{Epoch: 0, EndOffset: 0}, false},
		{"an epoch above every one", 12, 5, 8, kerr.OffsetOutOfRange.Code, none, false},
		{"v11 carries none", 11, 2, 7, 0, none, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dialRaw(t, ts.addr)
			req := kmsg.NewPtrFetchRequest()
			req.Version, req.MaxBytes, req.MinBytes, req.SessionEpoch = tt.version, 1<<20, 1, -1
			if !tt.wantRecords {
				// Nothing to answer: a diverging or failed partition
				// is answered at once, an empty one at max_wait.
				req.MaxWaitMillis = 300
				if tt.diverging != none || tt.code != 0 {
					req.MaxWaitMillis = 20_000
				}
			}
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = "t"
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.FetchOffset, rp.LastFetchedEpoch, rp.PartitionMaxBytes = tt.offset, tt.lastEpoch, 1<<20
			rt.Partitions = []kmsg.FetchRequestTopicPartition{rp}
			req.Topics = []kmsg.FetchRequestTopic{rt}
			start := time.Now()
			c.send(c.frame(req))
			resp := kmsg.NewPtrFetchResponse()
			resp.Version = tt.version
			c.read(resp)
			took := time.Since(start)
			p := resp.Topics[0].Partitions[0]
			got := EpochEndOffset{Epoch: p.DivergingEpoch.Epoch, EndOffset: p.DivergingEpoch.EndOffset}
			if p.ErrorCode != tt.code || got != tt.diverging || (len(p.RecordBatches) > 0) != tt.wantRecords {
				t.Fatalf("partition: error %d, diverging epoch %+v, %d bytes of records; want error %d, diverging epoch %+v, records %t",
					p.ErrorCode, got, len(p.RecordBatches), tt.code, tt.diverging, tt.wantRecords)
			}
			if tt.code == 0 && p.HighWatermark != 8 {
				t.Fatalf("high watermark %d, want 8", p.HighWatermark)
			}
			if took > 10*time.Second {
				t.Fatalf("answered after %v: a diverging partition waited for data", took)
			}
		})
	}
	ts.broker.waitRecordsClosed(t)
}
