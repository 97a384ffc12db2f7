package group

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

func newGroup(t *testing.T, counts map[string]int32) *Group {
	t.Helper()
	g, err := New("g", Options{})
	if err != nil || g.ID() != "g" {
		t.Fatalf("New: %v, %v", g, err)
	}
	for topic, n := range counts {
		if err := g.SetPartitions(topic, n); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

func mustJoin(t *testing.T, g *Group, id string, topics ...string) Response {
	t.Helper()
	r, err := g.Join(id, topics, 10*time.Second, t0)
	if err != nil {
		t.Fatalf("Join(%s): %v", id, err)
	}
	return r
}

func mustHeartbeat(t *testing.T, g *Group, id string, epoch int32, owned []TopicPartition, now time.Time) Response {
	t.Helper()
	r, err := g.Heartbeat(id, epoch, owned, now)
	if err != nil {
		t.Fatalf("Heartbeat(%s, %d, %v): %v", id, epoch, owned, err)
	}
	return r
}

func wantResponse(t *testing.T, what string, r Response, epoch int32, assigned, revoke []TopicPartition) {
	t.Helper()
	if r.MemberEpoch != epoch || fmt.Sprint(r.Assigned) != fmt.Sprint(assigned) || fmt.Sprint(r.Revoke) != fmt.Sprint(revoke) {
		t.Fatalf("%s: epoch %d, assigned %v, revoke %v; want epoch %d, assigned %v, revoke %v",
			what, r.MemberEpoch, r.Assigned, r.Revoke, epoch, assigned, revoke)
	}
}

func wantWake(t *testing.T, g *Group, want ...string) {
	t.Helper()
	if got := g.Ready().Wake; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Ready().Wake = %v, want %v", got, want)
	}
}

// TestCooperativeHandoff walks one partition move: revoked from its owner
// first, granted to the new member only once released, while the owner
// keeps consuming what stays.
func TestCooperativeHandoff(t *testing.T) {
	g := newGroup(t, map[string]int32{"t": 4})
	wantResponse(t, "a joins", mustJoin(t, g, "a", "t"), 1, tps("t", 0, 1, 2, 3), nil)
	wantWake(t, g)

	wantResponse(t, "b joins", mustJoin(t, g, "b", "t"), 2, nil, nil)
	wantWake(t, g, "a")
	r := mustHeartbeat(t, g, "a", 1, tps("t", 0, 1, 2, 3), t0)
	wantResponse(t, "a told to revoke", r, 1, tps("t", 0, 1), tps("t", 2, 3))
	wantWake(t, g)
	if err := g.CheckCommit("a", 1, TopicPartition{"t", 2}); err != nil {
		t.Fatalf("a commits t/2 while revoking it: %v", err)
	}
	wantResponse(t, "b waits", mustHeartbeat(t, g, "b", 2, nil, t0), 2, nil, nil)
	// a still consumes t/2 and t/3.
	wantResponse(t, "a still revoking", mustHeartbeat(t, g, "a", 1, tps("t", 0, 1, 2, 3), t0), 1, tps("t", 0, 1), tps("t", 2, 3))
	// a released t/3 only: still nothing moves to b, and a's epoch waits.
	wantResponse(t, "a released t/3", mustHeartbeat(t, g, "a", 1, tps("t", 0, 1, 2), t0), 1, tps("t", 0, 1), tps("t", 2))
	if id, ok := g.Owner(TopicPartition{"t", 3}); ok {
		t.Fatalf("t/3 owned by %s after a released it", id)
	}
	wantWake(t, g, "b")
	wantResponse(t, "a done", mustHeartbeat(t, g, "a", 1, tps("t", 0, 1), t0), 2, tps("t", 0, 1), nil)
	if err := g.CheckCommit("a", 2, TopicPartition{"t", 2}); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("a commits t/2 after releasing it: %v, want ErrNotOwner", err)
	}
	wantResponse(t, "b granted", mustHeartbeat(t, g, "b", 2, nil, t0), 2, tps("t", 2, 3), nil)
	wantWake(t, g)
	if err := g.CheckFetch("b", 2, TopicPartition{"t", 2}); err != nil {
		t.Fatalf("b fetches t/2: %v", err)
	}
}

