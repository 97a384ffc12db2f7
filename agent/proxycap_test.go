package agent

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"

	"github.com/logagent/logagent/wire"
)

// TestProxiedFetchCapsMaxBytes: a fetch that an agent without an in-sync
// replica sends on to the leader (the HTTP fetch proxy, the Kafka
// listener's leaderFetch) asks for at most max(fetch_max_bytes, the batch
// limit), the most the proxy's bound (that + 64 KiB) lets through. The
// consumer's max_bytes went on unchanged: with more than the bound in the
// leader's segment, a max_bytes above it (the local path serves up to
// 2 GiB) got 502 over the bound, and the Kafka path leader_not_available,
// at that offset every time. The proxy streams the leader's answer and
// refuses one over its bound from its Content-Length unread, so it never
// held more than the bound either way: what was wrong is the refusal.
func TestProxiedFetchCapsMaxBytes(t *testing.T) {
	// One segment holds them all: an answer never spans two.
	c := startTestCluster(t, 2, "storage {\n  segment_bytes = \"64MiB\"\n}\n")
	c.createTopic(c.agents[0], "big", 1, 1, 1)
	leader, _ := c.waitLeader("big", 0, 1)
	other := c.agents[0]
	if other == leader {
		other = c.agents[1]
	}
	bound := fetchBodyLimit(other.agent.cfg)
	// Records of 1,000,000 bytes (within limits.max_record_bytes), one
	// batch each, a few more than the bound holds.
	records := bound/1_000_000 + 2
	value := bytes.Repeat([]byte("v"), 1_000_000)
	for range records {
		if status, body := leader.produce("big", 0, "acks=1", wire.ContentTypeOctetStream, value); status != 200 {
			t.Fatalf("produce: %d %s", status, body)
		}
	}
	const maxBytes = 64 << 20
	path := func(offset int) string {
		return fmt.Sprintf("/v1/topics/big/partitions/0/records?offset=%d&max_bytes=%d", offset, maxBytes)
	}
	// The leader serves the whole segment to a local fetch: more than the
	// proxy's bound.
	if status, body := leader.call("GET", path(0), "", nil); status != 200 || len(body) <= bound {
		t.Fatalf("local fetch at the leader: %d, %d bytes; want 200 and more than the proxy's bound %d", status, len(body), bound)
	}
	for _, tc := range []struct {
		name   string
		accept string
	}{
		{"batches", wire.ContentTypeBatch},
		{"ndjson", wire.ContentTypeNDJSON},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A consumer reading every record through the agent without a
			// replica, max_bytes 64 MiB.
			next := 0
			for next < records {
				status, body := c.callAddr(other.client, "GET", path(next), "", nil, http.Header{"Accept": {tc.accept}})
				if status != 200 {
					t.Fatalf("fetch at offset %d through %s (no replica): %d %s", next, other.nodeID, status, body[:min(len(body), 300)])
				}
				if len(body) > bound {
					t.Fatalf("an answer of %d bytes passed the proxy's bound %d", len(body), bound)
				}
				got := 0
				if tc.accept == wire.ContentTypeBatch {
					got = len(decodeValues(t, body))
				} else {
					got = bytes.Count(body, []byte("\n"))
				}
				if got == 0 {
					t.Fatalf("no record at offset %d, below the high watermark %d", next, records)
				}
				next += got
			}
		})
	}
	// The Kafka listener's way to the leader.
	body, pos, err := sidecarService{other.agent}.LeaderFetch("big", 0, "0", -1, maxBytes, 0)
	if err != nil || len(body) == 0 || len(body) > bound || pos.HW != int64(records) {
		t.Fatalf("Kafka fetch through %s (no replica): %d bytes, high watermark %d, %v; want at most %d bytes, %d", other.nodeID, len(body), pos.HW, err, bound, records)
	}
}
