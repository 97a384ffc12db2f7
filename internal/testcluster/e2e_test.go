package testcluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/client"
)

// TestEndToEndThroughSidecars (acceptance 1, 2, 5): records produced
// through agent A's sidecar, half as ndjson over HTTP and half with the Go
// client, to partitions other agents lead, all read back through agent C's
// sidecar in order, with no gap and no duplicate. A fetch of more than 64
// KiB from C's own replica leaves through sendfile. The real CLI's
// `consume -follow` against C prints a new record soon after its
// acknowledgement; the delay is logged, not asserted.
//
// LOGAGENT_E2E_RECORDS sets the total (default 10000; the acceptance
// figure is 100000).
func TestEndToEndThroughSidecars(t *testing.T) {
	const topic, partitions, linesPerRequest = "e2e", 3, 200
	total := envInt(t, "LOGAGENT_E2E_RECORDS", 10000)
	c := Start(t, Options{})
	if err := c.Agents[0].CreateTopic(TopicSpec{Name: topic, Partitions: partitions, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	leaders := make([]*Agent, partitions)
	for p := range partitions {
		leaders[p], _ = c.WaitLeader(topic, p, 20*time.Second)
		c.WaitISR(topic, p, []string{"n1", "n2", "n3"}, 20*time.Second)
	}
	// A is the agent leading the fewest partitions, C another one: who
	// leads depends on who campaigned first.
	a, cAgent := c.Agents[0], c.Agents[1]
	for _, ag := range c.Agents {
		if countLed(leaders, ag) < countLed(leaders, a) {
			a = ag
		}
	}
	for _, ag := range c.Agents {
		if ag != a {
			cAgent = ag
		}
	}
	var targets []int
	for p, leader := range leaders {
		if leader != a {
			targets = append(targets, p)
		}
	}
	t.Logf("producing %d records through %s to partitions %v, led elsewhere", total, a.NodeID, targets)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	// Records sent to each partition, by both producers.
	var countMu sync.Mutex
	counts := map[int]int64{}
	sentTo := func(p, n int) {
		countMu.Lock()
		counts[p] += int64(n)
		countMu.Unlock()
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	// ndjson over HTTP: values "h-<partition>-<seq>", acks=all.
	wg.Go(func() {
		sent := 0
		for req := 0; sent < total/2; req++ {
			p := targets[req%len(targets)]
			var body bytes.Buffer
			lines := 0
			for ; lines < linesPerRequest && sent < total/2; lines++ {
				fmt.Fprintf(&body, "h-%d-%d\n", p, sent)
				sent++
			}
			if _, err := a.Produce(topic, p, ContentTypeNDJSON, body.Bytes(), "all", 10*time.Second); err != nil {
				errs <- fmt.Errorf("ndjson produce: %w", err)
				return
			}
			sentTo(p, lines)
		}
	})
	// The Go client: values "g-<partition>-<seq>".
	wg.Go(func() {
		cl, err := client.New("http://" + a.ClientAddr)
		if err != nil {
			errs <- err
			return
		}
		prod, err := cl.NewProducer(client.WithDefaultTopic(topic), client.WithLinger(time.Millisecond))
		if err != nil {
			errs <- err
			return
		}
		futures := make([]*client.Future, 0, total-total/2)
		for i := range total - total/2 {
			p := targets[i%len(targets)]
			f, err := prod.Produce(ctx, client.Message{Value: fmt.Appendf(nil, "g-%d-%d", p, i), Partition: client.ToPartition(p)})
			if err != nil {
				errs <- fmt.Errorf("go client produce: %w", err)
				return
			}
			futures = append(futures, f)
			sentTo(p, 1)
		}
		if err := prod.Close(ctx); err != nil {
			errs <- err
			return
		}
		for i, f := range futures {
			if _, err := f.Wait(ctx); err != nil {
				errs <- fmt.Errorf("go client record %d: %w", i, err)
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d records acknowledged in %s", total, time.Since(start).Round(time.Millisecond))

	// Read every target partition through C: offsets from 0 without a
	// gap, each value once, each source's values in the order sent.
	cc, err := client.New("http://" + cAgent.ClientAddr)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, p := range targets {
		cons, err := cc.NewConsumer(topic, p, client.OffsetEarliest)
		if err != nil {
			t.Fatal(err)
		}
		// C's high watermark may trail the leader's by a fetch.
		end := counts[p]
		waitReplicasAt(t, c, topic, p, end, 20*time.Second)
		last := map[string]int{"h": -1, "g": -1}
		values := map[string]bool{}
		for off := int64(0); off < end; off++ {
			r, err := cons.Next(ctx)
			if err != nil {
				t.Fatalf("%s/%d offset %d through %s: %v", topic, p, off, cAgent.NodeID, err)
			}
			if r.Offset != off {
				t.Fatalf("%s/%d through %s: offset %d after %d", topic, p, cAgent.NodeID, r.Offset, off-1)
			}
			v := string(r.Value)
			if values[v] {
				t.Fatalf("%s/%d: %q twice", topic, p, v)
			}
			values[v] = true
			parts := strings.Split(v, "-")
			seq, err := strconv.Atoi(parts[len(parts)-1])
			if err != nil || parts[1] != strconv.Itoa(p) {
				t.Fatalf("%s/%d offset %d: unexpected value %q", topic, p, off, v)
			}
			if seq <= last[parts[0]] {
				t.Fatalf("%s/%d offset %d: %q after sequence %d of the same source", topic, p, off, v, last[parts[0]])
			}
			last[parts[0]] = seq
		}
		seen += int(end)
	}
	if seen != total {
		t.Fatalf("read %d records through %s, produced %d", seen, cAgent.NodeID, total)
	}

	t.Run("fetch above 64KiB leaves through sendfile", func(t *testing.T) {
		p := targets[0]
		// 256 KiB more, in records of 1 KiB, so the answer is well above
		// the 64 KiB where sendfile starts to pay.
		line := append(bytes.Repeat([]byte("s"), 1023), '\n')
		produced, err := a.Produce(topic, p, ContentTypeNDJSON, bytes.Repeat(line, 256), "all", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		from, end := *produced.BaseOffset, *produced.LastOffset+1
		c.WaitFor(10*time.Second, cAgent.NodeID+" knows the records committed", func() bool {
			d, err := cAgent.DescribePartition(topic, p)
			return err == nil && d.HighWatermark != nil && *d.HighWatermark >= end
		})
		fetch := func() int {
			req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://%s/v1/topics/%s/partitions/%d/records?offset=%d&max_bytes=%d", cAgent.ClientAddr, topic, p, from, 1<<20), nil)
			resp, err := c.http.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			n, err := io.Copy(io.Discard, resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("fetch: %d %v", resp.StatusCode, err)
			}
			return int(n)
		}
		fetch() // connection and page cache warm
		before := readSyscalls(t, cAgent.PID())
		n := fetch()
		reads := readSyscalls(t, cAgent.PID()) - before
		t.Logf("a %d-byte fetch from %s's replica took %d read-side system calls (a 4 KiB copy loop needs %d)", n, cAgent.NodeID, reads, n/4096)
		if n <= 64<<10 {
			t.Fatalf("fetch of %d bytes: want more than 64 KiB (produce more records)", n)
		}
		if limit := int64(n / (16 << 10)); reads > limit {
			t.Fatalf("%d read-side system calls for a %d-byte fetch (limit %d): the body was copied, not sent with sendfile", reads, n, limit)
		}
	})

	t.Run("cli consume -follow", func(t *testing.T) {
		p := targets[0]
		cmd := exec.Command(Binary(t), "consume", "-addr", "http://"+cAgent.ClientAddr, "-topic", topic,
			"-partition", strconv.Itoa(p), "-from", "latest", "-follow", "-wait", "2s")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		t.Cleanup(func() {
			_ = cmd.Process.Kill() // this test's own child, by its PID
			_ = cmd.Wait()
			if stderr.Len() > 0 {
				t.Logf("consume (pid %d) stderr: %s", pid, stderr.String())
			}
		})
		lines := make(chan string)
		go func() {
			s := bufio.NewScanner(stdout)
			for s.Scan() {
				lines <- s.Text()
			}
			close(lines)
		}()
		time.Sleep(500 * time.Millisecond) // the consumer is long-polling at latest
		var delays []time.Duration
		for i := range 5 {
			want := fmt.Sprintf("follow-%d", i)
			if _, err := a.Produce(topic, p, ContentTypeNDJSON, []byte(want), "all", 5*time.Second); err != nil {
				t.Fatal(err)
			}
			acked := time.Now()
			select {
			case line, ok := <-lines:
				if !ok || line != want {
					t.Fatalf("consume -follow printed %q (open %v), want %q", line, ok, want)
				}
				delays = append(delays, time.Since(acked))
			case <-time.After(10 * time.Second):
				t.Fatalf("consume -follow printed nothing for %q in 10s", want)
			}
		}
		t.Logf("consume -follow through %s printed each record %v after its acknowledgement through %s", cAgent.NodeID, delays, a.NodeID)
	})
}

func countLed(leaders []*Agent, a *Agent) int {
	n := 0
	for _, l := range leaders {
		if l == a {
			n++
		}
	}
	return n
}
