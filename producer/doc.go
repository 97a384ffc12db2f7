// Package producer is the idempotent-producer state of one partition (KIP-98,
// docs/design.md §2.1): for each producer id, its epoch and the metadata of
// its last NumBatchesToRetain batches, and the decision a leader takes on a
// produce request from it (append it, answer it as a duplicate, refuse it as
// out of order or as a fenced epoch). It is a pure state machine like
// replicate: no I/O, no goroutines, no clock (time is an argument), so the
// same calls give the same state and the same snapshot bytes.
//
// The agent's replica loop drives it:
//
//	leader, before appending  Check(pid, epoch, seq, count) ──► Decision
//	after any append          Apply(batch)      leader, follower and log recovery alike
//	log truncated             TruncateTo(offset)
//	log start advanced        RemoveBefore(logStartOffset)
//	periodically              Expire(now)
//	persisting                MarshalSnapshot / UnmarshalSnapshot (then replay
//	                          the log from the snapshot's end offset)
//
// The rules are Kafka's (ProducerStateManager, ProducerAppendInfo and
// ProducerStateEntry) for producers that are idempotent but not
// transactional, with one deliberate difference, documented on TruncateTo:
// the state is not rebuilt from the log on truncation, and a producer whose
// retained batches are all truncated keeps its epoch and its next sequence.
package producer
