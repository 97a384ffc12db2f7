// Package kafkabroker is kafka.Broker and the classic consumer-group API
// (kafka.Groups) implemented on the sidecar service: the Kafka listener's
// requests (docs/kafka.md) become the operations the agent's HTTP handlers
// call too, so that a Kafka request and an HTTP request for the same thing
// run the same code below their decoding (docs/design.md §2.1). What it
// needs of the agent is a Sidecar and a Config; it imports nothing of the
// agent, so that imports point one way.
package kafkabroker
