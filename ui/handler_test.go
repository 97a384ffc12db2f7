package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// stateFunc is a Source made of a function.
type stateFunc func(ctx context.Context) (State, error)

func (f stateFunc) State(ctx context.Context) (State, error) { return f(ctx) }

func i64(v int64) *int64 { return &v }

// sampleState is a cluster of three agents, n3 down, with one topic whose
// partition 0 is led by its preferred replica with everyone in sync and
// partition 1 lost n3 from its ISR and is led by n2; n2 is being
// drained, and partition 2 is moving from n1,n2,n3 to n1,n3,n4 (n4 caught up
// 30 of the 40 offsets of n1's log from 10).
func sampleState() State {
	return State{
		TimeUnixMilli: 1700000000000,
		Self:          Self{NodeID: "n1", State: "serving"},
		Agents: []Agent{
			{NodeID: "n1", ClientAddress: "127.0.0.1:7070", PeerAddress: "127.0.0.1:7171", Up: true},
			{NodeID: "n2", ClientAddress: "127.0.0.1:7072", PeerAddress: "127.0.0.1:7173", Up: true, Draining: true},
			{NodeID: "n3", Up: false},
		},
		Topics: []Topic{{
			Name: "orders", ReplicationFactor: 3, MinInsyncReplicas: 2,
			Partitions: []Partition{
				{Partition: 0, Leader: "n1", Epoch: 1, Replicas: []string{"n1", "n2", "n3"}, ISR: []string{"n1", "n2", "n3"},
					Role: "leader", HighWatermark: i64(40), LogEndOffset: i64(42), LogStartOffset: i64(0)},
				{Partition: 1, Leader: "n2", Epoch: 3, Replicas: []string{"n3", "n1", "n2"}, ISR: []string{"n1", "n2"},
					Role: "follower", HighWatermark: i64(7), LogEndOffset: i64(7), LogStartOffset: i64(2)},
				{Partition: 2, Leader: "n1", Epoch: 2, Replicas: []string{"n1", "n3", "n4", "n2"}, ISR: []string{"n1", "n2", "n3"},
					Role: "leader", HighWatermark: i64(50), LogEndOffset: i64(50), LogStartOffset: i64(10),
					Move: &Move{Target: []string{"n1", "n3", "n4"}, Adding: []string{"n4"}, Removing: []string{"n2"},
						Progress: []MoveProgress{{Node: "n4", LogEndOffset: 40, Lag: 10, CatchUpBytes: 3 << 20}}}},
			},
		}},
	}
}

// serve runs the handler on an in-memory listener and returns a function
// that sends one raw request line (the path exactly as given, nothing
// normalized on the way) and returns the answer.
func serve(t *testing.T, src Source) func(method, path string) *fasthttp.Response {
	t.Helper()
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: New(src).Serve, NoDefaultContentType: true}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		if err := srv.Shutdown(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-done
	})
	return func(method, path string) *fasthttp.Response {
		t.Helper()
		conn, err := ln.Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: ui.test\r\nConnection: close\r\n\r\n", method, path); err != nil {
			t.Fatal(err)
		}
		resp := &fasthttp.Response{}
		if err := resp.Read(bufio.NewReader(conn)); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return resp
	}
}

func TestHandlerFiles(t *testing.T) {
	get := serve(t, stateFunc(func(context.Context) (State, error) { return sampleState(), nil }))
	tests := []struct {
		path        string
		status      int
		contentType string
		bodyHas     string
	}{
		{"/ui/", 200, "text/html; charset=utf-8", `<script src="app.js" defer></script>`},
		{"/ui/app.js", 200, "text/javascript; charset=utf-8", "api/state"},
		{"/ui/style.css", 200, "text/css; charset=utf-8", ".agent.down"},
		{"/ui/api/state", 200, "application/json", `"time_unix_ms":1700000000000`},
		{"/ui/?refresh=1", 200, "text/html; charset=utf-8", "<title>"},
		{"/ui/app.js?v=2", 200, "text/javascript; charset=utf-8", "api/state"},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			resp := get("GET", tc.path)
			if resp.StatusCode() != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode(), tc.status, resp.Body())
			}
			if ct := string(resp.Header.ContentType()); ct != tc.contentType {
				t.Errorf("Content-Type %q, want %q", ct, tc.contentType)
			}
			if !strings.Contains(string(resp.Body()), tc.bodyHas) {
				t.Errorf("body lacks %q", tc.bodyHas)
			}
			checkSecurityHeaders(t, resp)
		})
	}
}

