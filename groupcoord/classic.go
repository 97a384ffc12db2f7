package groupcoord

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/logagent/logagent/group"
)

// The classic group protocol (Kafka's JoinGroup/SyncGroup with client-side
// assignors, docs/design.md §7.5): a group.Classic per group, kept in the
// memory of the shard only. A new coordinator knows none: their members
// are answered UNKNOWN_MEMBER_ID and join again, as Kafka clients do after
// any coordinator change. Their committed offsets take the same path as
// the server-side groups' (appended with acks=all, applied once committed),
// so they survive any failover.

// MaxClassicWait bounds how long one call holds a JoinGroup or SyncGroup:
// well under the peer client's read timeout, so a sidecar waiting longer
// (a rebalance timeout of minutes) asks again with Resume.
const MaxClassicWait = 20 * time.Second

// ClassicProtocol is one assignor of a ClassicJoinRequest.
type ClassicProtocol struct {
	Name     string `json:"name"`
	Metadata []byte `json:"metadata"`
}

// ClassicJoinRequest is a Kafka JoinGroup.
type ClassicJoinRequest struct {
	MemberID string `json:"member_id,omitempty"`
	// NewMemberID is the id a new member gets; the sidecar picks it, so a
	// request it resends after a lost answer names the same member.
	NewMemberID          string            `json:"new_member_id,omitempty"`
	ClientID             string            `json:"client_id,omitempty"`
	ClientHost           string            `json:"client_host,omitempty"`
	ProtocolType         string            `json:"protocol_type"`
	Protocols            []ClassicProtocol `json:"protocols"`
	SessionTimeoutMS     int64             `json:"session_timeout_ms"`
	RebalanceTimeoutMS   int64             `json:"rebalance_timeout_ms,omitempty"`
	RequireKnownMemberID bool              `json:"require_known_member_id,omitempty"`
	// Resume: this member's join is held already; only wait for its
	// answer (the request's other fields are not looked at).
	Resume bool  `json:"resume,omitempty"`
	WaitMS int64 `json:"wait_ms"`
}

// ClassicMember is a member's metadata in a ClassicJoinResponse.
type ClassicMember struct {
	MemberID string `json:"member_id"`
	Metadata []byte `json:"metadata"`
}

// ClassicJoinResponse answers a ClassicJoinRequest; Done false means the
// join phase is still under way: resume it.
type ClassicJoinResponse struct {
	Done         bool            `json:"done"`
	MemberID     string          `json:"member_id"`
	Generation   int32           `json:"generation"`
	ProtocolType string          `json:"protocol_type,omitempty"`
	Protocol     string          `json:"protocol,omitempty"`
	Leader       string          `json:"leader,omitempty"`
	Members      []ClassicMember `json:"members,omitempty"`
}

// ClassicSyncRequest is a Kafka SyncGroup.
type ClassicSyncRequest struct {
	MemberID     string            `json:"member_id"`
	Generation   int32             `json:"generation"`
	ProtocolType string            `json:"protocol_type,omitempty"`
	Protocol     string            `json:"protocol,omitempty"`
	Assignments  map[string][]byte `json:"assignments,omitempty"`
	Resume       bool              `json:"resume,omitempty"`
	WaitMS       int64             `json:"wait_ms"`
}

// ClassicSyncResponse answers a ClassicSyncRequest; Done false: resume.
type ClassicSyncResponse struct {
	Done       bool   `json:"done"`
	Assignment []byte `json:"assignment"`
}

// ClassicHeartbeatRequest is a Kafka Heartbeat.
type ClassicHeartbeatRequest struct {
	MemberID   string `json:"member_id"`
	Generation int32  `json:"generation"`
}

// ClassicLeaveRequest is a Kafka LeaveGroup.
type ClassicLeaveRequest struct {
	MemberIDs []string `json:"member_ids"`
}

