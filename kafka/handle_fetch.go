package kafka

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleFetch reads every requested partition without waiting; when the
// answer holds fewer than min_bytes and max_wait_ms is positive, it waits
// for new data (Broker.WaitForData) and reads everything once more. A
// partition with an error or a diverging epoch (v12+: the client's last
// fetched epoch ends before its offset, KIP-320) answers at once, as
// Kafka does.
//
// Fetch sessions (v7+) are not kept: every answer has session id 0, which
// tells a client to send full fetches; an incremental fetch (a session
// epoch other than 0 and -1) of a session that cannot exist is
// FETCH_SESSION_ID_NOT_FOUND, on which clients drop their session.
func (s *Server) handleFetch(ctx context.Context, req *kmsg.FetchRequest) (*fetchReply, error) {
	rep := &fetchReply{version: req.Version}
	if req.Version >= 7 && req.SessionEpoch != 0 && req.SessionEpoch != -1 {
		rep.errorCode = kerr.FetchSessionIDNotFound.Code
		return rep, nil
	}
	topics, total, now := s.fetchOnce(ctx, req)
	if req.MaxWaitMillis > 0 && total < int64(req.MinBytes) && !now {
		// Wait for data past what the first read saw: the high
		// watermark, or the fetch offset when it is ahead.
		var positions []Position
		for _, t := range topics {
			for _, p := range t.partitions {
				positions = append(positions, Position{Topic: t.name, Partition: p.partition, Offset: max(p.fetchOffset, p.highWatermark)})
			}
		}
		closeFetched(topics)
		if err := s.cfg.Broker.WaitForData(ctx, positions, time.Duration(req.MaxWaitMillis)*time.Millisecond); err != nil && ctx.Err() != nil {
			return nil, err
		}
		topics, _, _ = s.fetchOnce(ctx, req)
	}
	rep.topics = topics
	return rep, nil
}

// fetchOnce reads every partition of req, concurrently, and then applies
// the request's max_bytes in request order: the first partition with data
// keeps its records however large (Kafka's rule, so that a batch larger
// than the limits is not stuck); a later one whose records do not fit in
// what is left, or exceed its partition_max_bytes, is answered without
// records (its high watermark still tells the client data is there). It
// returns the partitions, the bytes of records kept and whether any
// partition must be answered now: it failed, or diverges.
func (s *Server) fetchOnce(ctx context.Context, req *kmsg.FetchRequest) ([]fetchTopic, int64, bool) {
	topics := make([]fetchTopic, len(req.Topics))
	calls := newItemCalls()
	var kept keptReads
	order := 0
	for i, rt := range req.Topics {
		topics[i] = fetchTopic{name: rt.Topic, partitions: make([]fetchPartition, len(rt.Partitions))}
		for j, rp := range rt.Partitions {
			p := &topics[i].partitions[j]
			p.partition, p.fetchOffset = rp.Partition, rp.FetchOffset
			p.nullAborted = req.IsolationLevel == 0
			fr := FetchRequest{
				Topic:              rt.Topic,
				Partition:          rp.Partition,
				Offset:             rp.FetchOffset,
				MaxBytes:           min(rp.PartitionMaxBytes, req.MaxBytes),
				CurrentLeaderEpoch: rp.CurrentLeaderEpoch,
				LastFetchedEpoch:   rp.LastFetchedEpoch,
			}
			index := order
			order++
			calls.Go(func() {
				res, err := s.cfg.Broker.Fetch(ctx, fr)
				if err != nil {
					p.errorCode = fetchErrorCode(err)
					p.highWatermark, p.logStartOffset = -1, -1
					return
				}
				p.highWatermark, p.logStartOffset, p.records = res.HighWatermark, res.LogStartOffset, res.Records
				if res.Diverging != nil {
					d := *res.Diverging
					p.diverging = &d
					if p.records != nil {
						p.records.Close()
						p.records = nil
					}
				}
				kept.add(index, p, int64(req.MaxBytes))
			})
		}
	}
	calls.Wait()

	remaining := int64(req.MaxBytes)
	var total int64
	now := false
	for i, rt := range req.Topics {
		for j, rp := range rt.Partitions {
			p := &topics[i].partitions[j]
			if p.errorCode != 0 || p.diverging != nil {
				now = true
				continue
			}
			if p.records == nil {
				continue
			}
			n := p.records.Len()
			if n == 0 {
				continue
			}
			if total > 0 && (n > remaining || n > int64(rp.PartitionMaxBytes)) {
				p.records.Close()
				p.records = nil
				continue
			}
			total += n
			remaining -= n
		}
	}
	return topics, total, now
}

