package segstore

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"syscall"
)

// Index file (<base>.index): a sparse map from offsets to positions in the
// segment's .log file, 8 big-endian bytes per entry:
//
//	0               4               8
//	+---------------+---------------+
//	| relative off  | position      |  entry 0
//	+---------------+---------------+
//	| relative off  | position      |  entry 1
//	+---------------+---------------+
//	|       0       |       0       |  preallocated space (active index only)
//	+---------------+---------------+
//
//	relative off  u32  base offset of the batch minus the segment's base offset
//	position      u32  byte position of that batch's header in the .log file
//
// The batch at position p > 0 gets an entry when p is at least
// IndexIntervalBytes past the previous entry's position (the segment start
// counts as an entry at 0). The index is thus a pure function of the log:
// recovery rebuilds it by scanning and tests can check it exactly. Entries
// strictly increase in both fields and never have position 0, so the first
// entry that does not increase ends the index.
//
// An active index is preallocated to IndexBytes (sparse) and mmap'd
// read-write without read-ahead; the appender reserves disk blocks a chunk
// ahead of the entries (a hole written through the mapping on a full disk
// would raise SIGBUS), writes an entry and then publishes the new count, so
// readers never see a half-written entry. Sealing (roll, close) trims the file to exactly
// 8 * entries and maps it read-only.
const (
	indexEntrySize = 8
	// warmIndexBytes is the tail of the index that lookups search first:
	// most reads are near the end of the log, and a binary search that starts
	// in the middle of a large index touches cold pages (Kafka does the same).
	warmIndexBytes = 8192
)

type indexEntry struct {
	rel uint32
	pos uint32
}

type index struct {
	path string
	file *fileHandle
	data []byte // the mapping; nil when nothing is mapped
	n    atomic.Int64
	// reserved is how far the active index's file has disk blocks (see
	// reserve); the appender's.
	reserved int64
}

// reserveChunk is how much of an active index reserve allocates at a time:
// 8192 entries, one fallocate(2) per 32 MiB of log at the default index
// interval.
const reserveChunk = 64 << 10

func newIndex(l *Log, path string) *index {
	return &index{path: path, file: newFileHandle(l, path, osCreateRW)}
}

func (ix *index) entries() int { return int(ix.n.Load()) }

func (ix *index) entry(i int) indexEntry {
	b := ix.data[i*indexEntrySize:]
	return indexEntry{rel: binary.BigEndian.Uint32(b), pos: binary.BigEndian.Uint32(b[4:])}
}

// lastPos is the position of the last entry, or 0 for an empty index.
func (ix *index) lastPos() int64 {
	n := ix.entries()
	if n == 0 {
		return 0
	}
	return int64(ix.entry(n - 1).pos)
}

// floorByOffset returns the last entry whose relative offset is at most rel,
// or the segment start (0, 0).
func (ix *index) floorByOffset(rel uint32) indexEntry {
	i := ix.search(rel, false)
	if i < 0 {
		return indexEntry{}
	}
	return ix.entry(i)
}

// floorByPosition returns the last entry whose position is at most pos, or
// the segment start (0, 0).
func (ix *index) floorByPosition(pos uint32) indexEntry {
	i := ix.search(pos, true)
	if i < 0 {
		return indexEntry{}
	}
	return ix.entry(i)
}

