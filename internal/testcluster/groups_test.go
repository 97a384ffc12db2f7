package testcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/groupcoord"
	"github.com/logagent/logagent/wire"
)

// groupCall sends a group request to a's client API and decodes the JSON
// answer into out, or returns the *APIError.
func groupCall(a *Agent, method, path string, body, out any) error {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return err
		}
	}
	return a.do(method, a.url(path, nil), "application/json", b, out)
}

func joinGroup(t *testing.T, a *Agent, group, member string, topics ...string) groupcoord.MemberResponse {
	t.Helper()
	var r groupcoord.MemberResponse
	if err := groupCall(a, http.MethodPost, "/v1/groups/"+group+"/members",
		groupcoord.JoinRequest{Topics: topics, MemberID: member}, &r); err != nil {
		t.Fatalf("join %s as %s through %s: %v", group, member, a.NodeID, err)
	}
	return r
}

func commitOffsets(a *Agent, group, member string, epoch int32, offsets map[int]int64, topic string) error {
	req := groupcoord.CommitRequest{MemberID: member, MemberEpoch: epoch}
	for _, p := range sortedKeys(offsets) {
		req.Offsets = append(req.Offsets, groupcoord.OffsetCommit{Topic: topic, Partition: int32(p), Offset: offsets[p]})
	}
	return groupCall(a, http.MethodPost, "/v1/groups/"+group+"/offsets", req, nil)
}

func committedOffsets(a *Agent, group string) (map[int]int64, error) {
	var r groupcoord.OffsetsResponse
	if err := groupCall(a, http.MethodGet, "/v1/groups/"+group+"/offsets", nil, &r); err != nil {
		return nil, err
	}
	out := map[int]int64{}
	for _, o := range r.Offsets {
		out[int(o.Partition)] = o.Offset
	}
	return out, nil
}

