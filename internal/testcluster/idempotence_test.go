package testcluster

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/wire"
)

// idemRequest is one idempotent produce of the test: its body, first
// sequence and the offsets it was first answered with.
type idemRequest struct {
	body       []byte
	seq        int32
	base, last int64
}

// produceUntilAcked sends one idempotent request through agent, again and
// again with the same headers and body, until it is acknowledged or
// refused for good, as a producer that retries after unknown outcomes does.
func produceUntilAcked(t *testing.T, c *Cluster, topic string, p ProducerID, body []byte, seq int32) (Produced, error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		for _, a := range c.Agents {
			if !a.Running() {
				continue
			}
			got, err := a.ProduceIdempotent(topic, 0, ContentTypeNDJSON, body, p, seq, 5*time.Second)
			if err == nil {
				return got, nil
			}
			var ae *APIError
			if errors.As(err, &ae) && ae.Status == 409 && (ae.Code == wire.CodeOutOfOrderSequence || ae.Code == wire.CodeInvalidProducerEpoch) {
				return got, err
			}
			last = err
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("sequence %d not acknowledged within 60 s: %v", seq, last)
	return Produced{}, nil
}

func ndjson(prefix string, n int) []byte {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "%s-%d\n", prefix, i)
	}
	return []byte(b.String())
}

