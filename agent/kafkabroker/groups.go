package kafkabroker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/logagent/logagent/group"
	"github.com/logagent/logagent/groupcoord"
	"github.com/logagent/logagent/kafka"
	"github.com/logagent/logagent/wire"
)

// Kafka's classic consumer groups (docs/design.md §7.5, docs/kafka.md
// "Consumer groups"): the Kafka listener's kafka.Groups. Every call runs
// on the group's coordinator, this agent's or another's through the peer
// API, as the HTTP group operations do (Sidecar.RunGroupOp), under the
// classic_* operations. The coordinator answers the protocol's outcomes
// (illegal generation, rebalance in progress, ...) as a Kafka error code
// inside a 200 answer (ClassicAnswer), so that they cross the peer hop
// unchanged; only a coordinator that is not there (or not ready) answers
// 503, which the sidecar retries for its group route timeout, or until the
// request's deadline when sooner, and then answers
// COORDINATOR_NOT_AVAILABLE, so the client looks for it again.
//
// A JoinGroup or SyncGroup that must wait is held by the coordinator at
// most groupcoord.MaxClassicWait per call (under the peer client's read
// timeout); the broker then asks again with Resume until the answer comes
// or the request's own deadline passes.

// ClassicAnswer is a classic operation's answer on the peer API: the
// agent's coordinator writes it, Groups reads it.
type ClassicAnswer struct {
	ErrorCode int16           `json:"error_code"`
	Message   string          `json:"message,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
}

// Groups is the broker's kafka.Groups: the classic consumer groups on the
// sidecar's group operations.
func (b *Broker) Groups() kafka.Groups {
	return groups{b}
}

// groups is the broker's kafka.Groups.
type groups struct{ b *Broker }

// call runs a classic operation on the group's coordinator and decodes its
// result into out.
func (k groups) call(ctx context.Context, name, groupID string, req any, wait time.Duration, out any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	// Under the request's deadline: the routing retries an unavailable
	// coordinator no longer than the client waits, so a commit the client
	// gave up on does not land after the one it sends next.
	answer, e := k.b.s.RunGroupOp(ctx, name, groupID, body, wait)
	if e != nil {
		// Answered with its wire code's Kafka code
		// (COORDINATOR_NOT_AVAILABLE, ...).
		return e
	}
	var ans ClassicAnswer
	if err := json.Unmarshal(answer, &ans); err != nil {
		return fmt.Errorf("kafkabroker: undecodable answer of the group coordinator: %w", err)
	}
	if out != nil && len(ans.Result) > 0 {
		if err := json.Unmarshal(ans.Result, out); err != nil {
			return fmt.Errorf("kafkabroker: undecodable answer of the group coordinator: %w", err)
		}
	}
	if ans.ErrorCode != 0 {
		return &kafka.Error{Code: ans.ErrorCode, Message: ans.Message}
	}
	return nil
}

// holdFor is how long the coordinator holds one call of a join or sync:
// what is left of ctx, at most groupcoord.MaxClassicWait.
func (k groups) holdFor(ctx context.Context) time.Duration {
	wait := groupcoord.MaxClassicWait
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, d.Sub(k.b.cfg.Now()))
	}
	return max(wait, 0)
}

func (k groups) JoinGroup(ctx context.Context, req kafka.JoinGroupRequest) (kafka.JoinGroupResult, error) {
	jr := groupcoord.ClassicJoinRequest{MemberID: req.MemberID, ClientID: req.ClientID, ClientHost: req.ClientHost,
		ProtocolType: req.ProtocolType, SessionTimeoutMS: req.SessionTimeout.Milliseconds(),
		RebalanceTimeoutMS: req.RebalanceTimeout.Milliseconds(), RequireKnownMemberID: req.RequireKnownMemberID}
	if req.MemberID == "" {
		// Named here, so that a join the routing resends after a lost
		// answer is the same new member.
		jr.NewMemberID = groupcoord.NewMemberID()
	}
	for _, p := range req.Protocols {
		jr.Protocols = append(jr.Protocols, groupcoord.ClassicProtocol{Name: p.Name, Metadata: p.Metadata})
	}
	for {
		wait := k.holdFor(ctx)
		jr.WaitMS = wait.Milliseconds()
		var r groupcoord.ClassicJoinResponse
		err := k.call(ctx, "classic_join", req.Group, jr, wait, &r)
		res := kafka.JoinGroupResult{MemberID: r.MemberID, Generation: r.Generation, ProtocolType: r.ProtocolType,
			Protocol: r.Protocol, Leader: r.Leader}
		if err != nil || r.Done {
			for _, m := range r.Members {
				res.Members = append(res.Members, kafka.GroupMember{MemberID: m.MemberID, Metadata: m.Metadata})
			}
			return res, err
		}
		jr = groupcoord.ClassicJoinRequest{MemberID: r.MemberID, Resume: true}
	}
}

func (k groups) SyncGroup(ctx context.Context, req kafka.SyncGroupRequest) ([]byte, error) {
	sr := groupcoord.ClassicSyncRequest{MemberID: req.MemberID, Generation: req.Generation,
		ProtocolType: req.ProtocolType, Protocol: req.Protocol, Assignments: req.Assignments}
	for {
		wait := k.holdFor(ctx)
		sr.WaitMS = wait.Milliseconds()
		var r groupcoord.ClassicSyncResponse
		if err := k.call(ctx, "classic_sync", req.Group, sr, wait, &r); err != nil || r.Done {
			return r.Assignment, err
		}
		sr = groupcoord.ClassicSyncRequest{MemberID: req.MemberID, Generation: req.Generation, Resume: true}
	}
}

func (k groups) Heartbeat(ctx context.Context, groupID, member string, generation int32) error {
	return k.call(ctx, "classic_heartbeat", groupID, groupcoord.ClassicHeartbeatRequest{MemberID: member, Generation: generation}, 0, nil)
}

func (k groups) LeaveGroup(ctx context.Context, groupID string, members []string) ([]error, error) {
	var r groupcoord.ClassicLeaveResponse
	if err := k.call(ctx, "classic_leave", groupID, groupcoord.ClassicLeaveRequest{MemberIDs: members}, 0, &r); err != nil {
		return nil, err
	}
	if len(r.Unknown) != len(members) {
		return nil, fmt.Errorf("kafkabroker: the group coordinator answered %d members of %d", len(r.Unknown), len(members))
	}
	errs := make([]error, len(members))
	for i, unknown := range r.Unknown {
		if unknown {
			errs[i] = &kafka.Error{Code: kerr.UnknownMemberID.Code}
		}
	}
	return errs, nil
}

func (k groups) CommitOffsets(ctx context.Context, req kafka.CommitRequest) error {
	cr := groupcoord.ClassicCommitRequest{MemberID: req.MemberID, Generation: req.Generation}
	for _, o := range req.Offsets {
		if o.Topic == groupcoord.OffsetsTopic {
			return &kafka.Error{Code: kerr.TopicAuthorizationFailed.Code, Message: groupcoord.OffsetsTopic + " is internal"}
		}
		cr.Offsets = append(cr.Offsets, groupcoord.OffsetCommit{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Metadata: o.Metadata})
	}
	return k.call(ctx, "classic_commit", req.Group, cr, 0, nil)
}

func (k groups) FetchOffsets(ctx context.Context, groupID string) ([]kafka.CommittedOffset, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	answer, e := k.b.s.RunGroupOp(ctx, "offsets", groupID, nil, 0)
	if e != nil {
		if e.Code == wire.CodeUnknownGroup {
			return nil, nil
		}
		return nil, e
	}
	var r groupcoord.OffsetsResponse
	if err := json.Unmarshal(answer, &r); err != nil {
		return nil, fmt.Errorf("kafkabroker: undecodable answer of the group coordinator: %w", err)
	}
	out := make([]kafka.CommittedOffset, 0, len(r.Offsets))
	for _, o := range r.Offsets {
		out = append(out, kafka.CommittedOffset{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Metadata: o.Metadata})
	}
	return out, nil
}

func (k groups) DescribeGroup(ctx context.Context, groupID string) (kafka.GroupDescription, error) {
	var d groupcoord.ClassicDescription
	if err := k.call(ctx, "classic_describe", groupID, struct{}{}, 0, &d); err != nil {
		return kafka.GroupDescription{}, err
	}
	out := kafka.GroupDescription{State: d.State, ProtocolType: d.ProtocolType, Protocol: d.Protocol}
	for _, m := range d.Members {
		out.Members = append(out.Members, kafka.GroupMemberDescription{MemberID: m.MemberID, ClientID: m.ClientID,
			ClientHost: m.ClientHost, Metadata: m.Metadata, Assignment: m.Assignment})
	}
	return out, nil
}

// DeleteGroup runs the HTTP API's delete on the group's coordinator: its
// refusals carry wire codes, answered as Kafka's (group_not_empty as
// NON_EMPTY_GROUP, unknown_group as GROUP_ID_NOT_FOUND,
// coordinator_not_available as COORDINATOR_NOT_AVAILABLE).
func (k groups) DeleteGroup(ctx context.Context, groupID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, e := k.b.s.RunGroupOp(ctx, "delete", groupID, nil, 0); e != nil {
		return e
	}
	return nil
}

// ListGroups merges the groups stored in Consul (those of the HTTP API's
// protocol, listed as Kafka lists KIP-848 groups: type consumer) with what
// every agent's coordinator holds in memory: its classic groups and the
// groups whose offsets it serves.
func (k groups) ListGroups(ctx context.Context) ([]kafka.GroupListing, error) {
	byID := map[string]kafka.GroupListing{}
	stored, err := groupcoord.List(ctx, k.b.coord)
	if err != nil {
		return nil, err
	}
	for _, g := range stored.Groups {
		state := "Empty"
		if g.Members > 0 {
			state = "Stable"
		}
		byID[g.Group] = kafka.GroupListing{Group: g.Group, ProtocolType: "consumer", State: state}
	}
	for _, info := range k.b.s.KnownAgents() {
		var list []groupcoord.ClassicSummary
		if info.NodeID == k.b.cfg.NodeID {
			list = k.b.s.ClassicList()
		} else if err := k.b.s.ClassicListAt(ctx, info.PeerAddr, &list); err != nil {
			// An agent that does not answer coordinates nothing for
			// long: its offsets partitions move to others.
			k.b.cfg.Logger.Warn("listing an agent's classic groups failed", "agent", info.NodeID, "error", err)
			continue
		}
		for _, g := range list {
			if _, ok := byID[g.Group]; !ok || g.State != group.ClassicEmpty.String() {
				byID[g.Group] = kafka.GroupListing{Group: g.Group, ProtocolType: g.ProtocolType, State: g.State}
			}
		}
	}
	out := make([]kafka.GroupListing, 0, len(byID))
	for _, g := range byID {
		out = append(out, g)
	}
	return out, nil
}
