package election

import (
	"fmt"
	"regexp"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
)

// Defaults for the zero values of Config.
const (
	DefaultPrefix      = "logagent/"
	DefaultCheckTTL    = 3 * time.Second
	DefaultSessionTTL  = 10 * time.Second
	DefaultLockDelay   = 250 * time.Millisecond
	DefaultLeaseMargin = 500 * time.Millisecond
	DefaultDeregister  = time.Minute
	DefaultWatchWait   = 30 * time.Second
	DefaultWatchMinGap = 50 * time.Millisecond
	DefaultCallTimeout = 5 * time.Second
	DefaultMaxInflight = 16
	// DefaultMaxConcurrentRequests leaves Consul's http_max_conns_per_client
	// (200 per client IP) room for three agents on one host, as `logagent
	// dev` runs them, plus their blocking queries and heartbeats.
	DefaultMaxConcurrentRequests = 32
	minLockDelay                 = time.Millisecond
	maxLockDelay                 = 60 * time.Second
	minSessionTTL                = time.Second
	maxSessionTTL                = 24 * time.Hour
	minDeregisterAfter           = time.Minute
	serviceName                  = "logagent"
	serfHealthCheckID            = "serfHealth"
	metaNodeID                   = "node_id"
	metaPeerAddr                 = "peer_addr"
	metaClientAddr               = "client_addr"
	metaVersion                  = "version"
	sessionBehavior              = api.SessionBehaviorRelease
	maxOpsPerTxn                 = 64
	heartbeatsPerTTL             = 3
	renewalsPerTTL               = 2
	maxEpoch                     = 1<<31 - 1
	watchTimeoutPadding          = 5 * time.Second
)

