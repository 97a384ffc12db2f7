// Package group is the consumer-group coordinator's core (docs/design.md
// §7.2): the membership and assignment of one group as a pure state machine
// (Group), the committed offsets of the groups one coordinator serves
// (Offsets), and the record format of the internal offsets topic they are
// kept in. Like replicate and producer it does no I/O, starts no goroutines
// and reads no clock: time is an argument, and the same calls give the same
// state.
//
// The model is Kafka's KIP-848 (server-side assignment, cooperative
// reconciliation, member epochs):
//
//	member joins/leaves/dies, topic grows  Join / Leave / Tick / SetPartitions
//	                                       ──► group epoch+1, new target
//	member heartbeats                      Heartbeat(owned) ──► Response
//	                                       {MemberEpoch, Assigned, Revoke}
//	after any input                        Ready ──► members to answer now
//	                                       (long polls), next Tick deadline
//	member fetches / commits               CheckFetch / Commit ──► record to
//	                                       append; Offsets.Apply once committed
//	coordinator becomes leader             Offsets.Apply over its partition
//	                                       (restatements bound the rebuild)
//
// The target assignment (assign.go) is sticky and balanced and is computed
// in one place, deterministically. Each member's current assignment moves
// towards it cooperatively: a partition moving from A to B is revoked from
// A first, granted to B only once A's heartbeat no longer lists it (or A
// left or died), and partitions that do not move are never revoked, so
// their members never stop consuming them. At most one member owns a
// partition at any time, and a fetch or commit is checked against that
// ownership and the member epoch it was granted at.
//
// The classic protocol (Kafka's JoinGroup/SyncGroup with a client-side
// assignor, docs/design.md §7.5) is Classic, a state machine of its own in
// the same style: join phases, generations, a leader that computes the
// assignment.
package group
