package testcluster

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// peerSockets counts the established TCP connections process pid holds
// to or from the peer listeners: dialed[addr] those it dialed to the peer
// address addr, accepted those its own listener (port listen) took.
func peerSockets(t *testing.T, pid, listen int, peers []string) (dialed map[string]int, accepted int) {
	t.Helper()
	owned := map[string]bool{}
	fdDir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if link, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && strings.HasPrefix(link, "socket:[") {
			owned[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	ports := map[int]string{}
	for _, p := range peers {
		_, port, err := net.SplitHostPort(p)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(port)
		ports[n] = p
	}
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dialed = map[string]int{}
	port := func(addr string) int {
		i := strings.LastIndexByte(addr, ':')
		n, _ := strconv.ParseInt(addr[i+1:], 16, 32)
		return int(n)
	}
	s := bufio.NewScanner(f)
	for s.Scan() {
		// sl local_address rem_address st ... inode (field 9); st 01 is
		// ESTABLISHED.
		fields := strings.Fields(s.Text())
		if len(fields) < 10 || fields[3] != "01" || !owned[fields[9]] {
			continue
		}
		local, remote := port(fields[1]), port(fields[2])
		if local == listen {
			accepted++
		} else if p, ok := ports[remote]; ok {
			dialed[p]++
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return dialed, accepted
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(port)
	return n
}

// TestFetchSessionsManyPartitions (issue 19): 300 partitions of RF 3 on
// three agents, idle: each agent holds a few replication connections per
// peer agent (its fetch sessions, one each way, and a few pooled ones),
// not one per partition it follows; then a kill -9 of one agent, and every
// partition accepts acks=all writes through a survivor again.
func TestFetchSessionsManyPartitions(t *testing.T) {
	const topic, partitions = "sessions", 300
	// Per peer agent and direction: a fetch session, and a few pooled
	// connections of other peer calls (the descriptor estimate allows 6 a
	// peer, partition's fdsPerPeer); a connection per partition would be
	// about 100 here.
	const perPeerBound = 6
	c := Start(t, Options{})
	if err := c.Agents[0].CreateTopic(TopicSpec{Name: topic, Partitions: partitions, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	all := []string{"n1", "n2", "n3"}
	leaders := map[int]string{}
	c.WaitFor(90*time.Second, "every partition led with a full ISR", func() bool {
		d, err := c.Agents[0].Describe(topic)
		if err != nil || len(d.Partitions) != partitions {
			return false
		}
		for _, p := range d.Partitions {
			if p.Leader == "" || !slices.Equal(slices.Sorted(slices.Values(p.ISR)), all) {
				return false
			}
			leaders[p.Partition] = p.Leader
		}
		return true
	})
	// Idle for several heartbeats: parked fetches keep every follower in
	// sync without a request per partition.
	time.Sleep(3 * time.Second)
	for _, a := range c.Agents {
		var others []string
		for _, b := range c.Agents {
			if b != a {
				others = append(others, b.PeerAdvertise)
			}
		}
		dialed, accepted := peerSockets(t, a.PID(), portOf(t, a.PeerAddr), others)
		t.Logf("%s: peer connections dialed %v, accepted %d (%d partitions, RF 3)", a.NodeID, dialed, accepted, partitions)
		for addr, n := range dialed {
			if n > perPeerBound {
				t.Errorf("%s holds %d connections to %s, more than %d", a.NodeID, n, addr, perPeerBound)
			}
		}
		if accepted > perPeerBound*len(others) {
			t.Errorf("%s accepted %d peer connections, more than %d", a.NodeID, accepted, perPeerBound*len(others))
		}
	}
	// The first write after more than lag_time_max idle: a parked follower
	// counts as caught up until its fetch is answered, so no leader takes
	// it out of the ISR in the moment before its next fetch.
	isrChanges := func() float64 {
		var n float64
		for _, a := range c.Agents {
			n += scrapeAgent(t, a).must(t, "logagent_isr_changes_total")
		}
		return n
	}
	before := isrChanges()
	forEachPartition(partitions, func(p int) {
		if _, err := c.Agents[1].Produce(topic, p, ContentTypeNDJSON, []byte("\"after idle\"\n"), "all", 5*time.Second); err != nil {
			t.Errorf("acks=all write to %s/%d after the idle time: %v", topic, p, err)
		}
	})
	time.Sleep(time.Second)
	if after := isrChanges(); after != before {
		t.Errorf("%v ISR changes after the idle time's first writes, want none", after-before)
	}
	d, err := c.Agents[0].Describe(topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range d.Partitions {
		if !slices.Equal(slices.Sorted(slices.Values(p.ISR)), all) {
			t.Fatalf("%s/%d has ISR %v after the idle time, want %v", topic, p.Partition, p.ISR, all)
		}
	}

	victim, via := c.Agents[0], c.Agents[1]
	killed := time.Now()
	victim.Kill()
	firstAck := make([]time.Duration, partitions)
	forEachPartition(partitions, func(p int) {
		for time.Since(killed) < 60*time.Second {
			if _, err := via.Produce(topic, p, ContentTypeNDJSON, []byte("\"after\"\n"), "all", 5*time.Second); err == nil {
				firstAck[p] = time.Since(killed)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	var led, followed []time.Duration
	for p, d := range firstAck {
		if d == 0 {
			t.Fatalf("%s/%d accepted no acks=all write within 60 s of the kill", topic, p)
		}
		if leaders[p] == victim.NodeID {
			led = append(led, d)
		} else {
			followed = append(followed, d)
		}
	}
	summary := func(ds []time.Duration) string {
		slices.Sort(ds)
		if len(ds) == 0 {
			return "none"
		}
		return fmt.Sprintf("%d partitions, median %s, max %s", len(ds), ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
	}
	t.Logf("after kill -9 of %s: acks=all accepted again on the partitions it led: %s; on those it followed: %s",
		victim.NodeID, summary(led), summary(followed))
}

// forEachPartition runs f for partitions 0 to n-1, 16 at a time.
func forEachPartition(n int, f func(p int)) {
	work := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for p := range work {
				f(p)
			}
		})
	}
	for p := range n {
		work <- p
	}
	close(work)
	wg.Wait()
}
