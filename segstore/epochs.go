package segstore

import (
	"slices"
	"sync"
	"sync/atomic"
)

// EpochEntry says that the leader of epoch Epoch wrote the log from
// StartOffset on (until the next entry's StartOffset).
type EpochEntry struct {
	Epoch       int32
	StartOffset int64
}

// UndefinedEpoch and UndefinedOffset are what EndOffsetForEpoch answers when
// it cannot place the epoch (Kafka's UNDEFINED_EPOCH and
// UNDEFINED_EPOCH_OFFSET).
const (
	UndefinedEpoch  int32 = -1
	UndefinedOffset int64 = -1
)

// epochCache is Kafka's leader epoch cache (KIP-101): entries strictly
// increasing in both epoch and start offset. It is plain data; the log
// decides when to persist it (writes are lazy because recovery rebuilds the
// entries above the recovery point from the batches themselves).
type epochCache struct {
	mu      sync.RWMutex
	entries []EpochEntry
	version uint64 // bumped on every change
	saved   uint64 // the version last written to disk
	// latestEpoch mirrors the last entry's epoch (UndefinedEpoch when
	// empty) so the append path checks it without the lock.
	latestEpoch atomic.Int32
}

// setLatest refreshes latestEpoch after a change. Caller holds mu.
func (c *epochCache) setLatest() {
	c.version++
	if n := len(c.entries); n > 0 {
		c.latestEpoch.Store(c.entries[n-1].Epoch)
		return
	}
	c.latestEpoch.Store(UndefinedEpoch)
}

// latestEpochOrUndefined is the newest epoch, or UndefinedEpoch.
func (c *epochCache) latestEpochOrUndefined() int32 { return c.latestEpoch.Load() }

// assign records that epoch starts at start, with Kafka's rule: nothing to
// do if epoch is already the latest and starts no later; otherwise every
// entry the new one contradicts (epoch or start offset not below it) is
// dropped first, which discards what a truncation left stale.
func (c *epochCache) assign(epoch int32, start int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.entries); n > 0 {
		if latest := c.entries[n-1]; latest.Epoch == epoch && start >= latest.StartOffset {
			return false
		}
	}
	// Both fields increase, so the contradicted entries are a suffix.
	i := len(c.entries)
	for i > 0 && (c.entries[i-1].Epoch >= epoch || c.entries[i-1].StartOffset >= start) {
		i--
	}
	c.entries = append(c.entries[:i], EpochEntry{Epoch: epoch, StartOffset: start})
	c.setLatest()
	return true
}

func (c *epochCache) latest() (EpochEntry, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if len(c.entries) == 0 {
		return EpochEntry{}, false
	}
	return c.entries[len(c.entries)-1], true
}

// endOffsetFor answers a follower's "where does my epoch end on the leader"
// exactly as Kafka's LeaderEpochFileCache.endOffsetFor: for the latest epoch
// the log end offset; otherwise the largest known epoch at most the one
// asked and the start offset of the first epoch above it; for an epoch below
// every entry, that epoch and the first entry's start; for an epoch above
// the latest, or an empty cache, UndefinedEpoch and UndefinedOffset.
func (c *epochCache) endOffsetFor(epoch int32, leo int64) (int32, int64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := len(c.entries)
	if epoch < 0 || n == 0 {
		return UndefinedEpoch, UndefinedOffset
	}
	if c.entries[n-1].Epoch == epoch {
		return epoch, leo
	}
	higher, _ := slices.BinarySearchFunc(c.entries, epoch, func(e EpochEntry, target int32) int {
		if e.Epoch <= target {
			return -1
		}
		return 1
	})
	switch {
	case higher == n:
		return UndefinedEpoch, UndefinedOffset
	case higher == 0:
		return epoch, c.entries[0].StartOffset
	default:
		return c.entries[higher-1].Epoch, c.entries[higher].StartOffset
	}
}

// truncateFromEnd drops the entries starting at or after end.
func (c *epochCache) truncateFromEnd(end int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := len(c.entries)
	for i > 0 && c.entries[i-1].StartOffset >= end {
		i--
	}
	if i == len(c.entries) {
		return false
	}
	c.entries = c.entries[:i]
	c.setLatest()
	return true
}

// truncateFromStart drops the entries wholly below start and moves the one
// covering start to begin there (Kafka's truncateFromStart).
func (c *epochCache) truncateFromStart(start int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := 0
	for i < len(c.entries) && c.entries[i].StartOffset <= start {
		i++
	}
	if i == 0 || (i == 1 && c.entries[0].StartOffset == start) {
		return false
	}
	covering := EpochEntry{Epoch: c.entries[i-1].Epoch, StartOffset: start}
	c.entries = append([]EpochEntry{covering}, c.entries[i:]...)
	c.setLatest()
	return true
}

// reset replaces every entry (recovery, full truncation).
func (c *epochCache) reset(entries []EpochEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries = slices.Clone(entries)
	c.setLatest()
}

// snapshot returns a copy of the entries and the version it reflects.
func (c *epochCache) snapshot() ([]EpochEntry, uint64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return slices.Clone(c.entries), c.version
}

func (c *epochCache) dirty() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.version != c.saved
}

// markSaved records that the snapshot of version was written to disk.
func (c *epochCache) markSaved(version uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.saved = version
}
