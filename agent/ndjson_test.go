package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/wire"
)

// TestProxiedNDJSONOfOneLargeBatch: an ndjson fetch through an agent
// without a replica is proxied to the leader, whose answer the proxy
// bounds at max(fetch_max_bytes, batch limit) + 64 KiB. The rendering of a
// batch is several times the batch (every control byte of a UTF-8 value is
// 6 bytes of JSON), and it held the first batch whole whatever max_bytes
// said: one batch well within the batch limit made the proxy answer 502 at
// that offset for ever. max_bytes now bounds the rendering too (the first
// line whole), and a consumer moves on line by line.
func TestProxiedNDJSONOfOneLargeBatch(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	c := startTestCluster(t, 2, "")
	c.createTopic(c.agents[0], "wide", 1, 1, 1)
	leader, _ := c.waitLeader("wide", 0, 1)
	other := c.agents[0]
	if other == leader {
		other = c.agents[1]
	}
	// One batch of four records of 1,000,000 control bytes (valid UTF-8,
	// under limits.max_record_bytes): a quarter of the batch limit.
	value := make([]byte, 1_000_000)
	for i := range value {
		value[i] = byte(1 + rng.IntN(0x1f))
	}
	batch := testBatch(t, []string{string(value), string(value), string(value), string(value)})
	if status, body := leader.produce("wide", 0, "acks=1", wire.ContentTypeBatch, batch); status != 200 {
		t.Fatalf("produce: %d %s", status, body)
	}
	ndjson := http.Header{"Accept": {wire.ContentTypeNDJSON}}
	for _, maxBytes := range []int{1, 1 << 20, 16 << 20} {
		// A consumer reading from offset 0 to the end, through the agent
		// without a replica.
		offset, lines := 0, 0
		for offset < 4 {
			status, body := c.callAddr(other.client, "GET", fmt.Sprintf("/v1/topics/wide/partitions/0/records?offset=%d&max_bytes=%d", offset, maxBytes), "", nil, ndjson)
			if status != 200 {
				t.Fatalf("ndjson fetch through %s (no replica) at offset %d, max_bytes %d: %d %s", other.nodeID, offset, maxBytes, status, bytes.TrimSpace(body[:min(len(body), 300)]))
			}
			if len(body) > fetchBodyLimit(other.agent.cfg) {
				t.Fatalf("answer of %d bytes passed the proxy's bound %d", len(body), fetchBodyLimit(other.agent.cfg))
			}
			sc := bufio.NewScanner(bytes.NewReader(body))
			sc.Buffer(nil, 64<<20)
			got := 0
			for sc.Scan() {
				var r ndjsonRecord
				if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.Offset != int64(offset) || r.Value == nil || *r.Value != string(value) {
					t.Fatalf("max_bytes %d: line at offset %d: offset %d, %v", maxBytes, offset, r.Offset, err)
				}
				offset++
				got++
			}
			if got == 0 {
				t.Fatalf("max_bytes %d: an empty answer at offset %d below the high watermark 4", maxBytes, offset)
			}
			lines += got
		}
		if lines != 4 {
			t.Fatalf("max_bytes %d: %d lines, want 4", maxBytes, lines)
		}
	}
}

// TestNDJSONNullValue: a record's value and a header's value may be null
// (length -1: a Kafka tombstone), which the binary format keeps apart from
// empty. The ndjson rendering answered "value":"" and "h":"" for both, so
// an ndjson consumer could not tell a tombstone from an empty record. A
// null value now has no value field (as a null key), a null header value
// is null.
func TestNDJSONNullValue(t *testing.T) {
	c := startTestCluster(t, 1, "")
	n1 := c.agents[0]
	c.createTopic(n1, "nulls", 1, 1, 1)
	c.waitLeader("nulls", 0, 1)
	var b record.Builder
	if err := b.Add(1, []byte("gone"), nil, []record.RecordHeader{{Key: "h", Value: nil}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Add(1, []byte("empty"), []byte{}, []record.RecordHeader{{Key: "h", Value: []byte{}}}); err != nil {
		t.Fatal(err)
	}
	batch, err := b.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	if status, body := n1.produce("nulls", 0, "acks=1", wire.ContentTypeBatch, batch); status != 200 {
		t.Fatalf("produce: %d %s", status, body)
	}
	status, body := c.callAddr(n1.client, "GET", "/v1/topics/nulls/partitions/0/records?offset=0", "", nil,
		http.Header{"Accept": {wire.ContentTypeNDJSON}})
	if status != 200 {
		t.Fatalf("ndjson fetch: %d %s", status, body)
	}
	want := `{"offset":0,"timestamp":1,"key":"gone","headers":{"h":null}}` + "\n" +
		`{"offset":1,"timestamp":1,"key":"empty","value":"","headers":{"h":""}}` + "\n"
	if string(body) != want {
		t.Fatalf("ndjson answer:\n%s\nwant:\n%s", body, want)
	}
}
