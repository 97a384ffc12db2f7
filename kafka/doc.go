// Package kafka is the sidecar's Kafka listener (docs/design.md §15): the
// Kafka wire protocol on a TCP listener, so that any Kafka client on the
// host reaches logagent at localhost:9092. It owns the framing (a 4-byte
// size, the request header, a body decoded with franz-go's kmsg), the
// per-connection loop that answers in request order, ApiVersions, and one
// handler file per API key, in the manner of franz-go's pkg/kfake.
//
// It knows nothing of Consul, segment files or the HTTP APIs: what it
// needs of the sidecar is the Broker interface (topics, produce, fetch,
// offsets, producer ids) and the Groups interface (the classic consumer
// group protocol and committed offsets), which the agent implements. The
// sidecar presents itself as the only broker: leader of every partition,
// coordinator of every group; it forwards inside the cluster as the HTTP
// path does.
package kafka