func checkSecurityHeaders(t *testing.T, resp *fasthttp.Response) {
	t.Helper()
	if got := string(resp.Header.Peek("X-Content-Type-Options")); got != "nosniff" {
		t.Errorf("X-Content-Type-Options %q, want nosniff", got)
	}
	csp := string(resp.Header.Peek("Content-Security-Policy"))
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
}

func TestHandlerRedirect(t *testing.T) {
	get := serve(t, stateFunc(func(context.Context) (State, error) { return sampleState(), nil }))
	for _, path := range []string{"/ui", "/ui?x=1"} {
		resp := get("GET", path)
		if resp.StatusCode() != fasthttp.StatusMovedPermanently {
			t.Fatalf("%s: status %d, want 301", path, resp.StatusCode())
		}
		if loc := string(resp.Header.Peek("Location")); loc != "/ui/" {
			t.Errorf("%s: Location %q, want /ui/", path, loc)
		}
	}
}

// TestHandlerNotFound: anything but the page's own paths is a JSON 404,
// and no spelling of a path reaches a file outside the table, in the
// embedded tree or beyond it.
func TestHandlerNotFound(t *testing.T) {
	get := serve(t, stateFunc(func(context.Context) (State, error) { return sampleState(), nil }))
	for _, path := range []string{
		"/ui/index.html",
		"/ui/nope.js",
		"/ui/static/app.js",
		"/ui/static%2fapp.js",
		"/ui/../ui/app.js",
		"/ui/./app.js",
		"/ui//app.js",
		"/ui/app.js/",
		"/ui/%2e%2e/handler.go",
		"/ui/..%2fhandler.go",
		"/ui/%2e%2e%2f%2e%2e%2fgo.mod",
		"/ui/..%5chandler.go",
		"/ui/api",
		"/ui/api/state/",
		"/ui/api/%73tate",
		"/ui/APP.JS",
		"/other",
	} {
		t.Run(path, func(t *testing.T) {
			resp := get("GET", path)
			if resp.StatusCode() != fasthttp.StatusNotFound {
				t.Fatalf("status %d, want 404; body %.80q", resp.StatusCode(), resp.Body())
			}
			var body struct {
				Error struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(resp.Body(), &body); err != nil || body.Error.Code != "not_found" {
				t.Errorf("body %q (%v), want the not_found JSON error", resp.Body(), err)
			}
			checkSecurityHeaders(t, resp)
		})
	}
}

// TestStateJSON checks the shape of /ui/api/state: the names the page
// reads, the derived flags and totals.
func TestStateJSON(t *testing.T) {
	get := serve(t, stateFunc(func(context.Context) (State, error) { return sampleState(), nil }))
	resp := get("GET", "/ui/api/state")
	if resp.StatusCode() != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
	}
	if cc := string(resp.Header.Peek("Cache-Control")); cc != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", cc)
	}
	var doc map[string]any
	if err := json.Unmarshal(resp.Body(), &doc); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]any) string {
		return strings.Join(slices.Sorted(maps.Keys(m)), ",")
	}
	if got, want := keys(doc), "agents,counters,self,time_unix_ms,topics,totals,warnings"; got != want {
		t.Errorf("state keys %s, want %s", got, want)
	}
	if doc["counters"] != nil {
		t.Errorf("counters %v, want null when the source keeps none", doc["counters"])
	}
	agent := doc["agents"].([]any)[0].(map[string]any)
	if got, want := keys(agent), "client_address,draining,node_id,not_passing,peer_address,up,version"; got != want {
		t.Errorf("agent keys %s, want %s", got, want)
	}
	topic := doc["topics"].([]any)[0].(map[string]any)
	if got, want := keys(topic), "min_insync_replicas,name,partitions,replication_factor"; got != want {
		t.Errorf("topic keys %s, want %s", got, want)
	}
	p := topic["partitions"].([]any)[0].(map[string]any)
	if got, want := keys(p), "epoch,high_watermark,isr,lag,leader,leader_not_preferred,log_end_offset,log_start_offset,move,offline,partition,replicas,role,under_min_isr,under_replicated"; got != want {
		t.Errorf("partition keys %s, want %s", got, want)
	}
	var st State
	if err := json.Unmarshal(resp.Body(), &st); err != nil {
		t.Fatal(err)
	}
	if p["move"] != nil {
		t.Errorf("partition 0 move %v, want null", p["move"])
	}
	move := topic["partitions"].([]any)[2].(map[string]any)["move"].(map[string]any)
	if got, want := keys(move), "adding,cancelled,phase,progress,removing,target"; got != want {
		t.Errorf("move keys %s, want %s", got, want)
	}
	progress := move["progress"].([]any)[0].(map[string]any)
	if got, want := keys(progress), "catch_up_bytes,caught_up,in_sync,lag,log_end_offset,node"; got != want {
		t.Errorf("move progress keys %s, want %s", got, want)
	}
	want := Totals{AgentsUp: 2, AgentsDown: 1, AgentsDraining: 1, Topics: 1, Partitions: 3, UnderReplicated: 1, LeaderNotPreferred: 1, Moving: 1}
	if st.Totals != want {
		t.Errorf("totals %+v, want %+v", st.Totals, want)
	}
	p0, p1 := st.Topics[0].Partitions[0], st.Topics[0].Partitions[1]
	if p0.Lag == nil || *p0.Lag != 2 || p0.UnderReplicated || p0.LeaderNotPreferred || p0.Offline {
		t.Errorf("partition 0 derived lag %v under %v notPreferred %v offline %v, want 2 false false false",
			p0.Lag, p0.UnderReplicated, p0.LeaderNotPreferred, p0.Offline)
	}
	if !p1.UnderReplicated || p1.UnderMinISR || !p1.LeaderNotPreferred || p1.Offline {
		t.Errorf("partition 1 derived under %v underMin %v notPreferred %v offline %v, want true false true false",
			p1.UnderReplicated, p1.UnderMinISR, p1.LeaderNotPreferred, p1.Offline)
	}
	p2 := st.Topics[0].Partitions[2]
	if p2.UnderReplicated || p2.Move == nil || p2.Move.Phase != "adding" || p2.Move.Progress[0].CaughtUp == nil || *p2.Move.Progress[0].CaughtUp != 0.75 {
		t.Errorf("partition 2 under %v move %+v, want not under-replicated, adding, n4 0.75 caught up", p2.UnderReplicated, p2.Move)
	}
}

