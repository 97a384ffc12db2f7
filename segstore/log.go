package segstore

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/record"
)

// Log is one partition's log on disk. See the package documentation.
//
// Locks, always taken in this order:
//   - appendMu: the single writer (appends, roll, truncation, retention's
//     deletions, close). Its holder may read segments without mu.
//   - metaMu: checkpoint files, so a lowered recovery point is never
//     overwritten by an older, higher one.
//   - mu: the segment list and index mappings; readers hold it shared while
//     they look up positions, writers exclusively while they change them.
//   - syncMu: group commit state.
type Log struct {
	fs     FS
	dir    string
	opts   Options
	logger hclog.Logger
	files  *FileCache

	appendMu sync.Mutex
	metaMu   sync.Mutex
	mu       sync.RWMutex

	segments []*segment // guarded by mu (writes also hold appendMu); the last is active
	active   *segment   // appendMu
	// detached are the segments a truncation took out of segments and has
	// not deleted yet: a truncation that fails in between leaves them on
	// disk, where Regions may name their bytes, for Close to hand on
	// (closedSegments). Guarded by mu (writes also hold appendMu).
	detached []closedSegment

	// Published positions, readable without locks.
	leo atomic.Int64
	lso atomic.Int64
	hw  atomic.Int64

	epochs epochCache

	// Group commit, guarded by syncMu.
	syncMu   sync.Mutex
	syncCond *sync.Cond
	syncing  bool
	synced   logPosition
	// syncGen changes on truncation: a sync that started before it must not
	// publish its (now too high) position.
	syncGen uint64

	// Guarded by appendMu: what the next sync must cover besides the active
	// segment's log.
	unsyncedSealed []*segment // each holds a reference
	dirDirty       bool
	// closedSegments are the segments Close released, as their regions
	// may still see them: an Open with this log as Options.Reopen makes
	// its appends roll past the bytes they name (recovery.go, finish).
	// Written by Close.
	closedSegments []closedSegment

	// Guarded by metaMu: the values on disk.
	recoveryPoint  logPosition
	checkpointedHW int64
	// legacyCheckpoints names the checkpoint files Open found in version 0
	// (no checksum: checkpoint.go): the next checkpoint rewrites each in
	// version 1, changed or not. Guarded by metaMu.
	legacyCheckpoints map[string]bool

	// The retention limits ApplyRetention uses: Options.Retention and
	// RetentionBytes until SetRetention changes them.
	retention      atomic.Int64 // a time.Duration
	retentionBytes atomic.Int64

	failure  atomic.Pointer[FailedError]
	closed   atomic.Bool
	dataLoss *DataLossError
	// openScanned is how many log bytes Open validated (for tests and logs).
	openScanned int64
}

// closedSegment is what a closed log's regions may name of one segment's
// file: up to size (the most it published since it last cut), and more if
// cut (a truncation cut what it had published).
type closedSegment struct {
	base int64
	size int64
	cut  bool
}

// releaseSegments gives up the log's references to segs.
func releaseSegments(segs []*segment) {
	for _, s := range segs {
		s.release()
	}
}

func closedSegmentsOf(segs []*segment) []closedSegment {
	out := make([]closedSegment, len(segs))
	for i, s := range segs {
		out[i] = closedSegment{base: s.base, size: s.size.Load(), cut: s.cutFrom}
	}
	return out
}

// usable reports whether the log is closed or failed.
func (l *Log) usable() error {
	if l.closed.Load() {
		return ErrClosed
	}
	if f := l.failure.Load(); f != nil {
		return f
	}
	return nil
}

// fail moves the log to the failed state, which is final, and returns the
// error every later call will see.
func (l *Log) fail(err error) error {
	if isNoSpace(err) && !errors.Is(err, ErrNoSpace) {
		err = fmt.Errorf("%w: %w", ErrNoSpace, err)
	}
	if l.failure.CompareAndSwap(nil, &FailedError{Err: err}) {
		l.logger.Error("log failed; close and reopen it to recover from disk", "error", err)
	}
	return l.failure.Load()
}

// LogEndOffset is the offset the next appended record gets (LEO).
func (l *Log) LogEndOffset() int64 { return l.leo.Load() }

// LogStartOffset is the first offset kept.
func (l *Log) LogStartOffset() int64 { return l.lso.Load() }

// HighWatermark is the last value given to SetHighWatermark, clamped by
// truncation and retention.
func (l *Log) HighWatermark() int64 { return l.hw.Load() }

// DataLoss reports what Open cut below the recovery point when
// Options.RepairDataLoss was set, or nil.
func (l *Log) DataLoss() *DataLossError { return l.dataLoss }

// SyncedOffset is the offset below which every batch is known durable.
func (l *Log) SyncedOffset() int64 {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	return l.synced.offset
}

func (l *Log) syncedPosition() logPosition {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	return l.synced
}

// SetHighWatermark records the high watermark; Checkpoint persists it.
func (l *Log) SetHighWatermark(hw int64) error {
	if err := l.usable(); err != nil {
		return err
	}
	if lso, leo := l.lso.Load(), l.leo.Load(); hw < lso || hw > leo {
		return fmt.Errorf("%w: high watermark %d outside [%d, %d]", ErrInvalidArgument, hw, lso, leo)
	}
	l.hw.Store(hw)
	return nil
}

func (l *Log) clampHW(lo, hi int64) {
	for {
		old := l.hw.Load()
		v := min(max(old, lo), hi)
		if v == old || l.hw.CompareAndSwap(old, v) {
			return
		}
	}
}

// LatestEpoch returns the newest entry of the epoch cache.
func (l *Log) LatestEpoch() (EpochEntry, bool) { return l.epochs.latest() }

// EpochEntries returns a copy of the epoch cache.
func (l *Log) EpochEntries() []EpochEntry {
	entries, _ := l.epochs.snapshot()
	return entries
}

// EndOffsetForEpoch answers a follower's epoch query with Kafka's semantics:
// the largest epoch at most epoch that this log knows and the offset where
// it ends (the next epoch's start, or the LEO for the latest epoch), or
// UndefinedEpoch and UndefinedOffset.
func (l *Log) EndOffsetForEpoch(epoch int32) (int32, int64) {
	return l.epochs.endOffsetFor(epoch, l.leo.Load())
}

// AssignEpoch records that a new leader epoch starts at startOffset, which
// must be the log end offset: a new leader calls it before its first
// append, so EndOffsetForEpoch answers for its epoch at once.
func (l *Log) AssignEpoch(epoch int32, startOffset int64) error {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	if leo := l.leo.Load(); startOffset != leo {
		return fmt.Errorf("%w: epoch %d must start at the log end offset %d, not %d", ErrInvalidArgument, epoch, leo, startOffset)
	}
	if latest, ok := l.epochs.latest(); epoch < 0 || (ok && epoch < latest.Epoch) {
		return fmt.Errorf("%w: epoch %d, latest is %d", ErrStaleEpoch, epoch, latest.Epoch)
	}
	l.epochs.assign(epoch, startOffset)
	return nil
}

