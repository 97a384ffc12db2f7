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
	"github.com/logagent/logagent/segstore"
)

// What the start-up check of RLIMIT_NOFILE and the open budget count
// (docs/operations.md, "Open files"). A replica's files, the .log and the
// .index of each of its segments and its pooled read descriptors, are
// opened and closed by the agent's segstore.FileCache, whose bound
// (FileCacheBound) all replicas share: at most that many are open while
// none is in use. Outside the bound, a replica has a read descriptor in
// use while a Region of it is sent. Replication connections are per peer
// agent, not per replica (docs/design.md §7.9): a fetch session to each
// agent this one follows partitions on and one from each agent following
// partitions here, and a few pooled connections of forwarded produce
// requests and other peer calls, fdsPerPeer in all.
//
// On top of the replicas, the agent itself holds its listeners, its Consul
// connections, the data directory's lock, the runtime's poller and its
// client connections.
const (
	fdsPerSegment      = 2
	fdsPerReplicaReads = 1
	fdsAgentBase       = 64
	fdsPerPeer         = 6
)

// FileCacheBound's share of the limit, and its least value.
const (
	minFileCache     = 16
	fileCacheDivisor = 4
)

// FileCacheBound is the bound of the agent's file cache for the soft
// RLIMIT_NOFILE limit: a quarter of it, at least 16. The rest is for
// connections (replication, clients, Consul), files in use beyond the
// bound (Regions being sent) and the descriptor reserve. At
// LimitNOFILE=65536 that is 16,384 segment files: 8,000 partitions written
// at once keep theirs open.
func FileCacheBound(softLimit uint64) int {
	return int(max(min(softLimit, math.MaxInt32)/fileCacheDivisor, minFileCache))
}

// SoftFileLimit is the soft RLIMIT_NOFILE, or ok false if unknown.
func SoftFileLimit() (limit uint64, ok bool) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, false
	}
	return lim.Cur, true
}

// replicaFiles estimates the files of one replica with segments on disk
// (a partition not created yet has one), which the file cache bounds.
func replicaFiles(segments int) int {
	return fdsPerSegment * max(segments, 1)
}

// descriptorEstimate is the agent's estimate for the replicas snap assigns
// to self, counting segments on disk (estimateDescriptors).
func descriptorEstimate(fsys segstore.FS, snap *election.Snapshot, self, dataDir string, cacheBound int) (replicas, fds int) {
	var held []heldReplica
	for _, name := range snap.Topics() {
		tm, _ := snap.Topic(name)
		if tm.Err != nil {
			continue
		}
		for _, pm := range tm.Partitions {
			if slices.Contains(pm.Replicas, self) {
				held = append(held, heldReplica{replicas: pm.Replicas, segments: countSegments(fsys, partitionDir(dataDir, name, pm.Partition))})
			}
		}
	}
	return len(held), estimateDescriptors(self, held, cacheBound)
}

// heldReplica is a replica self holds: its partition's replica set and its
// segments on disk.
type heldReplica struct {
	replicas []string
	segments int
}

// estimateDescriptors is the agent's base, the replicas' files up to the
// file cache's bound, a read descriptor in use for each replica, and the
// connections to each agent that shares a partition with self.
func estimateDescriptors(self string, held []heldReplica, cacheBound int) int {
	files, fds := 0, fdsAgentBase
	peers := map[string]bool{}
	for _, h := range held {
		files += replicaFiles(h.segments)
		fds += fdsPerReplicaReads
		for _, id := range h.replicas {
			if id != self {
				peers[id] = true
			}
		}
	}
	return fds + fdsPerPeer*len(peers) + min(files, cacheBound)
}

// countSegments counts a partition directory's segment logs; a directory
// that cannot be read counts as none.
func countSegments(fsys segstore.FS, dir string) int {
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, name := range names {
		if strings.HasSuffix(name, ".log") {
			n++
		}
	}
	return n
}

// CheckFileLimit logs the RLIMIT_NOFILE the agent runs under and warns when
// the replicas it holds need more than half of it: the other half is for
// client connections and files in use beyond the cache. The limit is not
// raised here: since Go 1.19 the syscall package raises the soft limit to
// the hard one (to one below it, to notice a later prlimit(1)) when the
// process starts, so the hard limit, LimitNOFILE in the unit, is what
// counts.
func CheckFileLimit(log hclog.Logger, fsys segstore.FS, snap *election.Snapshot, self, dataDir string, files *segstore.FileCache) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("cannot read the open files limit (RLIMIT_NOFILE)", "error", err)
		return
	}
	bound := cacheBound(files)
	replicas, need := descriptorEstimate(fsys, snap, self, dataDir, bound)
	log.Info("open files limit", "soft", lim.Cur, "hard", lim.Max, "replicas", replicas, "estimated_need", need, "file_cache", bound)
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
// /proc/self/fd), the file cache's open files among them, and keeps what
// the cache may still open for it; elsewhere, or if either is unknown,
// opens are not held back.
func measureFDBudget(files *segstore.FileCache) fdBudget {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur > math.MaxInt32 {
		return fdBudget{}
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fdBudget{}
	}
	// Less the listing's own descriptor.
	headroom := 0
	if files != nil {
		headroom = max(files.Max()-files.Open(), 0)
	}
	return newFDBudget(int(lim.Cur), len(entries)-1, headroom)
}

// cacheBound is the bound of files, or segstore's default for the logs
// that then have a cache each (tests).
func cacheBound(files *segstore.FileCache) int {
	if files == nil {
		return segstore.DefaultMaxOpenFiles
	}
	return files.Max()
}

func newFDBudget(limit, inUse, cacheHeadroom int) fdBudget {
	reserved := descriptorReserve(limit)
	return fdBudget{known: true, left: limit - inUse - reserved - cacheHeadroom, limit: limit, inUse: inUse + cacheHeadroom, reserved: reserved}
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
