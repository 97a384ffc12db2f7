package kafka

// Groups is what the listener needs of the sidecar for consumer groups:
// the classic group protocol (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup) with client-side assignors, committed offsets, and the
// admin views (DescribeGroups, ListGroups). Defined with its handlers.
type Groups interface{}