// AppendLeader appends one batch as the leader of epoch: it verifies the
// batch, which must be as a producer sends it (record.Header.CheckDense),
// assigns its offsets from the log end offset and stamps the epoch, both
// in place in batch. A new epoch starts a new epoch cache entry.
func (l *Log) AppendLeader(batch []byte, epoch int32) (base, last int64, err error) {
	h, err := record.Verify(batch, l.opts.MaxBatchBytes)
	if err == nil {
		err = h.CheckDense()
	}
	if err != nil {
		return 0, 0, fmt.Errorf("segstore: append: %w", err)
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if err := l.usable(); err != nil {
		return 0, 0, err
	}
	if latest := l.epochs.latestEpochOrUndefined(); epoch < 0 || epoch < latest {
		return 0, 0, fmt.Errorf("%w: append with epoch %d, latest is %d", ErrStaleEpoch, epoch, latest)
	}
	base = l.leo.Load()
	record.SetBaseOffset(batch, base)
	record.SetLeaderEpoch(batch, epoch)
	var one [1]batchInfo
	one[0] = infoOf(h, 0)
	if err := l.appendBatches(batch, one[:]); err != nil {
		return 0, 0, err
	}
	return base, one[0].next - 1, nil
}

// AppendFollower appends a leader's batches verbatim: one or more whole
// batches back to back. Each is verified, must start at the log end offset
// (contiguity), may not go back in epoch, and may not come from an epoch
// above followedEpoch, the epoch of the leader being followed (a leader
// that stepped down can still be sending bytes it wrote later as a
// follower of a newer one); the epoch cache follows the batches' epochs.
// Nothing is written unless every batch passes.
func (l *Log) AppendFollower(batches []byte, followedEpoch int32) error {
	var stack [16]batchInfo
	infos := stack[:0]
	for pos := 0; pos < len(batches); {
		batch, _, err := record.NextBatch(batches[pos:], l.opts.MaxBatchBytes)
		if err != nil {
			return fmt.Errorf("segstore: append: batch at byte %d: %w", pos, err)
		}
		infos = append(infos, infoOf(record.Header(batch), 0))
		pos += len(batch)
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	next := l.leo.Load()
	latest, haveEpoch := l.epochs.latest()
	for _, info := range infos {
		if info.base != next {
			return fmt.Errorf("%w: batch base offset %d, log end offset %d", ErrNotContiguous, info.base, next)
		}
		if info.epoch < 0 || (haveEpoch && info.epoch < latest.Epoch) {
			return fmt.Errorf("%w: batch at %d has epoch %d, latest is %d", ErrStaleEpoch, info.base, info.epoch, latest.Epoch)
		}
		if info.epoch > followedEpoch {
			return fmt.Errorf("%w: batch at %d has epoch %d, following epoch %d", ErrEpochAhead, info.base, info.epoch, followedEpoch)
		}
		latest, haveEpoch = EpochEntry{Epoch: info.epoch}, true
		next = info.next
	}
	return l.appendBatches(batches, infos)
}

// appendBatches writes batches (already checked, offsets assigned), rolling
// segments as needed; infos describes them in order. One write per run of
// batches that land in the same segment.
//
// Out of space before anything was published, it returns an ErrNoSpace
// error and leaves the log as it was, epoch cache included. Once a run is
// published, a later refusal fails the log instead: the caller could not
// tell which of its batches are in.
func (l *Log) appendBatches(buf []byte, infos []batchInfo) error {
	var epochsBefore []EpochEntry
	epochsChanged := false
	for _, info := range infos {
		if info.epoch > l.epochs.latestEpochOrUndefined() {
			if !epochsChanged {
				epochsBefore, _ = l.epochs.snapshot()
				epochsChanged = true
			}
			l.epochs.assign(info.epoch, info.base)
		}
	}
	before := l.leo.Load()
	err := l.writeBatches(buf, infos)
	// Any refusal (out of space, a descriptor that cannot be opened) after
	// a run was published fails the log: the caller cannot tell which of
	// its batches are in. Before that, nothing was written.
	if err != nil && l.failure.Load() == nil {
		if l.leo.Load() != before {
			return l.fail(err)
		}
		if epochsChanged {
			l.epochs.reset(epochsBefore)
		}
	}
	return err
}

func (l *Log) writeBatches(buf []byte, infos []batchInfo) error {
	var now time.Time
	if l.opts.SegmentAge > 0 {
		now = l.opts.Now()
	}
	seg := l.active
	runStart, runLen, runFirst := 0, int64(0), 0
	pos := seg.size.Load()
	lastIndexed := seg.lastIndexedPos
	newEntries := 0
	for i, info := range infos {
		needEntry := pos > 0 && pos-lastIndexed >= int64(l.opts.IndexIntervalBytes)
		if l.mustRoll(seg, pos, info, needEntry, newEntries, now) {
			if err := l.writeRun(seg, buf[runStart:runStart+int(runLen)], infos[runFirst:i], now); err != nil {
				return err
			}
			if err := l.roll(info.base); err != nil {
				return err
			}
			seg = l.active
			runStart, runLen, runFirst = runStart+int(runLen), 0, i
			pos, lastIndexed, newEntries, needEntry = 0, 0, 0, false
		}
		if needEntry {
			lastIndexed = pos
			newEntries++
		}
		pos += info.size
		runLen += info.size
	}
	return l.writeRun(seg, buf[runStart:runStart+int(runLen)], infos[runFirst:], now)
}

// mustRoll decides whether the batch info, which would go at pos, needs a
// new segment. An empty segment takes any batch.
func (l *Log) mustRoll(seg *segment, pos int64, info batchInfo, needEntry bool, newEntries int, now time.Time) bool {
	if pos == 0 {
		return false
	}
	switch {
	case seg.cutFrom:
		return true // a truncation freed what is at pos: see truncate
	case pos+info.size > l.opts.SegmentBytes:
		return true
	case info.next-seg.base > math.MaxUint32:
		return true // relative offsets are u32
	case needEntry && (seg.index.entries()+newEntries+1)*indexEntrySize > len(seg.index.data):
		return true
	case l.opts.SegmentAge > 0 && !seg.firstAppendAt.IsZero() && now.Sub(seg.firstAppendAt) >= l.opts.SegmentAge:
		// A zero time is a segment whose first batch this very append is
		// placing (writeRun sets it): it is new, not old.
		return true
	}
	return false
}

// writeRun writes batches into seg at its end, adds their index entries and
// publishes them to readers.
func (l *Log) writeRun(seg *segment, buf []byte, infos []batchInfo, now time.Time) error {
	if len(infos) == 0 {
		return nil
	}
	start := seg.size.Load()
	// Both files stay pinned for the run: a descriptor that cannot be
	// opened now (EMFILE) refuses the append before anything is written,
	// and the index file is open while its mapping is written, so the
	// cache fsyncs it before it closes it.
	logFile, err := seg.log.pin()
	if err != nil {
		return fmt.Errorf("segstore: append: %w", err)
	}
	defer seg.log.unpin(true)
	if _, err := seg.index.file.pin(); err != nil {
		return fmt.Errorf("segstore: append: %w", err)
	}
	indexWrote := false
	defer func() { seg.index.file.unpin(indexWrote) }()
	// At most one index entry per batch; reserved before anything is
	// written, so a refusal leaves nothing to undo.
	if err := seg.index.reserve(seg.index.entries() + len(infos)); err != nil {
		if isNoSpace(err) {
			return fmt.Errorf("%w: %w", ErrNoSpace, err)
		}
		return l.fail(err)
	}
	if _, err := logFile.WriteAt(buf, start); err != nil {
		err = fmt.Errorf("segstore: write %s: %w", seg.logPath, err)
		if !isNoSpace(err) {
			return l.fail(err)
		}
		// Out of space is not an I/O error: the file holds what it held,
		// plus perhaps a part of this write, which must never be read or
		// recovered as if it were whole. Cut it off; the log stays usable.
		if terr := logFile.Truncate(start); terr != nil {
			return l.fail(fmt.Errorf("segstore: cut a write refused for space: %w (after %w)", terr, err))
		}
		return fmt.Errorf("%w: %w", ErrNoSpace, err)
	}
	if start == 0 {
		seg.firstAppendAt = now
	}
	pos := start
	interval := int64(l.opts.IndexIntervalBytes)
	for _, info := range infos {
		if pos > 0 && pos-seg.lastIndexedPos >= interval {
			indexWrote = true
			seg.index.append(indexEntry{rel: uint32(info.base - seg.base), pos: uint32(pos)})
			seg.lastIndexedPos = pos
		}
		seg.noteTimestamp(info.maxTimestamp)
		pos += info.size
	}
	next := infos[len(infos)-1].next
	seg.next.Store(next)
	seg.size.Store(pos)
	l.leo.Store(next)
	return nil
}

// roll seals the active segment and starts a new one at base.
func (l *Log) roll(base int64) error {
	old := l.active
	seg, err := createSegment(l, base, l.opts.IndexBytes)
	if err != nil {
		if !isNoSpace(err) {
			return l.fail(err)
		}
		// Nothing refers to the new files yet: remove what was created, so
		// a later roll can create them again.
		for _, suffix := range []string{logSuffix, indexSuffix} {
			if rerr := l.fs.Remove(filepath.Join(l.dir, segmentFileName(base, suffix))); rerr != nil && !isNotExist(rerr) {
				return l.fail(fmt.Errorf("segstore: remove a segment refused for space: %w (after %w)", rerr, err))
			}
		}
		return fmt.Errorf("%w: %w", ErrNoSpace, err)
	}
	l.mu.Lock()
	err = old.index.seal()
	l.segments = append(l.segments, seg)
	l.active = seg
	l.mu.Unlock()
	old.acquire()
	l.unsyncedSealed = append(l.unsyncedSealed, old)
	l.dirDirty = true
	if err != nil {
		return l.fail(err)
	}
	l.logger.Debug("rolled segment", "base", base, "previous_bytes", old.size.Load())
	return nil
}

// Sync makes every batch appended before the call durable and returns the
// synced offset. Concurrent callers share fsyncs: a caller that arrives
// while one is in flight waits for the next, which covers its batches. An
// fsync error fails the log for good; the fsync is never retried.
func (l *Log) Sync() (int64, error) {
	if err := l.usable(); err != nil {
		return 0, err
	}
	target := l.leo.Load()
	l.syncMu.Lock()
	gen := l.syncGen
	for {
		if err := l.usable(); err != nil {
			l.syncMu.Unlock()
			return 0, err
		}
		if l.syncGen != gen || l.synced.offset >= target {
			// Reached, or what the caller appended was truncated away.
			s := l.synced.offset
			l.syncMu.Unlock()
			return s, nil
		}
		if !l.syncing {
			break
		}
		l.syncCond.Wait()
	}
	l.syncing = true
	l.syncMu.Unlock()

	tail, snapGen, err := l.syncOnce()
	if err == nil {
		// The log failed meanwhile, by a path of its own (a file closed
		// with a failed fsync, say): what this sync covered is not known.
		err = l.usable()
	}

	l.syncMu.Lock()
	l.syncing = false
	if err == nil && snapGen == l.syncGen && tail.offset > l.synced.offset {
		l.synced = tail
	}
	s := l.synced.offset
	l.syncCond.Broadcast()
	l.syncMu.Unlock()
	if err != nil {
		return 0, err
	}
	return s, nil
}

// syncOnce fsyncs what was appended up to now: segments sealed since the
// last sync (log and index), the active segment's log, and the directory if
// files were created. The active index is not synced here: recovery rebuilds
// it above the recovery point, and Checkpoint syncs it before moving that.
func (l *Log) syncOnce() (logPosition, uint64, error) {
	l.appendMu.Lock()
	if err := l.usable(); err != nil {
		l.appendMu.Unlock()
		return logPosition{}, 0, err
	}
	active := l.active
	active.acquire()
	tail := logPosition{offset: l.leo.Load(), segmentBase: active.base, pos: active.size.Load()}
	sealed := l.unsyncedSealed
	l.unsyncedSealed = nil
	dirDirty := l.dirDirty
	l.dirDirty = false
	l.syncMu.Lock()
	gen := l.syncGen
	l.syncMu.Unlock()
	l.appendMu.Unlock()

	defer func() {
		active.release()
		for _, s := range sealed {
			s.release()
		}
	}()
	if l.opts.OnSync == nil {
		return tail, gen, l.syncFiles(sealed, active, dirDirty)
	}
	start := l.opts.Now()
	err := l.syncFiles(sealed, active, dirDirty)
	l.opts.OnSync(l.opts.Now().Sub(start))
	return tail, gen, err
}

// syncFiles fsyncs the sealed segments (log and index), the active
// segment's log, and the directory when dirDirty. An error fails the log.
func (l *Log) syncFiles(sealed []*segment, active *segment, dirDirty bool) error {
	for _, s := range sealed {
		if err := s.syncLog(); err != nil {
			return l.fail(err)
		}
		if err := s.index.sync(); err != nil {
			return l.fail(err)
		}
	}
	if err := active.syncLog(); err != nil {
		return l.fail(err)
	}
	if dirDirty {
		if err := l.fs.SyncDir(l.dir); err != nil {
			return l.fail(fmt.Errorf("segstore: fsync directory: %w", err))
		}
	}
	return nil
}

// segmentFor returns the segment holding offset. Caller holds mu or appendMu.
func (l *Log) segmentFor(offset int64) (int, *segment) {
	segs := l.segments
	if last := len(segs) - 1; segs[last].base <= offset {
		return last, segs[last]
	}
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base > offset }) - 1
	if i < 0 {
		i = 0
	}
	return i, segs[i]
}