// keptReads bounds what the reads of one fetch hold while others run: past
// max_bytes, the records of the read latest in request order are let go
// (the request-order pass after the reads would not keep them), never the
// earliest one holding records, which that pass keeps however large. A
// request naming a partition a thousand times held a thousand reads.
type keptReads struct {
	mu      sync.Mutex
	bytes   int64
	holders []keptRead
}

type keptRead struct {
	index int // in request order
	p     *fetchPartition
}

func (k *keptReads) add(index int, p *fetchPartition, maxBytes int64) {
	if p.records == nil || p.records.Len() == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.holders = append(k.holders, keptRead{index: index, p: p})
	k.bytes += p.records.Len()
	for k.bytes > maxBytes && len(k.holders) > 1 {
		last := 0
		for i, h := range k.holders {
			if h.index > k.holders[last].index {
				last = i
			}
		}
		h := k.holders[last]
		k.bytes -= h.p.records.Len()
		h.p.records.Close()
		h.p.records = nil
		k.holders = slices.Delete(k.holders, last, last+1)
	}
}

// fetchErrorCode is the code a partition whose read failed is answered
// with: one of those a Kafka broker answers a Fetch with, which clients
// handle, or else NOT_LEADER_OR_FOLLOWER, on which every client refreshes
// its metadata and fetches again. The Java consumer throws
// IllegalStateException out of poll() on any other code: LEADER_NOT_AVAILABLE
// (no leader, or the leader unreachable), BROKER_NOT_AVAILABLE (the agent
// starts or stops) and REQUEST_TIMED_OUT (a forward timed out) came here
// during routine leadership moves.
func fetchErrorCode(err error) int16 {
	switch code := ErrorCode(err); code {
	case kerr.OffsetOutOfRange.Code, kerr.UnknownTopicOrPartition.Code, kerr.NotLeaderForPartition.Code,
		kerr.FencedLeaderEpoch.Code, kerr.UnknownLeaderEpoch.Code, kerr.KafkaStorageError.Code,
		kerr.TopicAuthorizationFailed.Code, kerr.CorruptMessage.Code, kerr.UnknownServerError.Code,
		kerr.ReplicaNotAvailable.Code, kerr.OffsetNotAvailable.Code, kerr.UnknownTopicID.Code,
		kerr.InconsistentTopicID.Code:
		return code
	}
	return kerr.NotLeaderForPartition.Code
}

func closeFetched(topics []fetchTopic) {
	for _, t := range topics {
		for i := range t.partitions {
			if r := t.partitions[i].records; r != nil {
				r.Close()
				t.partitions[i].records = nil
			}
		}
	}
}

type fetchTopic struct {
	name       string
	partitions []fetchPartition
}

type fetchPartition struct {
	partition                     int32
	fetchOffset                   int64 // requested, for the long poll
	errorCode                     int16
	highWatermark, logStartOffset int64
	// nullAborted answers a null aborted-transactions list, as Kafka does
	// for read_uncommitted; read_committed gets an empty one.
	nullAborted bool
	records     Records // nil: no records
	// diverging is the diverging_epoch tag (v12+), nil when the client's
	// log does not diverge (or it named no last fetched epoch).
	diverging *EpochEndOffset
}

// fetchReply is a Fetch response written by hand around its records, so
// that they go from the Broker's Records (a file region) to the socket
// without passing through memory: kmsg's encoder needs them as a slice.
type fetchReply struct {
	version   int16
	errorCode int16
	topics    []fetchTopic
}

