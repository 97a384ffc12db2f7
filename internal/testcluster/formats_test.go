package testcluster

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/logagent/logagent/client"
)

// TestSidecarFormatsStatusDelete: JSON and octet-stream bodies sent through
// every agent land in the partition the key's FNV-1a hash names (the Go
// client's PartitionForKey), read back as ndjson through every agent with
// text or base64 as documented; /v1/status shows each agent's view; DELETE
// removes the topic from every agent's metadata and disk.
func TestSidecarFormatsStatusDelete(t *testing.T) {
	const topic, partitions = "formats", 2
	c := Start(t, Options{})
	if err := c.Agents[0].CreateTopic(TopicSpec{Name: topic, Partitions: partitions, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	for p := range partitions {
		c.WaitLeader(topic, p, 20*time.Second)
		c.WaitISR(topic, p, []string{"n1", "n2", "n3"}, 20*time.Second)
	}

	type line struct {
		Offset        int64             `json:"offset"`
		Key           *string           `json:"key"`
		KeyBase64     *string           `json:"key_base64"`
		Value         *string           `json:"value"`
		ValueBase64   *string           `json:"value_base64"`
		Headers       map[string]string `json:"headers"`
		HeadersBase64 map[string]string `json:"headers_base64"`
	}
	want := map[int][]string{} // partition → the ndjson lines' summaries, in order
	summary := func(l line) string {
		s := func(p *string) string {
			if p == nil {
				return "-"
			}
			return *p
		}
		return fmt.Sprintf("%s|%s|%s|%s|%v|%v", s(l.Key), s(l.KeyBase64), s(l.Value), s(l.ValueBase64), l.Headers, l.HeadersBase64)
	}
	for i, a := range c.Agents {
		key := fmt.Sprintf("user-%d", i)
		p := client.PartitionForKey([]byte(key), partitions)
		body := fmt.Sprintf(`{"records":[{"key":%q,"value":"hello from %s","headers":{"via":%q}},{"key":%q,"value_base64":"/wAB"}]}`, key, a.NodeID, a.NodeID, key)
		status, b, err := a.Send("POST", "/v1/topics/"+topic+"/records?acks=all", "application/json", []byte(body))
		var got Produced
		if err != nil || status != 200 || json.Unmarshal(b, &got) != nil || got.Partition != p || got.Count != 2 {
			t.Fatalf("json through %s: %d %s %v, want partition %d", a.NodeID, status, b, err, p)
		}
		want[p] = append(want[p],
			fmt.Sprintf("%s|-|hello from %s|-|map[via:%s]|map[]", key, a.NodeID, a.NodeID),
			fmt.Sprintf("%s|-|-|/wAB|map[]|map[]", key))
		status, b, err = a.Send("POST", fmt.Sprintf("/v1/topics/%s/records?key=bin-%d", topic, i), "application/octet-stream", []byte{0xfe, 'x', 0})
		if err != nil || status != 200 {
			t.Fatalf("octet-stream through %s: %d %s %v", a.NodeID, status, b, err)
		}
		bp := client.PartitionForKey(fmt.Appendf(nil, "bin-%d", i), partitions)
		want[bp] = append(want[bp], fmt.Sprintf("bin-%d|-|-|/ngA|map[]|map[]", i))
	}
	for p := range partitions {
		waitReplicasAt(t, c, topic, p, int64(len(want[p])), 20*time.Second)
	}
	for _, a := range c.Agents {
		for p := range partitions {
			status, b, err := a.Get(fmt.Sprintf("/v1/topics/%s/partitions/%d/records?offset=earliest", topic, p), "application/x-ndjson")
			if err != nil || status != 200 {
				t.Fatalf("ndjson fetch of %s/%d through %s: %d %s %v", topic, p, a.NodeID, status, b, err)
			}
			var got []string
			for i, text := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
				var l line
				if err := json.Unmarshal([]byte(text), &l); err != nil || l.Offset != int64(i) {
					t.Fatalf("%s/%d through %s, line %d %q: %v", topic, p, a.NodeID, i, text, err)
				}
				got = append(got, summary(l))
			}
			// The order between agents' requests is the order sent.
			if fmt.Sprint(got) != fmt.Sprint(want[p]) {
				t.Fatalf("%s/%d through %s:\n got %q\nwant %q", topic, p, a.NodeID, got, want[p])
			}
		}
		status, b, err := a.Get(fmt.Sprintf("/v1/topics/%s/partitions/0/records?offset=latest", topic), "application/x-ndjson")
		if err != nil || status != 200 || len(b) != 0 {
			t.Fatalf("offset=latest through %s: %d %q %v", a.NodeID, status, b, err)
		}
	}

	for _, a := range c.Agents {
		var st struct {
			NodeID string `json:"node_id"`
			State  string `json:"state"`
			Agents []struct {
				NodeID string `json:"node_id"`
			} `json:"agents"`
			Partitions []struct {
				Topic         string `json:"topic"`
				Role          string `json:"role"`
				HighWatermark int64  `json:"high_watermark"`
			} `json:"partitions"`
		}
		status, b, err := a.Get("/v1/status", "")
		if err != nil || status != 200 || json.Unmarshal(b, &st) != nil {
			t.Fatalf("status of %s: %d %s %v", a.NodeID, status, b, err)
		}
		if st.NodeID != a.NodeID || st.State != "serving" || len(st.Agents) != 3 || len(st.Partitions) != partitions {
			t.Fatalf("status of %s: %s", a.NodeID, b)
		}
	}

	status, b, err := c.Agents[1].Send("DELETE", "/v1/topics/"+topic, "", nil)
	if err != nil || status != 204 {
		t.Fatalf("delete: %d %s %v", status, b, err)
	}
	for _, a := range c.Agents {
		c.WaitFor(20*time.Second, topic+" gone from "+a.NodeID, func() bool {
			status, _, err := a.Get("/v1/topics/"+topic, "")
			if err != nil || status != 404 {
				return false
			}
			for p := range partitions {
				if _, err := os.Stat(a.PartitionDir(topic, p)); !os.IsNotExist(err) {
					return false
				}
			}
			return true
		})
	}
	if status, b, _ := c.Agents[0].Send("DELETE", "/v1/topics/"+topic, "", nil); status != 404 {
		t.Fatalf("second delete: %d %s", status, b)
	}
}
