package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestPartitionMoveUsage: what the command refuses before asking an agent.
func TestPartitionMoveUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-partition", "0", "-replicas", "n1,n2"},
		{"-topic", "t", "-replicas", "n1,n2"},
		{"-topic", "t", "-partition", "0"},
		{"-topic", "t", "-partition", "0", "-replicas", "n1,,n2"},
		{"-topic", "t", "-partition", "0", "-replicas", "n1,n2,n1"},
		{"-topic", "t", "-partition", "0", "-replicas", "n1,n2", "-interval", "0s"},
		{"-topic", "t", "-partition", "0", "-replicas", "n1,n2", "-cancel"},
		{"-partition", "0", "-cancel"},
	} {
		var stdout, stderr strings.Builder
		// Nothing listens there: a command that got past its checks
		// would fail with exit 1, not 2.
		code := run(append([]string{"partition", "move", "-addr", "http://127.0.0.1:1"}, args...), &stdout, &stderr)
		if code != exitUsage {
			t.Errorf("partition move %v: exit %d (stderr %q), want %d", args, code, stderr.String(), exitUsage)
		}
	}
}

// TestPartitionMoveWaits: against an agent answering as docs/api.md says
// (a fake, this command's unit test only), the command starts the move,
// prints the progress it reads from the leader's agent while the move is
// in flight, and returns once the agent shows it done.
func TestPartitionMoveWaits(t *testing.T) {
	var mu sync.Mutex
	polls := 0
	var posted []byte
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"replicas":["n2","n3","n4","n1"],"isr":["n1","n2","n3"],"leader":"n1",
			"reassignment":{"target":["n2","n3","n4"],"adding":["n4"],"removing":["n1"],
			"progress":[{"node":"n4","log_end_offset":10,"lag":90,"in_sync":false,"catch_up_bytes":2048}]}}`)
	}))
	defer leader.Close()
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/topics/orders/partitions/0/reassignment" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch r.Method {
		case http.MethodPost:
			posted, _ = io.ReadAll(r.Body)
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, `{"replicas":["n2","n3","n4","n1"],"reassignment":{"target":["n2","n3","n4"],"adding":["n4"],"removing":["n1"]}}`)
		case http.MethodGet:
			polls++
			if polls < 3 {
				io.WriteString(w, `{"replicas":["n2","n3","n4","n1"],"isr":["n1","n2","n3"],"leader":"n1","leader_address":"`+
					strings.TrimPrefix(leader.URL, "http://")+`","reassignment":{"target":["n2","n3","n4"],"adding":["n4"],"removing":["n1"]}}`)
				return
			}
			io.WriteString(w, `{"replicas":["n2","n3","n4"],"isr":["n2","n3","n4"],"leader":"n2","reassignment":null}`)
		}
	}))
	defer agent.Close()
	var stdout, stderr strings.Builder
	code := run([]string{"partition", "move", "-addr", agent.URL, "-topic", "orders", "-partition", "0", "-replicas", "n2,n3,n4", "-interval", "10ms"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout.String(), stderr.String())
	}
	var body map[string][]string
	if err := json.Unmarshal(posted, &body); err != nil || strings.Join(body["replicas"], ",") != "n2,n3,n4" {
		t.Fatalf("posted %s", posted)
	}
	out := stdout.String()
	for _, want := range []string{
		"moving orders/0 to n2,n3,n4: adding n4, removing n1",
		"leader n1; isr n1,n2,n3; n4: lag 90, 2.0 KiB sent",
		"done: orders/0 has replicas n2,n3,n4, ISR n2,n3,n4",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "lag 90") != 1 {
		t.Errorf("an unchanged progress line printed twice:\n%s", out)
	}
}