// TestDeriveMove: a move's phase follows the ISR and the leader (design.md
// §7.6's states), its added replicas' share caught up the leader's
// positions, and under-replication counts the replicas before the move and
// the replication factor, not the replicas a move adds.
func TestDeriveMove(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	ab, abc := []string{"a", "b"}, []string{"a", "b", "c"}
	// A move of [a b c] to [b c d]: replicas are the union [b c d a].
	bcd := func(leader string, isr []string, progress ...MoveProgress) Partition {
		return Partition{Leader: leader, Replicas: []string{"b", "c", "d", "a"}, ISR: isr, LogStartOffset: i64(100), LogEndOffset: i64(300),
			Move: &Move{Target: []string{"b", "c", "d"}, Adding: []string{"d"}, Removing: []string{"a"}, Progress: progress}}
	}
	tests := []struct {
		name     string
		rf       int
		p        Partition
		under    bool
		phase    string
		caughtUp []*float64
	}{
		{"healthy", 3, Partition{Leader: "a", Replicas: abc, ISR: abc}, false, "", nil},
		{"fewer replicas than the replication factor", 3, Partition{Leader: "a", Replicas: ab, ISR: ab}, true, "", nil},
		{"adding, before the first fetch", 3, bcd("a", abc, MoveProgress{Node: "d", LogEndOffset: -1, Lag: 300}), false, "adding", []*float64{f(0)}},
		{"adding, at the log start", 3, bcd("a", abc, MoveProgress{Node: "d", LogEndOffset: 100, Lag: 200}), false, "adding", []*float64{f(0)}},
		{"adding, 61 %", 3, bcd("a", abc, MoveProgress{Node: "d", LogEndOffset: 222, Lag: 78}), false, "adding", []*float64{f(0.61)}},
		{"adding, at the log end but not in sync", 3, bcd("a", abc, MoveProgress{Node: "d", LogEndOffset: 300}), false, "adding", []*float64{f(1)}},
		{"adding, an original replica out of the ISR", 3, bcd("a", []string{"a", "b"}), true, "adding", nil},
		{"leader off: every target replica in the ISR, the leader removed", 3,
			bcd("a", []string{"a", "b", "c", "d"}, MoveProgress{Node: "d", LogEndOffset: 300, InSync: true}), false, "leader-off", []*float64{f(1)}},
		{"completing", 3, bcd("b", []string{"a", "b", "c", "d"}), false, "completing", nil},
		{"progress from a follower without positions", 3,
			Partition{Leader: "a", Replicas: []string{"b", "c", "d", "a"}, ISR: abc,
				Move: &Move{Target: []string{"b", "c", "d"}, Adding: []string{"d"}, Removing: []string{"a"}, Progress: []MoveProgress{{Node: "d", LogEndOffset: 5}}}},
			false, "adding", []*float64{nil}},
		{"a cancel's way back", 3,
			Partition{Leader: "a", Replicas: []string{"a", "b", "c", "d"}, ISR: abc,
				Move: &Move{Target: abc, Removing: []string{"d"}, Cancelled: true}}, false, "cancelling", nil},
		{"a reorder: nothing added or removed", 2,
			Partition{Leader: "a", Replicas: []string{"b", "a"}, ISR: ab, Move: &Move{Target: []string{"b", "a"}}}, false, "completing", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := State{Agents: []Agent{{NodeID: "a", Up: true}}, Topics: []Topic{{Name: "t", ReplicationFactor: tc.rf, Partitions: []Partition{tc.p}}}}
			st.derive()
			got := st.Topics[0].Partitions[0]
			if got.UnderReplicated != tc.under {
				t.Errorf("under-replicated %v, want %v", got.UnderReplicated, tc.under)
			}
			if st.Totals.Moving != b2i(tc.phase != "") {
				t.Errorf("totals moving %d", st.Totals.Moving)
			}
			if tc.phase == "" {
				return
			}
			if got.Move.Phase != tc.phase {
				t.Errorf("phase %q, want %q", got.Move.Phase, tc.phase)
			}
			if got.Move.Adding == nil || got.Move.Removing == nil || got.Move.Progress == nil {
				t.Errorf("move has null lists: %+v", got.Move)
			}
			for i, want := range tc.caughtUp {
				c := got.Move.Progress[i].CaughtUp
				if (c == nil) != (want == nil) || c != nil && math.Abs(*c-*want) > 1e-9 {
					t.Errorf("replica %s caught up %s, want %s", got.Move.Progress[i].Node, fmtF(c), fmtF(want))
				}
			}
		})
	}
}