// findBatch returns the batch of seg that holds target, looking at the
// published bytes below size only; found is false when target is past them.
// Caller holds mu (shared) or appendMu, and a reference on seg.
func (l *Log) findBatch(seg *segment, target, size int64) (batchInfo, bool, error) {
	e := seg.index.floorByOffset(uint32(target - seg.base))
	info, found, err := l.walkTo(seg, int64(e.pos), seg.base+int64(e.rel), target, size)
	if errors.Is(err, ErrCorrupt) && e.pos > 0 {
		// The index entry does not point where it should: fall back to the
		// segment start rather than fail a read the log itself can serve.
		l.logger.Warn("index entry does not match the log; scanning the segment", "segment", seg.base, "position", e.pos, "error", err)
		return l.walkTo(seg, 0, seg.base, target, size)
	}
	return info, found, err
}

func (l *Log) walkTo(seg *segment, pos, expect, target, size int64) (batchInfo, bool, error) {
	bufp := lookupBufs.Get().(*[]byte)
	defer lookupBufs.Put(bufp)
	w := walker{f: seg.log, pos: pos, end: size, maxBatch: l.opts.MaxBatchBytes, buf: *bufp, bufPos: -1}
	for first := true; ; first = false {
		info, err := w.next()
		if err == io.EOF {
			return batchInfo{}, false, nil
		}
		if err == nil && first && info.base != expect {
			err = fmt.Errorf("%w: batch base offset %d, index says %d", record.ErrCorrupt, info.base, expect)
		}
		switch {
		case errors.Is(err, record.ErrCorrupt), errors.Is(err, record.ErrShort):
			return batchInfo{}, false, &CorruptError{Path: seg.logPath, Position: w.pos, Err: err}
		case err != nil:
			// The file could not be read (or opened: the cache closes
			// idle descriptors): not damage, and no reason to walk again.
			return batchInfo{}, false, fmt.Errorf("segstore: read %s: %w", seg.logPath, err)
		}
		if info.next > target {
			return info, true, nil
		}
	}
}

