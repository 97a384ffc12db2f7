// Package partition is the partition runtime of an agent: the data
// directory and each partition's files in it, the manager that keeps one
// replica of every partition the metadata assigns to this agent, and the
// replica loop that owns a partition's log and its replication state
// machine, leading (appends, acks, the ISR) or following (reconciling by
// epoch, fetching from the leader). It imports nothing of the agent: the
// agent hands it a Deps and calls it from its handlers.
package partition
