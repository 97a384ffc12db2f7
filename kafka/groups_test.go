package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/logagent/logagent/group"
)

// fakeGroups is a Groups for the handlers' tests: group.Classic per group
// under one lock, a held join or sync woken by a channel closed at every
// change, committed offsets in a map. Sessions expire at a ticker of its
// own, which Close stops.
type fakeGroups struct {
	mu      sync.Mutex
	groups  map[string]*group.Classic
	changed chan struct{}
	offsets map[string]map[string]map[int32]CommittedOffset
	ids     int
	commits int

	stop chan struct{}
	done chan struct{}
}

func newFakeGroups() *fakeGroups {
	f := &fakeGroups{groups: map[string]*group.Classic{}, changed: make(chan struct{}),
		offsets: map[string]map[string]map[int32]CommittedOffset{}, stop: make(chan struct{}), done: make(chan struct{})}
	go f.run()
	return f
}

func (f *fakeGroups) Close() {
	close(f.stop)
	<-f.done
}

func (f *fakeGroups) run() {
	defer close(f.done)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case now := <-t.C:
			f.mu.Lock()
			for _, g := range f.groups {
				g.Tick(now)
			}
			f.notify()
			f.mu.Unlock()
		}
	}
}

func (f *fakeGroups) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// codeOf is the Kafka error of a group error.
func codeOf(err error) error {
	for _, m := range []struct {
		err  error
		kerr *kerr.Error
	}{
		{group.ErrMemberIDRequired, kerr.MemberIDRequired}, {group.ErrIllegalGeneration, kerr.IllegalGeneration},
		{group.ErrRebalanceInProgress, kerr.RebalanceInProgress}, {group.ErrUnknownMember, kerr.UnknownMemberID},
		{group.ErrInconsistentProtocol, kerr.InconsistentGroupProtocol},
	} {
		if errors.Is(err, m.err) {
			return &Error{Code: m.kerr.Code, Message: err.Error()}
		}
	}
	return err
}

// checkGroupID refuses what the sidecar's coordinator refuses: a group id
// it cannot hold (the empty one), answered INVALID_REQUEST.
func checkGroupID(id string) error {
	if _, err := group.NewClassic(id); err != nil {
		return &Error{Code: kerr.InvalidRequest.Code, Message: err.Error()}
	}
	return nil
}

func (f *fakeGroups) classic(id string) *group.Classic {
	g := f.groups[id]
	if g == nil {
		g, _ = group.NewClassic(id)
		f.groups[id] = g
	}
	return g
}

