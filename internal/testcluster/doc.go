// Package testcluster runs real logagent processes for tests (docs/design.md §13):
// a Consul server (consultest) and N agents built from this module, each
// with its own data directory, configuration file and free loopback ports.
// Tests kill (SIGKILL), stop (SIGTERM), pause (SIGSTOP) and restart agents on
// their data, find partition leaders, produce and fetch through the client
// API, and read partition logs from disk to compare replicas.
//
// Agents detect failures on shortened timings (TimingFast: a 2 s check TTL
// and lag_time_max) unless Options.Timing is TimingShipped, which sets none
// and leaves the built-in defaults users get; Cluster.Timings says which
// values are in force.
//
// Every process is started in its own process group with Pdeathsig, and
// stopped by PID in t.Cleanup, also when the test fails (its log is then
// printed). StartMain does the same for a TestMain, which has no test:
// its Stop runs the cleanups (the client package's examples run against
// such a cluster).
//
// Each agent has separate listen and advertised addresses, and its own
// Consul address. With Options.Proxies, each agent reaches Consul and its
// peers only through TCP proxies the test controls (proxy.go): cut a link
// both ways, one way, from one agent only (Cluster.CutLink), or delay it.
package testcluster
