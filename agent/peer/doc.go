// Package peer is the wire format of the replication requests agents send
// each other over the peer API (a follower's fetch and epoch end offset
// query, the positions a leader's fetch answer carries in its headers, the
// frames of a fetch session), the pooled client that sends them, and the
// follower side of the fetch sessions (Sessions). The agent serves them;
// it imports nothing of the agent.
package peer