// ClassicLeaveResponse has an error per member of the request: empty, or
// the unknown member's.
type ClassicLeaveResponse struct {
	Unknown []bool `json:"unknown"`
}

// ClassicCommitRequest is a Kafka OffsetCommit: by a member at its
// generation, or (generation -1, no member) a simple commit.
type ClassicCommitRequest struct {
	MemberID   string         `json:"member_id"`
	Generation int32          `json:"generation"`
	Offsets    []OffsetCommit `json:"offsets"`
}

// ClassicDescription is a Kafka DescribeGroups answer for one group.
type ClassicDescription struct {
	Group        string                     `json:"group"`
	State        string                     `json:"state"`
	ProtocolType string                     `json:"protocol_type"`
	Protocol     string                     `json:"protocol"`
	Members      []ClassicMemberDescription `json:"members"`
}

// ClassicMemberDescription is one member of a ClassicDescription.
type ClassicMemberDescription struct {
	MemberID   string `json:"member_id"`
	ClientID   string `json:"client_id"`
	ClientHost string `json:"client_host"`
	Metadata   []byte `json:"metadata"`
	Assignment []byte `json:"assignment"`
}

// ClassicSummary is a group in a ClassicList.
type ClassicSummary struct {
	Group        string `json:"group"`
	State        string `json:"state"`
	ProtocolType string `json:"protocol_type"`
}

// classicEntry is one classic group a shard serves. changed is closed and
// replaced after every change, to wake the held joins and syncs.
type classicEntry struct {
	g       *group.Classic
	changed chan struct{}
}

func (ce *classicEntry) notify() {
	close(ce.changed)
	ce.changed = make(chan struct{})
}

// classicGroup returns the shard (locked) and the group's classic entry,
// creating it if create: refused (ErrInconsistentProtocol) for a group id
// whose server-side group has members. On an error no lock is held.
func (c *Coordinator) classicGroup(ctx context.Context, groupID string, create bool) (*shard, *classicEntry, error) {
	s, err := c.shardFor(ctx, groupID)
	if err != nil {
		return nil, nil, err
	}
	ce := s.classic[groupID]
	if ce == nil && create {
		e, err := c.loadGroup(ctx, s, groupID, false)
		if err == nil && e != nil && e.g.Members() > 0 {
			err = fmt.Errorf("%w: group %q has members of the HTTP API's protocol", group.ErrInconsistentProtocol, groupID)
		}
		var g *group.Classic
		if err == nil {
			g, err = group.NewClassic(groupID)
		}
		if err != nil {
			s.mu.Unlock()
			return nil, nil, err
		}
		ce = &classicEntry{g: g, changed: make(chan struct{})}
		s.classic[groupID] = ce
	}
	if ce == nil {
		s.mu.Unlock()
		return nil, nil, fmt.Errorf("%w: %q has no member of the Kafka protocol here", group.ErrUnknownMember, groupID)
	}
	return s, ce, nil
}