func fmtF(p *float64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

// TestStateUnavailable: a source that fails gives the API's retriable 503,
// which the page shows as the agent not answering.
func TestStateUnavailable(t *testing.T) {
	get := serve(t, stateFunc(func(ctx context.Context) (State, error) {
		if _, ok := ctx.Deadline(); !ok {
			return State{}, errors.New("no deadline on the source's context")
		}
		return State{}, errors.New("agent is stopping")
	}))
	resp := get("GET", "/ui/api/state")
	if resp.StatusCode() != fasthttp.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", resp.StatusCode())
	}
	if ra := string(resp.Header.Peek("Retry-After")); ra != "1" {
		t.Errorf("Retry-After %q, want 1", ra)
	}
	if !strings.Contains(string(resp.Body()), `"code":"service_unavailable"`) || !strings.Contains(string(resp.Body()), "agent is stopping") {
		t.Errorf("body %s", resp.Body())
	}
}

func TestDerive(t *testing.T) {
	up := []Agent{{NodeID: "a", Up: true}, {NodeID: "b", Up: true}, {NodeID: "c", Up: false}}
	abc := []string{"a", "b", "c"}
	tests := []struct {
		name   string
		minISR int
		p      Partition
		want   Partition // only the derived fields are compared
	}{
		{"healthy", 2, Partition{Leader: "a", Replicas: abc, ISR: abc}, Partition{}},
		{"one out of the ISR", 2, Partition{Leader: "a", Replicas: abc, ISR: []string{"a", "b"}}, Partition{UnderReplicated: true}},
		{"under min ISR", 2, Partition{Leader: "a", Replicas: abc, ISR: []string{"a"}}, Partition{UnderReplicated: true, UnderMinISR: true}},
		{"not the preferred leader", 2, Partition{Leader: "b", Replicas: abc, ISR: abc}, Partition{LeaderNotPreferred: true}},
		{"no leader yet", 2, Partition{Replicas: abc, ISR: abc}, Partition{Offline: true}},
		{"leader down", 1, Partition{Leader: "c", Replicas: []string{"c", "a"}, ISR: []string{"c"}}, Partition{UnderReplicated: true, Offline: true}},
		{"leader unknown to the agents list", 1, Partition{Leader: "z", Replicas: []string{"z"}, ISR: []string{"z"}}, Partition{Offline: true}},
		{"positions", 1, Partition{Leader: "a", Replicas: []string{"a"}, ISR: []string{"a"}, HighWatermark: i64(5), LogEndOffset: i64(9)}, Partition{Lag: i64(4)}},
		{"HW only", 1, Partition{Leader: "a", Replicas: []string{"a"}, ISR: []string{"a"}, HighWatermark: i64(5)}, Partition{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := State{Agents: up, Topics: []Topic{{Name: "t", MinInsyncReplicas: tc.minISR, Partitions: []Partition{tc.p}}}}
			st.derive()
			got := st.Topics[0].Partitions[0]
			if (got.Lag == nil) != (tc.want.Lag == nil) || got.Lag != nil && *got.Lag != *tc.want.Lag {
				t.Errorf("lag %s, want %s", fmtPtr(got.Lag), fmtPtr(tc.want.Lag))
			}
			if got.UnderReplicated != tc.want.UnderReplicated || got.UnderMinISR != tc.want.UnderMinISR ||
				got.LeaderNotPreferred != tc.want.LeaderNotPreferred || got.Offline != tc.want.Offline {
				t.Errorf("under %v underMin %v notPreferred %v offline %v, want %v %v %v %v",
					got.UnderReplicated, got.UnderMinISR, got.LeaderNotPreferred, got.Offline,
					tc.want.UnderReplicated, tc.want.UnderMinISR, tc.want.LeaderNotPreferred, tc.want.Offline)
			}
		})
	}
}

