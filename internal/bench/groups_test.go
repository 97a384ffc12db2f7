package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSettled(t *testing.T) {
	p := func(ps ...int32) []gpart {
		out := make([]gpart, 0, len(ps))
		for _, x := range ps {
			out = append(out, gpart{"t", x})
		}
		return out
	}
	v := func(owned []gpart) memberView { return memberView{owned: owned} }
	tests := []struct {
		name  string
		views []memberView
		want  bool
	}{
		{"no members", nil, false},
		{"balanced and complete", []memberView{v(p(0, 1)), v(p(2, 3))}, true},
		{"partition 3 without an owner", []memberView{v(p(0, 1)), v(p(2))}, false},
		{"complete, 3 + 1", []memberView{v(p(0, 1, 2)), v(p(3))}, false},
		{"a partition missing (dead member's)", []memberView{v(p(0)), v(p(1))}, false},
		{"two owners of one partition", []memberView{v(p(0, 1)), v(p(1, 2, 3))}, false},
		{"complete but unbalanced (a new member owns nothing yet)", []memberView{v(p(0, 1)), v(p(2, 3)), v(nil)}, false},
		{"a member still revoking", []memberView{v(p(0, 1)), {owned: p(2, 3), revoking: true}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := settled(tt.views, 4); got != tt.want {
				t.Fatalf("settled(%v, 4) = %t, want %t", tt.views, got, tt.want)
			}
		})
	}
	if !settled([]memberView{v(p(0, 1)), v(p(2))}, 3) {
		t.Fatal("3 partitions as 2 + 1 is settled")
	}
}

func validGroupsConfig() GroupsConfig {
	return GroupsConfig{Addrs: []string{"http://127.0.0.1:1"}, Topic: "t", Group: "g", Members: 4, Concurrency: 1,
		RecordBytes: 50, SeedRecords: 10, Duration: time.Second, SessionTimeout: time.Second, HeartbeatWait: time.Second,
		SettleMembers: 3, Rounds: 1, SettleTimeout: 5 * time.Second}
}

func TestGroupsConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*GroupsConfig)
	}{
		{"no address", func(c *GroupsConfig) { c.Addrs = nil }},
		{"bad address", func(c *GroupsConfig) { c.Addrs = []string{"ftp://x"} }},
		{"no topic", func(c *GroupsConfig) { c.Topic = "" }},
		{"no group", func(c *GroupsConfig) { c.Group = "" }},
		{"both phases skipped", func(c *GroupsConfig) { c.SkipCommits, c.SkipSettle = true, true }},
		{"no members", func(c *GroupsConfig) { c.Members = 0 }},
		{"no workers", func(c *GroupsConfig) { c.Concurrency = 0 }},
		{"empty records", func(c *GroupsConfig) { c.RecordBytes = 0 }},
		{"no seed records", func(c *GroupsConfig) { c.SeedRecords = 0 }},
		{"no duration", func(c *GroupsConfig) { c.Duration = 0 }},
		{"negative warm-up", func(c *GroupsConfig) { c.Warmup = -time.Second }},
		{"sub-millisecond session", func(c *GroupsConfig) { c.SessionTimeout = time.Microsecond }},
		{"wait above 30s", func(c *GroupsConfig) { c.HeartbeatWait = 31 * time.Second }},
		{"one settle member", func(c *GroupsConfig) { c.SettleMembers = 1 }},
		{"no rounds", func(c *GroupsConfig) { c.Rounds = 0 }},
		{"settle timeout not above the session", func(c *GroupsConfig) { c.SettleTimeout = c.SessionTimeout }},
		{"negative partitions", func(c *GroupsConfig) { c.Partitions = -1 }},
	}
	good := validGroupsConfig()
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := validGroupsConfig()
			tt.change(&cfg)
			if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig", err)
			}
		})
	}
	noDuration := validGroupsConfig()
	noDuration.Duration, noDuration.SkipCommits = 0, true
	if err := noDuration.Validate(); err != nil {
		t.Fatalf("settle only needs no duration: %v", err)
	}
}

