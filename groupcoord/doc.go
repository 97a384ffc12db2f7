// Package groupcoord runs the consumer-group coordinators of one agent
// (docs/design.md §7.3): for every partition of the internal offsets topic
// this agent leads, it serves the groups that hash to that partition. It
// holds each group's group.Group (membership, epochs, assignment), stored
// in Consul on every change of membership or assignment, and the group's
// committed offsets (group.Offsets), rebuilt from its offsets partition on
// becoming leader and extended only by records that partition committed.
//
// It does no HTTP and no file I/O of its own: the agent implements Host
// (the offsets partitions and the metadata) and Store (Consul), decodes
// requests and routes each to the agent that coordinates the group.
package groupcoord