// lastBoundary returns the end of the last batch that ends at or before
// bound, and not before the end of first (a read returns at least one batch).
// It starts from the index entry below bound when the batch there is the one
// the entry names, else from first: an entry whose position was damaged
// (recovery checks only a segment's last entry below the recovery point)
// failed every read through it, and one that landed on a batch inside a
// record's value could have ended a region inside a batch.
func (l *Log) lastBoundary(seg *segment, first batchInfo, bound, size int64) (int64, error) {
	if e := seg.index.floorByPosition(uint32(bound)); int64(e.pos) > first.pos {
		end, err := l.boundaryFrom(seg, int64(e.pos), seg.base+int64(e.rel), first.pos+first.size, bound, size)
		if err == nil {
			return end, nil
		}
		l.logger.Warn("index entry does not match the log; scanning from the read's first batch", "segment", seg.base, "position", e.pos, "error", err)
	}
	return l.boundaryFrom(seg, first.pos, first.base, first.pos+first.size, bound, size)
}

// boundaryFrom is lastBoundary's walk from pos, where the batch based at
// expect must start; end is the least it returns.
func (l *Log) boundaryFrom(seg *segment, pos, expect, end, bound, size int64) (int64, error) {
	bufp := lookupBufs.Get().(*[]byte)
	defer lookupBufs.Put(bufp)
	w := walker{f: seg.log, pos: pos, end: size, maxBatch: l.opts.MaxBatchBytes, buf: *bufp, bufPos: -1}
	for first := true; ; first = false {
		info, err := w.next()
		if err == io.EOF {
			return end, nil
		}
		if err == nil && first && info.base != expect {
			err = fmt.Errorf("batch base offset %d, index says %d", info.base, expect)
		}
		if err != nil {
			return 0, &CorruptError{Path: seg.logPath, Position: w.pos, Err: err}
		}
		if info.pos+info.size > bound {
			return max(end, info.pos), nil
		}
		end = info.pos + info.size
	}
}

// locate finds the file region for a read and takes a reference on its
// segment, and a descriptor when withReader, else a pin on its log file.
// seg is nil for an empty read.
func (l *Log) locate(offset, maxBytes, limit int64, withReader bool) (seg *segment, start, end int64, f *os.File, err error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := l.usable(); err != nil {
		return nil, 0, 0, nil, err
	}
	leo := l.leo.Load()
	lso := l.lso.Load()
	if offset < lso || offset > leo {
		return nil, 0, 0, nil, &OffsetOutOfRangeError{Offset: offset, LogStartOffset: lso, LogEndOffset: leo}
	}
	limit = min(limit, leo)
	if offset >= limit {
		return nil, 0, 0, nil, nil
	}
	_, seg = l.segmentFor(offset)
	size := seg.size.Load()
	next := seg.next.Load()
	first, found, err := l.findBatch(seg, offset, size)
	if err != nil || !found {
		return nil, 0, 0, nil, err
	}
	start, end = first.pos, size
	if next > limit {
		b, found, err := l.findBatch(seg, limit, size)
		if err != nil {
			return nil, 0, 0, nil, err
		}
		if found {
			end = b.pos
		}
	}
	if end <= start {
		return nil, 0, 0, nil, nil
	}
	if end-start > maxBytes {
		if end, err = l.lastBoundary(seg, first, start+max(maxBytes, 0), end); err != nil {
			return nil, 0, 0, nil, err
		}
	}
	seg.acquire()
	// Under mu the file is not yet unlinked: deletion takes mu first.
	if withReader {
		f, err = seg.reader()
	} else {
		_, err = seg.log.pin()
	}
	if err != nil {
		seg.release()
		return nil, 0, 0, nil, err
	}
	return seg, start, end, f, nil
}

// Read returns the file region of whole batches that starts with the batch
// holding offset (so it may start before offset) and holds only batches that
// end at or before limit, the caller's high watermark bound. It holds at
// most maxBytes, except that it always holds the first batch if that batch
// is within limit. A region never spans segments. At the log end, or at or
// past limit, the region is empty; outside [LogStartOffset, LogEndOffset]
// the error matches ErrOffsetOutOfRange. The caller must Close the region.
func (l *Log) Read(offset, maxBytes, limit int64) (*Region, error) {
	seg, start, end, f, err := l.locate(offset, maxBytes, limit, true)
	if err != nil {
		return nil, err
	}
	if seg == nil {
		return &Region{}, nil
	}
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		// Not pooled: a descriptor that cannot be positioned serves no
		// region.
		seg.closeReader(f)
		seg.release()
		return nil, fmt.Errorf("segstore: seek %s: %w", seg.logPath, err)
	}
	return &Region{File: f, Pos: start, Len: end - start, seg: seg, left: end - start}, nil
}