// fakeGroupAgent serves the client API's topic, produce and group
// endpoints for one topic, with a cooperative assignor like the agent's:
// partition p's target is the (p mod n)-th member in join order; a
// partition is granted once its previous owner released it; a member that
// misses its session timeout is dropped; heartbeats are held until news or
// the wait.
type fakeGroupAgent struct {
	topic      string
	partitions int
	session    time.Duration

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
	groups  map[string]*fakeGroup
	nextID  int
	commits int

	stop chan struct{}
	done chan struct{}
}

type fakeGroup struct {
	members []string // join order
	seen    map[string]time.Time
	owner   map[int32]string
	offsets map[int32]int64
}

func newFakeGroupAgent(t *testing.T, partitions int, session time.Duration) *httptest.Server {
	f := &fakeGroupAgent{topic: "t", partitions: partitions, session: session, changed: make(chan struct{}),
		groups: map[string]*fakeGroup{}, stop: make(chan struct{}), done: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	go f.expire()
	t.Cleanup(func() {
		close(f.stop)
		<-f.done
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

// expire drops members whose sessions ran out.
func (f *fakeGroupAgent) expire() {
	defer close(f.done)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-f.stop:
			return
		case now := <-tick.C:
			f.mu.Lock()
			for _, g := range f.groups {
				for _, m := range slices.Clone(g.members) {
					if now.Sub(g.seen[m]) > f.session {
						f.remove(g, m)
					}
				}
			}
			f.mu.Unlock()
		}
	}
}

// remove drops m and frees its partitions; called with f.mu held.
func (f *fakeGroupAgent) remove(g *fakeGroup, m string) {
	g.members = slices.DeleteFunc(g.members, func(x string) bool { return x == m })
	for p, o := range g.owner {
		if o == m {
			delete(g.owner, p)
		}
	}
	f.broadcast()
}

func (f *fakeGroupAgent) broadcast() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeGroupAgent) target(g *fakeGroup, p int32) string {
	return g.members[int(p)%len(g.members)]
}

// answer applies m's owned set and returns what it owns and must revoke;
// called with f.mu held.
func (f *fakeGroupAgent) answer(g *fakeGroup, m string, owned []gpart) (assigned, revoke []gpart, news bool) {
	keep := map[int32]bool{}
	for _, p := range owned {
		keep[p.Partition] = true
	}
	released := false
	for p, o := range g.owner {
		if o == m && !keep[p] {
			delete(g.owner, p)
			released = true
		}
	}
	if released {
		f.broadcast()
	}
	for p := range int32(f.partitions) {
		switch o := g.owner[p]; {
		case f.target(g, p) == m && (o == "" || o == m):
			if o == "" {
				g.owner[p] = m
				news = true
			}
			assigned = append(assigned, gpart{f.topic, p})
		case o == m:
			revoke = append(revoke, gpart{f.topic, p})
			news = true
		}
	}
	return assigned, revoke, news || len(assigned) != len(owned)
}

func writeJSONAnswer(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func writeAPIErr(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"code":%q,"message":"fake","retriable":false}}`, code)
}

func (f *fakeGroupAgent) serve(w http.ResponseWriter, r *http.Request) {
	path := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/topics/"+f.topic:
		var ps []map[string]any
		for p := range f.partitions {
			ps = append(ps, map[string]any{"partition": p, "leader": "n1", "replicas": []string{"n1"}, "isr": []string{"n1"}})
		}
		writeJSONAnswer(w, map[string]any{"name": f.topic, "partitions": ps})
	case r.Method == http.MethodPost && r.URL.Path == "/v1/topics/"+f.topic+"/records":
		writeJSONAnswer(w, map[string]any{"topic": f.topic})
	case r.Method == http.MethodGet && r.URL.Path == "/v1/status":
		writeJSONAnswer(w, map[string]any{"agents": []map[string]any{{"node_id": "n1", "client_address": r.Host}}})
	case len(path) >= 3 && path[0] == "v1" && path[1] == "groups":
		f.serveGroup(w, r, path[2], path[3:])
	default:
		writeAPIErr(w, http.StatusNotFound, "not_found")
	}
}

func (f *fakeGroupAgent) serveGroup(w http.ResponseWriter, r *http.Request, name string, rest []string) {
	f.mu.Lock()
	g := f.groups[name]
	if g == nil {
		g = &fakeGroup{seen: map[string]time.Time{}, owner: map[int32]string{}, offsets: map[int32]int64{}}
		f.groups[name] = g
	}
	switch {
	case r.Method == http.MethodPost && len(rest) == 1 && rest[0] == "members":
		f.nextID++
		m := fmt.Sprintf("m%d", f.nextID)
		g.members = append(g.members, m)
		g.seen[m] = time.Now()
		f.broadcast()
		assigned, _, _ := f.answer(g, m, nil)
		f.mu.Unlock()
		writeJSONAnswer(w, memberAnswer{MemberID: m, MemberEpoch: 1, Assigned: assigned, HeartbeatIntervalMS: 100})
	case r.Method == http.MethodPost && len(rest) == 3 && rest[2] == "heartbeat":
		m := rest[1]
		var req heartbeatBody
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			f.mu.Unlock()
			writeAPIErr(w, http.StatusBadRequest, "invalid_request")
			return
		}
		deadline := time.Now().Add(min(time.Duration(req.WaitMS)*time.Millisecond, f.session/3))
		for {
			if !slices.Contains(g.members, m) {
				f.mu.Unlock()
				writeAPIErr(w, http.StatusNotFound, "unknown_member")
				return
			}
			g.seen[m] = time.Now()
			assigned, revoke, news := f.answer(g, m, req.Owned)
			wait := time.Until(deadline)
			if news || wait <= 0 {
				f.mu.Unlock()
				writeJSONAnswer(w, memberAnswer{MemberID: m, MemberEpoch: 1, Assigned: assigned, Revoke: revoke, HeartbeatIntervalMS: 100})
				return
			}
			ch := f.changed
			f.mu.Unlock()
			select {
			case <-ch:
			case <-time.After(wait):
			case <-r.Context().Done():
				return
			}
			f.mu.Lock()
		}
	case r.Method == http.MethodDelete && len(rest) == 2 && rest[0] == "members":
		f.remove(g, rest[1])
		f.mu.Unlock()
		writeJSONAnswer(w, map[string]any{})
	case r.Method == http.MethodPost && len(rest) == 1 && rest[0] == "offsets":
		var req struct {
			MemberID string `json:"member_id"`
			Offsets  []struct {
				Partition int32 `json:"partition"`
				Offset    int64 `json:"offset"`
			} `json:"offsets"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			f.mu.Unlock()
			writeAPIErr(w, http.StatusBadRequest, "invalid_request")
			return
		}
		for _, o := range req.Offsets {
			if g.owner[o.Partition] != req.MemberID {
				f.mu.Unlock()
				writeAPIErr(w, http.StatusConflict, "not_owner")
				return
			}
		}
		for _, o := range req.Offsets {
			g.offsets[o.Partition] = o.Offset
		}
		f.commits++
		f.mu.Unlock()
		writeJSONAnswer(w, map[string]any{"committed": req.Offsets})
	case r.Method == http.MethodGet && len(rest) == 1 && rest[0] == "offsets":
		var out committedOffsets
		for p, o := range g.offsets {
			out.Offsets = append(out.Offsets, struct {
				Topic     string `json:"topic"`
				Partition int32  `json:"partition"`
				Offset    int64  `json:"offset"`
			}{f.topic, p, o})
		}
		f.mu.Unlock()
		writeJSONAnswer(w, out)
	case r.Method == http.MethodGet && len(rest) == 0:
		f.mu.Unlock()
		writeJSONAnswer(w, groupDescription{Coordinator: "n1"})
	default:
		f.mu.Unlock()
		writeAPIErr(w, http.StatusNotFound, "not_found")
	}
}

