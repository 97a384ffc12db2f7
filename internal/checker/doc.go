// Package checker verifies the history of a fault-injection run against a
// logagent cluster (docs/design.md §13), in the manner of Jepsen's queue and Kafka
// workloads. The harness records every client operation with its outcome
// and, after healing the cluster, reads every partition from every replica;
// Check then reports each kind of anomaly with examples:
//
//   - lost: a write acknowledged as committed that the final read lacks, or
//     holds at its acknowledged offset with another value;
//   - duplicate: one value at two offsets, counted apart when the write's
//     outcome was unknown at some attempt (a retry may legally duplicate it);
//     the Duplicates figure counts both kinds, for runs whose producers
//     retry until acknowledged (0 with idempotent producers);
//   - inconsistent offset: one (partition, offset) seen with two values, by
//     consumers or replicas;
//   - non-monotonic: a consumer that saw a partition's offsets go backwards or
//     repeat within one run of reads;
//   - divergence: two replicas that differ below the lower of their high
//     watermarks;
//   - unseen (informational): acknowledged writes that no consumer read.
//
// The checker is pure: it takes values and returns a Report; it knows nothing
// of processes, sockets or time.
package checker
