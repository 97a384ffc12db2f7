// Package agent is the logagent daemon: it opens and locks the data
// directory, connects to Consul through election, keeps a replica of every
// partition the metadata assigns to it (leading or following it, one loop
// per replica), serves the client API (the sidecar applications use on
// localhost: topics, produce, fetch) and the peer API (replica fetches
// between agents, served by agent/peerapi, and the sidecar's forwarded
// produces and group operations) with fasthttp, routes the consumer
// groups' operations to their coordinators through agent/groups (which the
// agent gives a groups.Sidecar; the HTTP handlers stay here), opens the
// Kafka listener on the same sidecar operations (its broker is
// agent/kafkabroker, which the agent gives a kafkabroker.Sidecar), and
// stops gracefully. It does the I/O; the protocol decisions live in
// replicate, election and segstore.
package agent
