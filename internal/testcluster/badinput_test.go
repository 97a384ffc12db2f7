package testcluster

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// badInputHCL makes the limits small enough to cross cheaply.
const badInputHCL = `
limits {
  max_record_bytes  = "1KiB"
  max_request_bytes = "64KiB"
}
`

// dataListing is every file and directory under the agents' data
// directories, with sizes.
func dataListing(t *testing.T, c *Cluster) []string {
	t.Helper()
	var out []string
	for _, a := range c.Agents {
		err := filepath.WalkDir(a.DataDir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			size := info.Size()
			if d.IsDir() {
				size = 0
			}
			out = append(out, fmt.Sprintf("%s %d", path, size))
			return nil
		})
		if err != nil {
			t.Fatalf("list %s: %v", a.DataDir, err)
		}
	}
	return out
}

// consulListing is every KV key with its ModifyIndex.
func consulListing(t *testing.T, c *Cluster) []string {
	t.Helper()
	pairs, _, err := c.Consul.Client().KV().List("", nil)
	if err != nil {
		t.Fatalf("consul kv list: %v", err)
	}
	out := make([]string, 0, len(pairs))
	for _, p := range pairs {
		out = append(out, fmt.Sprintf("%s@%d", p.Key, p.ModifyIndex))
	}
	return out
}

// badRequest is one bad input and the refusal it must get.
type badRequest struct {
	name        string
	method      string
	path        string // raw, sent as is
	contentType string
	accept      string
	body        []byte
	status      int
	code        string
}

// sendRaw sends a request with its path exactly as given (no cleaning, no
// escaping) and returns the status and body.
func sendRaw(t *testing.T, addr string, br badRequest) (int, []byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var req bytes.Buffer
	fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\nContent-Length: %d\r\n", br.method, br.path, addr, len(br.body))
	if br.contentType != "" {
		fmt.Fprintf(&req, "Content-Type: %s\r\n", br.contentType)
	}
	if br.accept != "" {
		fmt.Fprintf(&req, "Accept: %s\r\n", br.accept)
	}
	req.WriteString("\r\n")
	req.Write(br.body)
	if _, err := conn.Write(req.Bytes()); err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("%s: write: %v", br.name, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s: read answer: %v", br.name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: read body: %v", br.name, err)
	}
	return resp.StatusCode, b
}

// sendChunked posts an ndjson body with chunked transfer encoding, in 4 KiB
// chunks, and returns the status and body of the answer; a write refused
// once the agent has answered and closed is expected.
func sendChunked(t *testing.T, addr, path string, body []byte) (int, []byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n", path, addr)
	for len(body) > 0 {
		n := min(len(body), 4096)
		fmt.Fprintf(&req, "%x\r\n%s\r\n", n, body[:n])
		body = body[n:]
	}
	req.WriteString("0\r\n\r\n")
	go func() { _, _ = conn.Write(req.Bytes()) }()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("chunked: read answer: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("chunked: read body: %v", err)
	}
	return resp.StatusCode, b
}