// nodeIDPattern keeps node ids usable inside service ids, check ids and JSON.
var nodeIDPattern = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,128}$`)

// Config says how to reach Consul and how this agent appears there.
// Durations left zero take the Default* values.
type Config struct {
	// Consul is the API configuration (address, token, TLS). Build it with
	// api.DefaultConfig() so CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN(_FILE) and
	// the other CONSUL_* variables apply. Nil means api.DefaultConfig().
	Consul *api.Config
	// Prefix is the KV prefix, ending in "/".
	Prefix string

	NodeID     string
	PeerAddr   string
	ClientAddr string
	// Version is the agent's build (logagent version), registered in the
	// service's meta so that every agent's is listed (AgentInfo.Version):
	// a rolling upgrade shows which agents still run the old one. Empty
	// registers none.
	Version string

	// CheckTTL is the TTL of the agent's health check, passed every third
	// of it. The session is linked to this check, so a crashed agent loses
	// its locks about CheckTTL after its last pass.
	CheckTTL time.Duration
	// SessionTTL is the session TTL, renewed every half of it.
	SessionTTL time.Duration
	// LockDelay is sent with the session: after the session is invalidated
	// Consul refuses to lock its keys for this long. At least 1ms, because
	// Consul turns 0 into 15s.
	LockDelay time.Duration
	// LeaseMargin is subtracted from the local lease: the agent stops
	// leading at min(last successful renewal sent + SessionTTL, last
	// successful check pass sent + CheckTTL) - LeaseMargin.
	LeaseMargin time.Duration
	// DeregisterCriticalAfter lets Consul drop the registration of an agent
	// whose check stayed critical this long (Consul's minimum is 1m).
	DeregisterCriticalAfter time.Duration
	// NoSerfHealth leaves the Consul node's serfHealth check out of the
	// session. Set it when the Consul agent the API talks to is not on this
	// host, since then its node's health says nothing about this agent.
	NoSerfHealth bool

	// WatchWait is the wait time of the metadata and liveness blocking
	// queries.
	WatchWait time.Duration
	// WatchMinGap rate-limits the metadata and liveness watches: successive
	// blocking queries of each start at least this far apart.
	WatchMinGap time.Duration
	// CallTimeout bounds every non-blocking Consul call, so a hung Consul
	// cannot stall renewals.
	CallTimeout time.Duration
	// MaxInflight bounds the batched transactions in flight: elections, ISR
	// changes and the consistent reads before them, packed up to
	// maxOpsPerTxn operations a request (txnBatcher). A lone one is sent at
	// once; while MaxInflight are out, the rest queue and share the next.
	MaxInflight int
	// MaxConcurrentRequests bounds every Consul request in flight but the
	// few that must never wait behind the others: blocking queries (one
	// per watch), session renewals and check heartbeats (limitTransport).
	MaxConcurrentRequests int

	Logger hclog.Logger
	Clock  Clock
}

// Clock is the source of time. Tests of the pure parts pass times directly;
// the client reads time only through this.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// withDefaults returns a copy with zero values replaced, or an error naming
// every invalid field.
func (c Config) withDefaults() (Config, error) {
	if c.Consul == nil {
		c.Consul = api.DefaultConfig()
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	setDefault(&c.CheckTTL, DefaultCheckTTL)
	setDefault(&c.SessionTTL, DefaultSessionTTL)
	setDefault(&c.LockDelay, DefaultLockDelay)
	setDefault(&c.LeaseMargin, DefaultLeaseMargin)
	setDefault(&c.DeregisterCriticalAfter, DefaultDeregister)
	setDefault(&c.WatchWait, DefaultWatchWait)
	setDefault(&c.WatchMinGap, DefaultWatchMinGap)
	setDefault(&c.CallTimeout, DefaultCallTimeout)
	if c.MaxInflight == 0 {
		c.MaxInflight = DefaultMaxInflight
	}
	if c.MaxConcurrentRequests == 0 {
		c.MaxConcurrentRequests = DefaultMaxConcurrentRequests
	}
	if c.Logger == nil {
		c.Logger = hclog.Default().Named("election")
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}

	var problems []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	check(nodeIDPattern.MatchString(c.NodeID), "node id %q must match %s", c.NodeID, nodeIDPattern)
	check(c.Prefix[len(c.Prefix)-1] == '/', "prefix %q must end with /", c.Prefix)
	check(c.SessionTTL >= minSessionTTL && c.SessionTTL <= maxSessionTTL,
		"session ttl %s must be within [%s, %s]", c.SessionTTL, minSessionTTL, maxSessionTTL)
	check(c.LockDelay >= minLockDelay && c.LockDelay <= maxLockDelay,
		"lock delay %s must be within [%s, %s]", c.LockDelay, minLockDelay, maxLockDelay)
	check(c.CheckTTL > 0, "check ttl %s must be positive", c.CheckTTL)
	// The lease must survive one missed beat of either kind, or a single slow
	// request would make the agent step down.
	check(c.LeaseMargin > 0 && c.LeaseMargin < c.CheckTTL-2*c.CheckTTL/heartbeatsPerTTL,
		"lease margin %s must be positive and below a third of the check ttl %s", c.LeaseMargin, c.CheckTTL)
	check(c.LeaseMargin < c.SessionTTL/renewalsPerTTL,
		"lease margin %s must be below half the session ttl %s", c.LeaseMargin, c.SessionTTL)
	check(c.DeregisterCriticalAfter >= minDeregisterAfter,
		"deregister critical after %s must be at least %s", c.DeregisterCriticalAfter, minDeregisterAfter)
	check(c.WatchWait > 0 && c.WatchMinGap > 0 && c.CallTimeout > 0, "watch wait, watch min gap and call timeout must be positive")
	check(c.MaxInflight > 0, "max inflight %d must be positive", c.MaxInflight)
	check(c.MaxConcurrentRequests >= c.MaxInflight, "max concurrent requests %d must be at least max inflight %d", c.MaxConcurrentRequests, c.MaxInflight)
	if len(problems) > 0 {
		return Config{}, fmt.Errorf("%w: %v", ErrInvalidConfig, problems)
	}
	return c, nil
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}
