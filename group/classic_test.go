package group

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

const (
	testSession   = 10 * time.Second
	testRebalance = 30 * time.Second
)

func newClassic(t *testing.T) *Classic {
	t.Helper()
	g, err := NewClassic("g")
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func joinReq(member, newID string, protocols ...string) ClassicJoinRequest {
	if len(protocols) == 0 {
		protocols = []string{"range"}
	}
	req := ClassicJoinRequest{MemberID: member, NewMemberID: newID, ClientID: "c-" + newID, ClientHost: "/127.0.0.1",
		ProtocolType: "consumer", SessionTimeout: testSession, RebalanceTimeout: testRebalance}
	for _, p := range protocols {
		req.Protocols = append(req.Protocols, Protocol{Name: p, Metadata: []byte("sub-" + newID + member)})
	}
	return req
}

// join sends a join and checks whether it completed.
func join(t *testing.T, g *Classic, req ClassicJoinRequest, now time.Time, wantDone bool) ClassicJoinResponse {
	t.Helper()
	r, done, err := g.Join(req, now)
	if err != nil || done != wantDone {
		t.Fatalf("Join(%q/%q) = %+v, done %v, %v; want done %v", req.MemberID, req.NewMemberID, r, done, err, wantDone)
	}
	return r
}

func answer(t *testing.T, g *Classic, member string) ClassicJoinResponse {
	t.Helper()
	r, done, err := g.JoinAnswer(member)
	if err != nil || !done {
		t.Fatalf("JoinAnswer(%s) = %+v, done %v, %v; want done", member, r, done, err)
	}
	return r
}

func wantJoin(t *testing.T, r ClassicJoinResponse, gen int32, leader, protocol string, members ...string) {
	t.Helper()
	var got []string
	for _, m := range r.Members {
		got = append(got, m.MemberID)
	}
	if r.Generation != gen || r.Leader != leader || r.Protocol != protocol || fmt.Sprint(got) != fmt.Sprint(members) {
		t.Fatalf("join answer %+v: want generation %d, leader %s, protocol %s, members %v", r, gen, leader, protocol, members)
	}
}

func sync(t *testing.T, g *Classic, member string, gen int32, assign map[string][]byte, now time.Time, wantDone bool) []byte {
	t.Helper()
	a, done, err := g.Sync(ClassicSyncRequest{MemberID: member, Generation: gen, ProtocolType: "consumer", Assignments: assign}, now)
	if err != nil || done != wantDone {
		t.Fatalf("Sync(%s, %d) = %q, done %v, %v; want done %v", member, gen, a, done, err, wantDone)
	}
	return a
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
}

// TestClassicMemberIDRequired: a v4+ first join is given its id, which
// makes no member of the still Empty group, and the join phase waits for
// it; with it the member joins and leads.
func TestClassicMemberIDRequired(t *testing.T) {
	g := newClassic(t)
	req := joinReq("", "m1")
	req.RequireKnownMemberID = true
	r, done, err := g.Join(req, t0)
	if !errors.Is(err, ErrMemberIDRequired) || !done || r.MemberID != "m1" {
		t.Fatalf("first join: %+v, %v, %v; want MEMBER_ID_REQUIRED with m1", r, done, err)
	}
	// An id handed out makes no member (Kafka's pending members are apart
	// from its members): the group is empty.
	if g.Members() != 0 || g.Pending() != 1 || g.State() != ClassicEmpty {
		t.Fatalf("pending member: %d members, %d pending, state %v; want 0, 1, Empty", g.Members(), g.Pending(), g.State())
	}
	r = join(t, g, joinReq("m1", ""), t0, true)
	wantJoin(t, r, 1, "m1", "range", "m1")
	if a := sync(t, g, "m1", 1, map[string][]byte{"m1": []byte("all")}, t0, true); string(a) != "all" {
		t.Fatalf("assignment %q", a)
	}
	if g.State() != ClassicStable {
		t.Fatalf("state %v, want Stable", g.State())
	}
	if err := g.Heartbeat("m1", 1, t0.Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	// An unused id expires with the session timeout it joined with.
	req.NewMemberID = "m2"
	g.Join(req, t0.Add(time.Second))
	if gone := g.Tick(t0.Add(time.Second + testSession)); fmt.Sprint(gone) != "[m2]" {
		t.Fatalf("Tick removed %v, want [m2]", gone)
	}
}

// TestClassicRebalanceOnJoin: a second member starts a join phase; the
// first learns it from its heartbeat, joins again, and both get the new
// generation; the follower's sync waits for the leader's.
func TestClassicRebalanceOnJoin(t *testing.T) {
	g := newClassic(t)
	wantJoin(t, join(t, g, joinReq("", "a"), t0, true), 1, "a", "range", "a")
	sync(t, g, "a", 1, map[string][]byte{"a": []byte("0,1")}, t0, true)

	join(t, g, joinReq("", "b"), t0, false)
	if g.State() != ClassicPreparingRebalance {
		t.Fatalf("state %v", g.State())
	}
	if _, done, _ := g.JoinAnswer("b"); done {
		t.Fatal("b's join done before a joined again")
	}
	wantErr(t, "a's heartbeat", g.Heartbeat("a", 1, t0), ErrRebalanceInProgress)
	// a commits what it consumed before joining again (eager).
	if err := g.CheckCommit("a", 1); err != nil {
		t.Fatalf("commit during the join phase: %v", err)
	}
	wantJoin(t, join(t, g, joinReq("a", ""), t0, true), 2, "a", "range", "a", "b")
	wantJoin(t, answer(t, g, "b"), 2, "a", "range")
	wantErr(t, "commit before the sync", g.CheckCommit("b", 2), ErrRebalanceInProgress)
	sync(t, g, "b", 2, nil, t0, false)
	sync(t, g, "a", 2, map[string][]byte{"a": []byte("0"), "b": []byte("1"), "x": []byte("?")}, t0, true)
	if a, done, err := g.SyncAnswer("b", 2); string(a) != "1" || !done || err != nil {
		t.Fatalf("b's sync answer %q, %v, %v", a, done, err)
	}
	if err := g.CheckCommit("b", 2); err != nil {
		t.Fatal(err)
	}
}

// TestClassicRejoinWithoutChange: a follower's resent join in Stable gets
// the current generation without a rebalance; the leader's, or one with
// other metadata, starts one.
func TestClassicRejoinWithoutChange(t *testing.T) {
	g := newClassic(t)
	join(t, g, joinReq("", "a"), t0, true)
	join(t, g, joinReq("", "b"), t0, false)
	join(t, g, joinReq("a", ""), t0, true)
	sync(t, g, "a", 2, map[string][]byte{"a": []byte("0"), "b": []byte("1")}, t0, true)

	wantJoin(t, join(t, g, joinReq("b", ""), t0, true), 2, "a", "range")
	if g.State() != ClassicStable {
		t.Fatalf("state %v after a follower's resend", g.State())
	}
	changed := joinReq("b", "")
	changed.Protocols[0].Metadata = []byte("new subscription")
	join(t, g, changed, t0, false)
	if g.State() != ClassicPreparingRebalance {
		t.Fatalf("state %v after new metadata", g.State())
	}
	join(t, g, joinReq("a", ""), t0, true)
	sync(t, g, "a", 3, nil, t0, true)
	join(t, g, joinReq("a", ""), t0, false)
	if g.State() != ClassicPreparingRebalance {
		t.Fatalf("state %v after the leader joined again", g.State())
	}
}

// TestClassicRebalanceDeadline: a member that does not join again by the
// rebalance deadline is removed and the phase ends without it.
func TestClassicRebalanceDeadline(t *testing.T) {
	g := newClassic(t)
	join(t, g, joinReq("", "a"), t0, true)
	join(t, g, joinReq("", "b"), t0, false)
	join(t, g, joinReq("a", ""), t0, true)
	sync(t, g, "a", 2, nil, t0, true)

	now := t0.Add(time.Second)
	join(t, g, joinReq("", "c"), now, false)
	join(t, g, joinReq("a", ""), now, false)
	if d := g.Deadline(); !d.Equal(now.Add(testRebalance)) && !d.Before(now.Add(testRebalance)) {
		t.Fatalf("deadline %v", d)
	}
	// b keeps heartbeating (REBALANCE_IN_PROGRESS) but never joins again.
	for at := now; at.Before(now.Add(testRebalance)); at = at.Add(3 * time.Second) {
		wantErr(t, "b's heartbeat", g.Heartbeat("b", 2, at), ErrRebalanceInProgress)
		if gone := g.Tick(at); gone != nil {
			t.Fatalf("Tick(%v) removed %v", at, gone)
		}
	}
	if gone := g.Tick(now.Add(testRebalance)); fmt.Sprint(gone) != "[b]" {
		t.Fatalf("at the deadline removed %v, want [b]", gone)
	}
	wantJoin(t, answer(t, g, "a"), 3, "a", "range", "a", "c")
	wantJoin(t, answer(t, g, "c"), 3, "a", "range")
	_, _, err := g.JoinAnswer("b")
	wantErr(t, "b's join answer", err, ErrUnknownMember)
}

// TestClassicSessionExpiry: a member that stops heartbeating is removed
// after its session timeout, which starts a rebalance; the leader that
// dies is replaced by the first member to join again.
func TestClassicSessionExpiry(t *testing.T) {
	g := newClassic(t)
	join(t, g, joinReq("", "a"), t0, true)
	join(t, g, joinReq("", "b"), t0, false)
	join(t, g, joinReq("", "c"), t0, false)
	join(t, g, joinReq("a", ""), t0, true)
	sync(t, g, "a", 2, nil, t0, true)
	sync(t, g, "b", 2, nil, t0, true)
	sync(t, g, "c", 2, nil, t0, true)

	for at := t0.Add(3 * time.Second); at.Before(t0.Add(testSession)); at = at.Add(3 * time.Second) {
		for _, m := range []string{"b", "c"} {
			if err := g.Heartbeat(m, 2, at); err != nil {
				t.Fatal(err)
			}
		}
	}
	if gone := g.Tick(t0.Add(testSession - time.Millisecond)); gone != nil {
		t.Fatalf("removed %v before the session timeout", gone)
	}
	if gone := g.Tick(t0.Add(testSession)); fmt.Sprint(gone) != "[a]" {
		t.Fatalf("removed %v, want [a]", gone)
	}
	now := t0.Add(testSession)
	wantErr(t, "c's heartbeat", g.Heartbeat("c", 2, now), ErrRebalanceInProgress)
	join(t, g, joinReq("c", ""), now, false)
	wantJoin(t, join(t, g, joinReq("b", ""), now, true), 3, "c", "range")
	wantJoin(t, answer(t, g, "c"), 3, "c", "range", "b", "c")
	// A member waiting in the join phase does not expire on its session.
	join(t, g, joinReq("", "d"), now, false)
	join(t, g, joinReq("c", ""), now, false)
	if gone := g.Tick(now.Add(2 * testSession)); fmt.Sprint(gone) != "[b]" {
		t.Fatalf("removed %v, want [b] (c and d are joining)", gone)
	}
	wantJoin(t, answer(t, g, "d"), 4, "c", "range")
}

// TestClassicLeave: LeaveGroup removes several members at once, answers
// each unknown one on its own, and rebalances; the last to leave empties
// the group, which then takes simple commits.
func TestClassicLeave(t *testing.T) {
	g := newClassic(t)
	join(t, g, joinReq("", "a"), t0, true)
	join(t, g, joinReq("", "b"), t0, false)
	join(t, g, joinReq("", "c"), t0, false)
	join(t, g, joinReq("a", ""), t0, true)
	sync(t, g, "a", 2, nil, t0, true)
	wantErr(t, "a simple commit", g.CheckCommit("", -1), ErrUnknownMember)

	errs := g.Leave([]string{"b", "x", "c"}, t0)
	if errs[0] != nil || !errors.Is(errs[1], ErrUnknownMember) || errs[2] != nil {
		t.Fatalf("Leave errors %v", errs)
	}
	if g.State() != ClassicPreparingRebalance {
		t.Fatalf("state %v", g.State())
	}
	wantJoin(t, join(t, g, joinReq("a", ""), t0, true), 3, "a", "range", "a")
	g.Leave([]string{"a"}, t0)
	if g.State() != ClassicEmpty || g.Generation() != 4 || g.Members() != 0 {
		t.Fatalf("after the last left: %v generation %d, %d members", g.State(), g.Generation(), g.Members())
	}
	if err := g.CheckCommit("", -1); err != nil {
		t.Fatalf("simple commit to an empty group: %v", err)
	}
	// A waiting follower learns of the leave through its sync.
	join(t, g, joinReq("", "p"), t0, true)
	join(t, g, joinReq("", "q"), t0, false)
	join(t, g, joinReq("p", ""), t0, true)
	sync(t, g, "q", 6, nil, t0, false)
	g.Leave([]string{"p"}, t0)
	_, done, err := g.SyncAnswer("q", 6)
	if !done {
		t.Fatal("q's sync still waits")
	}
	wantErr(t, "q's sync after the leader left", err, ErrRebalanceInProgress)
}

// TestClassicChecks: the generation, member and protocol checks of every
// request.
func TestClassicChecks(t *testing.T) {
	g := newClassic(t)
	join(t, g, joinReq("", "a", "range", "roundrobin"), t0, true)
	sync(t, g, "a", 1, nil, t0, true)

	otherType := joinReq("", "b")
	otherType.ProtocolType = "connect"
	noCommon := joinReq("", "c", "sticky")
	zeroSession := joinReq("", "d")
	zeroSession.SessionTimeout = 0
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"heartbeat of an unknown member", g.Heartbeat("x", 1, t0), ErrUnknownMember},
		{"heartbeat of an old generation", g.Heartbeat("a", 0, t0), ErrIllegalGeneration},
		{"sync of a newer generation", func() error { _, _, err := g.Sync(ClassicSyncRequest{MemberID: "a", Generation: 2}, t0); return err }(), ErrIllegalGeneration},
		{"sync of an unknown member", func() error { _, _, err := g.Sync(ClassicSyncRequest{MemberID: "x", Generation: 1}, t0); return err }(), ErrUnknownMember},
		{"sync of another protocol", func() error {
			_, _, err := g.Sync(ClassicSyncRequest{MemberID: "a", Generation: 1, Protocol: "sticky"}, t0)
			return err
		}(), ErrInconsistentProtocol},
		{"join with another protocol type", func() error { _, _, err := g.Join(otherType, t0); return err }(), ErrInconsistentProtocol},
		{"join with no protocol in common", func() error { _, _, err := g.Join(noCommon, t0); return err }(), ErrInconsistentProtocol},
		{"join of an unknown member id", func() error { _, _, err := g.Join(joinReq("zz", ""), t0); return err }(), ErrUnknownMember},
		{"join with no session timeout", func() error { _, _, err := g.Join(zeroSession, t0); return err }(), ErrInvalidInput},
		{"commit of an unknown member", g.CheckCommit("x", 1), ErrUnknownMember},
		{"commit of another generation", g.CheckCommit("a", 7), ErrIllegalGeneration},
	} {
		wantErr(t, tc.name, tc.err, tc.want)
	}
	if g.State() != ClassicStable || g.Generation() != 1 {
		t.Fatalf("refused requests changed the group: %v %d", g.State(), g.Generation())
	}
}

// TestClassicProtocolVote: the protocol most members prefer among those
// all support wins.
func TestClassicProtocolVote(t *testing.T) {
	g := newClassic(t)
	join(t, g, joinReq("", "a", "cooperative-sticky", "range"), t0, true)
	join(t, g, joinReq("", "b", "range", "cooperative-sticky"), t0, false)
	join(t, g, joinReq("", "c", "range"), t0, false)
	r := join(t, g, joinReq("a", "", "cooperative-sticky", "range"), t0, true)
	wantJoin(t, r, 2, "a", "range", "a", "b", "c")
	for _, m := range r.Members {
		if string(m.Metadata) != "sub-"+m.MemberID {
			t.Fatalf("member %s metadata %q", m.MemberID, m.Metadata)
		}
	}
	d := g.Describe()
	if d.State != ClassicCompletingRebalance || d.Protocol != "range" || len(d.Members) != 3 || d.Members[1].ClientID != "c-b" {
		t.Fatalf("Describe %+v", d)
	}
}
