package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/logagent/logagent/client"
	"github.com/logagent/logagent/record"
)

// benchReport is the part of `bench ... -json` the tests read.
type benchReport struct {
	Workload    string                 `json:"workload"`
	Requests    int64                  `json:"requests"`
	Records     int64                  `json:"records"`
	Bytes       int64                  `json:"bytes"`
	ErrorCount  int64                  `json:"error_count"`
	Errors      map[string]int64       `json:"errors"`
	Latency     struct{ Count int64 }  `json:"latency_us"`
	EndToEnd    *struct{ Count int64 } `json:"end_to_end_latency_us"`
	NotConsumed *int64                 `json:"not_consumed"`
}

// runBenchJSON runs a bench command that must succeed and decodes its
// JSON report.
func runBenchJSON(t *testing.T, args ...string) benchReport {
	t.Helper()
	var out, errb bytes.Buffer
	if err := benchCommand(context.Background(), append(args, "-json"), &out, &errb); err != nil {
		t.Fatalf("bench %v: %v\nstdout: %s\nstderr: %s", args, err, out.String(), errb.String())
	}
	var rep benchReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("bench %v: %v\n%s", args, err, out.String())
	}
	return rep
}

// storedBatch is a batch the fake agent stored.
type storedBatch struct {
	partition int
	keys      []string
	values    [][]byte
}

func (f *fakeClientAPI) storedBatches(t *testing.T, topic string) []storedBatch {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []storedBatch
	d := record.NewDecoder(record.Limits{})
	for p, batches := range f.batches[topic] {
		for _, b := range batches {
			it, err := d.Records(b)
			if err != nil {
				t.Fatal(err)
			}
			sb := storedBatch{partition: p}
			for it.Next() {
				r := it.Record()
				if r.Key != nil {
					sb.keys = append(sb.keys, string(r.Key))
				}
				sb.values = append(sb.values, bytes.Clone(r.Value))
			}
			if err := it.Err(); err != nil {
				t.Fatal(err)
			}
			out = append(out, sb)
		}
	}
	return out
}

func TestBenchProduce(t *testing.T) {
	f := newFakeClientAPI(t)
	addr := f.srv.URL

	t.Run("closed loop, count bound, topic created", func(t *testing.T) {
		rep := runBenchJSON(t, "produce", "-addr", addr, "-topic", "load", "-create", "-partitions", "3",
			"-replication-factor", "1", "-min-insync-replicas", "1", "-concurrency", "2", "-size", "100", "-batch", "5", "-requests", "30")
		if rep.Workload != "produce" || rep.Requests != 30 || rep.Records != 150 || rep.Bytes != 15000 || rep.ErrorCount != 0 ||
			rep.Latency.Count != 30 {
			t.Fatalf("report %+v", rep)
		}
		perPartition := map[int]int{}
		for _, b := range f.storedBatches(t, "load") {
			perPartition[b.partition]++
			if len(b.values) != 5 || len(b.keys) != 0 || len(b.values[0]) != 100 {
				t.Errorf("partition %d: batch of %d records, %d keys, values of %d bytes: want each request one batch of 5 keyless 100-byte records",
					b.partition, len(b.values), len(b.keys), len(b.values[0]))
			}
		}
		if perPartition[0] != 10 || perPartition[1] != 10 || perPartition[2] != 10 {
			t.Errorf("batches per partition %v, want 10 each (partitions in turn)", perPartition)
		}
	})

	t.Run("open loop sends the schedule", func(t *testing.T) {
		before := len(f.produceQueries())
		// 400 records/s in batches of 2 is 200 requests/s: 50 in 250ms.
		rep := runBenchJSON(t, "produce", "-addr", addr, "-topic", "load", "-rate", "400", "-batch", "2", "-size", "10",
			"-duration", "250ms", "-acks", "1")
		if rep.Requests+rep.ErrorCount != 50 || rep.ErrorCount != 0 || rep.Records != 100 {
			t.Fatalf("report %+v, want the 50 scheduled requests, all ok", rep)
		}
		queries := f.produceQueries()[before:]
		if len(queries) != 50 || !strings.Contains(queries[0], "acks=1") {
			t.Errorf("%d produce requests, first %q", len(queries), queries[0])
		}
	})

	t.Run("keys stay in their partition", func(t *testing.T) {
		f2 := newFakeClientAPI(t)
		rep := runBenchJSON(t, "produce", "-addr", f2.srv.URL, "-topic", "keyed", "-create", "-partitions", "3",
			"-keys", "20", "-batch", "4", "-requests", "20", "-acks", "0", "-size", "8")
		if rep.Requests != 20 || rep.Records != 80 {
			t.Fatalf("report %+v", rep)
		}
		seen := map[string]bool{}
		for _, b := range f2.storedBatches(t, "keyed") {
			if len(b.keys) != 4 {
				t.Fatalf("batch with %d keys of %d records", len(b.keys), len(b.values))
			}
			for _, k := range b.keys {
				seen[k] = true
				if p := client.PartitionForKey([]byte(k), 3); p != b.partition {
					t.Errorf("key %q (partition %d) sent to partition %d", k, p, b.partition)
				}
			}
		}
		if len(seen) < 10 {
			t.Errorf("only %d distinct keys of 20 in 80 records", len(seen))
		}
		if q := f2.produceQueries(); !strings.Contains(q[0], "acks=0") {
			t.Errorf("query %q", q[0])
		}
	})

	t.Run("table", func(t *testing.T) {
		var out, errb bytes.Buffer
		err := benchCommand(context.Background(), []string{"produce", "-addr", addr, "-topic", "load", "-requests", "3"}, &out, &errb)
		checkCLI(t, cliCase{code: 0, stdout: []string{"workload", "produce", "records/s", "MB/s", "p99.9", "3 ok, 0 failed"}},
			exitCodeOf(err), out.String(), errb.String())
	})
}