func sortedKeys[V any](m map[int]V) []int {
	var ks []int
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// produceRecords writes n records to one partition through a with
// acks=all.
func produceRecords(t *testing.T, a *Agent, topic string, partition, n int) {
	t.Helper()
	var body strings.Builder
	for i := range n {
		fmt.Fprintf(&body, "{\"value\":\"p%d-%d\"}\n", partition, i)
	}
	if _, err := a.Produce(topic, partition, ContentTypeNDJSON, []byte(body.String()), "all", 10*time.Second); err != nil {
		t.Fatalf("produce to %s/%d: %v", topic, partition, err)
	}
}

// TestGroupOffsetsSurviveCoordinatorCrashAndFullRestart is acceptance 3 of
// the consumer-groups issue: committed offsets survive kill -9 of the
// coordinator's agent and a restart of every agent, and the member keeps
// its partitions and epoch across the coordinator's failover (the group's
// state is in Consul, not only in the dead coordinator's memory).
func TestGroupOffsetsSurviveCoordinatorCrashAndFullRestart(t *testing.T) {
	c := Start(t, Options{Timing: TimingShipped})
	a := c.Agents[0]
	if err := a.CreateTopic(TopicSpec{Name: "orders", Partitions: 4, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	for p := range 4 {
		c.WaitLeader("orders", p, 20*time.Second)
		produceRecords(t, a, "orders", p, 10+p)
	}
	m := joinGroup(t, a, "g", "m1", "orders")
	if len(m.Assigned) != 4 {
		t.Fatalf("the only member was assigned %v", m.Assigned)
	}
	want := map[int]int64{0: 3, 1: 11, 2: 7, 3: 13}
	if err := commitOffsets(a, "g", "m1", m.MemberEpoch, want, "orders"); err != nil {
		t.Fatal(err)
	}
	var d groupcoord.Description
	if err := groupCall(a, http.MethodGet, "/v1/groups/g", nil, &d); err != nil {
		t.Fatal(err)
	}
	var coordinator, other *Agent
	for _, ag := range c.Agents {
		if ag.NodeID == d.Coordinator {
			coordinator = ag
		} else if other == nil {
			other = ag
		}
	}
	if coordinator == nil {
		t.Fatalf("describe names coordinator %q, no agent of the cluster", d.Coordinator)
	}
	t.Logf("coordinator %s killed with SIGKILL", coordinator.NodeID)
	killed := time.Now()
	coordinator.Kill()
	var got map[int]int64
	c.WaitFor(60*time.Second, "offsets served by a new coordinator", func() bool {
		var err error
		got, err = committedOffsets(other, "g")
		return err == nil
	})
	t.Logf("offsets served again %v after the kill", time.Since(killed).Round(time.Millisecond))
	if !mapsEqual(got, want) {
		t.Fatalf("offsets after the coordinator's crash = %v, want %v", got, want)
	}
	// The member was not fenced: its epoch and partitions still hold.
	want[2] = 9
	if err := commitOffsets(other, "g", "m1", m.MemberEpoch, want, "orders"); err != nil {
		t.Fatalf("commit at the member's epoch after the failover: %v", err)
	}
	coordinator.Restart()
	for _, ag := range c.Agents {
		ag.Kill()
	}
	for _, ag := range c.Agents {
		ag.Start()
	}
	for _, ag := range c.Agents {
		ag.WaitHealthy()
	}
	c.WaitFor(60*time.Second, "offsets served after every agent restarted", func() bool {
		var err error
		got, err = committedOffsets(c.Agents[2], "g")
		return err == nil
	})
	if !mapsEqual(got, want) {
		t.Fatalf("offsets after restarting every agent = %v, want %v", got, want)
	}
}

func mapsEqual(a, b map[int]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestGroupBadInputCommitsNothing is acceptance 5: an unknown group, a
// stale member epoch, a commit beyond the high watermark, a member id of
// another group, and malformed requests are each a 4xx JSON error, and
// nothing is committed.
func TestGroupBadInputCommitsNothing(t *testing.T) {
	c := Start(t, Options{Timing: TimingShipped})
	a, b := c.Agents[0], c.Agents[1]
	if err := a.CreateTopic(TopicSpec{Name: "t", Partitions: 2, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	for p := range 2 {
		c.WaitLeader("t", p, 20*time.Second)
		produceRecords(t, a, "t", p, 5)
	}
	m := joinGroup(t, a, "g", "m1", "t")
	joinGroup(t, b, "other", "stranger", "t")
	if err := commitOffsets(a, "g", "m1", m.MemberEpoch, map[int]int64{0: 2, 1: 2}, "t"); err != nil {
		t.Fatal(err)
	}
	// m2 joining moves the group's epoch on: m1's epoch before its grant
	// is stale for what it owns.
	m2 := joinGroup(t, b, "g", "m2", "t")
	commit := func(group, member string, epoch int32, p int, off int64) func() (int, []byte) {
		return func() (int, []byte) {
			body, _ := json.Marshal(groupcoord.CommitRequest{MemberID: member, MemberEpoch: epoch,
				Offsets: []groupcoord.OffsetCommit{{Topic: "t", Partition: int32(p), Offset: off}}})
			st, resp, err := b.Send(http.MethodPost, "/v1/groups/"+group+"/offsets", "application/json", body)
			if err != nil {
				t.Fatal(err)
			}
			return st, resp
		}
	}
	raw := func(method, path, body string) func() (int, []byte) {
		return func() (int, []byte) {
			st, resp, err := b.Send(method, path, "application/json", []byte(body))
			if err != nil {
				t.Fatal(err)
			}
			return st, resp
		}
	}
	tests := []struct {
		name   string
		do     func() (int, []byte)
		status int
		code   string
	}{
		{"unknown group", commit("nope", "m1", m.MemberEpoch, 0, 1), 404, wire.CodeUnknownGroup},
		{"unknown group's offsets", raw(http.MethodGet, "/v1/groups/nope/offsets", ""), 404, wire.CodeUnknownGroup},
		{"stale member epoch", commit("g", "m1", m.MemberEpoch-1, 0, 1), 409, wire.CodeStaleMemberEpoch},
		{"member of another group", commit("g", "stranger", 1, 0, 1), 404, wire.CodeUnknownMember},
		{"partition the member does not own", commit("g", "m2", m2.MemberEpoch, 0, 1), 409, wire.CodeNotOwner},
		{"beyond the high watermark", commit("g", "m1", m.MemberEpoch, 0, 6), 400, wire.CodeOffsetBeyondHighWatermark},
		{"negative offset", commit("g", "m1", m.MemberEpoch, 0, -1), 400, wire.CodeInvalidRequest},
		{"no such partition", commit("g", "m1", m.MemberEpoch, 7, 1), 409, wire.CodeNotOwner},
		{"unknown field", raw(http.MethodPost, "/v1/groups/g/offsets", `{"member":"m1","offsets":[]}`), 400, wire.CodeInvalidRequest},
		{"not JSON", raw(http.MethodPost, "/v1/groups/g/offsets", `commit`), 400, wire.CodeInvalidRequest},
		{"join an unknown topic", raw(http.MethodPost, "/v1/groups/g/members", `{"topics":["nope"]}`), 404, wire.CodeUnknownTopic},
		{"heartbeat of a stranger", raw(http.MethodPost, "/v1/groups/g/members/stranger/heartbeat", `{"member_epoch":1,"owned":[]}`), 404, wire.CodeUnknownMember},
		{"fetch of a partition not owned", raw(http.MethodGet, fmt.Sprintf("/v1/topics/t/partitions/0/records?group=g&member_id=m2&member_epoch=%d", m2.MemberEpoch), ""), 409, wire.CodeNotOwner},
		{"reset while owned", raw(http.MethodPost, "/v1/groups/g/offsets/reset", `{"topic":"t","to":"earliest"}`), 409, wire.CodeGroupNotEmpty},
		{"write to the offsets topic", raw(http.MethodPost, "/v1/topics/"+groupcoord.OffsetsTopic+"/records", `{"value":"x"}`), 403, wire.CodeInternalTopic},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := tt.do()
			err := decodeAPIError(status, body)
			var apiErr *APIError
			if status != tt.status || !errors.As(err, &apiErr) || apiErr.Code != tt.code {
				t.Fatalf("status %d, body %s; want %d %s", status, body, tt.status, tt.code)
			}
		})
	}
	got, err := committedOffsets(a, "g")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[int]int64{0: 2, 1: 2}; !mapsEqual(got, want) {
		t.Fatalf("offsets after the refused requests = %v, want %v", got, want)
	}
}

// TestConcurrentGroupCommitsAnswerEachOnItsOwn: concurrent commits through
// a sidecar that does not coordinate the group, which the coordinator
// appends together, each get their own answer: the valid ones are
// committed, the stale ones and those beyond the high watermark refused.
func TestConcurrentGroupCommitsAnswerEachOnItsOwn(t *testing.T) {
	c := Start(t, Options{Timing: TimingShipped})
	a := c.Agents[0]
	if err := a.CreateTopic(TopicSpec{Name: "t", Partitions: 3, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	for p := range 3 {
		c.WaitLeader("t", p, 20*time.Second)
		produceRecords(t, a, "t", p, 5)
	}
	m := joinGroup(t, a, "g", "m1", "t")
	var d groupcoord.Description
	if err := groupCall(a, http.MethodGet, "/v1/groups/g", nil, &d); err != nil {
		t.Fatal(err)
	}
	var sidecar *Agent
	for _, ag := range c.Agents {
		if ag.NodeID != d.Coordinator {
			sidecar = ag
			break
		}
	}
	const each = 40
	type outcome struct {
		kind string
		err  error
	}
	results := make(chan outcome, 3*each)
	var wg sync.WaitGroup
	for i := range each {
		wg.Go(func() {
			results <- outcome{"valid", commitOffsets(sidecar, "g", "m1", m.MemberEpoch, map[int]int64{0: 3}, "t")}
		})
		wg.Go(func() {
			results <- outcome{"stale", commitOffsets(sidecar, "g", "m1", m.MemberEpoch-1, map[int]int64{1: 2}, "t")}
		})
		wg.Go(func() {
			results <- outcome{"beyond", commitOffsets(sidecar, "g", "m1", m.MemberEpoch, map[int]int64{2: int64(6 + i)}, "t")}
		})
	}
	wg.Wait()
	close(results)
	want := map[string]string{"valid": "", "stale": wire.CodeStaleMemberEpoch, "beyond": wire.CodeOffsetBeyondHighWatermark}
	for r := range results {
		var apiErr *APIError
		got := ""
		if r.err != nil {
			if !errors.As(r.err, &apiErr) {
				t.Fatalf("%s commit: %v", r.kind, r.err)
			}
			got = apiErr.Code
		}
		if got != want[r.kind] {
			t.Fatalf("%s commit answered %q (%v), want %q", r.kind, got, r.err, want[r.kind])
		}
	}
	got, err := committedOffsets(sidecar, "g")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[int]int64{0: 3}; !mapsEqual(got, want) {
		t.Fatalf("offsets = %v, want %v", got, want)
	}
}