// hold evaluates answer under the lock until it is done or ctx ends.
func (f *fakeGroups) hold(ctx context.Context, answer func() bool) error {
	for {
		f.mu.Lock()
		done, ch := answer(), f.changed
		f.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (f *fakeGroups) JoinGroup(ctx context.Context, req JoinGroupRequest) (JoinGroupResult, error) {
	if err := checkGroupID(req.Group); err != nil {
		return JoinGroupResult{}, err
	}
	f.mu.Lock()
	f.ids++
	jr := group.ClassicJoinRequest{MemberID: req.MemberID, NewMemberID: fmt.Sprintf("member-%d", f.ids),
		ProtocolType: req.ProtocolType, SessionTimeout: req.SessionTimeout, RebalanceTimeout: req.RebalanceTimeout,
		RequireKnownMemberID: req.RequireKnownMemberID}
	for _, p := range req.Protocols {
		jr.Protocols = append(jr.Protocols, group.Protocol{Name: p.Name, Metadata: p.Metadata})
	}
	g := f.classic(req.Group)
	r, done, err := g.Join(jr, time.Now())
	f.notify()
	f.mu.Unlock()
	if !done {
		err = f.hold(ctx, func() bool {
			var d bool
			r, d, err = g.JoinAnswer(r.MemberID)
			return d
		})
	}
	res := JoinGroupResult{MemberID: r.MemberID, Generation: r.Generation, ProtocolType: r.ProtocolType, Protocol: r.Protocol, Leader: r.Leader}
	for _, m := range r.Members {
		res.Members = append(res.Members, GroupMember{MemberID: m.MemberID, Metadata: m.Metadata})
	}
	return res, codeOf(err)
}

func (f *fakeGroups) SyncGroup(ctx context.Context, req SyncGroupRequest) ([]byte, error) {
	if err := checkGroupID(req.Group); err != nil {
		return nil, err
	}
	f.mu.Lock()
	g := f.classic(req.Group)
	a, done, err := g.Sync(group.ClassicSyncRequest{MemberID: req.MemberID, Generation: req.Generation,
		ProtocolType: req.ProtocolType, Protocol: req.Protocol, Assignments: req.Assignments}, time.Now())
	f.notify()
	f.mu.Unlock()
	if !done {
		if herr := f.hold(ctx, func() bool {
			var d bool
			a, d, err = g.SyncAnswer(req.MemberID, req.Generation)
			return d
		}); herr != nil {
			return nil, herr
		}
	}
	return a, codeOf(err)
}

func (f *fakeGroups) Heartbeat(_ context.Context, groupID, member string, generation int32) error {
	if err := checkGroupID(groupID); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return codeOf(f.classic(groupID).Heartbeat(member, generation, time.Now()))
}

func (f *fakeGroups) LeaveGroup(_ context.Context, groupID string, members []string) ([]error, error) {
	if err := checkGroupID(groupID); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	errs := f.classic(groupID).Leave(members, time.Now())
	for i := range errs {
		if errs[i] != nil {
			errs[i] = codeOf(errs[i])
		}
	}
	f.notify()
	return errs, nil
}

func (f *fakeGroups) CommitOffsets(_ context.Context, req CommitRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.classic(req.Group).CheckCommit(req.MemberID, req.Generation); err != nil {
		return codeOf(err)
	}
	f.commits++
	for _, o := range req.Offsets {
		if f.offsets[req.Group] == nil {
			f.offsets[req.Group] = map[string]map[int32]CommittedOffset{}
		}
		if f.offsets[req.Group][o.Topic] == nil {
			f.offsets[req.Group][o.Topic] = map[int32]CommittedOffset{}
		}
		f.offsets[req.Group][o.Topic][o.Partition] = CommittedOffset(o)
	}
	return nil
}

func (f *fakeGroups) FetchOffsets(_ context.Context, groupID string) ([]CommittedOffset, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []CommittedOffset
	for _, parts := range f.offsets[groupID] {
		for _, o := range parts {
			out = append(out, o)
		}
	}
	return out, nil
}

func (f *fakeGroups) committed(groupID, topic string, p int32) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o, ok := f.offsets[groupID][topic][p]; ok {
		return o.Offset
	}
	return -1
}

func (f *fakeGroups) DescribeGroup(_ context.Context, groupID string) (GroupDescription, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.groups[groupID]
	if g == nil {
		return GroupDescription{State: "Dead"}, nil
	}
	d := g.Describe()
	out := GroupDescription{State: d.State.String(), ProtocolType: d.ProtocolType, Protocol: d.Protocol}
	for _, m := range d.Members {
		out.Members = append(out.Members, GroupMemberDescription{MemberID: m.MemberID, Metadata: m.Metadata, Assignment: m.Assignment})
	}
	return out, nil
}

func (f *fakeGroups) ListGroups(context.Context) ([]GroupListing, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []GroupListing
	for id, g := range f.groups {
		out = append(out, GroupListing{Group: id, ProtocolType: g.Describe().ProtocolType, State: g.State().String()})
	}
	return out, nil
}

func (f *fakeGroups) DeleteGroup(_ context.Context, groupID string) error {
	if err := checkGroupID(groupID); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.groups[groupID]
	switch {
	case g != nil && g.Members() > 0:
		return &Error{Code: kerr.NonEmptyGroup.Code}
	case g == nil && f.offsets[groupID] == nil:
		return &Error{Code: kerr.GroupIDNotFound.Code}
	}
	delete(f.groups, groupID)
	delete(f.offsets, groupID)
	return nil
}

func startGroupServer(t *testing.T) (*testServer, *fakeGroups) {
	t.Helper()
	fg := newFakeGroups()
	t.Cleanup(fg.Close)
	return startServer(t, func(c *Config) { c.Groups = fg }), fg
}

// consumed collects what group consumers polled, by member client.
type consumed struct {
	mu   sync.Mutex
	seen map[string]int // value → times seen
	by   map[int]int    // consumer → records
}

// consume polls cl until ctx ends, committing after every poll (as
// autocommit would, but at once).
func (c *consumed) consume(ctx context.Context, t *testing.T, idx int, cl *kgo.Client) {
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		fs.EachError(func(topic string, p int32, err error) { t.Errorf("consumer %d: %s/%d: %v", idx, topic, p, err) })
		c.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			c.seen[string(r.Value)]++
			c.by[idx]++
		})
		c.mu.Unlock()
		if err := cl.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
			t.Logf("consumer %d commit: %v", idx, err)
		}
	}
}

