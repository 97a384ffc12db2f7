// Command benchrun is `make bench` (issue 8): it measures logagent against
// NATS JetStream on this machine, side by side and with matched settings,
// and against the machine's own limits, then rewrites the bench region of
// docs/benchmarks.md and draws docs/benchmarks.png.
//
// Every system runs as child processes of benchrun on loopback: a logagent
// dev cluster (Consul and three agents) per storage setting, driven by
// `logagent bench ... -json`, and one or three nats-server processes driven
// in-process with nats.go. Each child runs in its own process group with
// a parent-death signal, and is stopped by its PID (SIGINT, then SIGKILL of
// its group after a grace period) when its rows end, on error and on
// timeout.
//
// Rows come in groups, run with -only: produce-r1, produce-r3,
// produce-r3-fsync, consume, e2e, limits, idempotence, groups (consumer
// groups: `logagent bench groups`, commits/s of one coordinator against
// acks=all produce of one record, and settle times after a kill, a leave
// and a join) and tls (produce-r3's rows and consume on a cluster with
// peer and client TLS and tokens, against the same rows in the clear) and
// kafka (franz-go's kgo, in-process, producing and replaying through the
// first agent's Kafka listener, against produce-r3's and consume's HTTP
// rows on the same cluster).
// consume and e2e also run the produce-r3 rows, whose data they read and
// whose maximum rates set the e2e rate; tls and kafka run the logagent
// side of produce-r3 and consume, their counterparts. -duration sets each row's length (10s; -quick is 1s, for
// smoke tests), -out the directory of benchmarks.md and benchmarks.png, and
// -timeout caps the whole run; a run that is cut short writes nothing.
//
// Matching: a logagent topic of P partitions faces P JetStream streams;
// logagent's C workers with batches of B records in flight face one async
// publisher with at most C·B unacknowledged messages; record values have
// the same size; rows last the same -duration. Latencies of both systems go
// into internal/bench's Histogram, so percentiles are computed the same way.
package main
