package kafka

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"testing"

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
// empty partition, a failed one, both kinds of aborted-transaction lists.
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
