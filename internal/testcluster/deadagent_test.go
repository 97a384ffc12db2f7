package testcluster

import (
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/config"
)

// shippedTimings loads the built-in configuration, for the timings a
// crashed agent's failover depends on, as shipped. The environment only
// satisfies the defaults' checks (a host name, an address to advertise):
// nothing uses them.
func shippedTimings(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.LoadWith(config.Environment{
		Hostname: func() (string, error) { return "shipped", nil },
		InterfaceAddrs: func() ([]net.Addr, error) {
			return []net.Addr{&net.IPNet{IP: net.IPv4(10, 1, 2, 3), Mask: net.CIDRMask(8, 32)}}, nil
		},
	})
	if err != nil {
		t.Fatalf("built-in configuration: %v", err)
	}
	return cfg
}

// partitionRecovery is what one partition went through after the kill.
type partitionRecovery struct {
	led       bool // the killed agent led it
	firstAck  time.Duration
	ackErrors int
	lastError error
	shrunk    time.Duration // the metadata's ISR without the killed agent
	leader    string
}

// TestDeadAgentLeavesTheISRAtOnce (issue 12): with the shipped timings
// (not the cluster's quick ones), kill -9 one of three agents and leave it
// dead; on every partition of an RF 3, min ISR 2 topic, acks=all writes
// through a survivor are acknowledged again once Consul reports the agent
// dead, because the leaders drop it from the ISR then instead of after
// lag_time_max: the partition it led (after the election) as well as the
// ones it followed. The times are logged; the bounds asserted are loose.
func TestDeadAgentLeavesTheISRAtOnce(t *testing.T) {
	const topic, partitions = "deadagent", 3
	shipped := shippedTimings(t)
	checkTTL, lockDelay, lagTimeMax := shipped.Consul.CheckTTL, shipped.Consul.LockDelay, shipped.Replication.LagTimeMax
	c := Start(t, Options{HCL: fmt.Sprintf(`
consul {
  session_ttl = %q
  check_ttl   = %q
  lock_delay  = %q
}
replication {
  lag_time_max   = %q
  fetch_max_wait = %q
}
`, shipped.Consul.SessionTTL, checkTTL, lockDelay, lagTimeMax, shipped.Replication.FetchMaxWait)})
	if err := c.Agents[0].CreateTopic(TopicSpec{Name: topic, Partitions: partitions, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	all := []string{"n1", "n2", "n3"}
	leaders := map[int]string{}
	for p := range partitions {
		leader, _ := c.WaitLeader(topic, p, 30*time.Second)
		c.WaitISR(topic, p, all, 30*time.Second)
		leaders[p] = leader.NodeID
	}
	victim, via := c.Agents[0], c.Agents[1]
	for p := range partitions {
		if _, err := via.Produce(topic, p, ContentTypeNDJSON, []byte("\"before\"\n"), "all", 5*time.Second); err != nil {
			t.Fatalf("acks=all write to %s/%d before the kill: %v", topic, p, err)
		}
	}

	killed := time.Now()
	victim.Kill()
	rec := make([]partitionRecovery, partitions)
	var wg sync.WaitGroup
	giveUp := killed.Add(3 * lagTimeMax)
	for p := range partitions {
		rec[p].led = leaders[p] == victim.NodeID
		wg.Go(func() {
			for time.Now().Before(giveUp) {
				_, err := via.Produce(topic, p, ContentTypeNDJSON, []byte("\"after\"\n"), "all", 5*time.Second)
				if err == nil {
					rec[p].firstAck = time.Since(killed)
					return
				}
				rec[p].ackErrors++
				rec[p].lastError = err
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	// The committed ISR as Consul has it (the survivor's metadata).
	wg.Go(func() {
		for time.Now().Before(giveUp) {
			tp, err := via.Describe(topic)
			done := true
			for p := range partitions {
				if rec[p].shrunk > 0 {
					continue
				}
				if err != nil || p >= len(tp.Partitions) {
					done = false
					continue
				}
				if pm := tp.Partitions[p]; !slices.Contains(pm.ISR, victim.NodeID) && pm.Leader != victim.NodeID {
					rec[p].shrunk, rec[p].leader = time.Since(killed), pm.Leader
				} else {
					done = false
				}
			}
			if done {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	wg.Wait()

	for p, r := range rec {
		role := "followed"
		if r.led {
			role = "led"
		}
		t.Logf("%s/%d (%s by the killed %s): dead agent out of the ISR after %v (leader %s), first acks=all write acknowledged after %v (%d failed attempts before; last: %v)",
			topic, p, role, victim.NodeID, r.shrunk.Round(time.Millisecond), r.leader, r.firstAck.Round(time.Millisecond), r.ackErrors, r.lastError)
	}
	t.Logf("timings: check_ttl %v, lock_delay %v, lag_time_max %v", checkTTL, lockDelay, lagTimeMax)
	// A crash is seen by Consul at most check_ttl after it; the partition
	// it led needs an election too (lock delay, then a campaign).
	bound := checkTTL + lockDelay + 2*time.Second
	for p, r := range rec {
		switch {
		case r.firstAck == 0:
			t.Errorf("%s/%d: no acks=all write acknowledged within %v of the kill; last error %v", topic, p, giveUp.Sub(killed), r.lastError)
		case r.shrunk == 0:
			t.Errorf("%s/%d: %s still in the ISR %v after the kill", topic, p, victim.NodeID, giveUp.Sub(killed))
		case r.shrunk > bound:
			t.Errorf("%s/%d: %s left the ISR %v after the kill, later than %v (lag_time_max %v)", topic, p, victim.NodeID, r.shrunk, bound, lagTimeMax)
		}
	}
	if !slices.ContainsFunc(rec, func(r partitionRecovery) bool { return r.led }) {
		t.Errorf("%s led none of the partitions (leaders %v): the led case went untested", victim.NodeID, leaders)
	}
}
