package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// TestReassignCalls: each day-2 call sends its method, path and body as
// docs/api.md says and decodes the answer; an error answer is its code's
// sentinel. The agent is a fake (this package's unit test only).
func TestReassignCalls(t *testing.T) {
	var got []string
	answers := map[string]string{
		"POST /v1/topics/orders/partitions/3/reassignment": `{"topic":"orders","partition":3,"replicas":["n2","n3","n4","n1"],` +
			`"reassignment":{"target":["n2","n3","n4"],"adding":["n4"],"removing":["n1"]}}`,
		"GET /v1/topics/orders/partitions/3/reassignment": `{"topic":"orders","partition":3,"replicas":["n2","n3","n4","n1"],"isr":["n1","n2","n3"],` +
			`"leader":"n1","leader_address":"127.0.0.1:7071","reassignment":{"target":["n2","n3","n4"],"adding":["n4"],"removing":["n1"],` +
			`"progress":[{"node":"n4","log_end_offset":305,"lag":195,"in_sync":false,"catch_up_bytes":4096}],` +
			`"leader_log_start_offset":0,"leader_log_end_offset":500}}`,
		"DELETE /v1/topics/orders/partitions/3/reassignment": `{"topic":"orders","partition":3,"replicas":["n1","n2","n3","n4"],` +
			`"reassignment":{"target":["n1","n2","n3"],"adding":[],"removing":["n4"],"cancelled":true}}`,
		"POST /v1/nodes/n1/drain":   `{"node":"n1","draining":true,"replicas":1,"leaderships":1,"partitions":[{"topic":"orders","partition":3,"replicas":["n1","n2","n3"],"leader":"n1","moving":true}]}`,
		"GET /v1/nodes/n1/drain":    `{"node":"n1","draining":true,"replicas":0,"leaderships":0,"partitions":[]}`,
		"DELETE /v1/nodes/n1/drain": `{"node":"n1","draining":false,"replicas":0,"leaderships":0,"partitions":[]}`,
		"GET /v1/rebalance": `{"agents":[{"node":"n1","replicas":2,"preferred_leaders":1,"replicas_after":1,"preferred_leaders_after":1}],` +
			`"moves":[{"topic":"orders","partition":3,"replicas":["n1","n2"],"target":["n5","n2"]}]}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := r.Method + " " + r.URL.Path
		got = append(got, strings.TrimSpace(key+" "+string(body)))
		if r.URL.Path == "/v1/topics/orders/partitions/9/reassignment" {
			writeFakeError(w, http.StatusConflict, CodeNoReassignmentInProgress, "no move", false, nil)
			return
		}
		answer, ok := answers[key]
		if !ok {
			writeFakeError(w, http.StatusNotFound, CodeNotFound, "no endpoint", false, nil)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, answer)
	}))
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	started, err := c.MovePartition(ctx, "orders", 3, []string{"n2", "n3", "n4"})
	if err != nil || started.Reassignment == nil || !slices.Equal(started.Reassignment.Adding, []string{"n4"}) {
		t.Fatalf("MovePartition = %+v, %v", started, err)
	}
	st, err := c.Reassignment(ctx, "orders", 3)
	if err != nil || st.LeaderAddress != "127.0.0.1:7071" || len(st.Reassignment.Progress) != 1 || st.Reassignment.Progress[0].LogEndOffset != 305 ||
		*st.Reassignment.LeaderLogEndOffset != 500 || *st.Reassignment.LeaderLogStartOffset != 0 {
		t.Fatalf("Reassignment = %+v, %v", st, err)
	}
	back, err := c.CancelMove(ctx, "orders", 3)
	if err != nil || !back.Reassignment.Cancelled || !slices.Equal(back.Reassignment.Target, []string{"n1", "n2", "n3"}) {
		t.Fatalf("CancelMove = %+v, %v", back, err)
	}
	if _, err := c.CancelMove(ctx, "orders", 9); !errors.Is(err, ErrNoReassignmentInProgress) {
		t.Errorf("CancelMove with nothing in flight = %v, want ErrNoReassignmentInProgress", err)
	}
	if _, err := c.MovePartition(ctx, "bad name", 0, []string{"n1"}); !errors.Is(err, ErrInvalidTopicName) {
		t.Errorf("MovePartition of a bad name = %v, want ErrInvalidTopicName", err)
	}
	if d, err := c.DrainNode(ctx, "n1"); err != nil || !d.Draining || len(d.Partitions) != 1 || !d.Partitions[0].Moving {
		t.Errorf("DrainNode = %+v, %v", d, err)
	}
	if d, err := c.NodeDrain(ctx, "n1"); err != nil || d.Replicas != 0 {
		t.Errorf("NodeDrain = %+v, %v", d, err)
	}
	if d, err := c.CancelDrain(ctx, "n1"); err != nil || d.Draining {
		t.Errorf("CancelDrain = %+v, %v", d, err)
	}
	plan, err := c.Rebalance(ctx)
	if err != nil || len(plan.Agents) != 1 || plan.Agents[0].ReplicasAfter != 1 || len(plan.Moves) != 1 || !slices.Equal(plan.Moves[0].Target, []string{"n5", "n2"}) {
		t.Errorf("Rebalance = %+v, %v", plan, err)
	}
	want := []string{
		`POST /v1/topics/orders/partitions/3/reassignment {"replicas":["n2","n3","n4"]}`,
		"GET /v1/topics/orders/partitions/3/reassignment",
		"DELETE /v1/topics/orders/partitions/3/reassignment",
		"DELETE /v1/topics/orders/partitions/9/reassignment",
		"POST /v1/nodes/n1/drain",
		"GET /v1/nodes/n1/drain",
		"DELETE /v1/nodes/n1/drain",
		"GET /v1/rebalance",
	}
	if !slices.Equal(got, want) {
		t.Errorf("requests\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
