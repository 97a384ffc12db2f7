// Package record defines the batch: the unit that logagent appends, stores,
// replicates and serves. The same bytes are written to segment files, sent
// between replicas and returned by binary fetches (docs/design.md §4).
//
// Decoding never trusts a length or a checksum: every length is bounded by
// what remains of the input and by the caller's limits, and any impossible
// value is reported as an error that matches ErrCorrupt with errors.Is.
package record