// TestDeriveEmpty: nil lists become empty ones, so the page never meets
// null where it iterates.
func TestDeriveEmpty(t *testing.T) {
	st := State{Topics: []Topic{{Name: "t", Partitions: []Partition{{}}}}}
	st.derive()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"agents":[]`, `"warnings":[]`, `"replicas":[]`, `"isr":[]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
}

// TestStaticFilesSelfContained: the page loads nothing from another origin
// (the policy would block it, but then the page would be broken), has no
// inline script or style for the policy to refuse, and the script never
// parses data as markup.
func TestStaticFilesSelfContained(t *testing.T) {
	html := string(files[PathIndex].body)
	for _, m := range regexp.MustCompile(`(?i)(?:src|href)\s*=\s*"([^"]*)"`).FindAllStringSubmatch(html, -1) {
		if strings.Contains(m[1], ":") || strings.HasPrefix(m[1], "//") || strings.HasPrefix(m[1], "/") {
			t.Errorf("index.html refers to %q: only relative paths of this page", m[1])
		}
	}
	if regexp.MustCompile(`(?i)<script[^>]*>[^<]+</script>|<style|\sstyle\s*=|\son[a-z]+\s*=`).MatchString(html) {
		t.Error("index.html has an inline script, style or event handler")
	}
	js := string(files[PathScript].body)
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
		if strings.Contains(js, bad) {
			t.Errorf("app.js uses %s", bad)
		}
	}
	if strings.Contains(js, "http://") || strings.Contains(js, "https://") {
		t.Error("app.js names an absolute URL")
	}
}

func fmtPtr(p *int64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}
