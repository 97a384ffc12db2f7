package agent

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/wire"
)

// TestFetchLastFetchedEpoch: a consumer fetch that names the epoch of the
// last batch it read (the Kafka listener's Fetch v12+, and the HTTP
// API's last_fetched_epoch) is checked against the leader's epoch cache,
// as Kafka's Partition.readRecords does (KIP-320): where that epoch ends
// before the fetch offset the answer is the diverging epoch and no
// records; an epoch above the log's is out of range. The leader checks
// its own log; an agent without a replica proxies the fetch (HTTP) or
// sends it (leaderFetch, the Kafka listener's path) with the epoch, and
// relays the leader's answer.
func TestFetchLastFetchedEpoch(t *testing.T) {
	c := startTestCluster(t, 2, "")
	c.createTopic(c.agents[0], "div", 1, 1, 1)
	leader, pd := c.waitLeader("div", 0, 1)
	other := c.agents[0]
	if other == leader {
		other = c.agents[1]
	}
	first := pd.Epoch
	leader.mustProduce("div", 0, "a", "b", "c", "d")
	// A new epoch: the only replica leads again after a restart.
	if err := leader.stop(); err != nil {
		t.Fatal(err)
	}
	leader.start()
	_, pd = c.waitLeader("div", 0, 1)
	second := pd.Epoch
	if second <= first {
		t.Fatalf("epoch %d after the restart, %d before", second, first)
	}
	leader.mustProduce("div", 0, "e", "f")
	// The log: epoch first from 0 to 4, epoch second from 4 to 6.

	tests := []struct {
		name      string
		lastEpoch int32 // -1: none sent
		offset    int64
		status    int
		diverging *replicate.EpochEndOffset
		records   bool
	}{
		{"none sent", -1, 5, 200, nil, true},
		{"the epoch ends at the offset", first, 4, 200, nil, true},
		{"the latest epoch", second, 5, 200, nil, true},
		{"the epoch ends before the offset", first, 5, 200, &replicate.EpochEndOffset{Epoch: first, EndOffset: 4}, false},
		{"past the log end", first, 9, 200, &replicate.EpochEndOffset{Epoch: first, EndOffset: 4}, false},
		{"an epoch above the log's", second + 1, 5, 416, nil, false},
	}
	for _, via := range []*testAgent{leader, other} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s via %s", tt.name, via.nodeID), func(t *testing.T) {
				path := fmt.Sprintf("/v1/topics/div/partitions/0/records?offset=%d", tt.offset)
				if tt.lastEpoch >= 0 {
					path += fmt.Sprintf("&last_fetched_epoch=%d", tt.lastEpoch)
				}
				req, err := http.NewRequest("GET", "http://"+via.client+path, nil)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := c.http.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				var got *replicate.EpochEndOffset
				if v := resp.Header.Get(wire.HeaderDivergingEpoch); v != "" {
					epoch, _ := strconv.ParseInt(v, 10, 32)
					end, _ := strconv.ParseInt(resp.Header.Get(wire.HeaderDivergingEndOffset), 10, 64)
					got = &replicate.EpochEndOffset{Epoch: int32(epoch), EndOffset: end}
				}
				if resp.StatusCode != tt.status || fmt.Sprint(got) != fmt.Sprint(tt.diverging) ||
					(tt.status == 200 && (resp.ContentLength > 0) != tt.records) {
					t.Fatalf("status %d, diverging %v, %d bytes; want %d, diverging %v, records %t",
						resp.StatusCode, got, resp.ContentLength, tt.status, tt.diverging, tt.records)
				}
				if via != other {
					return
				}
				// The Kafka listener's path to the leader.
				body, pos, err := other.agent.leaderFetch("div", 0, strconv.FormatInt(tt.offset, 10), tt.lastEpoch, 1<<20, 0)
				switch {
				case tt.status != 200:
					if err == nil {
						t.Fatalf("leaderFetch: %d bytes, %+v; want an error", len(body), pos)
					}
				case err != nil || fmt.Sprint(pos.Diverging) != fmt.Sprint(tt.diverging) || (len(body) > 0) != tt.records || pos.HW != 6:
					t.Fatalf("leaderFetch: %d bytes, %+v, %v; want diverging %v, records %t, high watermark 6",
						len(body), pos, err, tt.diverging, tt.records)
				}
			})
		}
	}
}