func TestGroupsAgainstFakeAgent(t *testing.T) {
	const session = 400 * time.Millisecond
	srv := newFakeGroupAgent(t, 6, session)
	cfg := GroupsConfig{Addrs: []string{srv.URL}, Topic: "t", Group: "g", Members: 6, Concurrency: 2,
		RecordBytes: 50, SeedRecords: 10, Duration: 200 * time.Millisecond, SessionTimeout: session,
		HeartbeatWait: time.Second, SettleMembers: 3, Rounds: 2, SettleTimeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Groups(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []*Result{res.ProduceBaseline, res.Commit, res.CommitAll} {
		if x.Requests == 0 || x.ErrorCount() != 0 {
			t.Fatalf("%s: %d requests, errors %v %v", x.Workload, x.Requests, x.Errors, x.Examples)
		}
	}
	if res.Commit.Records != res.Commit.Requests || res.CommitAll.Records != 6*res.CommitAll.Requests {
		t.Fatalf("offsets: %d in %d commits of one, %d in %d commits of all six", res.Commit.Records, res.Commit.Requests,
			res.CommitAll.Records, res.CommitAll.Requests)
	}
	if len(res.Notes) != 0 {
		t.Fatalf("notes %q, want none: no member of a healthy group fails a heartbeat", res.Notes)
	}
	byEvent := map[string]SettleStat{}
	for _, s := range res.Settle {
		byEvent[s.Event] = s
	}
	wantRuns := map[string]int{EventStart: 2, EventKill: 2, EventKillMidPoll: 2, EventJoin: 4, EventLeave: 2}
	for event, n := range wantRuns {
		if got := len(byEvent[event].Runs); got != n {
			t.Fatalf("%s: %d runs, want %d", event, got, n)
		}
	}
	// A dead member's partitions move once its session expired, not
	// sooner (counted from its last heartbeat, up to midPollKill before
	// the kill); a leave or a join does not wait for any session.
	for _, event := range []string{EventKill, EventKillMidPoll} {
		s := byEvent[event]
		for _, d := range s.Runs {
			if d < session-midPollKill-50*time.Millisecond || d > session+3*time.Second {
				t.Fatalf("%s settled after %v, want about the session timeout %v", event, d, session)
			}
		}
	}
	for _, event := range []string{EventJoin, EventLeave} {
		if m := byEvent[event].Max(); m >= session {
			t.Fatalf("%s settled after %v, want less than the session timeout %v", event, m, session)
		}
	}
	var out strings.Builder
	if err := res.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	var rep GroupsReport
	var js strings.Builder
	if err := res.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(js.String()), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Commit == nil || rep.CommitRatio <= 0 || len(rep.Settle) != 5 || rep.Settle[1].AfterSessionTimeoutMedianMS == nil {
		t.Fatalf("JSON report misses figures:\n%s", js.String())
	}
}

func TestGroupsRefusesMoreMembersThanPartitions(t *testing.T) {
	srv := newFakeGroupAgent(t, 2, time.Second)
	cfg := validGroupsConfig()
	cfg.Addrs = []string{srv.URL}
	cfg.Members = 3
	if _, err := Groups(context.Background(), cfg); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("3 members for 2 partitions: %v, want ErrInvalidConfig", err)
	}
}

func TestAppendCommitBody(t *testing.T) {
	b := appendCommitBody(nil, []byte(`"m\"1"`), 7, []byte(`"orders"`), []int32{0, 3}, 42)
	var got struct {
		MemberID    string `json:"member_id"`
		MemberEpoch int32  `json:"member_epoch"`
		Offsets     []struct {
			Topic     string `json:"topic"`
			Partition int32  `json:"partition"`
			Offset    int64  `json:"offset"`
		} `json:"offsets"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if got.MemberID != `m"1` || got.MemberEpoch != 7 || len(got.Offsets) != 2 || got.Offsets[1].Partition != 3 ||
		got.Offsets[1].Offset != 42 || got.Offsets[0].Topic != "orders" {
		t.Fatalf("decoded %+v from %s", got, b)
	}
}