// ReadBytes is Read copied into memory, for replication tests and callers
// that cannot use a file region.
func (l *Log) ReadBytes(offset, maxBytes, limit int64) ([]byte, error) {
	seg, start, end, _, err := l.locate(offset, maxBytes, limit, false)
	if err != nil || seg == nil {
		return nil, err
	}
	defer seg.release()
	defer seg.log.unpin(false)
	buf := make([]byte, end-start)
	if n, err := seg.log.ReadAt(buf, start); n < len(buf) {
		return nil, fmt.Errorf("segstore: read %s at %d: %w", seg.logPath, start, err)
	}
	return buf, nil
}

// Truncate removes every batch that holds an offset at or after offset (so
// the log ends at the base of the batch holding offset), used by a follower
// truncating by epoch. Whole segments may be deleted. The epoch cache loses
// its entries from there on, also when offset is the log end offset. An
// offset below the log start offset truncates fully (TruncateFully). The
// truncation is durable when Truncate returns.
//
// Reads bounded by the high watermark are not disturbed: truncation never
// goes below it in a correct replica. A region read above it (up to the
// log end offset) whose bytes are cut reads a short file, an error, never
// the batches appended after the cut: the cut bytes' file is never written
// again (see truncate).
func (l *Log) Truncate(offset int64) error {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	if offset < l.lso.Load() {
		return l.truncateFully(offset)
	}
	return l.truncate(offset)
}

func (l *Log) truncate(offset int64) error {
	if offset >= l.leo.Load() {
		l.epochs.truncateFromEnd(offset)
		return nil
	}
	ti, target := l.segmentFor(offset)
	cut, found, err := l.findBatch(target, offset, target.size.Load())
	if err != nil {
		return l.fail(err)
	}
	cutAt := logPosition{offset: target.next.Load(), segmentBase: target.base, pos: target.size.Load()}
	if found {
		cutAt = logPosition{offset: cut.base, segmentBase: target.base, pos: cut.pos}
	}
	// Bytes cut from a segment file are never written again: an open
	// Region (a follower's fetch read up to the LEO) may still name them,
	// and sendfile would send the new batches under the old region. A cut
	// at a segment's start deletes the segment (its regions keep the
	// unlinked file) and the log goes on at the end of the one before; a
	// cut inside one makes the next append roll (cutFrom); a cut at the
	// first segment's start replaces its files (replaceFirstSegment).
	if cutAt.pos == 0 && ti > 0 {
		ti--
		target = l.segments[ti]
		cutAt = logPosition{offset: target.next.Load(), segmentBase: target.base, pos: target.size.Load()}
	}
	cutInside := cutAt.pos < target.size.Load()
	replace := cutInside && cutAt.pos == 0

	l.metaMu.Lock()
	defer l.metaMu.Unlock()
	// The recovery point must never name bytes that are gone: lower it on
	// disk before cutting.
	if l.recoveryPoint.offset > cutAt.offset {
		if err := writeRecoveryPoint(l.fs, l.dir, cutAt); err != nil {
			// Refused for space, nothing has changed yet.
			return l.failUnlessNoSpace(err)
		}
		l.recoveryPoint = cutAt
	}
	if replace {
		// The new files exist before anything is cut: a full disk
		// refuses the truncation here, with the log as it was, rather
		// than fail it after the cut.
		if err := l.createSegmentFiles(target.base); err != nil {
			return l.failUnlessNoSpace(err)
		}
	}

	removed := slices.Clone(l.segments[ti+1:])
	// The log's references to removed go with deleteSegments, or with a
	// failure before it.
	failBeforeDelete := func(err error) error {
		releaseSegments(removed)
		return l.fail(err)
	}
	l.mu.Lock()
	l.segments = slices.Clip(l.segments[:ti+1])
	l.detached = closedSegmentsOf(removed)
	if target != l.active {
		err = target.index.activate(l.opts.IndexBytes)
	}
	if err == nil {
		err = target.index.truncateAtPosition(cutAt.pos)
	}
	target.next.Store(cutAt.offset)
	target.size.Store(cutAt.pos)
	// Set with the size it no longer publishes, before the file is cut:
	// a truncation that fails after this leaves it for Close to hand on
	// to the reopened log (closedSegments). A replaced segment's mark
	// goes with its old files; one whose replacement failed after the
	// file was emptied in place gets new files from that Open.
	if cutInside {
		target.cutFrom = true
	}
	l.leo.Store(cutAt.offset)
	l.active = target
	l.mu.Unlock()
	if err != nil {
		return failBeforeDelete(err)
	}

	target.lastIndexedPos = target.index.lastPos()
	target.firstAppendAt = l.opts.Now()
	target.maxTimestamp.Store(unknownTimestamp)
	if cutAt.pos == 0 {
		target.maxTimestamp.Store(noTimestamp)
	}
	if err := target.log.Truncate(cutAt.pos); err != nil {
		return failBeforeDelete(fmt.Errorf("segstore: truncate %s: %w", target.logPath, err))
	}
	if err := target.syncLog(); err != nil {
		return failBeforeDelete(err)
	}
	if err := l.deleteSegments(removed); err != nil {
		return err
	}
	l.mu.Lock()
	l.detached = nil
	l.mu.Unlock()
	if replace {
		if err := l.replaceFirstSegment(target); err != nil {
			return err
		}
	}

	l.syncMu.Lock()
	l.syncGen++
	if l.synced.offset > cutAt.offset {
		l.synced = cutAt
	}
	l.syncCond.Broadcast()
	l.syncMu.Unlock()
	l.clampHW(l.lso.Load(), cutAt.offset)
	l.epochs.truncateFromEnd(cutAt.offset)
	l.logger.Info("truncated log", "offset", offset, "log_end_offset", cutAt.offset, "deleted_segments", len(removed))
	return nil
}

// newSegmentPath is where createSegmentFiles puts the file of the segment
// at base with suffix until installSegmentFiles renames it to the
// segment's name. Recovery removes it (a .tmp file).
func (l *Log) newSegmentPath(base int64, suffix string) string {
	return filepath.Join(l.dir, segmentFileName(base, suffix)+tmpSuffix)
}

// createSegmentFiles creates, under temporary names, the empty files of
// the segment at base that a truncation installs (installSegmentFiles)
// once it has cut what it must. Made before anything is cut, they let a
// full disk refuse the truncation with the log as it was, as it refuses a
// roll: out of space, it removes what it created and returns an
// ErrNoSpace error.
func (l *Log) createSegmentFiles(base int64) error {
	for _, suffix := range []string{logSuffix, indexSuffix} {
		f, err := l.fs.OpenFile(l.newSegmentPath(base, suffix), os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o644)
		if err == nil {
			err = f.Close()
		}
		if err == nil {
			continue
		}
		err = fmt.Errorf("segstore: create segment: %w", err)
		if !isNoSpace(err) {
			return err
		}
		return l.dropSegmentFiles(base, fmt.Errorf("%w: %w", ErrNoSpace, err))
	}
	return nil
}

