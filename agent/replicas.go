package agent

import "github.com/logagent/logagent/agent/partition"

// ErrDataDirLocked is Run's error when another process holds the data
// directory's lock.
var ErrDataDirLocked = partition.ErrDataDirLocked

// The roles and the epoch marker of the partition runtime that the
// handlers test and pass. Most handlers have a parameter or variable named
// partition, which hides the package's name inside them.
const (
	roleLeader   = partition.RoleLeader
	roleFollower = partition.RoleFollower
	anyEpoch     = partition.AnyEpoch
)
