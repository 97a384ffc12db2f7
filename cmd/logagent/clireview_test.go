package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/logagent/logagent/client"
)

// TestConsumeInterruptedDumpFails: a consume without -follow that is
// interrupted (Ctrl-C, SIGTERM) before it reached the end must not exit 0:
// only -follow treats the end of its context as success.
func TestConsumeInterruptedDumpFails(t *testing.T) {
	f := newFakeClientAPI(t)
	f.addTopic(threePartitions("t"))
	addr := f.srv.URL
	if code, _, stderr := runData(context.Background(), []string{"produce", "-addr", addr, "-topic", "t", "-partition", "0"}, "one\ntwo\n"); code != 0 {
		t.Fatal(stderr)
	}
	// The agent stops answering the fetches (an election): the dump has
	// not got its records when the user hits Ctrl-C.
	f.mu.Lock()
	f.unavailable = 1 << 20
	f.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	code, stdout, stderr := runData(ctx, []string{"consume", "-addr", addr, "-topic", "t"}, "")
	if code == 0 {
		t.Errorf("consume (no -follow) interrupted before printing its records exited 0; stdout %q, stderr %q", stdout, stderr)
	}
}

// TestProduceNegativePartitionRefused: -partition -2 is not a partition;
// consume refuses it, produce silently spreads the records.
func TestProduceNegativePartitionRefused(t *testing.T) {
	f := newFakeClientAPI(t)
	f.addTopic(threePartitions("t"))
	code, stdout, stderr := runData(context.Background(), []string{"produce", "-addr", f.srv.URL, "-topic", "t", "-partition", "-2"}, "a\nb\n")
	if code != exitUsage {
		t.Errorf("produce -partition -2: exit %d, want 2 (bad usage)\nstdout: %s\nstderr: %s\nqueries: %v", code, stdout, stderr, f.produceQueries())
	}
}

// TestProduceMaxLineCRLF: the line ending is not part of the record,
// so a record of -max-line-bytes bytes is accepted whatever its ending.
func TestProduceMaxLineCRLF(t *testing.T) {
	f := newFakeClientAPI(t)
	f.addTopic(threePartitions("t"))
	for _, in := range []string{"abcd\n", "abcd\r\n", "abcd"} {
		code, stdout, stderr := runData(context.Background(), []string{"produce", "-addr", f.srv.URL, "-topic", "t", "-partition", "0", "-max-line-bytes", "4"}, in)
		if code != 0 || !strings.Contains(stdout, "produced 1 record(s)") {
			t.Errorf("stdin %q: exit %d\nstdout: %s\nstderr: %s", in, code, stdout, stderr)
		}
	}
}

// TestProduceStopSaysWhatWasNotSent: when a failure stops produce
// early, the lines it never sent must be accounted for: the output says
// where it stopped reading stdin (or counts those lines), so a user knows
// what to send again.
func TestProduceStopSaysWhatWasNotSent(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	f := newFakeClientAPI(t)
	f.addTopic(threePartitions("t"))
	n := 20000 + rng.IntN(10000)
	var in strings.Builder
	for i := range n {
		fmt.Fprintf(&in, "line-%d\n", i)
	}
	// Partition 7 does not exist: every record fails, the first failure
	// stops the reading.
	code, stdout, stderr := runData(context.Background(), []string{"produce", "-addr", f.srv.URL, "-topic", "t", "-partition", "7", "-linger", "0"}, in.String())
	t.Logf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(stderr, fmt.Sprintf("of %d record(s) not acknowledged", n)) && !strings.Contains(stderr, "stopped reading stdin at line") {
		t.Errorf("%d lines on stdin; the output neither accounts for all of them nor says where reading stopped", n)
	}
}

// TestNDJSONRepeatedHeaderKeepsLast: writeNDJSON's doc says a repeated
// header key keeps its last value; a key whose values are once binary and
// once text comes out twice, in "headers" and in "headers_base64".
func TestNDJSONRepeatedHeaderKeepsLast(t *testing.T) {
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	rec := client.Record{Value: []byte("v"), Headers: []client.Header{{Key: "h", Value: []byte{0xff}}, {Key: "h", Value: []byte("x")}}}
	if err := writeNDJSON(w, rec); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	var got map[string]any
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if _, dup := got["headers_base64"]; dup {
		t.Errorf("header h repeated, last value \"x\": got %s", b.String())
	}
}