// TestIdempotentProducer is the black-box contract of exactly-once appends
// on a real cluster: a resend after a kill -9 of the leader is answered with
// the original offsets and appends nothing; a resend of the 5th-last batch
// is a duplicate, of the 6th-last out of order; a gap is 409
// out_of_order_sequence; an older epoch after a bump is 409
// invalid_producer_epoch; and the state survives a restart of every agent.
// The log holds every record exactly once at the end.
func TestIdempotentProducer(t *testing.T) {
	c := Start(t, Options{})
	const topic = "idem"
	leader, _ := createReplicatedTopic(t, c, topic)
	sidecar := otherAgent(t, c, leader)
	p, err := sidecar.InitProducer(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("producer id %d epoch %d", p.ID, p.Epoch)

	var sent []idemRequest
	var seq int32
	send := func(name string, n int) {
		t.Helper()
		body := ndjson(name, n)
		got, err := produceUntilAcked(t, c, topic, p, body, seq)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.Duplicate {
			t.Fatalf("%s: first send answered as a duplicate: %+v", name, got)
		}
		sent = append(sent, idemRequest{body: body, seq: seq, base: *got.BaseOffset, last: *got.LastOffset})
		seq += int32(n)
	}
	for i := 0; i < 8; i++ {
		send(fmt.Sprintf("a%d", i), 3)
	}

	// The leader dies after acknowledging; the producer resends its last
	// request, not knowing the answer, and is told the original offsets.
	leader.Kill()
	lastReq := sent[len(sent)-1]
	got, err := produceUntilAcked(t, c, topic, p, lastReq.body, lastReq.seq)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Duplicate || *got.BaseOffset != lastReq.base || *got.LastOffset != lastReq.last {
		t.Fatalf("resend after the leader's kill: %+v, want duplicate of [%d, %d]", got, lastReq.base, lastReq.last)
	}
	t.Logf("resend after kill -9 of %s: duplicate, offsets [%d, %d] as first answered", leader.NodeID, *got.BaseOffset, *got.LastOffset)
	leader.Start()
	leader.WaitHealthy()

	// The last 5 batches are remembered, the 6th-last is not.
	fifth := sent[len(sent)-5]
	got, err = produceUntilAcked(t, c, topic, p, fifth.body, fifth.seq)
	if err != nil || !got.Duplicate || *got.BaseOffset != fifth.base {
		t.Fatalf("resend of the 5th-last batch: %+v, %v; want a duplicate at %d", got, err, fifth.base)
	}
	sixth := sent[len(sent)-6]
	_, err = produceUntilAcked(t, c, topic, p, sixth.body, sixth.seq)
	wantCode(t, "resend of the 6th-last batch", err, wire.CodeOutOfOrderSequence)

	// A gap.
	_, err = produceUntilAcked(t, c, topic, p, ndjson("gap", 1), seq+1)
	wantCode(t, "a sequence gap", err, wire.CodeOutOfOrderSequence)

	// A new epoch fences the old one.
	old, oldNext := p, seq
	p, err = sidecar.InitProducer(&old)
	if err != nil {
		t.Fatal(err)
	}
	if p.ID != old.ID || p.Epoch != old.Epoch+1 {
		t.Fatalf("bump of %+v answered %+v", old, p)
	}
	seq = 0
	send("b0", 2)
	_, err = produceUntilAcked(t, c, topic, old, ndjson("zombie", 1), oldNext)
	wantCode(t, "a write with the fenced epoch", err, wire.CodeInvalidProducerEpoch)
	send("b1", 2)

	// Every agent restarts (kill -9): the state comes back from the logs.
	for _, a := range c.Agents {
		a.Kill()
	}
	for _, a := range c.Agents {
		a.Start()
	}
	for _, a := range c.Agents {
		a.WaitHealthy()
	}
	lastReq = sent[len(sent)-1]
	got, err = produceUntilAcked(t, c, topic, p, lastReq.body, lastReq.seq)
	if err != nil || !got.Duplicate || *got.BaseOffset != lastReq.base {
		t.Fatalf("resend after every agent restarted: %+v, %v; want a duplicate at %d", got, err, lastReq.base)
	}
	// And a graceful restart of every agent (snapshots written at close).
	for _, a := range c.Agents {
		if code := a.Terminate(); code != 0 {
			t.Fatalf("%s exited %d", a.NodeID, code)
		}
	}
	for _, a := range c.Agents {
		a.Start()
	}
	for _, a := range c.Agents {
		a.WaitHealthy()
	}
	got, err = produceUntilAcked(t, c, topic, p, lastReq.body, lastReq.seq)
	if err != nil || !got.Duplicate || *got.BaseOffset != lastReq.base {
		t.Fatalf("resend after a graceful restart of every agent: %+v, %v; want a duplicate at %d", got, err, lastReq.base)
	}
	send("b2", 2)

	// Each record once, in the order acknowledged.
	end := sent[len(sent)-1].last + 1
	leader, _ = c.WaitLeader(topic, 0, 20*time.Second)
	records := map[int64][]byte{}
	for next := int64(0); next < end; {
		f, err := leader.Fetch(topic, 0, next, 1<<20, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := decodeRecords(t, f.Batches)
		if len(got) == 0 {
			t.Fatalf("no records at %d (high watermark %d)", next, f.HighWatermark)
		}
		for o, v := range got {
			records[o] = v
			next = max(next, o+1)
		}
	}
	seen := map[string]int64{}
	for o := int64(0); o < end; o++ {
		v, ok := records[o]
		if !ok {
			t.Fatalf("offset %d missing", o)
		}
		if first, dup := seen[string(v)]; dup {
			t.Fatalf("%q at offsets %d and %d", v, first, o)
		}
		seen[string(v)] = o
	}
	for _, r := range sent {
		for i, line := range strings.Split(strings.TrimSpace(string(r.body)), "\n") {
			if o, ok := seen[line]; !ok || o != r.base+int64(i) {
				t.Fatalf("%q at offset %d (present %v), acknowledged at %d", line, o, ok, r.base+int64(i))
			}
		}
	}
	t.Logf("%d records, each once, at the offsets first acknowledged", len(seen))
}

func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 409 || ae.Code != code {
		t.Fatalf("%s: %v, want 409 %s", what, err, code)
	}
	t.Logf("%s: %d %s: %s", what, ae.Status, ae.Code, ae.Message)
}

// TestSidecarResendsStalledForward: a plain acks=all request whose forward
// was appended by the leader but whose answer stalls (the leader-to-sidecar
// link cut) is sent again by the sidecar, with its own producer id, once
// the first attempt gives up half way through the request's timeout; the
// leader recognises the resend, so the request succeeds and the record is
// in the log once. An acks=1 request in the same spot is not resent: it
// answers 504 ack_timeout.
func TestSidecarResendsStalledForward(t *testing.T) {
	c := Start(t, Options{Proxies: true})
	const topic = "stall"
	leader, _ := createReplicatedTopic(t, c, topic)
	sidecar := otherAgent(t, c, leader)
	if _, err := sidecar.Produce(topic, 0, ContentTypeNDJSON, []byte("warm-up\n"), "all", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	const timeout = 10 * time.Second
	run := func(value, acks string, healAfter time.Duration) (Produced, time.Duration, error) {
		c.CutLink(leader, sidecar)
		healLink := func() {
			leader.PeerProxy.Heal()
			sidecar.PeerProxy.Heal()
		}
		heal := time.AfterFunc(healAfter, healLink)
		defer func() {
			heal.Stop()
			healLink()
		}()
		start := time.Now()
		got, err := sidecar.Produce(topic, 0, ContentTypeNDJSON, []byte(value+"\n"), acks, timeout)
		return got, time.Since(start), err
	}
	// The first attempt gives up after timeout/2 plus a second of grace.
	got, took, err := run("stalled-all", "all", timeout/2+2*time.Second)
	if err != nil {
		t.Fatalf("acks=all through a stalled forward: %v after %s", err, took)
	}
	t.Logf("acks=all: answered after %s at offset %d", took.Round(time.Millisecond), *got.BaseOffset)
	logged, err := os.ReadFile(sidecar.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logged), "resending an idempotent batch after an unknown outcome") {
		t.Fatalf("the sidecar did not resend (answered after %s)", took)
	}
	_, took, err = run("stalled-one", "1", timeout+2*time.Second)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != wire.CodeAckTimeout {
		t.Fatalf("acks=1 through a stalled forward: %v after %s, want 504 ack_timeout", err, took)
	}
	t.Logf("acks=1: %d %s after %s", ae.Status, ae.Code, took.Round(time.Millisecond))
	// Each value once.
	c.WaitISR(topic, 0, []string{"n1", "n2", "n3"}, 30*time.Second)
	f, err := leader.Fetch(topic, 0, 0, 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, v := range decodeRecords(t, f.Batches) {
		counts[string(v)]++
	}
	if counts["stalled-all"] != 1 {
		t.Fatalf("stalled-all is in the log %d times: %v", counts["stalled-all"], counts)
	}
	t.Logf("log: %v", counts)
}

// TestConcurrentIdempotentProducersThroughSidecar: many idempotent
// producers writing one partition at once through an agent that does not
// lead it (whose coalescer sends their batches side by side, never
// combined): every request is acknowledged, and every record is in the log
// once, at the offset its request was told.
func TestConcurrentIdempotentProducersThroughSidecar(t *testing.T) {
	c := Start(t, Options{})
	const topic, producers, requests = "crowd", 16, 20
	leader, _ := createReplicatedTopic(t, c, topic)
	sidecar := otherAgent(t, c, leader)
	type acked struct {
		value string
		at    int64
	}
	results := make(chan acked, producers*requests)
	errs := make(chan error, producers)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			id, err := sidecar.InitProducer(nil)
			if err != nil {
				errs <- err
				return
			}
			for i := range requests {
				value := fmt.Sprintf("p%d-%d", p, i)
				got, err := sidecar.ProduceIdempotent(topic, 0, ContentTypeNDJSON, []byte(value+"\n"), id, int32(i), 10*time.Second)
				if err != nil {
					errs <- fmt.Errorf("%s: %w", value, err)
					return
				}
				results <- acked{value, *got.BaseOffset}
			}
		})
	}
	wg.Wait()
	close(results)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	f, err := leader.Fetch(topic, 0, 0, 16<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	log := decodeRecords(t, f.Batches)
	n := 0
	for r := range results {
		if got := string(log[r.at]); got != r.value {
			t.Fatalf("%s acknowledged at %d, which holds %q", r.value, r.at, got)
		}
		n++
	}
	if len(log) != n {
		t.Fatalf("the log holds %d records for %d acknowledged", len(log), n)
	}
	t.Logf("%d idempotent requests from %d producers, each once in the log", n, producers)
}