func TestBenchConsume(t *testing.T) {
	f := newFakeClientAPI(t)
	addr := f.srv.URL
	runBenchJSON(t, "produce", "-addr", addr, "-topic", "read", "-create", "-partitions", "2", "-size", "50", "-batch", "10", "-requests", "12")

	all := runBenchJSON(t, "consume", "-addr", addr, "-topic", "read")
	if all.Workload != "consume" || all.Records != 120 || all.Bytes != 6000 || all.ErrorCount != 0 {
		t.Errorf("consume all: %+v, want the 120 records", all)
	}
	one := runBenchJSON(t, "consume", "-addr", addr, "-topic", "read", "-partition", "1")
	if one.Records != 60 || one.Requests != 1 {
		t.Errorf("consume partition 1: %+v, want its 60 records in one fetch", one)
	}
	// -repeat reads the partition again and again until -duration: whole
	// passes of its 60 records, one fetch each.
	again := runBenchJSON(t, "consume", "-addr", addr, "-topic", "read", "-partition", "1", "-repeat", "-duration", "200ms")
	if again.Requests < 2 || again.Records != 60*again.Requests || again.ErrorCount != 0 {
		t.Errorf("consume -repeat: %+v, want several passes of 60 records", again)
	}
}

func TestBenchEndToEnd(t *testing.T) {
	f := newFakeClientAPI(t)
	// 500 records/s in batches of 5: 100 requests/s, 30 in 300ms.
	rep := runBenchJSON(t, "e2e", "-addr", f.srv.URL, "-topic", "e2e", "-create", "-partitions", "2", "-rate", "500",
		"-batch", "5", "-size", "64", "-duration", "300ms", "-fetch-wait", "50ms")
	if rep.Workload != "e2e" || rep.Requests != 30 || rep.Records != 150 || rep.ErrorCount != 0 {
		t.Fatalf("report %+v", rep)
	}
	if rep.EndToEnd == nil || rep.EndToEnd.Count != 150 || rep.NotConsumed == nil || *rep.NotConsumed != 0 {
		t.Errorf("end-to-end %+v, not consumed %v: want every record timed", rep.EndToEnd, rep.NotConsumed)
	}
}