// TestRevocationUndone: a partition the target gives back before its
// owner released it stays with the owner, granted at its first epoch.
func TestRevocationUndone(t *testing.T) {
	g := newGroup(t, map[string]int32{"t": 4})
	mustJoin(t, g, "a", "t")
	mustJoin(t, g, "b", "t")
	wantResponse(t, "a told to revoke", mustHeartbeat(t, g, "a", 1, tps("t", 0, 1, 2, 3), t0), 1, tps("t", 0, 1), tps("t", 2, 3))
	if err := g.Leave("b"); err != nil {
		t.Fatal(err)
	}
	// a released t/3 but still has t/2: t/2 is its again at once, t/3 is
	// granted anew.
	wantResponse(t, "b left", mustHeartbeat(t, g, "a", 1, tps("t", 0, 1, 2), t0), 3, tps("t", 0, 1, 2, 3), nil)
	for _, tt := range []struct {
		p     int32
		epoch int32
		want  error
	}{{2, 1, nil}, {3, 1, ErrStaleMemberEpoch}, {3, 3, nil}} {
		if err := g.CheckCommit("a", tt.epoch, TopicPartition{"t", tt.p}); !errors.Is(err, tt.want) {
			t.Fatalf("CheckCommit(a, %d, t/%d) = %v, want %v", tt.epoch, tt.p, err, tt.want)
		}
	}
}

func TestHeartbeatEpochs(t *testing.T) {
	// a at epoch 1 owns t/0, t/1; b joins (epoch 2) and takes t/1, so a's
	// epoch moves 1 -> 2 on the heartbeat that releases t/1.
	setup := func(t *testing.T) *Group {
		g := newGroup(t, map[string]int32{"t": 2})
		mustJoin(t, g, "a", "t")
		mustJoin(t, g, "b", "t")
		mustHeartbeat(t, g, "a", 1, tps("t", 0, 1), t0)
		wantResponse(t, "a released", mustHeartbeat(t, g, "a", 1, tps("t", 0), t0), 2, tps("t", 0), nil)
		return g
	}
	tests := []struct {
		name   string
		member string
		epoch  int32
		owned  []TopicPartition
		want   error
	}{
		{"current epoch", "a", 2, tps("t", 0), nil},
		{"previous epoch, the answer was lost", "a", 1, tps("t", 0), nil},
		{"previous epoch owning what it gave up", "a", 1, tps("t", 0, 1), ErrFencedMemberEpoch},
		{"older epoch", "a", 0, nil, ErrFencedMemberEpoch},
		{"epoch ahead", "a", 3, tps("t", 0), ErrFencedMemberEpoch},
		{"unknown member", "z", 1, nil, ErrUnknownMember},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := setup(t)
			before := g.Describe()
			r, err := g.Heartbeat(tt.member, tt.epoch, tt.owned, t0.Add(time.Second))
			if !errors.Is(err, tt.want) {
				t.Fatalf("Heartbeat = %+v, %v; want %v", r, err, tt.want)
			}
			if err != nil && fmt.Sprint(g.Describe()) != fmt.Sprint(before) {
				t.Fatal("a refused heartbeat changed the group")
			}
			if err == nil {
				wantResponse(t, "answer", r, 2, tps("t", 0), nil)
			}
		})
	}
}