// holdClassic evaluates answer (with the shard locked) until it says done,
// wait passes, or ctx ends, again after every change of the group; the
// shard ending ends it (the next look finds a new shard or none).
func (c *Coordinator) holdClassic(ctx context.Context, groupID string, wait time.Duration, answer func(*group.Classic) bool) error {
	timer := time.NewTimer(min(max(wait, 0), MaxClassicWait))
	defer timer.Stop()
	expired := false
	for {
		s, ce, err := c.classicGroup(ctx, groupID, false)
		if err != nil {
			return err
		}
		done := answer(ce.g)
		ch := ce.changed
		s.mu.Unlock()
		if done || expired {
			return nil
		}
		select {
		case <-ch:
		case <-timer.C:
			expired = true
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func classicTimeouts(sessionMS, rebalanceMS int64) (time.Duration, time.Duration, error) {
	session := time.Duration(sessionMS) * time.Millisecond
	if session < MinSessionTimeout || session > MaxSessionTimeout {
		return 0, 0, fmt.Errorf("%w: session timeout %d ms: from %d to %d", ErrInvalidSessionTimeout, sessionMS,
			MinSessionTimeout.Milliseconds(), MaxSessionTimeout.Milliseconds())
	}
	rebalance := time.Duration(rebalanceMS) * time.Millisecond
	if rebalance < 0 || rebalance > MaxSessionTimeout {
		return 0, 0, fmt.Errorf("%w: rebalance timeout %d ms: up to %d", ErrInvalidRequest, rebalanceMS, MaxSessionTimeout.Milliseconds())
	}
	return session, rebalance, nil
}

// ClassicJoin is a JoinGroup, held up to its wait (at most MaxClassicWait)
// while the join phase is under way.
func (c *Coordinator) ClassicJoin(ctx context.Context, groupID string, req ClassicJoinRequest) (ClassicJoinResponse, error) {
	member := req.MemberID
	if !req.Resume {
		session, rebalance, err := classicTimeouts(req.SessionTimeoutMS, req.RebalanceTimeoutMS)
		if err != nil {
			return ClassicJoinResponse{}, err
		}
		gr := group.ClassicJoinRequest{MemberID: req.MemberID, NewMemberID: req.NewMemberID, ClientID: req.ClientID,
			ClientHost: req.ClientHost, ProtocolType: req.ProtocolType, SessionTimeout: session, RebalanceTimeout: rebalance,
			RequireKnownMemberID: req.RequireKnownMemberID}
		for _, p := range req.Protocols {
			gr.Protocols = append(gr.Protocols, group.Protocol{Name: p.Name, Metadata: p.Metadata})
		}
		s, ce, err := c.classicGroup(ctx, groupID, true)
		if err != nil {
			return ClassicJoinResponse{}, err
		}
		before := ce.g.Generation()
		r, done, err := ce.g.Join(gr, c.cfg.Now())
		ce.notify()
		s.mu.Unlock()
		if err != nil || done {
			if err == nil && r.Generation != before {
				c.log.Info("classic group rebalanced", "group", groupID, "generation", r.Generation, "leader", r.Leader)
			}
			return classicJoinResponse(r, done), err
		}
		member = r.MemberID
	}
	out := ClassicJoinResponse{MemberID: member}
	var answerErr error
	err := c.holdClassic(ctx, groupID, time.Duration(req.WaitMS)*time.Millisecond, func(g *group.Classic) bool {
		r, done, err := g.JoinAnswer(member)
		out, answerErr = classicJoinResponse(r, done), err
		return done
	})
	if err == nil {
		err = answerErr
	}
	return out, err
}

func classicJoinResponse(r group.ClassicJoinResponse, done bool) ClassicJoinResponse {
	out := ClassicJoinResponse{Done: done, MemberID: r.MemberID, Generation: r.Generation, ProtocolType: r.ProtocolType,
		Protocol: r.Protocol, Leader: r.Leader}
	for _, m := range r.Members {
		out.Members = append(out.Members, ClassicMember{MemberID: m.MemberID, Metadata: m.Metadata})
	}
	return out
}

// ClassicSync is a SyncGroup, a follower's held until the leader's
// assignment (up to its wait, at most MaxClassicWait).
func (c *Coordinator) ClassicSync(ctx context.Context, groupID string, req ClassicSyncRequest) (ClassicSyncResponse, error) {
	if !req.Resume {
		s, ce, err := c.classicGroup(ctx, groupID, false)
		if err != nil {
			return ClassicSyncResponse{}, err
		}
		a, done, err := ce.g.Sync(group.ClassicSyncRequest{MemberID: req.MemberID, Generation: req.Generation,
			ProtocolType: req.ProtocolType, Protocol: req.Protocol, Assignments: req.Assignments}, c.cfg.Now())
		ce.notify()
		s.mu.Unlock()
		if err != nil || done {
			return ClassicSyncResponse{Done: done, Assignment: a}, err
		}
	}
	var out ClassicSyncResponse
	var answerErr error
	err := c.holdClassic(ctx, groupID, time.Duration(req.WaitMS)*time.Millisecond, func(g *group.Classic) bool {
		a, done, err := g.SyncAnswer(req.MemberID, req.Generation)
		out, answerErr = ClassicSyncResponse{Done: done, Assignment: a}, err
		return done
	})
	if err == nil {
		err = answerErr
	}
	return out, err
}

// ClassicHeartbeat is a Heartbeat.
func (c *Coordinator) ClassicHeartbeat(ctx context.Context, groupID string, req ClassicHeartbeatRequest) error {
	s, ce, err := c.classicGroup(ctx, groupID, false)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	return ce.g.Heartbeat(req.MemberID, req.Generation, c.cfg.Now())
}

// ClassicLeave is a LeaveGroup of one or more members.
func (c *Coordinator) ClassicLeave(ctx context.Context, groupID string, req ClassicLeaveRequest) (ClassicLeaveResponse, error) {
	out := ClassicLeaveResponse{Unknown: make([]bool, len(req.MemberIDs))}
	s, ce, err := c.classicGroup(ctx, groupID, false)
	if err != nil {
		for i := range out.Unknown {
			out.Unknown[i] = true
		}
		if IsRetriable(err) {
			return ClassicLeaveResponse{}, err
		}
		return out, nil
	}
	defer s.mu.Unlock()
	for i, err := range ce.g.Leave(req.MemberIDs, c.cfg.Now()) {
		out.Unknown[i] = err != nil
	}
	ce.notify()
	c.log.Info("classic members left", "group", groupID, "members", req.MemberIDs, "state", ce.g.State())
	return out, nil
}

// ClassicCommit is an OffsetCommit: all offsets or none, answered once the
// offsets partition committed them. A member's is checked against the
// group's generation; a simple commit is refused while the group has
// members of either protocol.
func (c *Coordinator) ClassicCommit(ctx context.Context, groupID string, req ClassicCommitRequest) error {
	if len(req.Offsets) == 0 || len(req.Offsets) > MaxCommitOffsets {
		return fmt.Errorf("%w: %d offsets: from 1 to %d", ErrInvalidRequest, len(req.Offsets), MaxCommitOffsets)
	}
	s, err := c.shardFor(ctx, groupID)
	if err != nil {
		return err
	}
	err = c.classicCommitAllowed(ctx, s, groupID, req)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	now := c.cfg.Now()
	records := make([]group.Record, 0, len(req.Offsets))
	for _, oc := range req.Offsets {
		r, err := group.OffsetRecord(groupID, group.TopicPartition{Topic: oc.Topic, Partition: oc.Partition},
			group.Committed{Offset: oc.Offset, Metadata: oc.Metadata, CommitTime: now})
		if err != nil {
			return err
		}
		records = append(records, r)
	}
	return c.appendCommit(ctx, s, groupID, req.Offsets, records, func() error { return c.classicCommitAllowed(ctx, s, groupID, req) })
}

// classicCommitAllowed checks an OffsetCommit against the group's
// generation, or, for a simple commit (no member, generation -1), that the
// group has no member of either protocol: an empty classic group that had
// not been cleaned up yet let a simple commit through while a member of
// logagent's protocol owned the partition. Called with s.mu held.
func (c *Coordinator) classicCommitAllowed(ctx context.Context, s *shard, groupID string, req ClassicCommitRequest) error {
	simple := req.Generation < 0 && req.MemberID == ""
	ce := s.classic[groupID]
	switch {
	case ce != nil:
		if err := ce.g.CheckCommit(req.MemberID, req.Generation); err != nil || !simple {
			return err
		}
	case !simple:
		return fmt.Errorf("%w: commit by %q: group %q has no member of the Kafka protocol here", group.ErrUnknownMember, req.MemberID, groupID)
	}
	e, err := c.loadGroup(ctx, s, groupID, false)
	if err == nil && e != nil && e.g.Members() > 0 {
		err = fmt.Errorf("%w: a commit without a member to group %q, which has members", group.ErrUnknownMember, groupID)
	}
	return err
}

// ClassicDescribe describes a group for DescribeGroups: its classic
// members, "Empty" for a group that only has committed offsets (or
// server-side state without members), "Dead" for none; a group with
// server-side members is not a classic group (ErrUnknownGroup, as Kafka
// answers).
func (c *Coordinator) ClassicDescribe(ctx context.Context, groupID string) (ClassicDescription, error) {
	s, err := c.shardFor(ctx, groupID)
	if err != nil {
		return ClassicDescription{}, err
	}
	defer s.mu.Unlock()
	d := ClassicDescription{Group: groupID, Members: []ClassicMemberDescription{}}
	if ce := s.classic[groupID]; ce != nil {
		cd := ce.g.Describe()
		d.State, d.ProtocolType, d.Protocol = cd.State.String(), cd.ProtocolType, cd.Protocol
		for _, m := range cd.Members {
			d.Members = append(d.Members, ClassicMemberDescription{MemberID: m.MemberID, ClientID: m.ClientID,
				ClientHost: m.ClientHost, Metadata: m.Metadata, Assignment: m.Assignment})
		}
		return d, nil
	}
	e, err := c.loadGroup(ctx, s, groupID, false)
	switch {
	case err != nil:
		return ClassicDescription{}, err
	case e != nil && e.g.Members() > 0:
		return ClassicDescription{}, fmt.Errorf("%w: %q is a group of the HTTP API's protocol, not a classic group", group.ErrUnknownGroup, groupID)
	case e != nil || len(s.offsets.Group(groupID)) > 0:
		d.State = group.ClassicEmpty.String()
	default:
		d.State = "Dead"
	}
	return d, nil
}

// ClassicList lists the groups of the shards this coordinator has loaded
// and still leads that have classic members or committed offsets, by id.
func (c *Coordinator) ClassicList() []ClassicSummary {
	c.mu.Lock()
	shards := slices.Collect(maps.Values(c.shards))
	c.mu.Unlock()
	seen := map[string]ClassicSummary{}
	for _, s := range shards {
		if st, ok := c.cfg.Host.OffsetsLeader(s.p); !ok || st.Epoch != s.epoch {
			continue
		}
		s.mu.Lock()
		if !s.dropped {
			for _, g := range s.offsets.Groups() {
				seen[g] = ClassicSummary{Group: g, State: group.ClassicEmpty.String()}
			}
			for id, ce := range s.classic {
				seen[id] = ClassicSummary{Group: id, State: ce.g.State().String(), ProtocolType: ce.g.Describe().ProtocolType}
			}
		}
		s.mu.Unlock()
	}
	out := make([]ClassicSummary, 0, len(seen))
	for _, id := range slices.Sorted(maps.Keys(seen)) {
		out = append(out, seen[id])
	}
	return out
}

// tickClassic expires the classic groups' sessions and join phases that
// are due, and forgets groups left without members or member ids handed
// out (their offsets stay).
// Called with s.mu held.
func (c *Coordinator) tickClassic(s *shard, now time.Time) {
	for id, ce := range s.classic {
		if d := ce.g.Deadline(); !d.IsZero() && !now.Before(d) {
			before := ce.g.Generation()
			if gone := ce.g.Tick(now); len(gone) > 0 || ce.g.Generation() != before {
				c.log.Info("classic group expired members", "group", id, "members", gone,
					"state", ce.g.State(), "generation", ce.g.Generation())
			}
			ce.notify()
		}
		if ce.g.Members() == 0 && ce.g.Pending() == 0 {
			delete(s.classic, id)
			s.active[id] = now
		}
	}
}
