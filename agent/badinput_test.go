package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"

	"github.com/logagent/logagent/wire"
)

// Requests that are valid alone or on their face but that the agent took
// wrongly: a batch whose offset range its records do not fill, a text body
// that makes a batch over the log's limit, and valid batches that the
// coalescer could not combine, which failed the other callers of their
// group.

// restamp rewrites a batch's last_offset_delta and record_count, and its CRC.
func restamp(batch []byte, lastOffsetDelta, recordCount int32) []byte {
	const offCRC, offLastOffsetDelta, offRecordCount, crcStart = 17, 23, 57, 21
	binary.BigEndian.PutUint32(batch[offLastOffsetDelta:], uint32(lastOffsetDelta))
	binary.BigEndian.PutUint32(batch[offRecordCount:], uint32(recordCount))
	binary.BigEndian.PutUint32(batch[offCRC:], crc32.Checksum(batch[crcStart:], crc32.MakeTable(crc32.Castagnoli)))
	return batch
}

// sparseBatches are CRC-valid batches that no producer sends: one without
// records whose offset range is nearly 2^31, and one record spanning a
// million offsets.
func sparseBatches(t *testing.T) map[string][]byte {
	one := testBatch(t, []string{"x"})
	empty := bytes.Clone(one[:record.HeaderSize])
	binary.BigEndian.PutUint32(empty[8:], uint32(record.HeaderSize-record.LengthFieldEnd)) // batch_length
	return map[string][]byte{
		"no records":                     restamp(empty, math.MaxInt32-1, 0),
		"offset range over record count": restamp(bytes.Clone(one), 1_000_000, 1),
	}
}