// TestConsumeSaysWhichPartitionFailed: consume reads every partition
// unless -partition names one, so the failure of one of them must say
// which: the agent's own message ("offset 2 is outside the log") does not,
// and the bounds it gives are that partition's alone.
func TestConsumeSaysWhichPartitionFailed(t *testing.T) {
	f := newFakeClientAPI(t)
	f.addTopic(threePartitions("t"))
	for p, stdin := range []string{"a\nb\n", "c\nd\n", "e\n"} {
		if code, _, stderr := runData(context.Background(), []string{"produce", "-addr", f.srv.URL, "-topic", "t", "-partition", strconv.Itoa(p)}, stdin); code != 0 {
			t.Fatal(stderr)
		}
	}
	code, stdout, stderr := runData(context.Background(), []string{"consume", "-addr", f.srv.URL, "-topic", "t", "-from", "2"}, "")
	want := "partition 2: fake: offset_out_of_range: the log holds offsets 0 to 0 (log start 0, high watermark 1); -from earliest or -from latest start inside it\n"
	if code != exitFailure || !strings.HasSuffix(stderr, want) {
		t.Errorf("consume -from 2 of partitions holding 2, 2 and 1 record(s): exit %d, stdout %q, stderr %q; want exit 1 and stderr ending %q", code, stdout, stderr, want)
	}
}

// TestTimeoutMustBePositive: a -timeout of 0 or less is bad usage, as
// consume says; the commands that make one round of requests took it and
// failed at once, saying that the agent (which was up) did not answer.
func TestTimeoutMustBePositive(t *testing.T) {
	f := newFakeClientAPI(t)
	f.addTopic(threePartitions("t"))
	for _, args := range [][]string{
		{"status"}, {"topic", "list"}, {"topic", "describe", "t"}, {"topic", "create", "u"},
		{"topic", "alter", "t", "-partitions", "4"}, {"topic", "delete", "t"}, {"group", "list"},
	} {
		for _, timeout := range []string{"0s", "-1s"} {
			var stdout, stderr bytes.Buffer
			code := run(append(args, "-addr", f.srv.URL, "-timeout", timeout), &stdout, &stderr)
			if want := "-timeout " + timeout + ": want a positive duration"; code != exitUsage || !strings.Contains(stderr.String(), want) {
				t.Errorf("%v -timeout %s: exit %d, stderr %q; want exit 2 and %q", args, timeout, code, stderr.String(), want)
			}
		}
	}
}

// TestFollowWaitMustBePositive: consume -follow -wait 0 fetched each
// partition in a tight loop, an empty answer straight after another.
func TestFollowWaitMustBePositive(t *testing.T) {
	f := newFakeClientAPI(t)
	f.addTopic(threePartitions("t"))
	for _, wait := range []string{"0s", "-1s"} {
		for _, group := range [][]string{nil, {"-group", "g"}} {
			args := append([]string{"consume", "-addr", f.srv.URL, "-topic", "t", "-follow", "-wait", wait}, group...)
			var stdout, stderr bytes.Buffer
			code := run(args, &stdout, &stderr)
			if want := "-wait " + wait + " with -follow: want a positive duration"; code != exitUsage || !strings.Contains(stderr.String(), want) {
				t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", args, code, stderr.String(), want)
			}
		}
	}
}

// TestTopicChangeWithoutAnswer: an agent that does not answer a topic
// change within -timeout may have it and make it all the same (a
// creation of many partitions takes up to 35 s), so the command must say
// so, and how to find out, instead of asking whether the agent runs.
func TestTopicChangeWithoutAnswer(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"topic", "create", "big", "-partitions", "10000"}, "it may create topic big all the same"},
		{[]string{"topic", "alter", "big", "-partitions", "20000"}, "it may alter topic big all the same"},
		{[]string{"topic", "delete", "big"}, "it may delete topic big all the same"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append(c.args, "-addr", srv.URL, "-timeout", "200ms"), &stdout, &stderr)
		if code != exitFailure || !strings.Contains(stderr.String(), c.want) || !strings.Contains(stderr.String(), "'logagent topic describe big' shows whether it did") {
			t.Errorf("%v, unanswered: exit %d, stderr %q; want exit 1 and %q", c.args, code, stderr.String(), c.want)
		}
	}
}

