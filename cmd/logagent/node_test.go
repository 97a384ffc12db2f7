package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestNodeDrainUsage: what the command refuses before asking an agent.
func TestNodeDrainUsage(t *testing.T) {
	for _, args := range [][]string{
		{"node"},
		{"node", "empty"},
		{"node", "drain"},
		{"node", "drain", "n1", "n2"},
		{"node", "drain", "n1", "-interval", "0s"},
	} {
		var stdout, stderr strings.Builder
		// Nothing listens there: a command that got past its checks
		// would fail with exit 1, not 2.
		code := run(append(args, "-addr", "http://127.0.0.1:1"), &stdout, &stderr)
		if code != exitUsage {
			t.Errorf("%v: exit %d (stderr %q), want %d", args, code, stderr.String(), exitUsage)
		}
	}
}

// TestNodeDrainWaits: against an agent answering as docs/api.md says (a
// fake, this command's unit test only), the command posts the drain,
// prints what is left whenever it changes, and returns once nothing is;
// -cancel sends the DELETE.
func TestNodeDrainWaits(t *testing.T) {
	var mu sync.Mutex
	var methods []string
	answers := []string{
		`{"node":"n1","draining":true,"replicas":2,"leaderships":1,"partitions":[{"topic":"orders","partition":0,"replicas":["n1","n2","n3"],"leader":"n1","moving":false},{"topic":"orders","partition":1,"replicas":["n2","n3","n1"],"leader":"n2","moving":false}]}`,
		`{"node":"n1","draining":true,"replicas":2,"leaderships":1,"partitions":[{"topic":"orders","partition":0,"replicas":["n2","n3","n4","n1"],"leader":"n1","moving":true},{"topic":"orders","partition":1,"replicas":["n2","n3","n1"],"leader":"n2","moving":false}]}`,
		`{"node":"n1","draining":true,"replicas":2,"leaderships":1,"partitions":[{"topic":"orders","partition":0,"replicas":["n2","n3","n4","n1"],"leader":"n1","moving":true},{"topic":"orders","partition":1,"replicas":["n2","n3","n1"],"leader":"n2","moving":false}]}`,
		`{"node":"n1","draining":true,"replicas":0,"leaderships":0,"partitions":[]}`,
	}
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/nodes/n1/drain" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		methods = append(methods, r.Method)
		i := min(len(methods)-1, len(answers)-1)
		if r.Method == http.MethodDelete {
			i = 0
		}
		io.WriteString(w, answers[i])
	}))
	defer agent.Close()
	var stdout, stderr strings.Builder
	if code := run([]string{"node", "drain", "n1", "-addr", agent.URL, "-interval", "1ms"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	want := "draining n1: 2 replicas, 1 leaderships to move\n" +
		"  2 replicas, 1 leaderships left; moving -\n" +
		"  2 replicas, 1 leaderships left; moving orders/0\n" +
		"done: n1 holds no replica and leads nothing\n"
	if stdout.String() != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", stdout.String(), want)
	}
	if strings.Join(methods, ",") != "POST,GET,GET,GET" {
		t.Errorf("requests %v, want a POST then GETs until nothing is left", methods)
	}
	methods = nil
	stdout.Reset()
	if code := run([]string{"node", "drain", "-cancel", "n1", "-addr", agent.URL}, &stdout, &stderr); code != exitOK {
		t.Fatalf("-cancel: exit %d: %s", code, stderr.String())
	}
	if strings.Join(methods, ",") != "DELETE" || !strings.Contains(stdout.String(), "n1 is no longer drained; 2 replicas left on it") {
		t.Errorf("-cancel: requests %v, stdout %q", methods, stdout.String())
	}
}

// TestRebalanceUsage: what rebalance refuses before asking an agent.
func TestRebalanceUsage(t *testing.T) {
	for _, args := range [][]string{
		{"rebalance", "extra"},
		{"rebalance", "-interval", "0s"},
		{"rebalance", "-execute=maybe"},
	} {
		var stdout, stderr strings.Builder
		code := run(append(args, "-addr", "http://127.0.0.1:1"), &stdout, &stderr)
		if code != exitUsage {
			t.Errorf("%v: exit %d (stderr %q), want %d", args, code, stderr.String(), exitUsage)
		}
	}
}