// dropSegmentFiles removes the files createSegmentFiles made for base, when
// err refused what they were for, and returns err, or the failure of the
// removal. A failed log leaves them to recovery.
func (l *Log) dropSegmentFiles(base int64, err error) error {
	if l.failure.Load() != nil {
		return err
	}
	for _, suffix := range []string{logSuffix, indexSuffix} {
		if rerr := l.fs.Remove(l.newSegmentPath(base, suffix)); rerr != nil && !isNotExist(rerr) {
			return l.fail(fmt.Errorf("segstore: remove a segment refused for space: %w (after %w)", rerr, err))
		}
	}
	return err
}

// installSegmentFiles renames the files createSegmentFiles made to the
// names of the segment at base, over any files there (their descriptors
// in use stay valid), and returns the new, empty, active segment. Renaming
// needs no space, so nothing after a truncation's cut is refused for it.
// The directory entries become durable with the next directory fsync.
func (l *Log) installSegmentFiles(base int64) (*segment, error) {
	if err := l.renameSegmentFiles(base); err != nil {
		return nil, err
	}
	seg := newSegment(l, base)
	if err := seg.index.activate(l.opts.IndexBytes); err != nil {
		seg.closeFiles()
		return nil, err
	}
	return seg, nil
}

// renameSegmentFiles renames the files createSegmentFiles made for base
// to the segment's names, over any files there.
func (l *Log) renameSegmentFiles(base int64) error {
	for _, suffix := range []string{indexSuffix, logSuffix} {
		tmp := l.newSegmentPath(base, suffix)
		if err := l.fs.Rename(tmp, strings.TrimSuffix(tmp, tmpSuffix)); err != nil {
			return fmt.Errorf("segstore: install segment %d: %w", base, err)
		}
	}
	return nil
}

// replaceFirstSegment gives the log's only segment, emptied by a truncation
// and durably so, the new files createSegmentFiles made: regions of the old
// ones read their end there, never the batches appended next. Caller holds
// appendMu; readers do not reach the segment meanwhile (the log ends at its
// base).
func (l *Log) replaceFirstSegment(old *segment) error {
	// Its names are about to be the new files': nothing opens them for
	// old again.
	old.forget()
	seg, err := l.installSegmentFiles(old.base)
	if err != nil {
		return l.fail(err)
	}
	l.mu.Lock()
	l.segments[len(l.segments)-1] = seg
	l.active = seg
	l.mu.Unlock()
	old.release()
	if err := l.fs.SyncDir(l.dir); err != nil {
		return l.fail(fmt.Errorf("segstore: fsync directory: %w", err))
	}
	return nil
}

// deleteSegments unlinks segments already taken out of the list, then makes
// that durable. Caller holds appendMu.
func (l *Log) deleteSegments(segs []*segment) error {
	if len(segs) == 0 {
		return nil
	}
	for i, s := range segs {
		err := s.remove(l.fs)
		s.release()
		if err != nil {
			releaseSegments(segs[i+1:])
			return l.fail(err)
		}
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return l.fail(fmt.Errorf("segstore: fsync directory: %w", err))
	}
	return nil
}

// TruncateFully discards the whole log and starts it again, empty, at
// newStart (a follower whose log lies entirely outside the leader's).
// Durable when it returns. Refused for space (ErrNoSpace), the log is
// usable and either as it was or, its new start offset's checkpoint
// refused, emptied at its old start offset: the caller tells them apart by
// the log end offset.
func (l *Log) TruncateFully(newStart int64) error {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	return l.truncateFully(newStart)
}

// truncateFully first creates the new segment's files under temporary
// names, which recovery removes, then empties the log durably at its start
// offset, then moves the start offset and the recovery point there
// (recovery starts a log that holds nothing at or above the checkpointed
// start offset over, empty, at that offset, and trusts no recovery point at
// or below it), and only then replaces the segments. Every crash in between
// recovers to the old log, an empty log at the old start, or the new one.
func (l *Log) truncateFully(newStart int64) error {
	if newStart < 0 {
		return fmt.Errorf("%w: negative log start offset %d", ErrInvalidArgument, newStart)
	}
	lso := l.lso.Load()
	moves := newStart != lso
	if moves {
		// The new start's segment files exist before anything changes:
		// a full disk refuses the truncation here rather than fail the
		// log once its start offset moved on disk.
		if err := l.createSegmentFiles(newStart); err != nil {
			return l.failUnlessNoSpace(err)
		}
	}
	if l.leo.Load() > lso {
		if err := l.truncate(lso); err != nil {
			if moves {
				return l.dropSegmentFiles(newStart, err)
			}
			return err
		}
	}
	l.metaMu.Lock()
	defer l.metaMu.Unlock()
	start := logPosition{offset: newStart, segmentBase: newStart}
	if moves {
		if err := writeOffsetCheckpoint(l.fs, l.dir, logStartOffsetFile, newStart); err != nil {
			// Refused for space, the log is whole (empty at its start)
			// and the checkpoint on disk the old one.
			return l.dropSegmentFiles(newStart, l.failUnlessNoSpace(err))
		}
		if err := writeRecoveryPoint(l.fs, l.dir, start); err != nil {
			return l.fail(err)
		}
		l.recoveryPoint = start
		// The log is one empty segment at lso now, so newStart names no
		// existing file.
		seg, err := l.installSegmentFiles(newStart)
		if err != nil {
			return l.fail(err)
		}
		l.mu.Lock()
		old := l.segments
		l.segments = []*segment{seg}
		l.active = seg
		l.lso.Store(newStart)
		l.leo.Store(newStart)
		l.mu.Unlock()
		// deleteSegments fsyncs the directory, which also makes seg durable.
		if err := l.deleteSegments(old); err != nil {
			return err
		}
	}
	l.syncMu.Lock()
	l.syncGen++
	l.synced = start
	l.syncCond.Broadcast()
	l.syncMu.Unlock()
	l.hw.Store(newStart)
	l.epochs.reset(nil)
	l.logger.Info("truncated log fully", "log_start_offset", newStart)
	return nil
}

// SetRetention replaces the retention limits of Options (a topic's
// settings changed at run time); the next ApplyRetention uses them. Zero
// turns a limit off, as in Options; a negative value counts as zero.
func (l *Log) SetRetention(retention time.Duration, bytes int64) {
	l.retention.Store(int64(max(retention, 0)))
	l.retentionBytes.Store(max(bytes, 0))
}

// HasSealedSegments says the log has a segment besides the active one:
// only those can ApplyRetention or DeleteBefore delete.
func (l *Log) HasSealedSegments() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.segments) > 1
}

