package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/logagent/logagent/client"
	"github.com/logagent/logagent/internal/consultest"
	"github.com/logagent/logagent/record"
)

// TestProduceIdempotentWithAnAgent runs produce against a real agent (and a
// real Consul): by default its batches reach the log as an idempotent
// producer's (producer id, base sequences from 0), with -idempotent=false
// as a plain producer's, and each line is stored once, in order.
func TestProduceIdempotentWithAnAgent(t *testing.T) {
	consul := consultest.Start(t)
	s := newAgentSetup(t, "n1", consul.HTTPAddr())
	agent, _ := s.start(t)
	s.waitHealthy(t, agent)
	addr := "http://" + s.clientAddr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic(ctx, client.TopicSpec{Name: "t", Partitions: 1, ReplicationFactor: 1, MinInsyncReplicas: 1}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "a leader of t/0", func() bool {
		info, err := c.DescribeTopic(ctx, "t")
		return err == nil && len(info.Partitions) == 1 && info.Partitions[0].Leader != ""
	})

	runs := []struct {
		name       string
		args       []string
		lines      []string
		idempotent bool
	}{
		{"default", nil, []string{"a", "b", "c"}, true},
		// Batches of one line, several in flight.
		{"small batches", []string{"-linger", "0", "-batch-bytes", "80"}, []string{"d", "e", "f", "g"}, true},
		{"turned off", []string{"-idempotent=false"}, []string{"h"}, false},
	}
	var want []string
	for _, r := range runs {
		args := append([]string{"produce", "-addr", addr, "-topic", "t", "-partition", "0"}, r.args...)
		// Once: a second run would write the lines again.
		code, stdout, stderr := runData(ctx, args, strings.Join(r.lines, "\n")+"\n")
		if code != 0 || !strings.Contains(stdout, fmt.Sprintf("produced %d record(s)", len(r.lines))) {
			t.Fatalf("%s: exit %d: %s%s", r.name, code, stdout, stderr)
		}
		want = append(want, r.lines...)
	}

	// The log as stored: the batches' headers, and every record once.
	resp, err := http.Get(addr + "/v1/topics/t/partitions/0/records?offset=earliest&max_bytes=1048576")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("fetch: %s %v", resp.Status, err)
	}
	batches, err := record.SplitBatches(body, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := record.NewDecoder(record.Limits{})
	var got []string
	producers := map[int64]int32{} // id -> next sequence
	for _, b := range batches {
		h, _, err := record.ParseHeader(b, 0)
		if err != nil {
			t.Fatal(err)
		}
		it, err := d.Records(b)
		if err != nil {
			t.Fatal(err)
		}
		var values []string
		for it.Next() {
			values = append(values, string(it.Record().Value))
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		got = append(got, values...)
		idempotent := values[0] != "h"
		switch {
		case !idempotent && producers[h.ProducerID()] != 0:
			// The agent's sidecar sends a plain acks=all request with a
			// producer id of its own (producer.sidecar_idempotence), never
			// with one of the CLI's.
			t.Errorf("batch %v of -idempotent=false stored with the CLI's producer %d", values, h.ProducerID())
		case idempotent && (h.ProducerID() < 0 || h.ProducerEpoch() != 0 || h.BaseSequence() != producers[h.ProducerID()]):
			t.Errorf("batch %v: producer %d epoch %d sequence %d, want sequence %d", values, h.ProducerID(), h.ProducerEpoch(), h.BaseSequence(), producers[h.ProducerID()])
		case idempotent:
			producers[h.ProducerID()] += int32(len(values))
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("stored %q, want %q: each line once, in order", got, want)
	}
	if len(producers) != 2 {
		t.Errorf("%d producer ids, want one per idempotent run: %v", len(producers), producers)
	}
}

// TestProduceStopsWhileStdinIsIdle: produce reading a terminal, or a pipe
// with nothing more to say, stops at Ctrl-C or SIGTERM (the end of its
// context) and at a record that failed without waiting for another line:
// it reports the records sent and fails saying where it stopped.
func TestProduceStopsWhileStdinIsIdle(t *testing.T) {
	f := newFakeClientAPI(t)
	f.addTopic(threePartitions("t"))
	cases := []struct {
		name      string
		partition string // 7: the topic has no such partition
		interrupt bool
		stdout    string
		err       string
	}{
		{"interrupted", "0", true, "produced 1 record(s) to topic t\n  partition 0: offsets 0-0 (1 record(s))\n",
			"interrupted: stopped reading stdin after line 1: context canceled"},
		{"a record failed", "7", false, "produced 0 record(s) to topic t\n",
			"1 of 1 record(s) sent not acknowledged; stopped reading stdin at line 2: it and the lines after it were not sent"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stdin, feed := io.Pipe()
			// A reader still blocked on stdin ends when the test does.
			t.Cleanup(func() { feed.Close() })
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var stdout, stderr syncBuffer
			done := make(chan error, 1)
			sent := len(f.produceQueries())
			go func() {
				done <- produce(ctx, []string{"-addr", f.srv.URL, "-topic", "t", "-partition", c.partition, "-linger", "0"}, stdin, &stdout, &stderr)
			}()
			if _, err := io.WriteString(feed, "one\n"); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, 10*time.Second, "the line's produce request", func() bool { return len(f.produceQueries()) > sent })
			if c.interrupt {
				cancel()
			}
			select {
			case err := <-done:
				if code := exitCodeOf(err); code != exitFailure || err.Error() != c.err || stdout.String() != c.stdout {
					t.Errorf("exit %d, error %v, stdout %q; want exit 1, error %q, stdout %q\nstderr: %s", code, err, stdout.String(), c.err, c.stdout, stderr.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("produce still waiting for a line of stdin after 10s; stdout %q, stderr %q", stdout.String(), stderr.String())
			}
		})
	}
}
