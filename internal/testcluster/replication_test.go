package testcluster

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/testseed"
)

// TestReplicasByteIdenticalBelowHW: three agents, RF 3, min ISR 2, records
// produced acks=all in batches of 100 by concurrent producers; afterwards
// every replica's segment bytes below the high watermark are identical
// (leader epochs included) and hold every acknowledged record once.
// LOGAGENT_REPL_RECORDS changes the number of records (default 100000).
func TestReplicasByteIdenticalBelowHW(t *testing.T) {
	const topic, perBatch, producers = "ident", 100, 4
	records := envInt(t, "LOGAGENT_REPL_RECORDS", 100000)
	batches := (records + perBatch - 1) / perBatch
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 1))

	c := Start(t, Options{})
	leader, epoch := createReplicatedTopic(t, c, topic)

	// Bodies are built before the clock starts.
	bodies := make([][][]byte, producers)
	for i := range batches {
		p := i % producers
		bodies[p] = append(bodies[p], buildBatch(t, valuesOf(rng, p, len(bodies[p])*perBatch, perBatch, 64)))
	}
	var (
		mu    sync.Mutex
		acked = map[int64]int{} // base offset -> record count
		wg    sync.WaitGroup
		errs  = make(chan error, producers)
	)
	start := time.Now()
	for p := range producers {
		wg.Go(func() {
			for _, body := range bodies[p] {
				res, err := leader.Produce(topic, 0, ContentTypeBatch, body, "all", 10*time.Second)
				if err != nil {
					errs <- fmt.Errorf("producer %d: %w", p, err)
					return
				}
				mu.Lock()
				acked[*res.BaseOffset] = res.Count
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := int64(batches * perBatch)
	t.Logf("%d records in %d acks=all batches from %d producers in %s: %.0f records/s, %.0f batches/s",
		total, batches, producers, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), float64(batches)/elapsed.Seconds())

	waitReplicasAt(t, c, topic, 0, total, 20*time.Second)
	logBytes := compareReplicas(t, c.Agents, topic, 0, total)
	values := decodeRecords(t, logBytes)
	if int64(len(values)) != total {
		t.Fatalf("%d records below the high watermark, %d acknowledged", len(values), total)
	}
	for base, n := range acked {
		for off := base; off < base+int64(n); off++ {
			if _, ok := values[off]; !ok {
				t.Fatalf("acknowledged offset %d missing", off)
			}
		}
	}
	fetched, err := leader.Fetch(topic, 0, 0, 64<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fetched.Batches, logBytes) || fetched.HighWatermark != total || fetched.LogStartOffset != 0 {
		t.Fatalf("a fetch of the whole partition from the leader: %d bytes, high watermark %d, log start %d; want the %d bytes of the log, %d, 0",
			len(fetched.Batches), fetched.HighWatermark, fetched.LogStartOffset, len(logBytes), total)
	}
	split, _ := Batches(logBytes)
	for _, b := range split {
		if e := epochOf(b); e != epoch {
			t.Fatalf("batch with epoch %d, the only leader had epoch %d", e, epoch)
		}
	}
	t.Logf("replicas byte-identical below offset %d: %d bytes, %d batches, leader %s epoch %d",
		total, len(logBytes), len(split), leader.NodeID, epoch)
}

// TestKillLeaderMidStream: producers stream acks=all writes while the
// leader is killed with SIGKILL. Before the kill, the followers are paused
// and the leader takes acks=1 writes that no follower has: an
// unacknowledged (for acks=all) tail. Afterwards every acks=all write that
// was acknowledged is in the new leader's log, the epoch is higher, and the
// restarted ex-leader truncates its tail, catches up byte for byte and
// rejoins the ISR.
func TestKillLeaderMidStream(t *testing.T) {
	const topic, perBatch, producers = "failover", 20, 3
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 2))
	c := Start(t, Options{})
	old, oldEpoch := createReplicatedTopic(t, c, topic)
	var followers []*Agent
	for _, a := range c.Agents {
		if a != old {
			followers = append(followers, a)
		}
	}

	type ack struct {
		base  int64
		count int
		value []byte // the first record's value
	}
	var (
		mu    sync.Mutex
		acked []ack
		stop  = make(chan struct{})
		wg    sync.WaitGroup
	)
	for p := range producers {
		prng := rand.New(rand.NewPCG(rng.Uint64(), uint64(p)))
		wg.Go(func() {
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				values := valuesOf(prng, p, seq*perBatch, perBatch, 32)
				// Every agent is tried: after the failover the producer
				// finds the new leader by its not_leader answers.
				done := false
				for _, a := range c.Agents {
					res, err := a.Produce(topic, 0, ContentTypeBatch, buildBatch(t, values), "all", 3*time.Second)
					if err == nil {
						mu.Lock()
						acked = append(acked, ack{base: *res.BaseOffset, count: res.Count, value: values[0]})
						mu.Unlock()
						done = true
						break
					}
				}
				if !done {
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}

	// Let the stream run, then build the unacknowledged tail.
	time.Sleep(500 * time.Millisecond)
	for _, f := range followers {
		f.Pause()
	}
	time.Sleep(100 * time.Millisecond) // SIGSTOP has taken effect
	var tail []int64
	for i := range 5 {
		res, err := old.Produce(topic, 0, ContentTypeBatch, buildBatch(t, valuesOf(rng, 99, i, 10, 32)), "1", 3*time.Second)
		if err != nil {
			t.Fatalf("acks=1 write to the leader with paused followers: %v", err)
		}
		tail = append(tail, *res.BaseOffset)
	}
	oldTail, err := old.DescribePartition(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	old.Kill()
	for _, f := range followers {
		f.Resume()
	}
	killedAt := time.Now()
	oldLog, err := LogBytesBelow(old.PartitionDir(topic, 0), *oldTail.LogEndOffset)
	if err != nil {
		t.Fatal(err)
	}

	leader, epoch := c.WaitLeader(topic, 0, 20*time.Second)
	t.Logf("killed %s (epoch %d, log end %d, acks=1 tail at %v); %s leads epoch %d after %s",
		old.NodeID, oldEpoch, *oldTail.LogEndOffset, tail, leader.NodeID, epoch, time.Since(killedAt).Round(time.Millisecond))
	if epoch <= oldEpoch {
		t.Fatalf("new epoch %d is not above the old %d", epoch, oldEpoch)
	}
	time.Sleep(500 * time.Millisecond) // the stream goes on with the new leader
	close(stop)
	wg.Wait()

	old.Restart()
	c.WaitISR(topic, 0, []string{"n1", "n2", "n3"}, 30*time.Second)
	// One more write moves the high watermark past the old tail's offsets,
	// so the comparison below covers them.
	now, err := leader.DescribePartition(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	filler := bytes.Repeat([]byte("filler\n"), int(max(1, *oldTail.LogEndOffset-*now.LogEndOffset+1)))
	final, err := leader.Produce(topic, 0, ContentTypeNDJSON, filler, "all", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	hw := *final.LastOffset + 1
	if hw <= *oldTail.LogEndOffset {
		t.Fatalf("high watermark %d did not pass the old leader's log end %d", hw, *oldTail.LogEndOffset)
	}
	waitReplicasAt(t, c, topic, 0, hw, 20*time.Second)
	logBytes := compareReplicas(t, append([]*Agent{leader}, slices.DeleteFunc(slices.Clone(c.Agents), func(a *Agent) bool { return a == leader })...), topic, 0, hw)
	values := decodeRecords(t, logBytes)

	mu.Lock()
	defer mu.Unlock()
	for _, a := range acked {
		if got := values[a.base]; !bytes.Equal(got, a.value) {
			t.Fatalf("acknowledged write at offset %d: log has %q, want %q", a.base, got, a.value)
		}
	}
	// A paused follower may still take the first tail write, from the
	// fetch it had parked on the leader; the later ones exist only on the
	// ex-leader, so its log as it was at the kill is not a prefix of the
	// log it now shares.
	survived := 0
	for _, v := range values {
		if bytes.HasPrefix(v, []byte("p99-")) {
			survived++
		}
	}
	if bytes.HasPrefix(logBytes, oldLog) || survived == 5*10 {
		t.Fatalf("the ex-leader's log at the kill (%d bytes) is still part of the shared log: no divergent tail was cut", len(oldLog))
	}
	t.Logf("%d acknowledged acks=all writes all present; the ex-leader cut its divergent tail (%d of 50 acks=1 records survived through a parked fetch) and rejoined the ISR",
		len(acked), survived)
}

// TestMinInsyncRefusesBeforeAppend: with min ISR 2 and both followers
// gone, acks=all is refused with 503 not_enough_replicas and nothing is
// appended; once a follower is back in the ISR, writes succeed again.
func TestMinInsyncRefusesBeforeAppend(t *testing.T) {
	const topic = "minisr"
	c := Start(t, Options{})
	leader, _ := createReplicatedTopic(t, c, topic)
	if _, err := leader.Produce(topic, 0, ContentTypeNDJSON, []byte("a\nb\n"), "all", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	var followers []*Agent
	for _, a := range c.Agents {
		if a != leader {
			followers = append(followers, a)
			a.Kill()
		}
	}
	// As in Kafka, a follower that stopped at the leader's log end stays in
	// sync until the leader's log moves on: an acks=1 write lets the leader
	// see both lag behind for lag_time_max, and shrink the ISR.
	if _, err := leader.Produce(topic, 0, ContentTypeNDJSON, []byte("moves the log end\n"), "1", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	c.WaitISR(topic, 0, []string{leader.NodeID}, 20*time.Second)
	before, err := leader.DescribePartition(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, refused := leader.Produce(topic, 0, ContentTypeNDJSON, []byte("refused\n"), "all", 5*time.Second)
	var apiErr *APIError
	if !asAPIError(refused, &apiErr) || apiErr.Status != 503 || apiErr.Code != "not_enough_replicas" || !apiErr.Retriable {
		t.Fatalf("acks=all with ISR [%s]: %v, want 503 not_enough_replicas", leader.NodeID, refused)
	}
	after, err := leader.DescribePartition(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if *after.LogEndOffset != *before.LogEndOffset {
		t.Fatalf("log end offset moved from %d to %d: a refused write was appended", *before.LogEndOffset, *after.LogEndOffset)
	}
	t.Logf("refused: %v; log end offset still %d", refused, *after.LogEndOffset)

	followers[0].Restart()
	c.WaitISR(topic, 0, []string{leader.NodeID, followers[0].NodeID}, 20*time.Second)
	res, err := leader.Produce(topic, 0, ContentTypeNDJSON, []byte("accepted\n"), "all", 5*time.Second)
	if err != nil {
		t.Fatalf("acks=all with %s back in the ISR: %v", followers[0].NodeID, err)
	}
	if *res.BaseOffset != *before.LogEndOffset {
		t.Fatalf("accepted write at %d, want the old log end %d", *res.BaseOffset, *before.LogEndOffset)
	}
}

// TestGracefulStopHandsOver: SIGTERM makes the leader hand the partition
// over at once (it releases its lock, no lock delay) and exit 0; the new
// leader has every acknowledged record.
func TestGracefulStopHandsOver(t *testing.T) {
	const topic = "sigterm"
	c := Start(t, Options{})
	old, oldEpoch := createReplicatedTopic(t, c, topic)
	res, err := old.Produce(topic, 0, ContentTypeNDJSON, []byte("one\ntwo\nthree\n"), "all", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var others []*Agent
	for _, a := range c.Agents {
		if a != old {
			others = append(others, a)
		}
	}
	// Watched while the old leader stops, to time the hand-over itself.
	start := time.Now()
	handedOver := make(chan time.Duration, 1)
	go func() {
		for time.Since(start) < 10*time.Second {
			for _, a := range others {
				if p, err := a.DescribePartition(topic, 0); err == nil && p.Role == "leader" && p.Epoch > oldEpoch {
					handedOver <- time.Since(start)
					return
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
		close(handedOver)
	}()
	if code := old.Terminate(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	stopped := time.Since(start)
	// Released, not expired: the stopped agent destroyed its session
	// before it exited. Without that, the session would live on until its
	// health check failed, and a hand-over would still come, seconds later.
	sessions, _, err := c.Consul.Client().Session().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sessions {
		if s.Name == "logagent-"+old.NodeID {
			t.Fatalf("%s exited after SIGTERM with its session %s still in Consul: its locks were left to expire, not released", old.NodeID, s.ID)
		}
	}
	after, ok := <-handedOver
	if !ok {
		t.Fatal("no new leader within 10s of the SIGTERM")
	}
	leader, epoch := c.WaitLeader(topic, 0, 10*time.Second)
	t.Logf("%s (epoch %d) exited %s after SIGTERM; %s led epoch %d %s after the SIGTERM",
		old.NodeID, oldEpoch, stopped.Round(time.Millisecond), leader.NodeID, epoch, after.Round(time.Millisecond))
	if epoch <= oldEpoch {
		t.Fatalf("epoch %d after %d", epoch, oldEpoch)
	}
	f, err := leader.Fetch(topic, 0, 0, 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	values := decodeRecords(t, f.Batches)
	if len(values) != res.Count {
		t.Fatalf("the new leader serves %d records, want %d", len(values), res.Count)
	}
	for i, want := range []string{"one", "two", "three"} {
		if got := string(values[*res.BaseOffset+int64(i)]); got != want {
			t.Fatalf("the new leader serves %q at offset %d, want %q", got, *res.BaseOffset+int64(i), want)
		}
	}
}