// writeTo writes the response: the fixed parts are encoded in order into
// one buffer, noting where each partition's records go; the frame size is
// the buffer's length plus the records' Len()s. Then the buffer is written
// piecewise, each partition's records with WriteTo on the connection
// itself (sendfile when they are a file region and it is a TCP socket).
// Every Records is closed, written or not.
func (f *fetchReply) writeTo(c *conn, correlationID int32) error {
	defer closeFetched(f.topics)
	flexible := f.version >= 12
	v := f.version

	type insert struct {
		at      int // offset in buf where the records' bytes go
		records Records
	}
	var inserts []insert
	buf := append(c.out[:0], 0, 0, 0, 0)
	buf = kbin.AppendInt32(buf, correlationID)
	if flexible {
		buf = append(buf, 0) // response header v1: no tags
	}
	buf = kbin.AppendInt32(buf, 0) // throttle_time_ms (v1+)
	if v >= 7 {
		buf = kbin.AppendInt16(buf, f.errorCode)
		buf = kbin.AppendInt32(buf, 0) // session_id: sessions are not kept
	}
	buf = appendArrayLen(buf, len(f.topics), flexible)
	var recordBytes int64
	for _, t := range f.topics {
		if flexible {
			buf = kbin.AppendCompactString(buf, t.name)
		} else {
			buf = kbin.AppendString(buf, t.name)
		}
		buf = appendArrayLen(buf, len(t.partitions), flexible)
		for _, p := range t.partitions {
			buf = kbin.AppendInt32(buf, p.partition)
			buf = kbin.AppendInt16(buf, p.errorCode)
			buf = kbin.AppendInt64(buf, p.highWatermark)
			buf = kbin.AppendInt64(buf, p.highWatermark) // last_stable_offset: no transactions
			if v >= 5 {
				buf = kbin.AppendInt64(buf, p.logStartOffset)
			}
			if flexible {
				buf = kbin.AppendCompactNullableArrayLen(buf, 0, p.nullAborted)
			} else {
				buf = kbin.AppendNullableArrayLen(buf, 0, p.nullAborted)
			}
			if v >= 11 {
				buf = kbin.AppendInt32(buf, -1) // preferred_read_replica: none
			}
			var n int64
			if p.records != nil {
				n = p.records.Len()
			}
			if n > math.MaxInt32-1 {
				return fmt.Errorf("kafka: fetch records of %d bytes", n)
			}
			if flexible {
				buf = kbin.AppendUvarint(buf, uint32(n)+1)
			} else {
				buf = kbin.AppendInt32(buf, int32(n))
			}
			if n > 0 {
				inserts = append(inserts, insert{at: len(buf), records: p.records})
				recordBytes += n
			}
			if flexible {
				buf = appendPartitionTags(buf, p.diverging)
			}
		}
		if flexible {
			buf = append(buf, 0) // topic tags
		}
	}
	if flexible {
		buf = append(buf, 0) // response tags
	}
	size := int64(len(buf)-4) + recordBytes
	if size > math.MaxInt32 {
		return fmt.Errorf("kafka: fetch response of %d bytes", size)
	}
	binary.BigEndian.PutUint32(buf, uint32(size))
	if cap(buf) <= reuseLimit {
		c.out = buf[:0]
	} else {
		c.out = nil
	}

	from := 0
	for _, in := range inserts {
		if _, err := c.w.Write(buf[from:in.at]); err != nil {
			return err
		}
		if err := c.w.Flush(); err != nil {
			return err
		}
		want := in.records.Len()
		n, err := in.records.WriteTo(c.nc)
		if err != nil {
			return err
		}
		if n != want {
			return fmt.Errorf("kafka: fetch records wrote %d bytes of %d: %w", n, want, io.ErrShortWrite)
		}
		from = in.at
	}
	if _, err := c.w.Write(buf[from:]); err != nil {
		return err
	}
	return c.w.Flush()
}

// appendPartitionTags writes a flexible Fetch answer partition's tagged
// fields: diverging_epoch (tag 0) when set, else none.
func appendPartitionTags(dst []byte, diverging *EpochEndOffset) []byte {
	if diverging == nil {
		return append(dst, 0)
	}
	const size = 4 + 8 + 1 // epoch, end_offset, the struct's own empty tags
	dst = kbin.AppendUvarint(dst, 1)
	dst = kbin.AppendUvarint(dst, fetchDivergingEpochTag)
	dst = kbin.AppendUvarint(dst, size)
	dst = kbin.AppendInt32(dst, diverging.Epoch)
	dst = kbin.AppendInt64(dst, diverging.EndOffset)
	return append(dst, 0)
}

// fetchDivergingEpochTag is diverging_epoch's tag in a Fetch answer's
// partition (FetchResponse v12+).
const fetchDivergingEpochTag = 0

func appendArrayLen(dst []byte, n int, flexible bool) []byte {
	if flexible {
		return kbin.AppendCompactArrayLen(dst, n)
	}
	return kbin.AppendArrayLen(dst, n)
}
