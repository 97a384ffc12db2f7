package agent

import (
	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/election"
)

// NewCoordinator returns the election client an agent with cfg uses: the
// one place that maps the configuration onto Consul's settings. version,
// the agent's build, is registered with it, so that the other agents'
// status lists it.
func NewCoordinator(cfg *config.Config, version string, logger hclog.Logger) (*election.Client, error) {
	return election.New(election.Config{
		Consul:     cfg.Consul.API,
		Prefix:     cfg.Consul.Prefix,
		NodeID:     cfg.NodeID,
		PeerAddr:   cfg.Peer.AdvertiseAddress,
		ClientAddr: cfg.Client.Address,
		Version:    version,
		CheckTTL:   cfg.Consul.CheckTTL,
		SessionTTL: cfg.Consul.SessionTTL,
		LockDelay:  cfg.Consul.LockDelay,
		Logger:     logger,
	})
}

// peerCallTimeout bounds a call to a peer or to Consul that no long poll
// holds: the peer client's own bound.
const peerCallTimeout = peer.CallTimeout