// TestKgoGroupConsume: two kgo group consumers, with the default
// cooperative-sticky balancer and with the eager range balancer, join
// through the listener (the second's join a rebalance of the first's
// Stable group), split the partitions, consume every record once between
// them and commit the end; a third consumer of the group then
// starts from the committed offsets and gets only what came after.
func TestKgoGroupConsume(t *testing.T) {
	for _, tc := range []struct {
		name     string
		balancer []kgo.Opt
		protocol string
	}{
		{"cooperative-sticky", nil, "cooperative-sticky"},
		{"range eager", []kgo.Opt{kgo.Balancers(kgo.RangeBalancer())}, "range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts, fg := startGroupServer(t)
			ctx := testContext(t)
			createTopic(t, ts, "events", 4)
			producer := ts.client(t, kgo.DefaultProduceTopic("events"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
			const n = 200
			group := "g-" + tc.protocol
			opts := append([]kgo.Opt{kgo.ConsumerGroup(group), kgo.ConsumeTopics("events"), kgo.DisableAutoCommit(),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.SessionTimeout(6 * time.Second),
				kgo.HeartbeatInterval(200 * time.Millisecond)}, tc.balancer...)
			got := &consumed{seen: map[string]int{}, by: map[int]int{}}
			cctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			var members []*kgo.Client
			for i := range 2 {
				cl := ts.client(t, opts...)
				members = append(members, cl)
				wg.Go(func() { got.consume(cctx, t, i, cl) })
				if i == 0 {
					// The first member alone for a moment: the second's
					// join is then a rebalance of a Stable group.
					time.Sleep(300 * time.Millisecond)
				}
			}
			// On a failure too, the consumers stop before the test ends.
			t.Cleanup(func() { cancel(); wg.Wait() })
			deadline := time.Now().Add(20 * time.Second)
			for {
				d, _ := fg.DescribeGroup(ctx, group)
				assigned := 0
				for _, m := range d.Members {
					if len(m.Assignment) > 0 {
						assigned++
					}
				}
				if d.State == "Stable" && len(d.Members) == 2 && assigned == 2 && d.Protocol == tc.protocol {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("group never stable with two assigned members: %+v", d)
				}
				time.Sleep(50 * time.Millisecond)
			}
			// Produced once the partitions are split, so each member
			// consumes its share.
			for i := range n {
				if err := producer.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			for {
				done := true
				for p := range int32(4) {
					if fg.committed(group, "events", p) != n/4 {
						done = false
					}
				}
				if done {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("offsets not all committed at the end: seen %d values", len(got.seen))
				}
				time.Sleep(50 * time.Millisecond)
			}
			cancel()
			wg.Wait()
			for _, cl := range members {
				cl.Close() // leaves the group
			}
			if len(got.seen) != n {
				t.Fatalf("consumed %d distinct values, want %d", len(got.seen), n)
			}
			for v, times := range got.seen {
				if times != 1 {
					t.Fatalf("%s consumed %d times", v, times)
				}
			}
			if got.by[0] == 0 || got.by[1] == 0 {
				t.Fatalf("one member consumed nothing: %v", got.by)
			}
			d, _ := fg.DescribeGroup(ctx, group)
			if d.State != "Empty" || len(d.Members) != 0 {
				t.Fatalf("after both left: %+v", d)
			}

			// Resume from the committed offsets.
			for i := range 8 {
				if err := producer.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "late%d", i)}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			cl := ts.client(t, opts...)
			var late []string
			for len(late) < 8 {
				fs := cl.PollFetches(ctx)
				if err := ctx.Err(); err != nil {
					t.Fatalf("resumed consumer got %v: %v", late, err)
				}
				fs.EachRecord(func(r *kgo.Record) { late = append(late, string(r.Value)) })
			}
			slices.Sort(late)
			if fmt.Sprint(late) != "[late0 late1 late2 late3 late4 late5 late6 late7]" {
				t.Fatalf("resumed consumer got %v", late)
			}

			adm := kadm.NewClient(ts.client(t))
			listed, err := adm.ListGroups(ctx)
			if err != nil || !slices.Contains(listed.Groups(), group) {
				t.Fatalf("ListGroups: %v, %v", listed.Groups(), err)
			}
			// The state filter (v4) matches states as Kafka's does, in any
			// case: "stable" as the Java admin client's enum spells it
			// in lower case, "Stable" as kgo passes a string through.
			for _, filter := range []struct {
				states []string
				want   bool
			}{{[]string{"Stable"}, true}, {[]string{"stable"}, true}, {[]string{"STABLE", "Dead"}, true}, {[]string{"Empty"}, false}} {
				listed, err := adm.ListGroups(ctx, filter.states...)
				if err != nil || slices.Contains(listed.Groups(), group) != filter.want {
					t.Fatalf("ListGroups filtered by %q: %v, %v; want the group listed: %v", filter.states, listed.Groups(), err, filter.want)
				}
			}
			desc, err := adm.DescribeGroups(ctx, group)
			if err != nil || desc[group].State != "Stable" || len(desc[group].Members) != 1 {
				t.Fatalf("DescribeGroups: %+v, %v", desc[group], err)
			}
			offs, err := adm.FetchOffsets(ctx, group)
			if err != nil {
				t.Fatal(err)
			}
			if o, ok := offs.Lookup("events", 2); !ok || o.At != n/4 {
				t.Fatalf("FetchOffsets events/2: %+v", o)
			}
		})
	}
}

// TestGroupErrors: what a client that breaks the rules is answered, at
// the wire: a heartbeat of an old generation, an unknown member's commit,
// a static member's join, an empty group id.
func TestGroupErrors(t *testing.T) {
	ts, _ := startGroupServer(t)
	ctx := testContext(t)
	cl := ts.client(t)
	join := func(member string, instance *string) *kmsgJoin {
		t.Helper()
		return joinWire(ctx, t, cl, member, instance)
	}
	r := join("", nil)
	if r.code != kerr.MemberIDRequired.Code || r.member == "" {
		t.Fatalf("first v9 join: %+v", r)
	}
	r = join(r.member, nil)
	if r.code != 0 || r.generation != 1 || r.leader != r.member {
		t.Fatalf("second join: %+v", r)
	}
	if code := heartbeatWire(ctx, t, cl, r.member, 0); code != kerr.IllegalGeneration.Code {
		t.Fatalf("heartbeat at generation 0: %d", code)
	}
	if code := heartbeatWire(ctx, t, cl, "nobody", 1); code != kerr.UnknownMemberID.Code {
		t.Fatalf("heartbeat of an unknown member: %d", code)
	}
	if code := commitWire(ctx, t, cl, "nobody", 1); code != kerr.UnknownMemberID.Code {
		t.Fatalf("commit of an unknown member: %d", code)
	}
	if code := commitWire(ctx, t, cl, "", -1); code != kerr.UnknownMemberID.Code {
		t.Fatalf("simple commit to a group with members: %d", code)
	}
	instance := "static-1"
	if r := join("", &instance); r.code != kerr.InvalidRequest.Code {
		t.Fatalf("static member's join: %+v", r)
	}

	// DeleteGroups (kadm's): each group answered on its own, refused
	// while it has members, unknown when there is none.
	adm := kadm.NewClient(cl)
	res, err := adm.DeleteGroups(ctx, "wire", "nope")
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res["wire"].Err, kerr.NonEmptyGroup) || !errors.Is(res["nope"].Err, kerr.GroupIDNotFound) {
		t.Fatalf("DeleteGroups with a member: %+v", res)
	}
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Group = "wire"
	lm := kmsg.NewLeaveGroupRequestMember()
	lm.MemberID = r.member
	leave.Members = append(leave.Members, lm)
	if resp, err := leave.RequestWith(ctx, cl); err != nil || resp.ErrorCode != 0 || resp.Members[0].ErrorCode != 0 {
		t.Fatalf("leave: %+v, %v", resp, err)
	}
	if res, err := adm.DeleteGroups(ctx, "wire"); err != nil || res["wire"].Err != nil {
		t.Fatalf("DeleteGroups of the emptied group: %+v, %v", res, err)
	}

	// An empty group id: the membership APIs answer INVALID_GROUP_ID, as
	// Kafka's coordinator does; DeleteGroups takes it as a group's, as
	// Kafka does, and there is none. All were INVALID_REQUEST, the
	// coordinator's refusal of the id.
	res, err = adm.DeleteGroups(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[""].Err, kerr.GroupIDNotFound) {
		t.Errorf("DeleteGroups of the empty group id: %+v, want GROUP_ID_NOT_FOUND", res[""])
	}
	joinEmpty := kmsg.NewPtrJoinGroupRequest()
	joinEmpty.ProtocolType, joinEmpty.SessionTimeoutMillis, joinEmpty.RebalanceTimeoutMillis = "consumer", 10_000, 10_000
	syncEmpty := kmsg.NewPtrSyncGroupRequest()
	syncEmpty.MemberID, syncEmpty.Generation = "m", 1
	heartbeatEmpty := kmsg.NewPtrHeartbeatRequest()
	heartbeatEmpty.MemberID, heartbeatEmpty.Generation = "m", 1
	leaveEmpty := kmsg.NewPtrLeaveGroupRequest()
	leaveEmpty.Members = append(leaveEmpty.Members, kmsg.NewLeaveGroupRequestMember())
	for _, c := range []struct {
		api string
		req kmsg.Request
	}{{"JoinGroup", joinEmpty}, {"SyncGroup", syncEmpty}, {"Heartbeat", heartbeatEmpty}, {"LeaveGroup", leaveEmpty}} {
		resp, err := cl.Request(ctx, c.req)
		if err != nil {
			t.Fatalf("%s: %v", c.api, err)
		}
		var code int16
		switch r := resp.(type) {
		case *kmsg.JoinGroupResponse:
			code = r.ErrorCode
		case *kmsg.SyncGroupResponse:
			code = r.ErrorCode
		case *kmsg.HeartbeatResponse:
			code = r.ErrorCode
		case *kmsg.LeaveGroupResponse:
			code = r.ErrorCode
		}
		if code != kerr.InvalidGroupID.Code {
			t.Errorf("%s of the empty group id: %s, want INVALID_GROUP_ID", c.api, kerr.ErrorForCode(code))
		}
	}
}

