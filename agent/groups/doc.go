// Package groups is the sidecar's consumer groups (docs/design.md §7.3,
// §7.5; docs/api.md "Consumer groups"): it routes a group operation to the
// group's coordinator, this agent's groupcoord.Coordinator or another
// agent's over the peer API, runs the operations that reach this agent's
// coordinator (the HTTP API's and the Kafka listener's classic_* ones),
// and gives that coordinator its groupcoord.Host on the agent's offsets
// partitions. What it needs of the agent is a Sidecar and a Config; it
// imports nothing of the agent, so that imports point one way; the
// agent keeps the HTTP handlers, which call it (docs/design.md §2.1).
package groups