func TestCheckCommit(t *testing.T) {
	// a owns t/0 since epoch 1; b joins at epoch 2 and takes t/1 once a
	// lets it go; c joins at epoch 3 for another topic, which takes nothing
	// of a's, so a's epoch moves to 3 while t/0 stays granted at 1.
	g := newGroup(t, map[string]int32{"t": 2, "u": 1})
	mustJoin(t, g, "a", "t")
	mustJoin(t, g, "b", "t")
	mustHeartbeat(t, g, "a", 1, tps("t", 0, 1), t0)
	mustHeartbeat(t, g, "a", 1, tps("t", 0), t0)
	wantResponse(t, "b granted", mustHeartbeat(t, g, "b", 2, nil, t0), 2, tps("t", 1), nil)
	mustJoin(t, g, "c", "u")
	wantResponse(t, "a moves to epoch 3", mustHeartbeat(t, g, "a", 2, tps("t", 0), t0), 3, tps("t", 0), nil)
	tests := []struct {
		name   string
		member string
		epoch  int32
		tp     TopicPartition
		want   error
	}{
		{"at the grant epoch", "a", 1, TopicPartition{"t", 0}, nil},
		{"at the current epoch", "a", 3, TopicPartition{"t", 0}, nil},
		{"between them", "a", 2, TopicPartition{"t", 0}, nil},
		{"ahead of the member", "a", 4, TopicPartition{"t", 0}, ErrStaleMemberEpoch},
		{"before the grant", "b", 1, TopicPartition{"t", 1}, ErrStaleMemberEpoch},
		{"a partition it gave up", "a", 3, TopicPartition{"t", 1}, ErrNotOwner},
		{"a partition of another member", "a", 3, TopicPartition{"u", 0}, ErrNotOwner},
		{"a partition that does not exist", "a", 3, TopicPartition{"t", 9}, ErrNotOwner},
		{"unknown member", "z", 3, TopicPartition{"t", 0}, ErrUnknownMember},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := g.CheckCommit(tt.member, tt.epoch, tt.tp); !errors.Is(err, tt.want) {
				t.Fatalf("CheckCommit = %v, want %v", err, tt.want)
			}
			if err := g.CheckFetch(tt.member, tt.epoch, tt.tp); !errors.Is(err, tt.want) {
				t.Fatalf("CheckFetch = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestLeaveAndExpiry: a member that leaves or dies releases its partitions
// at once, and the others get them at their next heartbeat.
func TestLeaveAndExpiry(t *testing.T) {
	for _, how := range []string{"leave", "expire"} {
		t.Run(how, func(t *testing.T) {
			g := newGroup(t, map[string]int32{"t": 2})
			mustJoin(t, g, "a", "t")
			mustJoin(t, g, "b", "t")
			mustHeartbeat(t, g, "a", 1, tps("t", 0, 1), t0)
			mustHeartbeat(t, g, "a", 1, tps("t", 0), t0)
			wantResponse(t, "b granted", mustHeartbeat(t, g, "b", 2, nil, t0), 2, tps("t", 1), nil)
			later := t0.Add(5 * time.Second)
			mustHeartbeat(t, g, "a", 2, tps("t", 0), later)
			if d := g.Ready().Deadline; !d.Equal(t0.Add(10 * time.Second)) {
				t.Fatalf("Ready().Deadline = %v, want b's expiry at %v", d, t0.Add(10*time.Second))
			}
			switch how {
			case "leave":
				if err := g.Leave("b"); err != nil {
					t.Fatal(err)
				}
				if err := g.Leave("b"); !errors.Is(err, ErrUnknownMember) {
					t.Fatalf("second Leave = %v, want ErrUnknownMember", err)
				}
			case "expire":
				if dead := g.Tick(t0.Add(10*time.Second - 1)); dead != nil {
					t.Fatalf("Tick before the session ends expired %v", dead)
				}
				if dead := g.Tick(t0.Add(10 * time.Second)); fmt.Sprint(dead) != "[b]" {
					t.Fatalf("Tick expired %v, want [b]", dead)
				}
			}
			if _, ok := g.Owner(TopicPartition{"t", 1}); ok {
				t.Fatal("t/1 still owned after b went")
			}
			if err := g.CheckCommit("b", 2, TopicPartition{"t", 1}); !errors.Is(err, ErrUnknownMember) {
				t.Fatalf("b's commit after it went: %v, want ErrUnknownMember", err)
			}
			wantWake(t, g, "a")
			wantResponse(t, "a takes over", mustHeartbeat(t, g, "a", 2, tps("t", 0), later), 3, tps("t", 0, 1), nil)
			if err := g.CheckCommit("a", 3, TopicPartition{"t", 1}); err != nil {
				t.Fatal(err)
			}
			if err := g.CheckCommit("a", 2, TopicPartition{"t", 1}); !errors.Is(err, ErrStaleMemberEpoch) {
				t.Fatalf("commit of t/1 at an epoch before its grant: %v, want ErrStaleMemberEpoch", err)
			}
		})
	}
}

// TestRejoin: a member joining again under its id owns nothing any more; a
// late commit of its earlier life is refused.
func TestRejoin(t *testing.T) {
	g := newGroup(t, map[string]int32{"t": 2})
	mustJoin(t, g, "a", "t")
	wantResponse(t, "a joins again", mustJoin(t, g, "a", "t"), 2, tps("t", 0, 1), nil)
	if err := g.CheckCommit("a", 1, TopicPartition{"t", 0}); !errors.Is(err, ErrStaleMemberEpoch) {
		t.Fatalf("commit of the first life: %v, want ErrStaleMemberEpoch", err)
	}
	if _, err := g.Heartbeat("a", 1, nil, t0); !errors.Is(err, ErrFencedMemberEpoch) {
		t.Fatalf("heartbeat of the first life: %v, want ErrFencedMemberEpoch", err)
	}
}

func TestSetPartitions(t *testing.T) {
	g := newGroup(t, map[string]int32{"t": 1})
	mustJoin(t, g, "a", "t")
	steps := []struct {
		topic     string
		count     int32
		wantErr   error
		wantEpoch int32
	}{
		{"u", 3, nil, 1},              // nobody subscribes
		{"t", 1, nil, 1},              // unchanged
		{"t", 3, nil, 2},              // grew
		{"t", -1, ErrInvalidInput, 2}, // refused
		{"", 1, ErrInvalidInput, 2},
		{"t", 2, nil, 3}, // shrank
	}
	for i, s := range steps {
		if err := g.SetPartitions(s.topic, s.count); !errors.Is(err, s.wantErr) {
			t.Fatalf("step %d: SetPartitions(%q, %d) = %v, want %v", i, s.topic, s.count, err, s.wantErr)
		}
		if g.Epoch() != s.wantEpoch {
			t.Fatalf("step %d: epoch %d, want %d", i, g.Epoch(), s.wantEpoch)
		}
	}
	wantResponse(t, "grown, then shrunk", mustHeartbeat(t, g, "a", 1, tps("t", 0), t0), 3, tps("t", 0, 1), nil)
	if err := g.SetPartitions("t", 1); err != nil {
		t.Fatal(err)
	}
	wantResponse(t, "shrunk below what a owns", mustHeartbeat(t, g, "a", 3, tps("t", 0, 1), t0), 3, tps("t", 0), tps("t", 1))
	if err := g.SetPartitions("t", 0); err != nil {
		t.Fatal(err)
	}
	wantResponse(t, "deleted", mustHeartbeat(t, g, "a", 3, tps("t", 0), t0), 3, nil, tps("t", 0))
	wantResponse(t, "deleted and released", mustHeartbeat(t, g, "a", 3, nil, t0), 5, nil, nil)
	if d := g.Describe(); len(d.Partitions) != 1 || d.Partitions["u"] != 3 {
		t.Fatalf("partitions known after t was deleted: %v", d.Partitions)
	}
}

func TestJoinInvalid(t *testing.T) {
	long := string(make([]byte, MaxNameLen+1))
	tests := []struct {
		name    string
		id      string
		topics  []string
		session time.Duration
	}{
		{"empty id", "", []string{"t"}, time.Second},
		{"long id", long, []string{"t"}, time.Second},
		{"no topics", "a", nil, time.Second},
		{"empty topic", "a", []string{"t", ""}, time.Second},
		{"no session", "a", []string{"t"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGroup(t, map[string]int32{"t": 1})
			if _, err := g.Join(tt.id, tt.topics, tt.session, t0); !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("Join = %v, want ErrInvalidInput", err)
			}
			if g.Epoch() != 0 || len(g.Describe().Members) != 0 {
				t.Fatal("a refused Join changed the group")
			}
		})
	}
	if _, err := New("", Options{}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("New with no id: %v", err)
	}
}

func TestHeartbeatInterval(t *testing.T) {
	g, err := New("g", Options{HeartbeatInterval: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		session, want time.Duration
	}{{30 * time.Second, 2 * time.Second}, {3 * time.Second, time.Second}} {
		r, err := g.Join("a", []string{"t"}, tt.session, t0)
		if err != nil {
			t.Fatal(err)
		}
		if r.HeartbeatInterval != tt.want {
			t.Fatalf("session %v: interval %v, want %v", tt.session, r.HeartbeatInterval, tt.want)
		}
	}
}
