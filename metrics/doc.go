// Package metrics is an agent's Prometheus registry and the instruments
// the rest of the agent is given (docs/operations.md, "Metrics", names
// every family).
//
// Each agent has its own registry, not the client library's global one,
// so that agents run side by side in one process (the agent's tests) do
// not share or collide. Two kinds of figures live here:
//
//   - counters and histograms of the request paths (produce, fetch,
//     fsync, elections, ISR changes, error answers), which the agent and
//     its partitions update as things happen: an atomic add each, with
//     the label children resolved once (per acks value, per topic);
//   - per-partition and per-group gauges, which are not kept up to date
//     at all: they are read from the agent (Sources) when Prometheus
//     scrapes, and written straight into the text format, so the produce
//     path pays nothing for them and a scrape of 10,000 partitions little.
//
// The package imports nothing of logagent: the agent adapts its replicas,
// groups and Consul client to Sources.
package metrics