// leaderLog is a produce that appends to a real partition log with the
// agent's options, its errors answered as the leader answers them.
func leaderLog(t *testing.T, a *Agent) func(batch []byte, count int) (produceResponse, *reply.APIError) {
	opts := a.logOptions()
	opts.Logger = hclog.NewNullLogger()
	log, err := segstore.Open(segstore.OSFS{}, filepath.Join(t.TempDir(), "p0"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	return func(batch []byte, count int) (produceResponse, *reply.APIError) {
		base, last, err := log.AppendLeader(batch, 1)
		if err != nil {
			return produceResponse{}, a.produceError("t", 0, partition.ProduceOutcome{Err: err})
		}
		return produceResponse{Topic: "t", BaseOffset: &base, LastOffset: &last, Count: count}, nil
	}
}

// TestProduceRefusesSparseBatches: a binary batch is refused 400
// corrupt_batch unless it holds a record per offset of its range. The
// leader gave a batch of record_count 0 the offsets its last_offset_delta
// claimed, up to 2^31 for 61 bytes, answered 200 with count 0.
func TestProduceRefusesSparseBatches(t *testing.T) {
	a := unitAgent(t)
	for name, body := range sparseBatches(t) {
		t.Run(name, func(t *testing.T) {
			batch, count, _, err := a.decodeProduceBody([]byte(wire.ContentTypeBatch), body, nil, false)
			var e *reply.APIError
			if !errors.As(err, &e) || e.Status != 400 || e.Code != wire.CodeCorruptBatch {
				if resp, pe := leaderLog(t, a)(batch, count); pe == nil {
					t.Fatalf("got %v, want 400 corrupt_batch; the leader's log then takes it as offsets %d to %d, count %d", err, *resp.BaseOffset, *resp.LastOffset, count)
				}
				t.Fatalf("got %v, want 400 corrupt_batch", err)
			}
		})
	}
}

// TestBuiltBatchWithinLogLimit: records of a few bytes cost more as a batch
// than as text, so a JSON or ndjson body within limits.max_request_bytes
// could make a batch over the log's limit, which the leader refused as
// "corrupt". It is refused 413 request_too_large as it is built, and a
// JSON body is read record by record (a 16 MiB body of {} allocated
// 1.6 GB as a slice of records).
func TestBuiltBatchWithinLogLimit(t *testing.T) {
	a := unitAgent(t)
	limit := int(a.cfg.Limits.MaxRequestBytes)
	jsonBody := append([]byte(`{"records":[{}`), bytes.Repeat([]byte(`,{}`), (limit-20)/3)...)
	jsonBody = append(jsonBody, "]}"...)
	for _, tc := range []struct {
		contentType string
		body        []byte
	}{
		{wire.ContentTypeNDJSON, bytes.Repeat([]byte("a\n"), limit/2-1)},
		{wire.ContentTypeJSON, jsonBody},
	} {
		t.Run(tc.contentType, func(t *testing.T) {
			if len(tc.body) > limit {
				t.Fatalf("setup: a body of %d bytes is over the request limit %d", len(tc.body), limit)
			}
			_, count, _, err := a.decodeProduceBody([]byte(tc.contentType), tc.body, nil, false)
			var e *reply.APIError
			if !errors.As(err, &e) || e.Status != 413 || e.Code != wire.CodeRequestTooLarge {
				t.Fatalf("a %d-byte body: got %v (count %d), want 413 request_too_large", len(tc.body), err, count)
			}
		})
	}
}

// coalesceWith sends first while another send of its partition is in
// flight, then second, so that the agent's coalescer groups the two, and
// returns second's answer; sends go to produce.
func coalesceWith(t *testing.T, a *Agent, first, second []byte, produce func(batch []byte, count int) (produceResponse, *reply.APIError)) *reply.APIError {
	t.Helper()
	c := a.coalesce
	release := make(chan struct{})
	var mu sync.Mutex
	sends := 0
	c.produce = func(_ groupKey, batch []byte, count int, _ time.Time) (produceResponse, *reply.APIError) {
		mu.Lock()
		sends++
		blocker := sends == 1
		mu.Unlock()
		if blocker {
			<-release
		}
		return produce(batch, count)
	}
	key := groupKey{topic: "t", acks: replicate.AcksAll}
	deadline := time.Now().Add(time.Minute)
	c.linger = time.Minute // the group goes when the blocker's send ends
	waitFor := func(cond func() bool) {
		for !cond() {
			time.Sleep(time.Millisecond)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { c.submit(key, testBatch(t, []string{"blocker"}), 1, deadline) })
	waitFor(func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.inflight[key] != nil })
	wg.Go(func() { c.submit(key, first, int(record.Header(first).RecordCount()), deadline) })
	var secondErr *reply.APIError
	wg.Go(func() { _, secondErr = c.submit(key, second, int(record.Header(second).RecordCount()), deadline) })
	// Both wait in a group, or the first went alone and the second's
	// group holds it by itself.
	waitFor(func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		g := c.pending[key]
		return g != nil && len(g.members) == 2 || g != nil && len(g.members) == 1 && record.Header(first).Codec() != record.CodecNone
	})
	close(release)
	wg.Wait()
	return secondErr
}

// TestCoalescedCompressedBatchGoesAlone: a compressed batch is not combined.
// Combined, its records were stored uncompressed: a 0.84 MB snappy batch
// of 17 MiB of records, valid alone, made a batch over the log's 16 MiB
// limit, and the other caller of its group was answered 400 corrupt_batch.
func TestCoalescedCompressedBatchGoesAlone(t *testing.T) {
	a := unitAgent(t)
	a.recordLimits.MaxRecordBytes = 1 << 20
	var b record.Builder
	if err := b.SetCodec(record.CodecSnappy); err != nil {
		t.Fatal(err)
	}
	value := make([]byte, 1<<20-16)
	for range 17 {
		if err := b.Add(1, nil, value, nil); err != nil {
			t.Fatal(err)
		}
	}
	big, err := b.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.decodeBatch(big); err != nil || len(big) >= a.coalesce.maxBytes {
		t.Fatalf("setup: a batch of %d bytes: %v", len(big), err)
	}
	var mu sync.Mutex
	var stored []record.Codec
	log := leaderLog(t, a)
	produce := func(batch []byte, count int) (produceResponse, *reply.APIError) {
		mu.Lock()
		stored = append(stored, record.Header(batch).Codec())
		mu.Unlock()
		return log(batch, count)
	}
	if e := coalesceWith(t, a, big, testBatch(t, []string{"innocent"}), produce); e != nil {
		t.Fatalf("a valid one-record request sent beside a valid %d-byte snappy batch was answered %d %s: %s", len(big), e.Status, e.Code, e.Message)
	}
	if !slices.Contains(stored, record.CodecSnappy) {
		t.Fatalf("codecs of the batches stored: %v; the snappy batch should be stored as it came", stored)
	}
}

// TestCoalescedTimestampsFarApart: valid batches whose timestamps are too
// far apart for one batch's deltas go one by one. Their group was
// answered 500 internal, the other caller's valid request with it.
func TestCoalescedTimestampsFarApart(t *testing.T) {
	a := unitAgent(t)
	batchAt := func(ts int64, value string) []byte {
		var b record.Builder
		if err := b.Add(ts, nil, []byte(value), nil); err != nil {
			t.Fatal(err)
		}
		batch, err := b.AppendTo(nil)
		if err != nil {
			t.Fatal(err)
		}
		return batch
	}
	early := batchAt(math.MinInt64, "early")
	if _, _, err := a.decodeBatch(early); err != nil {
		t.Fatalf("setup: %v", err)
	}
	if e := coalesceWith(t, a, early, batchAt(1_700_000_000_000, "innocent"), leaderLog(t, a)); e != nil {
		t.Fatalf("a valid request grouped with another caller's valid batch was answered %d %s: %s", e.Status, e.Code, e.Message)
	}
}

// TestProduceSparseBatchOverHTTP: the batch without records, sent to an
// agent with acks=1 and with acks=all (through the sidecar's producer
// ids): 400 and nothing appended. acks=1 moved the log end by a million
// offsets; acks=all was answered 409 out_of_order_sequence about a
// producer id the client never sent, after the sidecar gave up three of
// its own.
func TestProduceSparseBatchOverHTTP(t *testing.T) {
	c := startTestCluster(t, 1, "")
	n1 := c.agents[0]
	c.createTopic(n1, "sparse", 1, 1, 1)
	c.waitLeader("sparse", 0, 1)
	one := testBatch(t, []string{"x"})
	empty := bytes.Clone(one[:record.HeaderSize])
	binary.BigEndian.PutUint32(empty[8:], uint32(record.HeaderSize-record.LengthFieldEnd))
	empty = restamp(empty, 999_999, 0)
	r := n1.agent.replicas.Get("sparse", 0)
	for _, acks := range []string{"1", "all"} {
		before := r.CurrentLog().LogEndOffset()
		status, body := n1.produce("sparse", 0, "acks="+acks, wire.ContentTypeBatch, bytes.Clone(empty))
		if after := r.CurrentLog().LogEndOffset(); status != 400 || after != before || !bytes.Contains(body, []byte(wire.CodeCorruptBatch)) {
			t.Errorf("acks=%s: %d %s, log end %d -> %d; want 400 corrupt_batch and nothing appended", acks, status, bytes.TrimSpace(body), before, after)
		}
	}
	if status, body := n1.produce("sparse", 0, "acks=all", wire.ContentTypeBatch, one); status != 200 || !bytes.Contains(body, []byte(`"base_offset":0`)) {
		t.Fatalf("a valid batch after them: %d %s, want 200 at offset 0", status, body)
	}
}

// TestNDJSONFetchWithinBatchLimit: an ndjson fetch is decoded in memory, so
// its max_bytes is held to the batch limit (16 MiB here); one asking for
// 2 GiB read up to a whole segment (1 GiB by default) into memory.
func TestNDJSONFetchWithinBatchLimit(t *testing.T) {
	// Segments above the limit, as the default 1 GiB are (the test
	// clusters' 1 MiB segments would end every read first).
	c := startTestClusterWith(t, 1, "", func(a *Agent) { a.cfg.Storage.SegmentBytes = 64 << 20 })
	n1 := c.agents[0]
	c.createTopic(n1, "wide", 1, 1, 1)
	c.waitLeader("wide", 0, 1)
	const recordsPerBatch, valueBytes, batches = 8, 128 << 10, 24 // 24 MiB of values
	values := make([]string, recordsPerBatch)
	for i := range values {
		values[i] = strings.Repeat("v", valueBytes)
	}
	for range batches {
		if status, body := n1.produce("wide", 0, "acks=1", wire.ContentTypeBatch, testBatch(t, values)); status != 200 {
			t.Fatalf("produce: %d %s", status, body)
		}
	}
	status, body := c.callAddr(n1.client, "GET", "/v1/topics/wide/partitions/0/records?offset=0&max_bytes=2147483647", "", nil,
		http.Header{"Accept": {wire.ContentTypeNDJSON}})
	if status != 200 {
		t.Fatalf("fetch: %d %s", status, bytes.TrimSpace(body[:min(len(body), 200)]))
	}
	lines := bytes.Count(body, []byte("\n"))
	limit := maxBatchBytes(n1.agent.cfg)
	if lines*valueBytes > limit+recordsPerBatch*valueBytes || lines >= recordsPerBatch*batches {
		t.Fatalf("an ndjson fetch of max_bytes 2 GiB answered %d of %d records (%d MiB of values); want at most the batch limit, %d MiB, and one batch",
			lines, recordsPerBatch*batches, lines*valueBytes>>20, limit>>20)
	}
}

// TestFetchOfAnotherIncarnationRefused: a replica's fetch names the topic
// incarnation it holds, and the leader refuses one of another (409
// inconsistent_topic_id), over a fetch session and over the GET. A topic
// deleted and created again starts its epochs again, so the fetch of a
// replica whose agent had not seen the deletion matched the new leader's
// epochs, and counted toward the new incarnation's high watermark with the
// old one's records: acks=all writes held by the leader alone.
func TestFetchOfAnotherIncarnationRefused(t *testing.T) {
	c := startTestCluster(t, 2, "")
	c.createTopic(c.agents[0], "again", 1, 2, 1)
	n1, pd := c.waitLeader("again", 0, 2)
	follower := c.agents[0]
	if follower == n1 {
		follower = c.agents[1]
	}
	n1.mustProduce("again", 0, "b0")
	id := n1.agent.replicas.Get("again", 0).TopicID()
	if id == "" {
		t.Fatal("setup: the replica has no topic id")
	}
	fetch := peer.Fetch{Topic: "again", Partition: 0, TopicID: "0123456789abcdef0123456789abcdef",
		FetchRequest: replicate.FetchRequest{ReplicaID: follower.nodeID, CurrentLeaderEpoch: pd.Epoch, LastFetchedEpoch: replicate.UndefinedEpoch},
		MaxBytes:     1 << 20, MaxWait: 100 * time.Millisecond}

	// As the follower's agent: its fetches at offset 0 only set its
	// position back for a moment.
	sessions := peer.NewSessions(peer.NewClients("", 1<<20, false, nil), follower.nodeID, 100*time.Millisecond, nil)
	defer sessions.Close()
	for _, tc := range []struct {
		name        string
		topicID     string
		wantRefused bool
	}{{"another incarnation", fetch.TopicID, true}, {"this incarnation", id, false}, {"no topic id", "", false}} {
		f := fetch
		f.TopicID = tc.topicID
		got := make(chan error, 1)
		sessions.Fetch(n1.peer, f, func(_ peer.FetchAnswer, err error) { got <- err })
		var err error
		select {
		case err = <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("session, %s: no answer", tc.name)
		}
		var pe *peer.Error
		if refused := errors.As(err, &pe) && pe.Code == wire.CodeInconsistentTopicID; refused != tc.wantRefused {
			t.Errorf("session, %s: %v, refused as another incarnation %t, want %t", tc.name, err, refused, tc.wantRefused)
		}

		path := fmt.Sprintf("%s?topic=again&partition=0&replica_id=%s&fetch_offset=0&current_leader_epoch=%d&last_fetched_epoch=-1&high_watermark=0&max_bytes=1024&max_wait_ms=0",
			peer.FetchPath, follower.nodeID, pd.Epoch)
		if tc.topicID != "" {
			path += "&topic_id=" + tc.topicID
		}
		status, body := c.callAddr(n1.peer, "GET", path, "", nil, nil)
		if refused := status == 409 && bytes.Contains(body, []byte(wire.CodeInconsistentTopicID)); refused != tc.wantRefused {
			t.Errorf("GET, %s: %d %q, refused as another incarnation %t, want %t", tc.name, status, body[:min(len(body), 200)], refused, tc.wantRefused)
		}
	}
}

// TestProducedMaxTimestampIsTheRecords: a produced batch whose
// max_timestamp is above every record's is appended with the largest
// record timestamp instead, its CRC made again (as Kafka's broker does). It
// was appended as sent: a client could date a segment a year ahead, and
// time retention kept it that long.
func TestProducedMaxTimestampIsTheRecords(t *testing.T) {
	a := unitAgent(t)
	const first, largest = int64(1_700_000_000_000), int64(1_700_000_000_250)
	var b record.Builder
	for _, ts := range []int64{first, largest, first + 100} {
		if err := b.Add(ts, nil, []byte("v"), nil); err != nil {
			t.Fatal(err)
		}
	}
	honest, err := b.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		sent int64
	}{
		{"as built", largest},
		{"a year ahead", largest + 365*24*3600*1000},
		{"the largest int64", math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := bytes.Clone(honest)
			record.SetMaxTimestamp(body, tc.sent)
			batch, count, _, err := a.decodeProduceBody([]byte(wire.ContentTypeBatch), body, nil, false)
			if err != nil {
				t.Fatal(err)
			}
			h, err := record.Verify(batch, 0)
			if err != nil {
				t.Fatalf("the batch to append: %v", err)
			}
			if count != 3 || h.MaxTimestamp() != largest {
				t.Fatalf("appended max_timestamp %d (count %d), want %d: the largest record timestamp", h.MaxTimestamp(), count, largest)
			}
			if tc.sent == largest && !bytes.Equal(batch, body) {
				t.Fatal("a batch sent with the right max_timestamp was changed")
			}
		})
	}
}
