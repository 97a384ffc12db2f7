// Package kafkaconf pins the franz-go release whose own integration tests
// `make kafka-conformance` runs against a logagent dev cluster's Kafka
// listeners (docs/kafka.md, "Conformance: franz-go's integration tests").
// It is a module of its own so that `go test github.com/twmb/franz-go/pkg/kgo`
// resolves kgo's test dependencies from this go.mod, apart from the
// project's.
package kafkaconf

import _ "github.com/twmb/franz-go/pkg/kgo"