type kmsgJoin struct {
	code       int16
	member     string
	leader     string
	generation int32
}

func joinWire(ctx context.Context, t *testing.T, cl *kgo.Client, member string, instance *string) *kmsgJoin {
	t.Helper()
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.MemberID, req.InstanceID, req.ProtocolType = "wire", member, instance, "consumer"
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 10_000, 10_000
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = "range", []byte("x")
	req.Protocols = append(req.Protocols, p)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	return &kmsgJoin{code: resp.ErrorCode, member: resp.MemberID, leader: resp.LeaderID, generation: resp.Generation}
}

func heartbeatWire(ctx context.Context, t *testing.T, cl *kgo.Client, member string, generation int32) int16 {
	t.Helper()
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.Generation = "wire", member, generation
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp.ErrorCode
}

func commitWire(ctx context.Context, t *testing.T, cl *kgo.Client, member string, generation int32) int16 {
	t.Helper()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.MemberID, req.Generation = "wire", member, generation
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = "events"
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset = 0, 1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Topics[0].Partitions[0].ErrorCode
}

// recordingGroups keeps what JoinGroup and SyncGroup were given, as a
// coordinator keeps a group's metadata and assignments; the other Groups
// methods are not called.
type recordingGroups struct {
	Groups
	mu    sync.Mutex
	joins []JoinGroupRequest
	syncs []SyncGroupRequest
}

