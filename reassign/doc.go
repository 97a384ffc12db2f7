// Package reassign decides the steps of moving one partition's replicas to
// a target list, Kafka's reassignment (KIP-455) driven by the partition's
// leader (docs/design.md §7.6): Next takes what the leader knows (the move
// and replicas in Consul, its committed ISR, the successors that hold its
// whole log) and returns the next guarded step; the agent does the I/O.
// Throttle is the token bucket that bounds the leader's catch-up answers to
// the replicas being added. Replace and DeadSince are self-healing's choice
// of a dead replica's replacement and its clock, StalledSince its clock for
// the replicas its own moves add, after which it cancels a move that makes
// no progress (docs/design.md §7.7). Time
// is a value the caller passes; nothing here reads a clock, starts a
// goroutine or touches Consul.
package reassign
