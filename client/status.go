package client

import (
	"context"
	"fmt"
	"net/http"
)

// AgentStatus is GET /v1/status: the answering agent and the agents
// Consul reports alive. (The answer's partitions, this agent's replicas, are
// left out: DescribeTopic gives them with the rest of each partition.)
type AgentStatus struct {
	NodeID string `json:"node_id"`
	// State is starting, serving or stopping.
	State         string `json:"state"`
	ClientAddress string `json:"client_address"`
	PeerAddress   string `json:"peer_address"`
	// Agents are the agents Consul reports alive, this one included while
	// it is registered; an agent that is down is not among them.
	Agents        []AgentInfo `json:"agents"`
	MetadataIndex uint64      `json:"metadata_index"`
}

// AgentInfo is one live agent of an AgentStatus.
type AgentInfo struct {
	NodeID        string `json:"node_id"`
	ClientAddress string `json:"client_address"`
	PeerAddress   string `json:"peer_address"`
	// NotPassing is set for an agent in Consul maintenance mode or with
	// a check in warning: alive and serving, it takes no new replica.
	NotPassing bool `json:"not_passing,omitempty"`
	// Draining is set for an agent being drained (NodeDrain): its
	// replicas move off and it takes no new one.
	Draining bool `json:"draining,omitempty"`
	// Version is the agent's build (logagent version), as it registered
	// in Consul.
	Version string `json:"version,omitempty"`
}

// Status asks the agent about itself and the live agents.
func (c *Client) Status(ctx context.Context) (*AgentStatus, error) {
	var st AgentStatus
	if err := c.doJSON(ctx, http.MethodGet, "/v1/status", nil, &st); err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	return &st, nil
}