func (r *recordingGroups) JoinGroup(_ context.Context, req JoinGroupRequest) (JoinGroupResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.joins = append(r.joins, req)
	return JoinGroupResult{MemberID: "m", Generation: 1, ProtocolType: req.ProtocolType, Protocol: req.Protocols[0].Name, Leader: "m"}, nil
}

func (r *recordingGroups) SyncGroup(_ context.Context, req SyncGroupRequest) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.syncs = append(r.syncs, req)
	return nil, nil
}

// TestGroupBytesOutliveTheFrame: the protocol metadata of a JoinGroup and
// the assignments of a SyncGroup that Groups keeps are not the
// connection's frame buffer, which the next request of the same size
// overwrites (the race detector caught the group state reading a buffer
// the connection was refilling).
func TestGroupBytesOutliveTheFrame(t *testing.T) {
	rec := &recordingGroups{}
	ts := startServer(t, func(c *Config) { c.Groups = rec })
	c := dialRaw(t, ts.addr)
	send := func(fill byte) {
		join := kmsg.NewPtrJoinGroupRequest()
		join.Version = 5
		join.Group, join.MemberID, join.ProtocolType = "g", "m", "consumer"
		join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = 10_000, 10_000
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = "range", bytes.Repeat([]byte{fill}, 64)
		join.Protocols = append(join.Protocols, p)
		c.send(c.frame(join))
		jr := kmsg.NewPtrJoinGroupResponse()
		jr.Version = join.Version
		c.read(jr)
		sync := kmsg.NewPtrSyncGroupRequest()
		sync.Version = 3
		sync.Group, sync.MemberID, sync.Generation = "g", "m", 1
		a := kmsg.NewSyncGroupRequestGroupAssignment()
		a.MemberID, a.MemberAssignment = "m", bytes.Repeat([]byte{fill}, 64)
		sync.GroupAssignment = append(sync.GroupAssignment, a)
		c.send(c.frame(sync))
		sr := kmsg.NewPtrSyncGroupResponse()
		sr.Version = sync.Version
		c.read(sr)
	}
	send('A')
	send('B') // the same frame sizes: the same buffer, refilled
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.joins) != 2 || len(rec.syncs) != 2 {
		t.Fatalf("%d joins, %d syncs reached Groups", len(rec.joins), len(rec.syncs))
	}
	if got := rec.joins[0].Protocols[0].Metadata; !bytes.Equal(got, bytes.Repeat([]byte{'A'}, 64)) {
		t.Errorf("the first JoinGroup's metadata became %q", got)
	}
	if got := rec.syncs[0].Assignments["m"]; !bytes.Equal(got, bytes.Repeat([]byte{'A'}, 64)) {
		t.Errorf("the first SyncGroup's assignment became %q", got)
	}
}
