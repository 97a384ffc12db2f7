// Package peerapi serves the replication requests of the peer API
// (docs/design.md §8): a follower's fetch, its epoch end offset query, and
// the leader side of the fetch sessions, one hijacked connection per pair
// of agents (docs/design.md §7.9). The agent routes these requests to a
// Server behind the peer token and gives it what it needs as a Host and a
// Config: the package imports nothing of the agent, so that imports point
// one way (docs/design.md §2.1). The agent's own peer requests, forwarded
// produces and group operations, stay with the agent's sidecar.
package peerapi