// search returns the largest i with key(entry(i)) <= target, or -1. It looks
// at the warm tail first.
func (ix *index) search(target uint32, byPosition bool) int {
	key := func(i int) uint32 {
		e := ix.entry(i)
		if byPosition {
			return e.pos
		}
		return e.rel
	}
	n := ix.entries()
	lo, hi := 0, n
	if warm := warmIndexBytes / indexEntrySize; n > warm {
		if key(n-warm) <= target {
			lo = n - warm
		} else {
			hi = n - warm
		}
	}
	// Invariant: key(i) <= target for i < lo; key(i) > target for i >= hi.
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if key(mid) <= target {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo - 1
}

// append adds an entry; the appender rolls the segment before its index
// could run out of room (see the index check in log.go), so there is always space.
func (ix *index) append(e indexEntry) {
	n := ix.entries()
	b := ix.data[n*indexEntrySize:]
	binary.BigEndian.PutUint32(b, e.rel)
	binary.BigEndian.PutUint32(b[4:], e.pos)
	ix.n.Store(int64(n + 1))
}

// truncateAtPosition removes the entries at or after pos. The index must be
// mapped writable and readers excluded. The file is pinned while the
// mapping is written, so the cache syncs it before it closes it.
func (ix *index) truncateAtPosition(pos int64) error {
	if _, err := ix.file.pin(); err != nil {
		return err
	}
	defer ix.file.unpin(true)
	n := ix.entries()
	i := n
	for i > 0 && int64(ix.entry(i-1).pos) >= pos {
		i--
	}
	clear(ix.data[i*indexEntrySize : n*indexEntrySize])
	ix.n.Store(int64(i))
	return nil
}

// activate maps the index read-write with room for capacity bytes. The file
// is first trimmed to its entries so the preallocated space reads as zeros.
func (ix *index) activate(capacity int) error {
	if err := ix.unmap(); err != nil {
		return err
	}
	used := ix.entries() * indexEntrySize
	size := max(capacity, used+indexEntrySize)
	if err := ix.file.Truncate(int64(used)); err != nil {
		return fmt.Errorf("segstore: trim index %s: %w", ix.path, err)
	}
	if err := ix.file.Truncate(int64(size)); err != nil {
		return fmt.Errorf("segstore: preallocate index %s: %w", ix.path, err)
	}
	// The file is sparse past its entries: writing a hole through the
	// mapping on a full file system would fault (SIGBUS) and kill the
	// process. reserve allocates ahead of the entries instead.
	ix.reserved = int64(used)
	return ix.mapFile(size, true)
}

// reserve makes sure the file has disk blocks for n entries, allocating a
// chunk ahead when they would pass what is reserved, so that append never
// writes through the mapping into a hole. Out of space, the error matches
// ENOSPC and nothing changed.
func (ix *index) reserve(n int) error {
	need := min(int64(n)*indexEntrySize, int64(len(ix.data)))
	if need <= ix.reserved {
		return nil
	}
	end := min(max(need, ix.reserved+reserveChunk), int64(len(ix.data)))
	err := ix.file.Allocate(ix.reserved, end-ix.reserved)
	if err != nil && end > need && isNoSpace(err) {
		// A nearly full disk may still hold what this append needs.
		end = need
		err = ix.file.Allocate(ix.reserved, end-ix.reserved)
	}
	if err != nil {
		return fmt.Errorf("segstore: reserve index %s: %w", ix.path, err)
	}
	ix.reserved = end
	return nil
}

// seal trims the file to its entries and maps it read-only.
func (ix *index) seal() error {
	if err := ix.unmap(); err != nil {
		return err
	}
	used := ix.entries() * indexEntrySize
	if err := ix.file.Truncate(int64(used)); err != nil {
		return fmt.Errorf("segstore: trim index %s: %w", ix.path, err)
	}
	return ix.mapFile(used, false)
}

// mapExisting maps the file as it is, read-only, publishes and returns how
// many leading entries are well formed (strictly increasing, positions in
// (0, below)), and returns how many entries the file holds.
func (ix *index) mapExisting(below int64) (valid, total int, err error) {
	size, err := ix.file.Size()
	if err != nil {
		return 0, 0, fmt.Errorf("segstore: stat index %s: %w", ix.path, err)
	}
	size -= size % indexEntrySize
	if err := ix.mapFile(int(size), false); err != nil {
		return 0, 0, err
	}
	total = int(size / indexEntrySize)
	var prev indexEntry
	for valid < total {
		e := ix.entry(valid)
		if e.pos == 0 || int64(e.pos) >= below || (valid > 0 && (e.rel <= prev.rel || e.pos <= prev.pos)) {
			break
		}
		prev = e
		valid++
	}
	ix.n.Store(int64(valid))
	return valid, total, nil
}

// replace writes entries as the whole file with plain writes and maps the
// result read-only. Recovery uses it, so the file holds nothing stale.
func (ix *index) replace(entries []indexEntry) error {
	if err := ix.unmap(); err != nil {
		return err
	}
	buf := make([]byte, len(entries)*indexEntrySize)
	for i, e := range entries {
		binary.BigEndian.PutUint32(buf[i*indexEntrySize:], e.rel)
		binary.BigEndian.PutUint32(buf[i*indexEntrySize+4:], e.pos)
	}
	if len(buf) > 0 {
		if _, err := ix.file.WriteAt(buf, 0); err != nil {
			return fmt.Errorf("segstore: write index %s: %w", ix.path, err)
		}
	}
	if err := ix.file.Truncate(int64(len(buf))); err != nil {
		return fmt.Errorf("segstore: trim index %s: %w", ix.path, err)
	}
	ix.n.Store(int64(len(entries)))
	return ix.mapFile(len(buf), false)
}

func (ix *index) mapFile(size int, writable bool) error {
	if size == 0 {
		return nil
	}
	prot := syscall.PROT_READ
	if writable {
		prot |= syscall.PROT_WRITE
	}
	// The mapping outlives the descriptor: the cache may close the file
	// while its entries stay readable.
	f, err := ix.file.pin()
	if err != nil {
		return err
	}
	defer ix.file.unpin(false)
	data, err := syscall.Mmap(int(f.Fd()), 0, size, prot, syscall.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("segstore: mmap index %s: %w", ix.path, err)
	}
	if writable {
		// No read-ahead on the active index's faults: past its entries
		// the file is a hole, and a fault's read-ahead (the device's
		// read_ahead_kb, 8 MiB on a virtio disk here) filled that much
		// of page cache with zeros at every segment's first index entry:
		// 75 % of the host's CPU while 300 new partitions took their
		// first writes (docs/benchmarks.md).
		if err := syscall.Madvise(data, syscall.MADV_RANDOM); err != nil {
			_ = syscall.Munmap(data)
			return fmt.Errorf("segstore: madvise index %s: %w", ix.path, err)
		}
	}
	ix.data = data
	return nil
}

func (ix *index) unmap() error {
	if ix.data == nil {
		return nil
	}
	data := ix.data
	ix.data = nil
	if err := syscall.Munmap(data); err != nil {
		return fmt.Errorf("segstore: munmap index %s: %w", ix.path, err)
	}
	return nil
}

func (ix *index) sync() error {
	if err := ix.file.Sync(); err != nil {
		return fmt.Errorf("segstore: fsync index %s: %w", ix.path, err)
	}
	return nil
}

func (ix *index) close() error {
	err := ix.unmap()
	ix.file.drop()
	return err
}
