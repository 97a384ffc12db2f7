// Package bench is logagent's load generator (`logagent bench`, docs/design.md §11):
// it drives an agent's client API through package client and reports
// throughput, errors and latency percentiles, and it measures the machine's
// own limits (loopback TCP, sequential file writes) as baselines.
//
// # Scheduling: open and closed loops
//
// With a target rate, a run is an open loop: request n is due at
// start + n/rate, whatever happened to the requests before it. A due request
// goes to a free worker; when every worker is busy it waits, and its latency
// still runs from its due time. So a stall of the agent is charged to every
// request that was due during it, as its users would have felt it, instead
// of to the one request that was in flight (the "coordinated omission" of a
// closed-loop generator, which stops asking while the system stalls). The
// concurrency is then only a ceiling on requests in flight; give enough
// workers for the rate, or the generator's own queue shows up as latency.
//
// Without a rate, a run is a closed loop: each of N workers issues its next
// request as soon as the previous one is answered, and latency runs from the
// request's actual start. That measures the highest throughput at N
// requests in flight; its latencies are service times, not what users at a
// given load would see.
//
// A run stops issuing requests after its Duration or Count, whichever comes
// first, then waits for the requests in flight (and, in an open loop, those
// already due) until its hard cap, by default Duration + 30s (10 min for a
// run bounded by a count only). At the hard cap requests in flight are
// canceled and count as errors of kind "canceled", and due requests never
// issued count as "unsent", so a run that cannot keep up is never reported
// as a clean one. Throughput is over the whole elapsed time, drain included.
//
// # What latency means in each workload
//
//   - produce: from the due time (open loop) or start (closed loop) of a
//     request, one batch of N records to one partition sent by its worker's
//     client.Producer, to the agent's answer at the chosen acks: with
//     acks=all the records are then below the high watermark. Keyless
//     requests go to the partitions in turn; with K keys, a request draws
//     one key uniformly, goes to that key's partition, and draws its other
//     records' keys among the keys of that partition, so each request stays
//     one batch and each key is equally frequent. A request the agent
//     refuses before writing (not_leader, not_enough_replicas) is retried
//     by the Producer for up to 10s, within its latency, and then fails
//     with the agent's error code as its kind.
//   - consume: from the call to the decoded answer of one fetch (no long
//     poll), reading every partition, or one, from its earliest offset to
//     the high watermark it had at the start, one worker per partition.
//   - e2e: producers at a target rate stamp the due time of their request
//     into each record value (see StampBytes); one consumer per partition
//     long-polls from the high watermark seen before the run. The end-to-end
//     latency of a record runs from that due time to the return of the
//     fetch that delivered it: the producer's queueing, the produce, the
//     replication up to the high watermark and the fetch. Records
//     acknowledged but not read within the drain count as not consumed.
//
// Latencies are kept in a log-linear Histogram (within 0.4 % from 1 ns to
// 73 min) per worker, merged at the end: p50, p90, p99, p99.9, max and an
// exact mean, of successful requests only; failed requests are counted by
// kind (ErrorKind: the agent's error code, or canceled, unsent, connection,
// outcome_unknown, ...). Bytes count record keys, values and headers, not
// batch framing or HTTP; MB are 10^6 bytes.
//
// # Limits
//
// LoopbackTCP and FileWrite measure what the machine can do without
// logagent: TCP over 127.0.0.1 with large writes between two goroutines,
// and appends to a file with the write-then-fsync pattern of segstore. They
// are the ceilings that logagent's figures are read against.
package bench