// failingAgent has one topic of one partition and refuses every produce
// with a non-retriable error.
func failingAgent(t *testing.T) string {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/topics/{topic}", func(w http.ResponseWriter, r *http.Request) {
		fakeJSON(w, http.StatusOK, client.TopicInfo{Name: r.PathValue("topic"), Partitions: []client.PartitionInfo{{Leader: "n1"}}})
	})
	mux.HandleFunc("POST /v1/producers", func(w http.ResponseWriter, r *http.Request) {
		fakeJSON(w, http.StatusCreated, client.ProducerID{ID: 1})
	})
	mux.HandleFunc("POST /v1/topics/{topic}/records", func(w http.ResponseWriter, r *http.Request) {
		fakeError(w, http.StatusRequestEntityTooLarge, client.CodeRecordTooLarge, nil)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestBenchFailsAboveErrorThreshold(t *testing.T) {
	addr := failingAgent(t)
	var out, errb bytes.Buffer
	err := benchCommand(context.Background(), []string{"produce", "-addr", addr, "-topic", "t", "-requests", "5"}, &out, &errb)
	checkCLI(t, cliCase{code: 1, stdout: []string{"0 ok, 5 failed", "record_too_large=5"}}, exitCodeOf(err), out.String(), errb.String())
	if err == nil || !strings.Contains(err.Error(), "5 of 5 requests failed") {
		t.Errorf("error %v", err)
	}

	rep := runBenchJSON(t, "produce", "-addr", addr, "-topic", "t", "-requests", "5", "-max-error-ratio", "1")
	if rep.ErrorCount != 5 || rep.Errors[client.CodeRecordTooLarge] != 5 || rep.Requests != 0 {
		t.Errorf("report %+v", rep)
	}
}

func TestBenchUsage(t *testing.T) {
	f := newFakeClientAPI(t)
	addr := f.srv.URL
	cases := []cliCase{
		{"missing topic", []string{"bench", "produce", "-addr", addr, "-topic", "nope", "-requests", "1"}, 1, nil,
			[]string{"does not exist", "add -create"}},
		{"no topic", []string{"bench", "produce", "-addr", addr}, 2, nil, []string{"-topic is required"}},
		{"bad acks", []string{"bench", "produce", "-addr", addr, "-topic", "t", "-acks", "2"}, 2, nil, []string{"acks"}},
		{"negative size", []string{"bench", "produce", "-addr", addr, "-topic", "t", "-size", "-1"}, 2, nil, []string{"record size"}},
		{"no bound", []string{"bench", "produce", "-addr", addr, "-topic", "t", "-duration", "0"}, 2, nil, []string{"duration or a count"}},
		{"bad ratio", []string{"bench", "produce", "-addr", addr, "-topic", "t", "-max-error-ratio", "2"}, 2, nil, []string{"-max-error-ratio"}},
		{"bad topic name", []string{"bench", "produce", "-addr", addr, "-topic", "a/b"}, 2, nil, []string{"invalid topic name"}},
		{"e2e without rate", []string{"bench", "e2e", "-addr", addr, "-topic", "t"}, 2, nil, []string{"needs a target rate"}},
		{"e2e record too small", []string{"bench", "e2e", "-addr", addr, "-topic", "t", "-rate", "10", "-size", "8"}, 2, nil, []string{"stamp"}},
		{"consume without topic", []string{"bench", "consume", "-addr", addr}, 2, nil, []string{"-topic is required"}},
		{"consume bad partition", []string{"bench", "consume", "-addr", addr, "-topic", "t", "-partition", "-2"}, 2, nil, []string{"partition -2"}},
		{"limits bad size", []string{"bench", "limits", "-size", "x"}, 2, nil, []string{"not an integer"}},
		{"limits no duration", []string{"bench", "limits", "-duration", "0"}, 2, nil, []string{"duration"}},
		{"no subcommand", []string{"bench"}, 2, nil, []string{"Usage: logagent bench", "name a subcommand"}},
		{"unknown subcommand", []string{"bench", "frob"}, 2, nil, []string{`unknown subcommand "frob"`}},
		{"help", []string{"bench", "-h"}, 0, nil, []string{"e2e", "limits"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(c.args, &out, &errb)
			checkCLI(t, c, code, out.String(), errb.String())
		})
	}
	if q := f.produceQueries(); len(q) != 0 {
		t.Errorf("usage errors sent %d produce requests", len(q))
	}
}

func TestBenchLimits(t *testing.T) {
	var out, errb bytes.Buffer
	err := benchCommand(context.Background(), []string{"limits", "-duration", "50ms", "-size", "100", "-batch", "1,10",
		"-dir", t.TempDir(), "-json"}, &out, &errb)
	if err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	var results []struct {
		Name        string  `json:"name"`
		WriteBytes  int     `json:"write_bytes"`
		MBPerSecond float64 `json:"mb_per_second"`
		Writes      int64   `json:"writes"`
		Bytes       int64   `json:"bytes"`
		Elapsed     float64 `json:"elapsed_seconds"`
	}
	if err := json.Unmarshal(out.Bytes(), &results); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	want := []string{"loopback TCP", "file write", "file write + fsync", "file write", "file write + fsync"}
	if len(results) != len(want) {
		t.Fatalf("%d results, want %d:\n%s", len(results), len(want), out.String())
	}
	for i, r := range results {
		// mb_per_second is rounded to 0.1: on a loaded host one slow
		// fsync in the 50 ms makes it 0.0, so the raw figures are checked.
		if r.Name != want[i] || r.Bytes <= 0 || r.Elapsed <= 0 || r.Writes <= 0 {
			t.Errorf("result %d: %+v, want %s with positive figures", i, r, want[i])
		}
	}
	if results[1].WriteBytes >= results[3].WriteBytes {
		t.Errorf("a batch of 1 record (%d bytes) is not smaller than one of 10 (%d)", results[1].WriteBytes, results[3].WriteBytes)
	}
}
