package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// cancelledMoveAgent is a fake agent (docs/api.md's answers) on which the
// move of orders/0 from n1,n2,n3 to n2,n3,n4 that the command starts is
// cancelled by someone else while the command waits: the next GET shows
// the way back, the one after that the partition back on n1,n2,n3.
func cancelledMoveAgent(t *testing.T) *httptest.Server {
	var mu sync.Mutex
	polls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.URL.Path == "/v1/rebalance":
			io.WriteString(w, `{"agents":[],"moves":[{"topic":"orders","partition":0,"replicas":["n1","n2","n3"],"target":["n2","n3","n4"]}]}`)
		case r.URL.Path != "/v1/topics/orders/partitions/0/reassignment":
			http.NotFound(w, r)
		case r.Method == http.MethodPost:
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, `{"replicas":["n2","n3","n4","n1"],"reassignment":{"target":["n2","n3","n4"],"adding":["n4"],"removing":["n1"]}}`)
		default:
			polls++
			switch polls {
			case 1:
				io.WriteString(w, `{"replicas":["n2","n3","n4","n1"],"isr":["n1","n2","n3"],"leader":"n1","reassignment":{"target":["n2","n3","n4"],"adding":["n4"],"removing":["n1"]}}`)
			case 2:
				io.WriteString(w, `{"replicas":["n1","n2","n3","n4"],"isr":["n1","n2","n3"],"leader":"n1","reassignment":{"target":["n1","n2","n3"],"adding":[],"removing":["n4"],"cancelled":true}}`)
			default:
				io.WriteString(w, `{"replicas":["n1","n2","n3"],"isr":["n1","n2","n3"],"leader":"n1","reassignment":null}`)
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestMoveCancelledMeanwhileIsNotDone: partition move and rebalance
// -execute wait for the move they started until the partition has no
// move in flight. One cancelled meanwhile (partition move -cancel from
// another terminal, DELETE .../reassignment) also ends with no move in
// flight, back on the replicas it started from: the commands said
// "done: orders/0 has replicas n1,n2,n3" and "now on n1,n2,n3", and
// exited 0, as if the move had been made. They must say the partition is
// not on the target, and exit 1.
func TestMoveCancelledMeanwhileIsNotDone(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"partition move", []string{"partition", "move", "-topic", "orders", "-partition", "0", "-replicas", "n2,n3,n4", "-interval", "10ms"}},
		{"rebalance -execute", []string{"rebalance", "-execute", "-interval", "10ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := cancelledMoveAgent(t)
			var stdout, stderr strings.Builder
			code := run(append(tc.args, "-addr", srv.URL), &stdout, &stderr)
			out := stdout.String() + stderr.String()
			t.Logf("exit %d:\n%s", code, out)
			if code != 1 {
				t.Errorf("exit %d for a move cancelled before it completed, want 1", code)
			}
			for _, wrong := range []string{"done: orders/0 has replicas n1,n2,n3", "now on n1,n2,n3"} {
				if strings.Contains(out, wrong) {
					t.Errorf("the command reports the cancelled move done (%q)", wrong)
				}
			}
			if !strings.Contains(out, "not on n2,n3,n4") {
				t.Errorf("the command does not say the partition is not on the target n2,n3,n4")
			}
		})
	}
}
