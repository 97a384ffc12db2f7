package testcluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/record"
)

// producers is an HTTP client that keeps a connection per concurrent
// producer, so the measurement is the agents' and not connection setup.
func producers(n int) *http.Client {
	return &http.Client{
		Timeout:   60 * time.Second,
		Transport: &http.Transport{MaxIdleConns: 2 * n, MaxIdleConnsPerHost: 2 * n},
	}
}

// produceVia posts one produce request with hc and decodes the answer.
func produceVia(hc *http.Client, a *Agent, topic string, partition int, contentType string, body []byte) (Produced, error) {
	u := fmt.Sprintf("http://%s/v1/topics/%s/records?partition=%d&acks=all&timeout=10s", a.ClientAddr, topic, partition)
	resp, err := hc.Post(u, contentType, bytes.NewReader(body))
	if err != nil {
		return Produced{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Produced{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return Produced{}, decodeAPIError(resp.StatusCode, b)
	}
	var p Produced
	if err := json.Unmarshal(b, &p); err != nil {
		return Produced{}, fmt.Errorf("%w: %s", err, b)
	}
	return p, nil
}

// startOneLeaderTopic creates a one-partition topic replicated on every
// agent and returns its leader and an agent that does not lead it.
func startOneLeaderTopic(t testing.TB, c *Cluster, topic string) (leader, other *Agent) {
	t.Helper()
	leader, _ = createReplicatedTopic(t, c, topic)
	for _, a := range c.Agents {
		if a != leader {
			return leader, a
		}
	}
	t.Fatal("testcluster: one agent only")
	return nil, nil
}

// fetchAll reads a partition's records below end through a, fetch after
// fetch (an answer never spans segments), and counts the batches. Each
// fetch may wait a little: a follower's high watermark can trail the
// leader's by one replica fetch.
func fetchAll(t *testing.T, a *Agent, topic string, partition int, end int64) (map[int64][]byte, int) {
	t.Helper()
	all := map[int64][]byte{}
	batches := 0
	for next := int64(0); next < end; {
		f, err := a.Fetch(topic, partition, next, 4<<20, 2*time.Second)
		if err != nil {
			t.Fatalf("fetch %s/%d at %d through %s: %v", topic, partition, next, a.NodeID, err)
		}
		split, err := Batches(f.Batches)
		if err != nil || len(split) == 0 {
			t.Fatalf("fetch %s/%d at %d through %s: %d batches, %v", topic, partition, next, a.NodeID, len(split), err)
		}
		batches += len(split)
		from := next
		for off, v := range decodeRecords(t, f.Batches) {
			if off >= from {
				all[off] = v
				next = max(next, off+1)
			}
		}
	}
	return all, batches
}

// TestSidecarCoalescesConcurrentProduces: concurrent producers of several
// records each, through a sidecar that does not lead the partition, each
// get offsets that hold exactly their records, in their order, and no two
// callers' offsets overlap.
func TestSidecarCoalescesConcurrentProduces(t *testing.T) {
	const topic, callers, rounds, perCall = "coalesce", 16, 5, 3
	c := Start(t, Options{HCL: `producer { linger = "5ms" }`})
	_, sidecar := startOneLeaderTopic(t, c, topic)
	hc := producers(callers)

	var mu sync.Mutex
	sent := map[int64][]byte{}
	var wg sync.WaitGroup
	var failed atomic.Bool
	for caller := range callers {
		wg.Go(func() {
			for round := range rounds {
				values := make([][]byte, perCall)
				for i := range values {
					values[i] = fmt.Appendf(nil, "c%d-r%d-%d", caller, round, i)
				}
				p, err := produceVia(hc, sidecar, topic, 0, ContentTypeNDJSON, bytes.Join(values, []byte("\n")))
				if err != nil || p.BaseOffset == nil || *p.LastOffset-*p.BaseOffset != perCall-1 || p.Count != perCall {
					t.Errorf("caller %d round %d: %+v %v", caller, round, p, err)
					failed.Store(true)
					return
				}
				mu.Lock()
				for i, v := range values {
					if _, dup := sent[*p.BaseOffset+int64(i)]; dup {
						t.Errorf("offset %d given twice", *p.BaseOffset+int64(i))
					}
					sent[*p.BaseOffset+int64(i)] = v
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if failed.Load() {
		t.FailNow()
	}
	total := int64(callers * rounds * perCall)
	waitReplicasAt(t, c, topic, 0, total, 20*time.Second)
	got, batches := fetchAll(t, sidecar, topic, 0, total)
	t.Logf("%d records from %d requests in %d batches", total, callers*rounds, batches)
	if batches >= callers*rounds {
		t.Errorf("%d requests made %d batches: nothing was coalesced", callers*rounds, batches)
	}
	if int64(len(got)) != total {
		t.Fatalf("log holds %d records, want %d", len(got), total)
	}
	for off, v := range sent {
		if !bytes.Equal(got[off], v) {
			t.Fatalf("offset %d holds %q, its producer was told %q", off, got[off], v)
		}
	}
}

// logEnd is the log end offset of the leader's replica of bench/0.
func logEnd(b *testing.B, leader *Agent) int64 {
	p, err := leader.DescribePartition("bench", 0)
	if err != nil {
		b.Fatal(err)
	}
	return *p.LogEndOffset
}

// recordsPerBatch is the mean number of records in the batches of the
// leader's log of bench/0 from offset from on.
func recordsPerBatch(b *testing.B, leader *Agent, from int64) float64 {
	end := logEnd(b, leader)
	log, err := LogBytesBelow(leader.PartitionDir("bench", 0), end)
	if err != nil {
		b.Fatal(err)
	}
	batches, err := Batches(log)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, batch := range batches {
		if record.Header(batch).BaseOffset() >= from {
			n++
		}
	}
	return float64(end-from) / float64(max(n, 1))
}

// produceFast posts one binary batch with a fasthttp client.
func produceFast(hc *fasthttp.HostClient, uri string, batch []byte) error {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType(ContentTypeBatch)
	req.SetRequestURI(uri)
	req.SetBodyRaw(batch)
	if err := hc.Do(req, resp); err != nil {
		return err
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return decodeAPIError(resp.StatusCode(), resp.Body())
	}
	return nil
}

// BenchmarkSidecarCoalescing: 64 concurrent producers of single records,
// acks=all, through one sidecar (one that does not lead the partition, and
// the leader), with coalescing on (producer.linger 1ms) and off (linger 0).
// It reports records per second. The floor is the same 64 producers
// against a fasthttp server in the benchmark's process that answers every
// request at once, doing nothing with it: what HTTP alone costs on this
// machine, with no sidecar, replication or disk behind it.
//
//	go test -run '^$' -bench SidecarCoalescing -benchtime 20000x ./internal/testcluster
//
// With LOGAGENT_BENCH_PROFILE=DIR each run also records a 5-second CPU
// profile of every agent into DIR (give it enough records to last 5 s);
// LOGAGENT_BENCH_DURABILITY=replicated runs the agents without an fsync
// before the ack (default: the shipped "fsync").
func BenchmarkSidecarCoalescing(b *testing.B) {
	batch := buildBatch(b, [][]byte{[]byte("a small record of about forty bytes....")})
	for _, mode := range []struct{ name, linger string }{{"on", "1ms"}, {"off", "0s"}} {
		b.Run("coalescing="+mode.name, func(b *testing.B) {
			profileDir := os.Getenv(ProfileDirEnv)
			hcl := `producer { linger = "` + mode.linger + `" }` + "\n"
			if profileDir != "" {
				hcl += ProfileHCL
			}
			if d := os.Getenv(benchDurabilityEnv); d != "" {
				hcl += `storage { durability = "` + d + `" }` + "\n"
			}
			c := Start(b, Options{HCL: hcl})
			leader, other := startOneLeaderTopic(b, c, "bench")
			for _, via := range []struct {
				name  string
				agent *Agent
			}{{"via=follower", other}, {"via=leader", leader}} {
				b.Run(via.name, func(b *testing.B) {
					from := logEnd(b, leader)
					var profiled func() error
					elapsed := runProducers(b, via.agent.ClientAddr, batch, func() {
						if profileDir != "" {
							profiled = ProfileCPU(profileDir, b.Name(), 5*time.Second, c.Agents...)
						}
					})
					if profiled != nil {
						if err := profiled(); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
					b.StopTimer()
					b.ReportMetric(recordsPerBatch(b, leader, from), "records/batch")
				})
			}
		})
	}
	b.Run("floor", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		answer := []byte(`{"topic":"bench","partition":0,"base_offset":1,"last_offset":1,"count":1,"epoch":1}` + "\n")
		srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("application/json")
			ctx.SetBody(answer)
		}}
		go srv.Serve(ln)
		defer srv.Shutdown()
		elapsed := runProducers(b, ln.Addr().String(), batch, nil)
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
	})
}

// benchDurabilityEnv overrides storage.durability in
// BenchmarkSidecarCoalescing.
const benchDurabilityEnv = "LOGAGENT_BENCH_DURABILITY"

// sidecarProducers is how many producers BenchmarkSidecarCoalescing runs.
const sidecarProducers = 64

// runProducers sends b.N single-batch produce requests (acks=all) to addr
// from sidecarProducers goroutines, one request at a time each, over a
// fasthttp client (so the producers' own HTTP work takes less of the two
// cores than net/http's would), after a warm-up that opens the
// connections. started runs when the timed part starts. It returns the
// timed part's duration.
func runProducers(b *testing.B, addr string, batch []byte, started func()) time.Duration {
	hc := &fasthttp.HostClient{Addr: addr, MaxConns: 2 * sidecarProducers, ReadTimeout: 30 * time.Second}
	uri := "http://" + addr + "/v1/topics/bench/records?partition=0&acks=all&timeout=10s"
	var next atomic.Int64
	var failed atomic.Value
	run := func(n int64) {
		var wg sync.WaitGroup
		for range sidecarProducers {
			wg.Go(func() {
				for next.Add(1) <= n {
					if err := produceFast(hc, uri, batch); err != nil {
						failed.Store(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	run(2 * sidecarProducers)
	next.Store(0)
	b.ResetTimer()
	start := time.Now()
	if started != nil {
		started()
	}
	run(int64(b.N))
	elapsed := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return elapsed
}
