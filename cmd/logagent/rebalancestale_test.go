package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestRebalanceExecuteHonoursADrainStartedMeanwhile: rebalance -execute
// starts its planned moves one at a time, each waiting for the last (a
// rebalance of a real cluster takes hours). An agent drained after the
// plan was made must not be the target of a move the rebalance starts
// after the drain (docs/design.md §7.7: no draining agent is a target of a
// rebalance): the fake agent drains n4 while the first move is in flight;
// the second planned move, onto n4, must not be started.
func TestRebalanceExecuteHonoursADrainStartedMeanwhile(t *testing.T) {
	var mu sync.Mutex
	replicas := map[int][]string{0: {"n1", "n2", "n3"}, 1: {"n1", "n2", "n3"}}
	draining := map[string]bool{}
	var violations []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/rebalance" {
			moves := []map[string]any{}
			if !draining["n4"] { // the plan the agent makes: n4 takes one replica of each
				if slices.Equal(replicas[0], []string{"n1", "n2", "n3"}) {
					moves = append(moves, map[string]any{"topic": "t", "partition": 0, "replicas": replicas[0], "target": []string{"n4", "n2", "n3"}})
				}
				if slices.Equal(replicas[1], []string{"n1", "n2", "n3"}) {
					moves = append(moves, map[string]any{"topic": "t", "partition": 1, "replicas": replicas[1], "target": []string{"n1", "n4", "n3"}})
				}
			}
			json.NewEncoder(w).Encode(map[string]any{"agents": []any{}, "moves": moves})
			return
		}
		parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/") // v1 topics t partitions N reassignment
		if len(parts) != 6 || parts[5] != "reassignment" {
			http.NotFound(w, r)
			return
		}
		p, _ := strconv.Atoi(parts[4])
		switch r.Method {
		case http.MethodPost:
			var body struct{ Replicas []string }
			json.NewDecoder(r.Body).Decode(&body)
			for _, n := range body.Replicas {
				if draining[n] {
					violations = append(violations, "partition "+parts[4]+" moved to "+strings.Join(body.Replicas, ","))
				}
			}
			replicas[p] = body.Replicas
			// The operator drains n4 while this move is in flight.
			draining["n4"] = true
			w.WriteHeader(http.StatusAccepted)
			json.NewEncoder(w).Encode(map[string]any{"topic": "t", "partition": p, "replicas": body.Replicas,
				"reassignment": map[string]any{"target": body.Replicas, "adding": []string{}, "removing": []string{}}})
		default:
			json.NewEncoder(w).Encode(map[string]any{"topic": "t", "partition": p, "replicas": replicas[p], "reassignment": nil})
		}
	}))
	defer srv.Close()
	var stdout, stderr strings.Builder
	code := run([]string{"rebalance", "-execute", "-interval", "10ms", "-addr", srv.URL}, &stdout, &stderr)
	t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	mu.Lock()
	defer mu.Unlock()
	if len(violations) > 0 {
		t.Fatalf("rebalance -execute started moves onto an agent drained after its plan: %v", violations)
	}
}
