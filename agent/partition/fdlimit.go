package partition

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/election"
)

// What the start-up check of RLIMIT_NOFILE and the open budget count
// (docs/operations.md, "Open files"). A replica keeps open, for as long as
// it exists:
//   - the .log and the .index of each of its segments;
//   - one read descriptor: segments pool up to 4 once read, but mostly only
//     the newest segment is read;
//   - its replication connections: a leader has one from each follower, a
//     follower one to its leader, so at most replication factor - 1.
//
// On top of the replicas, the agent itself holds its listeners, its Consul
// connections, the data directory's lock, the runtime's poller and its
// client connections.
const (
	fdsPerSegment      = 2
	fdsPerReplicaReads = 1
	fdsAgentBase       = 64
)

// replicaDescriptors estimates the descriptors one replica keeps open.
func replicaDescriptors(segments, replicationFactor int) int {
	return fdsPerSegment*max(segments, 1) + fdsPerReplicaReads + max(replicationFactor-1, 0)
}

// descriptorEstimate is the agent's estimate for the replicas snap assigns
// to self, counting segments on disk (a partition not created yet has
// one).
func descriptorEstimate(snap *election.Snapshot, self, dataDir string) (replicas, fds int) {
	fds = fdsAgentBase
	for _, name := range snap.Topics() {
		tm, _ := snap.Topic(name)
		if tm.Err != nil {
			continue
		}
		for _, pm := range tm.Partitions {
			if !slices.Contains(pm.Replicas, self) {
				continue
			}
			replicas++
			fds += replicaDescriptors(countSegments(partitionDir(dataDir, name, pm.Partition)), len(pm.Replicas))
		}
	}
	return replicas, fds
}

// countSegments counts a partition directory's segment logs; a directory
// that cannot be read counts as none.
func countSegments(dir string) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".log") {
			n++
		}
	}
	return n
}

// CheckFileLimit logs the RLIMIT_NOFILE the agent runs under and warns when
// the replicas it holds need more than half of it: the other half is for
// client connections, concurrent reads and new segments. The limit is not
// raised here: since Go 1.19 the syscall package raises the soft limit to
// the hard one (to one below it, to notice a later prlimit(1)) when the
// process starts, so the hard limit, LimitNOFILE in the unit, is what
// counts.
func CheckFileLimit(log hclog.Logger, snap *election.Snapshot, self, dataDir string) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("cannot read the open files limit (RLIMIT_NOFILE)", "error", err)
		return
	}
	replicas, need := descriptorEstimate(snap, self, dataDir)
	log.Info("open files limit", "soft", lim.Cur, "hard", lim.Max, "replicas", replicas, "estimated_need", need)
	if uint64(need) > lim.Cur/2 {
		log.Warn("the open files limit is low for the partitions this agent holds: some may stay offline and new connections wait; raise LimitNOFILE",
			"soft", lim.Cur, "hard", lim.Max, "replicas", replicas, "estimated_need", need, "suggested_limit", 2*need)
	}
}

// errDescriptorReserve is the reason a partition is not opened: opening it
// would eat into the descriptors kept for connections.
var errDescriptorReserve = errors.New("agent: too few free descriptors to open the partition's log")

// The descriptor reserve is what partition opens leave free for everything
// else: client, peer and Consul connections (losing Consul costs every
// leadership), reads, new segments and checkpoints. Opening partitions
// until open(2) fails with EMFILE would leave none, and a partition that
// keeps retrying would take every descriptor that comes free.
const (
	minDescriptorReserve = 32
	maxDescriptorReserve = 1024
)

// descriptorReserve is a tenth of the limit, within [32, 1024].
func descriptorReserve(limit int) int {
	return min(max(limit/10, minDescriptorReserve), maxDescriptorReserve)
}

// fdBudget is how many descriptors partition opens may still take. The
// zero value knows no limit and lets every open try.
type fdBudget struct {
	known                  bool
	left                   int
	limit, inUse, reserved int
}

// measureFDBudget reads the limit and the descriptors in use now (Linux:
// /proc/self/fd); elsewhere, or if either is unknown, opens are not held
// back.
func measureFDBudget() fdBudget {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur > math.MaxInt32 {
		return fdBudget{}
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fdBudget{}
	}
	return newFDBudget(int(lim.Cur), len(entries)-1) // less the listing's own descriptor
}

func newFDBudget(limit, inUse int) fdBudget {
	reserved := descriptorReserve(limit)
	return fdBudget{known: true, left: limit - inUse - reserved, limit: limit, inUse: inUse, reserved: reserved}
}

// take counts need descriptors against the budget, or says why they are
// not there.
func (b *fdBudget) take(need int) error {
	if !b.known {
		return nil
	}
	if b.left < need {
		return fmt.Errorf("%w: it needs about %d, %d of the limit of %d are in use and %d are kept for connections; raise LimitNOFILE",
			errDescriptorReserve, need, b.inUse, b.limit, b.reserved)
	}
	b.left -= need
	return nil
}