// ApplyRetention deletes the oldest segments that break the retention
// limits (Options.Retention and RetentionBytes, or what SetRetention set):
// newest record older than the time limit, or the log larger than the size
// limit. Only whole segments that are not active and lie entirely
// below below (the high watermark) go, oldest first, and the log start
// offset moves to the first segment kept (checkpointed before any file is
// deleted). Readers of a deleted segment keep their regions. It returns the
// number of segments deleted.
//
// A segment whose newest timestamp cannot be learnt (a batch header that
// does not parse: damage in a segment below the recovery point, which Open
// walks only from its last index entry; or its file cannot be opened, read
// or stat'ed) has an unknown age: time retention keeps it, and so every
// segment after it, but size retention deletes it like any other. The
// error (matching ErrCorrupt for a damaged header) is returned with the
// count of segments deleted, at every run until the segment is gone, so
// that it is seen without stopping the rest of retention.
func (l *Log) ApplyRetention(below int64) (int, error) {
	if err := l.usable(); err != nil {
		return 0, err
	}
	retention, retentionBytes := time.Duration(l.retention.Load()), l.retentionBytes.Load()
	if retention == 0 && retentionBytes == 0 {
		return 0, nil
	}
	deadline := int64(math.MinInt64)
	// ageErrs are the segments whose age is unknown: reported, never a
	// reason to stop (see below).
	var ageErrs []error
	if retention > 0 {
		deadline = l.opts.Now().UnixMilli() - retention.Milliseconds()
		// Segments loaded without a scan learn their newest timestamp by a
		// header walk, outside the writer's lock. One whose file cannot be
		// opened for it (out of descriptors, an I/O error) has an unknown
		// age, as one whose walk fails below.
		var candidates []*segment
		candidates, ageErrs = l.expiryCandidates(below)
		for _, s := range candidates {
			err := l.computeMaxTimestamp(s)
			s.log.unpin(false)
			s.release()
			if err != nil {
				// Its newest timestamp stays unknown, so time retention
				// keeps it; size retention does not need it. Returning
				// here stopped both, at every run for ever: one damaged
				// old segment filled the partition's disk.
				//
				// Not its file's mtime instead, as for a segment without
				// timestamps: there the timestamps are known to say
				// nothing, here they are unreadable, and may be later
				// than the last write (a producer's clock ahead, as in
				// TestRetentionAgeOfLoadedSegments), which an mtime would
				// cut short; and an mtime is only as right as the clock
				// and the tools (a restore, touch) that last set it. A
				// guess could delete records that were to be kept, for
				// good; keeping the segment costs only space, which
				// retention_bytes still bounds, and the error makes the
				// damage seen.
				ageErrs = append(ageErrs, ageUnknown(s, err))
			}
		}
	}

	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if err := l.usable(); err != nil {
		return 0, err
	}
	segs := l.segments
	var total int64
	for _, s := range segs {
		total += s.size.Load()
	}
	n := 0
	for ; n < len(segs)-1 && segs[n+1].base <= below; n++ {
		s := segs[n]
		expired := false
		if retention > 0 {
			ts := s.maxTimestamp.Load()
			if ts != unknownTimestamp && ts < 0 {
				// No timestamp at or after 1970 (-1 is a record's "none"):
				// the segment is as old as its last write, its file's
				// mtime, as Kafka's LogSegment.largestTimestamp has it.
				// It was expired at once.
				mt, err := s.log.ModTime()
				if err != nil {
					// Its age unknown, as above: time retention keeps
					// it, size retention goes on.
					ageErrs = append(ageErrs, ageUnknown(s, fmt.Errorf("stat %s: %w", s.logPath, err)))
					ts = unknownTimestamp
				} else {
					ts = mt.UnixMilli()
				}
			}
			// An unknown timestamp (a walk that failed) is not expired.
			expired = ts != unknownTimestamp && ts < deadline
		}
		oversize := retentionBytes > 0 && total-s.size.Load() >= retentionBytes
		if !expired && !oversize {
			break
		}
		total -= s.size.Load()
	}
	deleted, err := l.deleteFrontLocked(segs, n, "retention deleted segments")
	return deleted, errors.Join(append([]error{err}, ageErrs...)...)
}

