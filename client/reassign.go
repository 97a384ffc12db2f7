package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// This file is the client of the agent's day-2 operations (docs/api.md,
// "Moving a partition's replicas", "Draining an agent", "Rebalancing"):
// moving a partition's replicas, cancelling a move, draining an agent and
// planning a rebalance.

// ReassignmentProgress is one replica a move adds, as the partition's
// leader sees it.
type ReassignmentProgress struct {
	Node string `json:"node"`
	// LogEndOffset is the replica's last fetch offset, -1 before its first
	// fetch from this leader; Lag is the leader's log end less it.
	LogEndOffset int64 `json:"log_end_offset"`
	Lag          int64 `json:"lag"`
	InSync       bool  `json:"in_sync"`
	// CatchUpBytes is what the leader has sent it while it caught up.
	CatchUpBytes int64 `json:"catch_up_bytes"`
}

// MoveStatus is a partition's replicas and its move in flight, as the
// reassignment endpoint answers: MovePartition, Reassignment and
// CancelMove return it.
type MoveStatus struct {
	Topic     string   `json:"topic"`
	Partition int      `json:"partition"`
	Replicas  []string `json:"replicas"`
	// ISR and Leader are empty in the answer to MovePartition and
	// CancelMove.
	ISR    []string `json:"isr"`
	Leader string   `json:"leader"`
	// LeaderAddress is the leader's client API (host:port): only the
	// leader knows the move's progress.
	LeaderAddress string `json:"leader_address"`
	// Reassignment is the move in flight, nil when there is none.
	Reassignment *Reassignment `json:"reassignment"`
}

func reassignmentPath(topic string, partition int) string {
	return topicPath(topic) + "/partitions/" + strconv.Itoa(partition) + "/reassignment"
}

// MovePartition starts moving the partition's replicas to replicas (the
// first the preferred leader); the partition's leader carries it out. The
// answer's Reassignment is nil when the partition has these replicas
// already. A move in flight is ErrReassignmentInProgress; a node that is
// not a live agent, repeated, or too few replicas ErrInvalidRequest.
func (c *Client) MovePartition(ctx context.Context, topic string, partition int, replicas []string) (*MoveStatus, error) {
	if err := ValidateTopicName(topic); err != nil {
		return nil, err
	}
	var st MoveStatus
	if err := c.doJSON(ctx, http.MethodPost, reassignmentPath(topic, partition), map[string][]string{"replicas": replicas}, &st); err != nil {
		return nil, fmt.Errorf("move %s/%d: %w", topic, partition, err)
	}
	return &st, nil
}

// Reassignment returns the partition's replicas and move in flight as the
// agent's metadata has them, the move's progress only when the agent leads
// the partition (ask MoveStatus.LeaderAddress for it otherwise). A move is
// done once every agent answers a nil Reassignment.
func (c *Client) Reassignment(ctx context.Context, topic string, partition int) (*MoveStatus, error) {
	if err := ValidateTopicName(topic); err != nil {
		return nil, err
	}
	var st MoveStatus
	if err := c.doJSON(ctx, http.MethodGet, reassignmentPath(topic, partition), nil, &st); err != nil {
		return nil, fmt.Errorf("reassignment of %s/%d: %w", topic, partition, err)
	}
	return &st, nil
}

// CancelMove cancels the partition's move in flight: it goes back to the
// replicas it had, and the replicas it added delete their data. The
// answer's Reassignment is the way back (Cancelled). No move in flight
// (none, or it completed first) is ErrNoReassignmentInProgress; no
// original replica in the ISR ErrNotEnoughReplicas.
func (c *Client) CancelMove(ctx context.Context, topic string, partition int) (*MoveStatus, error) {
	if err := ValidateTopicName(topic); err != nil {
		return nil, err
	}
	var st MoveStatus
	if err := c.doJSON(ctx, http.MethodDelete, reassignmentPath(topic, partition), nil, &st); err != nil {
		return nil, fmt.Errorf("cancel the move of %s/%d: %w", topic, partition, err)
	}
	return &st, nil
}

// DrainStatus is what is left on an agent being drained.
type DrainStatus struct {
	Node     string `json:"node"`
	Draining bool   `json:"draining"`
	// Replicas and Leaderships count the partitions with a replica on the
	// agent and those it leads; the drain is done when Replicas is 0.
	Replicas    int              `json:"replicas"`
	Leaderships int              `json:"leaderships"`
	Partitions  []DrainPartition `json:"partitions"`
}

// DrainPartition is a partition with a replica on an agent being drained.
type DrainPartition struct {
	Topic     string   `json:"topic"`
	Partition int      `json:"partition"`
	Replicas  []string `json:"replicas"`
	Leader    string   `json:"leader"`
	// Moving is true while a move of the partition is in flight.
	Moving bool `json:"moving"`
}

func drainPath(node string) string { return "/v1/nodes/" + url.PathEscape(node) + "/drain" }

// DrainNode marks the agent node as being drained: the partitions' leaders
// move its replicas, and so its leaderships, away. A node that is neither
// a live agent nor holds a replica is ErrInvalidRequest.
func (c *Client) DrainNode(ctx context.Context, node string) (*DrainStatus, error) {
	return c.drain(ctx, http.MethodPost, node)
}

// NodeDrain returns what is left on the agent node; Draining is false when
// it is not being drained.
func (c *Client) NodeDrain(ctx context.Context, node string) (*DrainStatus, error) {
	return c.drain(ctx, http.MethodGet, node)
}

// CancelDrain ends the drain of node: no new move starts; the moves in
// flight finish (CancelMove cancels one).
func (c *Client) CancelDrain(ctx context.Context, node string) (*DrainStatus, error) {
	return c.drain(ctx, http.MethodDelete, node)
}

func (c *Client) drain(ctx context.Context, method, node string) (*DrainStatus, error) {
	var st DrainStatus
	if err := c.doJSON(ctx, method, drainPath(node), nil, &st); err != nil {
		return nil, fmt.Errorf("drain of %s: %w", node, err)
	}
	return &st, nil
}

// RebalancePlan is the agent's plan to even out replicas and preferred
// leaders over the live agents not being drained; it writes nothing.
type RebalancePlan struct {
	Agents []RebalanceAgent `json:"agents"`
	// Moves are the partition moves to start, one at a time, in order.
	Moves []RebalanceMove `json:"moves"`
}

// RebalanceAgent is one agent's counts now and after the plan.
type RebalanceAgent struct {
	Node                  string `json:"node"`
	Replicas              int    `json:"replicas"`
	PreferredLeaders      int    `json:"preferred_leaders"`
	ReplicasAfter         int    `json:"replicas_after"`
	PreferredLeadersAfter int    `json:"preferred_leaders_after"`
}

// RebalanceMove is one partition to move from Replicas to Target
// (MovePartition's list).
type RebalanceMove struct {
	Topic     string   `json:"topic"`
	Partition int      `json:"partition"`
	Replicas  []string `json:"replicas"`
	Target    []string `json:"target"`
}

// Rebalance returns the agent's rebalance plan.
func (c *Client) Rebalance(ctx context.Context) (*RebalancePlan, error) {
	var plan RebalancePlan
	if err := c.doJSON(ctx, http.MethodGet, "/v1/rebalance", nil, &plan); err != nil {
		return nil, fmt.Errorf("rebalance plan: %w", err)
	}
	return &plan, nil
}
