package agent

import (
	"testing"
	"time"
)

// TestCreateTopicTimeout: the bound of a creation grows with its
// partitions and stays inside the client API's minute. With
// peerCallTimeout alone, a 10,000-partition topic was created in Consul
// but answered 503, its 313 transactions and the watch's listing taking
// longer than 5 s.
func TestCreateTopicTimeout(t *testing.T) {
	for _, c := range []struct {
		partitions int
		least      time.Duration
	}{
		{1, peerCallTimeout},
		{1000, peerCallTimeout + 3*time.Second},
		{10000, 30 * time.Second},
	} {
		got := createTopicTimeout(c.partitions)
		if got < c.least || got > time.Minute-5*time.Second {
			t.Errorf("createTopicTimeout(%d) = %s, want at least %s and well inside a minute", c.partitions, got, c.least)
		}
	}
}