// DeleteBefore deletes the oldest segments that lie entirely below offset,
// which must be at most the high watermark, and moves the log start offset
// to the first segment kept (Kafka's DeleteRecords, at segment
// granularity): the records below offset are superseded by later ones,
// and the caller no longer needs them. The active segment always stays.
// It returns the number of segments deleted.
func (l *Log) DeleteBefore(offset int64) (int, error) {
	if err := l.usable(); err != nil {
		return 0, err
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if err := l.usable(); err != nil {
		return 0, err
	}
	offset = min(offset, l.hw.Load())
	segs := l.segments
	n := 0
	for n < len(segs)-1 && segs[n+1].base <= offset {
		n++
	}
	return l.deleteFrontLocked(segs, n, "deleted segments below a start offset")
}

// deleteFrontLocked deletes segs[:n] and moves the log start offset to
// segs[n]'s base, checkpointed before any file goes. Called with appendMu
// held.
func (l *Log) deleteFrontLocked(segs []*segment, n int, why string) (int, error) {
	if n == 0 {
		return 0, nil
	}
	newStart := segs[n].base

	l.metaMu.Lock()
	defer l.metaMu.Unlock()
	if err := writeOffsetCheckpoint(l.fs, l.dir, logStartOffsetFile, newStart); err != nil {
		// Refused for space, nothing is deleted: the start offset must be
		// on disk before the segments below it go.
		return 0, l.failUnlessNoSpace(err)
	}
	removed := slices.Clone(segs[:n])
	l.mu.Lock()
	l.segments = slices.Clone(segs[n:])
	l.lso.Store(newStart)
	l.mu.Unlock()
	if err := l.deleteSegments(removed); err != nil {
		return 0, err
	}
	l.clampHW(newStart, l.leo.Load())
	l.epochs.truncateFromStart(newStart)
	l.logger.Info(why, "count", n, "log_start_offset", newStart)
	return n, nil
}

// ageUnknown is why time retention keeps s: its newest timestamp could not
// be learnt.
func ageUnknown(s *segment, err error) error {
	return fmt.Errorf("segstore: segment %d kept by time retention, its age unknown: %w", s.base, err)
}

// expiryCandidates returns, with a reference and a pin on its log file
// each (a deletion may unlink it meanwhile), the oldest non-active segments
// below below whose newest timestamp is unknown, and an error for each of
// them whose file could not be pinned: those are left out, their age still
// unknown. Returning at the first such error stopped size retention too,
// at every run while it lasted: a host out of descriptors, which is also
// one filling up, let the partition's disk grow without bound.
func (l *Log) expiryCandidates(below int64) ([]*segment, []error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []*segment
	var errs []error
	for i := 0; i < len(l.segments)-1 && l.segments[i+1].base <= below; i++ {
		if s := l.segments[i]; s.maxTimestamp.Load() == unknownTimestamp {
			if _, err := s.log.pin(); err != nil {
				errs = append(errs, ageUnknown(s, err))
				continue
			}
			s.acquire()
			out = append(out, s)
		}
	}
	return out, errs
}

// computeMaxTimestamp walks a sealed segment's headers for its newest
// timestamp. The caller holds a reference.
func (l *Log) computeMaxTimestamp(s *segment) error {
	w := walker{f: s.log, end: s.size.Load(), maxBatch: l.opts.MaxBatchBytes, buf: make([]byte, 64<<10), bufPos: -1}
	newest := int64(noTimestamp)
	for {
		info, err := w.next()
		if err == io.EOF {
			s.maxTimestamp.CompareAndSwap(unknownTimestamp, newest)
			return nil
		}
		if err != nil {
			return &CorruptError{Path: s.logPath, Position: w.pos, Err: err}
		}
		newest = max(newest, info.maxTimestamp)
	}
}

// Checkpoint persists the epoch cache, the high watermark and the recovery
// point (the last synced position), in that order, so recovery after a crash
// starts from there. The agent calls it periodically; Close calls it too.
// Out of space it returns an ErrNoSpace error and the log stays usable.
func (l *Log) Checkpoint() error {
	l.metaMu.Lock()
	defer l.metaMu.Unlock()
	// Under metaMu: Close marks the log closed under it, so no checkpoint
	// writes a file after Close returned.
	if err := l.usable(); err != nil {
		return err
	}
	return l.checkpointLocked()
}

// CheckpointPending says Checkpoint has something to write: the synced
// position is past the recovery point, the epoch cache changed, or the high
// watermark moved since the last checkpoint. An idle log has nothing, so
// the agent arms no checkpoint timer for it.
func (l *Log) CheckpointPending() bool {
	if l.usable() != nil {
		return false
	}
	l.metaMu.Lock()
	defer l.metaMu.Unlock()
	return l.syncedPosition().offset > l.recoveryPoint.offset || l.epochs.dirty() || l.hw.Load() != l.checkpointedHW ||
		len(l.legacyCheckpoints) > 0
}

// checkpointLocked keeps the recovery point invariant (see recovery.go):
// before the recovery point moves to a position in a segment, that
// segment's index is fsynced (it holds every entry below the position), and
// the epoch cache is written (it holds every entry that starts below it).
func (l *Log) checkpointLocked() error {
	synced := l.syncedPosition()
	advance := synced.offset > l.recoveryPoint.offset
	if advance {
		l.mu.RLock()
		var seg *segment
		for _, s := range l.segments {
			if s.base == synced.segmentBase {
				seg = s
				seg.acquire()
			}
		}
		l.mu.RUnlock()
		if seg == nil {
			advance = false
		} else {
			err := seg.index.sync()
			seg.release()
			if err != nil {
				return l.fail(err)
			}
		}
	}
	legacy := l.legacyCheckpoints
	if entries, version := l.epochs.snapshot(); l.epochs.dirty() || legacy[epochCheckpointFile] {
		if err := writeEpochCheckpoint(l.fs, l.dir, entries); err != nil {
			return l.failUnlessNoSpace(err)
		}
		l.epochs.markSaved(version)
		delete(legacy, epochCheckpointFile)
	}
	if hw := l.hw.Load(); hw != l.checkpointedHW || legacy[hwCheckpointFile] {
		if err := writeOffsetCheckpoint(l.fs, l.dir, hwCheckpointFile, hw); err != nil {
			return l.failUnlessNoSpace(err)
		}
		l.checkpointedHW = hw
		delete(legacy, hwCheckpointFile)
	}
	if legacy[logStartOffsetFile] {
		// Only the upgrade rewrites it here: the log start offset moves
		// under metaMu, after its own write (deleteFrontLocked,
		// truncateFully).
		if err := writeOffsetCheckpoint(l.fs, l.dir, logStartOffsetFile, l.lso.Load()); err != nil {
			return l.failUnlessNoSpace(err)
		}
		delete(legacy, logStartOffsetFile)
	}
	if advance || legacy[recoveryPointFile] {
		rp := l.recoveryPoint
		if advance {
			rp = synced
		}
		if err := writeRecoveryPoint(l.fs, l.dir, rp); err != nil {
			return l.failUnlessNoSpace(err)
		}
		l.recoveryPoint = rp
		delete(legacy, recoveryPointFile)
	}
	return nil
}

// failUnlessNoSpace fails the log, except for a checkpoint that the file
// system refused for want of space: the one on disk is still whole and only
// older, so the log goes on and a later Checkpoint writes it.
func (l *Log) failUnlessNoSpace(err error) error {
	if errors.Is(err, ErrNoSpace) {
		return err
	}
	return l.fail(err)
}

// Close syncs everything, trims the active index and writes the
// checkpoints, so the next Open has nothing to recover. A failed log is
// closed without writing anything. Either way Close returns only once no
// Checkpoint is writing the checkpoint files (one may have begun before the
// log failed), and none writes them afterwards: the owner may open the
// directory again at once. Regions still open stay readable.
func (l *Log) Close() error {
	// A Sync in flight may hold segments sealed since the last sync (and
	// the directory's dirty flag), taken from the appender: wait for it and
	// keep others out, so that Close's own sync and recovery point never
	// promise what that fsync has not covered yet (or failed to).
	l.syncMu.Lock()
	for l.syncing {
		l.syncCond.Wait()
	}
	l.syncing = true
	l.syncMu.Unlock()
	defer func() {
		l.syncMu.Lock()
		l.syncing = false
		l.syncCond.Broadcast()
		l.syncMu.Unlock()
	}()
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.closed.Load() {
		return ErrClosed
	}
	var err error
	if l.failure.Load() == nil {
		err = l.flushForClose()
	}
	// The checkpoint files are metaMu's: wait for a Checkpoint in flight,
	// which a failed log's Close skipped. Its recovery point is still one
	// a successful fsync covered, but an Open of the directory (the owner
	// reopens a failed log at once) would recover beside its writes, and
	// a recovery point it wrote after that Open's could name bytes the
	// Open cut.
	l.metaMu.Lock()
	l.closed.Store(true)
	l.metaMu.Unlock()
	l.syncMu.Lock()
	l.syncCond.Broadcast()
	l.syncMu.Unlock()
	l.mu.Lock()
	segs := l.segments
	l.segments = nil
	detached := l.detached
	l.detached = nil
	l.mu.Unlock()
	for _, s := range l.unsyncedSealed {
		s.release()
	}
	l.unsyncedSealed = nil
	// A failed truncation's segments follow the ones it kept: the list
	// stays in base order.
	l.closedSegments = append(closedSegmentsOf(segs), detached...)
	releaseSegments(segs)
	return err
}

func (l *Log) flushForClose() error {
	active := l.active
	l.mu.Lock()
	err := active.index.seal()
	l.mu.Unlock()
	if err != nil {
		return l.fail(err)
	}
	if err := l.syncFiles(l.unsyncedSealed, active, l.dirDirty); err != nil {
		return err
	}
	l.dirDirty = false
	tail := logPosition{offset: l.leo.Load(), segmentBase: active.base, pos: active.size.Load()}
	l.syncMu.Lock()
	if tail.offset >= l.synced.offset {
		l.synced = tail
	}
	l.syncMu.Unlock()
	l.metaMu.Lock()
	defer l.metaMu.Unlock()
	return l.checkpointLocked()
}