// TestBadInputChangesNothing: each bad input sent through each agent's
// sidecar (the leader of the partition and agents that forward or proxy)
// gets its status and JSON error code, and leaves every agent's data
// directory and every Consul key exactly as they were.
func TestBadInputChangesNothing(t *testing.T) {
	const topic = "good"
	c := Start(t, Options{HCL: badInputHCL})
	leader, _ := startOneLeaderTopic(t, c, topic)
	if _, err := leader.Produce(topic, 0, ContentTypeNDJSON, []byte("one\ntwo\n"), "all", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	waitReplicasAt(t, c, topic, 0, 2, 20*time.Second)

	good := buildBatch(t, [][]byte{[]byte("fine")})
	badCRC := bytes.Clone(good)
	badCRC[len(badCRC)-1] ^= 0xff
	bigValue := bytes.Repeat([]byte("v"), 2<<10)
	long := strings.Repeat("t", 250)
	records := "/v1/topics/" + topic + "/records"
	requests := []badRequest{
		{"create ../x", "POST", "/v1/topics", "application/json", "", []byte(`{"name":"../x"}`), 400, "invalid_topic_name"},
		{"create %2e%2e", "POST", "/v1/topics", "application/json", "", []byte(`{"name":"%2e%2e"}`), 400, "invalid_topic_name"},
		{"create ..", "POST", "/v1/topics", "application/json", "", []byte(`{"name":".."}`), 400, "invalid_topic_name"},
		{"create NUL", "POST", "/v1/topics", "application/json", "", []byte(`{"name":"a\u0000b"}`), 400, "invalid_topic_name"},
		{"create 250 characters", "POST", "/v1/topics", "application/json", "", []byte(`{"name":"` + long + `"}`), 400, "invalid_topic_name"},
		{"create malformed", "POST", "/v1/topics", "application/json", "", []byte(`{"name":`), 400, "invalid_request"},
		{"produce to ..%2Fx", "POST", "/v1/topics/..%2Fx/records", "application/x-ndjson", "", []byte("x"), 400, "invalid_topic_name"},
		{"produce to %2e%2e", "POST", "/v1/topics/%2e%2e/records", "application/x-ndjson", "", []byte("x"), 400, "invalid_topic_name"},
		{"produce to NUL", "POST", "/v1/topics/a%00b/records", "application/x-ndjson", "", []byte("x"), 400, "invalid_topic_name"},
		{"produce to 250 characters", "POST", "/v1/topics/" + long + "/records", "application/x-ndjson", "", []byte("x"), 400, "invalid_topic_name"},
		{"fetch from %2e%2e", "GET", "/v1/topics/%2e%2e/partitions/0/records", "", "", nil, 400, "invalid_topic_name"},
		{"delete %2e%2e", "DELETE", "/v1/topics/%2e%2e", "", "", nil, 400, "invalid_topic_name"},
		{"delete unknown", "DELETE", "/v1/topics/nosuch", "", "", nil, 404, "unknown_topic"},
		{"record over max_record_bytes, ndjson", "POST", records + "?partition=0", "application/x-ndjson", "", bigValue, 413, "record_too_large"},
		{"record over max_record_bytes, octet-stream", "POST", records + "?partition=0", "application/octet-stream", "", bigValue, 413, "record_too_large"},
		{"record over max_record_bytes, json", "POST", records + "?partition=0", "application/json", "", []byte(`{"records":[{"value":"` + string(bigValue) + `"}]}`), 413, "record_too_large"},
		{"record over max_record_bytes, batch", "POST", records + "?partition=0", ContentTypeBatch, "", buildBatch(t, [][]byte{bigValue}), 413, "record_too_large"},
		{"body over max_request_bytes", "POST", records + "?partition=0", "application/x-ndjson", "", bytes.Repeat([]byte("line\n"), 20<<10), 413, "request_too_large"},
		{"malformed json", "POST", records + "?partition=0", "application/json", "", []byte(`{"records":[{"value":"x"}`), 400, "invalid_request"},
		{"json unknown field", "POST", records + "?partition=0", "application/json", "", []byte(`{"records":[{"valu":"x"}]}`), 400, "invalid_request"},
		{"batch with bad crc", "POST", records + "?partition=0", ContentTypeBatch, "", badCRC, 400, "corrupt_batch"},
		{"truncated batch", "POST", records + "?partition=0", ContentTypeBatch, "", good[:20], 400, "corrupt_batch"},
		{"unsupported content type", "POST", records + "?partition=0", "application/xml", "", []byte("<x/>"), 415, "unsupported_media_type"},
		{"invalid acks", "POST", records + "?partition=0&acks=2", "application/x-ndjson", "", []byte("x"), 400, "invalid_request"},
		{"invalid timeout", "POST", records + "?partition=0&timeout=forever", "application/x-ndjson", "", []byte("x"), 400, "invalid_request"},
		{"produce to unknown topic", "POST", "/v1/topics/nosuch/records", "application/x-ndjson", "", []byte("x"), 404, "unknown_topic"},
		{"produce to unknown partition", "POST", records + "?partition=7", "application/x-ndjson", "", []byte("x"), 404, "unknown_partition"},
		{"fetch unknown topic", "GET", "/v1/topics/nosuch/partitions/0/records", "", "", nil, 404, "unknown_topic"},
		{"fetch unknown partition", "GET", "/v1/topics/" + topic + "/partitions/7/records", "", "", nil, 404, "unknown_partition"},
		{"fetch past the log", "GET", "/v1/topics/" + topic + "/partitions/0/records?offset=1000", "", "", nil, 416, "offset_out_of_range"},
		{"fetch past the log, ndjson", "GET", "/v1/topics/" + topic + "/partitions/0/records?offset=1000", "", "application/x-ndjson", nil, 416, "offset_out_of_range"},
		{"fetch bad offset", "GET", "/v1/topics/" + topic + "/partitions/0/records?offset=-3", "", "", nil, 400, "invalid_offset"},
		{"fetch unacceptable", "GET", "/v1/topics/" + topic + "/partitions/0/records", "", "text/html", nil, 406, "not_acceptable"},
	}

	dataBefore, consulBefore := dataListing(t, c), consulListing(t, c)
	for _, a := range c.Agents {
		for _, br := range requests {
			status, body := sendRaw(t, a.ClientAddr, br)
			apiErr, ok := decodeAPIError(status, body).(*APIError)
			if status != br.status || !ok || apiErr.Code != br.code {
				t.Errorf("%s through %s: %d %s, want %d %s", br.name, a.NodeID, status, body, br.status, br.code)
				continue
			}
			if br.code == "offset_out_of_range" && (!strings.Contains(string(body), `"log_start_offset":0`) || !strings.Contains(string(body), `"high_watermark":2`)) {
				t.Errorf("%s through %s: %s, want the log's bounds 0 and 2", br.name, a.NodeID, body)
			}
		}
	}
	// A chunked body has no length to refuse up front: fasthttp reads it
	// up to limits.max_request_bytes and stops there.
	for _, a := range c.Agents {
		chunkStart := time.Now()
		status, body := sendChunked(t, a.ClientAddr, records+"?partition=0", bytes.Repeat([]byte("line\n"), 40<<10))
		t.Logf("chunked through %s answered in %s", a.NodeID, time.Since(chunkStart))
		if apiErr, ok := decodeAPIError(status, body).(*APIError); status != 413 || !ok || apiErr.Code != "request_too_large" {
			t.Errorf("chunked body over max_request_bytes through %s: %d %s", a.NodeID, status, body)
		}
	}
	if after := dataListing(t, c); !slices.Equal(after, dataBefore) {
		t.Errorf("data directories changed:\nbefore %q\nafter  %q", dataBefore, after)
	}
	if after := consulListing(t, c); !slices.Equal(after, consulBefore) {
		t.Errorf("consul keys changed:\nbefore %q\nafter  %q", consulBefore, after)
	}
}