// TestTopicCreateWaitsLongerForManyPartitions: without -timeout, topic
// create of many partitions waits for the agent's answer past the shared
// 10s (the agents answer within 5s plus 3ms per partition). Before, the
// creation of 1,000 partitions answered after 10.3s was given up on, "no
// answer from the agent", while the agent created it.
func TestTopicCreateWaitsLongerForManyPartitions(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(10300 * time.Millisecond):
		}
		fakeError(w, http.StatusConflict, client.CodeTopicExists, nil)
	}))
	t.Cleanup(srv.Close)
	var stdout, stderr bytes.Buffer
	code := run([]string{"topic", "create", "big", "-partitions", "1000", "-addr", srv.URL}, &stdout, &stderr)
	if code != exitFailure || !strings.Contains(stderr.String(), client.CodeTopicExists) {
		t.Fatalf("exit %d, stderr %q; want exit 1 with the agent's answer, %s", code, stderr.String(), client.CodeTopicExists)
	}
	if got, want := topicCreateTimeout(1000), 20*time.Second; got != want {
		t.Errorf("topicCreateTimeout(1000) = %v, want %v", got, want)
	}
}

// TestStatusUnavailableDoesNotNameItself: an agent that serves but cannot
// tell the cluster's state (Consul out of reach: 503 service_unavailable
// on /v1/status) made logagent status answer "'logagent status' shows the
// agents and leaders", the hint every other command gives for it.
func TestStatusUnavailableDoesNotNameItself(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/health" {
			fakeJSON(w, http.StatusOK, map[string]any{"status": "ok", "node_id": "n1"})
			return
		}
		fakeError(w, http.StatusServiceUnavailable, client.CodeServiceUnavailable, nil)
	}))
	t.Cleanup(srv.Close)
	var stdout, stderr bytes.Buffer
	code := run([]string{"status", "-addr", srv.URL, "-timeout", "2s"}, &stdout, &stderr)
	if code != exitFailure || strings.Contains(stderr.String(), "'logagent status'") || !strings.Contains(stderr.String(), "cannot show the cluster now: fake: service_unavailable (service_unavailable); the agent's log says why") {
		t.Fatalf("exit %d, stderr %q; want exit 1 saying the agent cannot show the cluster, its log says why", code, stderr.String())
	}
	// Other commands still send the user to logagent status.
	stderr.Reset()
	code = run([]string{"topic", "list", "-addr", srv.URL, "-timeout", "2s"}, &stdout, &stderr)
	if code != exitFailure || !strings.Contains(stderr.String(), "'logagent status' shows the agents and leaders") {
		t.Fatalf("topic list: exit %d, stderr %q; want the hint to logagent status", code, stderr.String())
	}
}

// TestStatusOfAStartingAgent: an agent starting or stopping answers its
// health 503 service_unavailable, which logagent status says as "does not
// serve yet". The explanation of a 503 of the cluster's state
// (TestStatusUnavailableDoesNotNameItself) took it over, and the user read
// that the agent could not show the cluster and should look at its log.
func TestStatusOfAStartingAgent(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fakeError(w, http.StatusServiceUnavailable, client.CodeServiceUnavailable, nil)
	}))
	t.Cleanup(srv.Close)
	var stdout, stderr bytes.Buffer
	code := run([]string{"status", "-addr", srv.URL, "-timeout", "2s"}, &stdout, &stderr)
	if want := "does not serve yet: fake: service_unavailable"; code != exitFailure || !strings.Contains(stderr.String(), want) {
		t.Fatalf("exit %d, stderr %q; want exit 1 and %q", code, stderr.String(), want)
	}
}
