package segstore

import (
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/logagent/logagent/record"
)

// Recovery (Open).
//
// The recovery point R = (offset, segment base, position), on disk in
// recovery-point, promises:
//
//  1. every byte below R is durable: the segments before R's segment, and
//     R's segment up to position, with their directory entries;
//  2. their index entries below R are durable: the whole (trimmed) index of
//     each earlier segment, and the entries of R's segment below position
//     (this is what keeps Open cheap; Open still checks that no entry is
//     missing after the last one it trusts, and rebuilds the index if one
//     is);
//  3. every epoch cache entry that starts below R's offset is in
//     leader-epoch-checkpoint.
//
// Sync gives 1 (and 2 for sealed segments); Checkpoint fsyncs R's segment's
// index and writes the epoch cache before it writes R; Truncate lowers R on
// disk before it cuts anything; Close and Open end by writing R at the log
// end after syncing everything (Open not for a log that holds nothing and
// has no R: see checkpointTail).
//
// Open therefore:
//   - trusts the log below R after checking its structure where damage is
//     likeliest: in each segment below R, the batches after the last index
//     entry must be valid (CRC included) and end exactly at the file end and
//     at the next segment's base offset; in R's segment they must end exactly
//     at R. If a check fails, the segment is walked from its start and its
//     index rebuilt; if the log itself is damaged, data that was durable is
//     gone: Open fails with a DataLossError naming the first lost offset, so
//     the replica can refuse to lead and fetch again. Cutting there instead
//     (Options.RepairDataLoss) is the caller's explicit choice.
//   - validates every batch from R on (CRC, contiguous offsets), rebuilds
//     their index entries and epoch cache entries, and cuts the log at the
//     first invalid batch, deleting later segments: nothing above R was
//     promised durable, so a torn or corrupt tail there is an interrupted
//     write, not a loss.
//   - syncs what it kept and writes R at the new log end, so a second crash
//     recovers the same log. Out of space for that write, it keeps the R it
//     found (still true: nothing below it was cut) and opens anyway.
//
// A write of its own that fails fails Open, also an fsync that the file
// cache ran to close a file it evicted (which fails the log instead of
// returning to the write): Open never returns a failed log, nor writes R
// after a failed fsync.
//
// Without a recovery point, or with one at or below the log start, nothing
// is trusted and every segment is validated. On a clean restart (Close wrote
// R at the log end) Open reads only a few KiB per segment.

// Open opens the log in dir, creating it if needed, and recovers it.
func Open(fsys FS, dir string, opts Options) (*Log, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	l := &Log{
		fs:     fsys,
		dir:    dir,
		opts:   opts,
		logger: opts.Logger.Named("segstore").With("dir", dir),
		files:  opts.Files,
	}
	l.SetRetention(opts.Retention, opts.RetentionBytes)
	if l.files == nil {
		l.files = NewFileCache(DefaultMaxOpenFiles)
	}
	l.syncCond = sync.NewCond(&l.syncMu)
	l.epochs.reset(nil)
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("segstore: open %s: %w", dir, err)
	}
	if err := fsys.SyncDir(filepath.Dir(dir)); err != nil {
		return nil, fmt.Errorf("segstore: open %s: %w", dir, err)
	}
	r := &recovery{l: l}
	err = r.run()
	if err == nil {
		err = r.failure()
	}
	if err != nil {
		// The files close without an fsync: released for good, and never
		// after a failed one.
		for _, s := range r.segs {
			s.release()
		}
		return nil, err
	}
	return l, nil
}

// failure is the error of an fsync of recovery's own writes that could not
// come back to them: the file cache ran it to close a file it evicted (to
// open another of this log's files, or another log's sharing the cache), and
// it failed the log. Open then fails with it rather than return a log that
// refuses every write, and recovery writes no recovery point after it.
func (r *recovery) failure() error {
	if f := r.l.failure.Load(); f != nil {
		return fmt.Errorf("segstore: recover %s: %w", r.l.dir, f.Err)
	}
	return nil
}

// recoveryReadBytes is the most a recovery reads of a segment at once.
const recoveryReadBytes = 256 << 10

type recovery struct {
	l     *Log
	segs  []*segment
	state []segmentRecovery
	buf   []byte

	rp         logPosition
	rpFound    bool
	lsoCk      int64
	lsoFound   bool
	hwCk       int64
	hwFound    bool
	fileEpochs []EpochEntry

	dirChanged   bool
	scannedBytes int64
	cutBytes     int64
}

type segmentRecovery struct {
	rebuilt   []indexEntry // non-nil: the index is replaced by these entries
	syncLog   bool
	syncIndex bool
	created   bool
	// cut: recovery cut bytes off the end of the log file, which the next
	// append must not write again (see cutSegment).
	cut bool
	// renewed: the segment got new, empty files (cutSegment at its start),
	// which no Region of the replaced log names.
	renewed bool
}

// walkResult is how far a validation walk got.
type walkResult struct {
	endPos       int64
	endOffset    int64
	entries      []indexEntry
	maxTimestamp int64
	// err says why the batches stopped before the end of the range (torn,
	// corrupt, not contiguous); nil when the walk reached it.
	err error
}

func (r *recovery) run() error {
	l := r.l
	names, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("segstore: open %s: %w", l.dir, err)
	}
	logs := map[int64]bool{}
	var bases, indexes []int64
	for _, name := range names {
		if strings.HasSuffix(name, tmpSuffix) {
			if err := r.remove(filepath.Join(l.dir, name)); err != nil {
				return err
			}
			continue
		}
		base, suffix, ok := parseSegmentFileName(name)
		switch {
		case !ok:
		case suffix == logSuffix:
			logs[base] = true
			bases = append(bases, base)
		default:
			indexes = append(indexes, base)
		}
	}
	for _, base := range indexes {
		if !logs[base] {
			if err := r.remove(filepath.Join(l.dir, segmentFileName(base, indexSuffix))); err != nil {
				return err
			}
		}
	}
	slices.Sort(bases)
	if err := r.readCheckpoints(); err != nil {
		return err
	}
	// Segments wholly below the log start offset are what a retention run
	// left behind when it stopped after moving the start offset.
	for r.lsoFound && len(bases) > 1 && bases[1] <= r.lsoCk {
		if err := r.removeSegmentFiles(bases[0]); err != nil {
			return err
		}
		bases = bases[1:]
	}
	for _, base := range bases {
		r.segs = append(r.segs, openSegment(l, base))
		r.state = append(r.state, segmentRecovery{})
	}
	if prev := l.opts.Reopen; prev != nil {
		if err := r.cutUnsynced(prev.syncedPosition()); err != nil {
			return err
		}
		if err := r.renewEmptied(prev.closedSegments); err != nil {
			return err
		}
	}
	if len(r.segs) > 0 {
		if err := r.recoverSegments(); err != nil {
			return err
		}
	}
	return r.finish()
}

// cutUnsynced ends the log at synced, the last position a successful fsync
// of the log this Open replaces covered: what lies beyond it may be pages
// that a failed fsync never wrote and that the page cache still serves.
// The recovery point is never beyond synced (Checkpoint writes synced
// positions), so the validation that follows starts below the cut.
func (r *recovery) cutUnsynced(synced logPosition) error {
	// An earlier Open with the same Reopen may have made these cuts and
	// failed before they were durable (the owner retries a failed
	// reopen): the files then show nothing to cut, and a crash would
	// bring the cut batches back after the recovery point, valid, under
	// offsets the reopened log gives other batches. So the segment synced
	// names and the directory are synced whatever this Open cuts.
	r.dirChanged = true
	keep := len(r.segs)
	for keep > 0 && r.segs[keep-1].base > synced.segmentBase {
		keep--
	}
	if keep < len(r.segs) {
		r.l.logger.Warn("deleting segments no successful fsync covered", "from", r.segs[keep].base, "synced_offset", synced.offset)
	}
	if err := r.dropAfter(keep - 1); err != nil {
		return err
	}
	if keep == 0 {
		return nil
	}
	s := r.segs[keep-1]
	if s.base != synced.segmentBase {
		return nil
	}
	r.state[keep-1].syncLog = true
	size, err := s.log.Size()
	if err != nil {
		return fmt.Errorf("segstore: recover %s: %w", s.logPath, err)
	}
	if size > synced.pos {
		r.l.logger.Warn("cutting what no successful fsync covered", "segment", s.base,
			"position", synced.pos, "offset", synced.offset, "bytes", size-synced.pos)
		if err := r.cutSegment(keep-1, synced.pos, size); err != nil {
			return err
		}
	}
	return nil
}

// renewEmptied gives new files to a segment a truncation of the replaced
// log cut and that is now empty: a truncation at the first segment's start
// empties the file in place before it renames the new files over it, and
// may fail in between. An empty segment takes its next append at position
// 0 whatever its mark, where a Region of the replaced log may still name
// the batches the truncation cut.
func (r *recovery) renewEmptied(closed []closedSegment) error {
	for i, s := range r.segs {
		j := slices.IndexFunc(closed, func(c closedSegment) bool { return c.base == s.base })
		if j < 0 || !closed[j].cut {
			continue
		}
		size, err := s.log.Size()
		if err != nil {
			return fmt.Errorf("segstore: recover %s: %w", s.logPath, err)
		}
		if size == 0 {
			if err := r.cutSegment(i, 0, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// cutSegment ends segment i's file at pos, below its size. The failed log
// this Open replaces (or a log closed in this process) may have published
// the cut bytes, and a Region of it may still name them: they are never
// written again in the same file (as after Truncate). A cut inside the
// segment makes its next append roll (segmentRecovery.cut); a cut at its
// start gives it new, empty files of the same name instead, renamed over
// the old ones, so that a crash leaves one or the other.
func (r *recovery) cutSegment(i int, pos, size int64) error {
	old := r.segs[i]
	r.cutBytes += size - pos
	if pos > 0 {
		if err := old.log.Truncate(pos); err != nil {
			return fmt.Errorf("segstore: recover: truncate %s: %w", old.logPath, err)
		}
		r.state[i].cut = true
		return nil
	}
	if err := r.l.createSegmentFiles(old.base); err != nil {
		return fmt.Errorf("segstore: recover: %w", err)
	}
	// Its names are about to be the new files': nothing opens them for
	// old again.
	old.forget()
	old.release()
	r.segs[i] = openSegment(r.l, old.base)
	r.state[i].renewed = true
	r.dirChanged = true
	if err := r.l.renameSegmentFiles(old.base); err != nil {
		return fmt.Errorf("segstore: recover: %w", err)
	}
	return nil
}

// readCheckpoints reads the checkpoint files. One that is corrupt fails
// Open with its *CorruptError, whichever it is (see checkpoint.go); the
// ones found in version 0 are noted for the next checkpoint to rewrite.
func (r *recovery) readCheckpoints() error {
	ck := checkpointReader{fs: r.l.fs, dir: r.l.dir, legacy: map[string]bool{}}
	var err error
	if r.lsoCk, r.lsoFound, err = ck.offset(logStartOffsetFile); err != nil {
		return err
	}
	if r.hwCk, r.hwFound, err = ck.offset(hwCheckpointFile); err != nil {
		return err
	}
	if r.rp, r.rpFound, err = ck.recoveryPoint(); err != nil {
		return err
	}
	if r.fileEpochs, err = ck.epochs(); err != nil {
		return err
	}
	r.l.legacyCheckpoints = ck.legacy
	return nil
}

func (r *recovery) remove(path string) error {
	if err := r.l.fs.Remove(path); err != nil {
		return fmt.Errorf("segstore: recover: remove %s: %w", path, err)
	}
	r.dirChanged = true
	return nil
}

func (r *recovery) removeSegmentFiles(base int64) error {
	if err := r.remove(filepath.Join(r.l.dir, segmentFileName(base, logSuffix))); err != nil {
		return err
	}
	err := r.l.fs.Remove(filepath.Join(r.l.dir, segmentFileName(base, indexSuffix)))
	if err != nil && !isNotExist(err) {
		return fmt.Errorf("segstore: recover: %w", err)
	}
	return nil
}

func (r *recovery) recoverSegments() error {
	first := r.segs[0]
	from, fromPos, fromOffset := 0, int64(0), first.base
	var fromEntries []indexEntry
	trusted := r.rpFound && r.rp.offset > max(first.base, r.lsoCk)
	if trusted {
		// Entries from the recovery point on are derived again from the
		// batches; the file may hold newer ones for batches lost since.
		r.l.epochs.reset(r.fileEpochs)
		r.l.epochs.truncateFromEnd(r.rp.offset)
		si := slices.IndexFunc(r.segs, func(s *segment) bool { return s.base == r.rp.segmentBase })
		if si < 0 {
			loss := &DataLossError{
				Offset: r.rp.segmentBase, RecoveryPoint: r.rp.offset,
				Path: filepath.Join(r.l.dir, segmentFileName(r.rp.segmentBase, logSuffix)),
				Err:  errors.New("segment missing"),
			}
			if err := r.repair(loss); err != nil {
				return err
			}
			// Validate everything instead: the walk cuts at the gap.
			trusted = false
		} else {
			for i := 0; i < si; i++ {
				res, ok, err := r.checkSealed(i)
				if err != nil {
					return err
				}
				if !ok {
					return r.loseAndCut(i, res)
				}
			}
			entries, res, ok, err := r.checkTrustedPrefix(si)
			if err != nil {
				return err
			}
			if !ok {
				return r.loseAndCut(si, res)
			}
			from, fromPos, fromOffset, fromEntries = si, r.rp.pos, r.rp.offset, entries
		}
	}
	if !trusted {
		// Every batch is validated, so the epoch cache comes from them.
		r.l.epochs.reset(nil)
		fromEntries = []indexEntry{}
	}
	return r.scan(from, fromPos, fromOffset, fromEntries)
}

// checkSealed checks a segment below the recovery point (see the top of the
// file); ok is false when its log is damaged, res says where.
func (r *recovery) checkSealed(i int) (walkResult, bool, error) {
	s := r.segs[i]
	nextBase := r.segs[i+1].base
	size, err := s.log.Size()
	if err != nil {
		return walkResult{}, false, fmt.Errorf("segstore: recover %s: %w", s.logPath, err)
	}
	valid, total, err := s.index.mapExisting(size)
	if err != nil {
		return walkResult{}, false, err
	}
	last, known := lastEntry(s.index, valid)
	res, err := r.walk(s, int64(last.pos), s.base+int64(last.rel), known, size, false)
	if err != nil {
		return res, false, err
	}
	// The walk must not find a batch that deserved an entry after the last
	// one: that would be a lost entry.
	if res.err == nil && res.endOffset == nextBase && valid == total && len(res.entries) == len(known) {
		s.size.Store(size)
		s.next.Store(nextBase)
		return res, true, nil
	}
	full, err := r.walk(s, 0, s.base, []indexEntry{}, size, false)
	if err != nil {
		return full, false, err
	}
	if full.err == nil && full.endOffset == nextBase {
		r.l.logger.Warn("rebuilt an index that did not match its segment", "segment", s.base)
		r.state[i] = segmentRecovery{rebuilt: full.entries, syncIndex: true}
		s.size.Store(size)
		s.next.Store(nextBase)
		s.maxTimestamp.Store(full.maxTimestamp)
		return full, true, nil
	}
	if full.err == nil {
		full.err = fmt.Errorf("segment ends at offset %d, the next one starts at %d", full.endOffset, nextBase)
	}
	return full, false, nil
}

// checkTrustedPrefix checks the recovery point's segment up to the recovery
// point and returns its index entries below it.
func (r *recovery) checkTrustedPrefix(si int) ([]indexEntry, walkResult, bool, error) {
	s := r.segs[si]
	size, err := s.log.Size()
	if err != nil {
		return nil, walkResult{}, false, fmt.Errorf("segstore: recover %s: %w", s.logPath, err)
	}
	if size >= r.rp.pos {
		valid, _, err := s.index.mapExisting(r.rp.pos)
		if err != nil {
			return nil, walkResult{}, false, err
		}
		last, known := lastEntry(s.index, valid)
		res, err := r.walk(s, int64(last.pos), s.base+int64(last.rel), known, r.rp.pos, false)
		if err != nil {
			return nil, res, false, err
		}
		if res.err == nil && res.endOffset == r.rp.offset && len(res.entries) == len(known) {
			entries := make([]indexEntry, valid)
			for i := range entries {
				entries[i] = s.index.entry(i)
			}
			return entries, res, true, nil
		}
	}
	full, err := r.walk(s, 0, s.base, []indexEntry{}, min(size, r.rp.pos), false)
	if err != nil {
		return nil, full, false, err
	}
	if full.err == nil && full.endPos == r.rp.pos && full.endOffset == r.rp.offset {
		r.l.logger.Warn("rebuilt an index that did not match its segment", "segment", s.base)
		r.state[si].syncIndex = true
		return full.entries, full, true, nil
	}
	if full.err == nil {
		full.err = fmt.Errorf("segment holds %d bytes up to offset %d; the recovery point is at byte %d, offset %d",
			full.endPos, full.endOffset, r.rp.pos, r.rp.offset)
	}
	return nil, full, false, nil
}

// lastEntry returns the last of the first valid index entries (the segment
// start when there is none), and it alone as the entries a tail walk extends.
func lastEntry(ix *index, valid int) (indexEntry, []indexEntry) {
	if valid == 0 {
		return indexEntry{}, nil
	}
	last := ix.entry(valid - 1)
	return last, []indexEntry{last}
}

// repair reports a loss below the recovery point: an error, unless the
// caller asked Open to cut the log there.
func (r *recovery) repair(loss *DataLossError) error {
	if !r.l.opts.RepairDataLoss {
		return loss
	}
	r.l.logger.Error("data lost below the recovery point; cutting the log there as asked", "error", loss)
	r.l.dataLoss = loss
	return nil
}

// loseAndCut handles damage at segment i below the recovery point.
func (r *recovery) loseAndCut(i int, res walkResult) error {
	loss := &DataLossError{Offset: res.endOffset, RecoveryPoint: r.rp.offset, Path: r.segs[i].logPath, Err: res.err}
	if err := r.repair(loss); err != nil {
		return err
	}
	return r.cut(i, res)
}

// scan validates every batch from (from, pos, offset) to the end of the
// log, with entries the index entries already known below pos.
func (r *recovery) scan(from int, pos, offset int64, entries []indexEntry) error {
	for i := from; i < len(r.segs); i++ {
		s := r.segs[i]
		if i > from {
			if s.base != offset {
				r.l.logger.Warn("segment does not continue the log; deleting it and the ones after it",
					"segment", s.base, "expected", offset)
				return r.dropAfter(i - 1)
			}
			pos, entries = 0, []indexEntry{}
		}
		size, err := s.log.Size()
		if err != nil {
			return fmt.Errorf("segstore: recover %s: %w", s.logPath, err)
		}
		res, err := r.walk(s, pos, offset, entries, size, true)
		if err != nil {
			return err
		}
		if pos == 0 {
			s.maxTimestamp.Store(res.maxTimestamp)
		}
		scanned := res.endPos > pos
		r.scannedBytes += res.endPos - pos
		r.state[i] = segmentRecovery{
			rebuilt:   res.entries,
			syncLog:   scanned || r.state[i].syncLog,
			syncIndex: scanned || r.state[i].syncIndex,
			cut:       r.state[i].cut,
		}
		if res.err != nil {
			r.l.logger.Warn("cutting a torn or corrupt tail", "segment", s.base,
				"position", res.endPos, "offset", res.endOffset, "bytes", size-res.endPos, "error", res.err)
			return r.cut(i, res)
		}
		offset = res.endOffset
		s.size.Store(res.endPos)
		s.next.Store(res.endOffset)
	}
	return nil
}

// cut ends the log inside segment i where res stopped and deletes the
// later segments.
func (r *recovery) cut(i int, res walkResult) error {
	s := r.segs[i]
	size, err := s.log.Size()
	if err != nil {
		return fmt.Errorf("segstore: recover %s: %w", s.logPath, err)
	}
	if size > res.endPos {
		if err := r.cutSegment(i, res.endPos, size); err != nil {
			return err
		}
		s = r.segs[i]
	}
	s.size.Store(res.endPos)
	s.next.Store(res.endOffset)
	if res.entries == nil {
		res.entries = []indexEntry{}
	}
	r.state[i] = segmentRecovery{rebuilt: res.entries, syncLog: true, syncIndex: true, cut: r.state[i].cut}
	return r.dropAfter(i)
}

// dropAfter deletes the segments after i. Segment i's end is made durable
// first: its file may show a truncation that no fsync covered (a process
// that died, or the failed log this Open replaces, cut it and failed before
// its fsync), and a crash that undid that truncation after the deletions
// were durable would recover segment i's old batches with the later ones
// gone: a log ending below what a Sync reported durable, and holding
// batches the truncation cut.
func (r *recovery) dropAfter(i int) error {
	if i >= 0 && i+1 < len(r.segs) {
		if err := r.segs[i].syncLog(); err != nil {
			return fmt.Errorf("segstore: recover: %w", err)
		}
		// Durable as it stands: finish need not fsync it again unless a
		// later step cuts it and asks for it (cutUnsynced).
		r.state[i].syncLog = false
	}
	for _, s := range r.segs[i+1:] {
		s.release()
		if err := r.removeSegmentFiles(s.base); err != nil {
			return err
		}
	}
	r.segs = r.segs[:i+1]
	r.state = r.state[:i+1]
	return nil
}

// walk validates the batches in [fromPos, toPos) of s, which must start at
// fromOffset, extending entries by the index rule. It returns an error only
// for I/O errors; damage is reported in the result.
func (r *recovery) walk(s *segment, fromPos, fromOffset int64, entries []indexEntry, toPos int64, assignEpochs bool) (walkResult, error) {
	res := walkResult{endPos: fromPos, endOffset: fromOffset, entries: entries, maxTimestamp: noTimestamp}
	lastIndexed := int64(0)
	if n := len(entries); n > 0 {
		lastIndexed = int64(entries[n-1].pos)
	}
	interval := int64(r.l.opts.IndexIntervalBytes)
	// The read buffer is made for the first walk that needs it, no larger
	// than the walk: a new or empty log has nothing to read, and an agent
	// creating thousands of partitions allocated 256 KiB for each
	// (docs/benchmarks.md, "Creating 10,000 partitions").
	if want := min(recoveryReadBytes, toPos-fromPos); int64(len(r.buf)) < want {
		r.buf = make([]byte, want)
	}
	w := walker{f: s.log, pos: fromPos, end: toPos, maxBatch: r.l.opts.MaxBatchBytes, verify: true, buf: r.buf, bufPos: -1}
	defer func() { r.buf = w.buf }()
	for {
		info, err := w.next()
		switch {
		case err == io.EOF:
			return res, nil
		case errors.Is(err, record.ErrCorrupt) || errors.Is(err, record.ErrShort):
			res.err = &CorruptError{Path: s.logPath, Position: w.pos, Err: err}
			return res, nil
		case err != nil:
			return res, fmt.Errorf("segstore: recover %s: %w", s.logPath, err)
		case info.base != res.endOffset:
			res.err = &CorruptError{Path: s.logPath, Position: w.pos, Err: fmt.Errorf("batch base offset %d, expected %d", info.base, res.endOffset)}
			return res, nil
		case info.pos > math.MaxUint32 || info.next-s.base > math.MaxUint32:
			res.err = &CorruptError{Path: s.logPath, Position: w.pos, Err: errors.New("batch beyond what a segment can index")}
			return res, nil
		}
		if info.pos > 0 && info.pos-lastIndexed >= interval {
			res.entries = append(res.entries, indexEntry{rel: uint32(info.base - s.base), pos: uint32(info.pos)})
			lastIndexed = info.pos
		}
		res.maxTimestamp = max(res.maxTimestamp, info.maxTimestamp)
		if assignEpochs {
			r.l.epochs.assign(info.epoch, info.base)
		}
		res.endPos, res.endOffset = info.pos+info.size, info.next
	}
}

// checkpointTail writes the epoch cache and then the recovery point at
// tail, and returns the recovery point on disk. Out of space, the one found
// stays, provided nothing below it was cut (no repaired data loss) and it
// is not past tail: it still promises only what holds, and the next
// Checkpoint moves it. So a log opens on a full disk and serves its reads.
//
// A log that holds nothing (tail at its start lso) and has no recovery
// point gets none: one at or below the log start promises nothing, so the
// file would say what its absence says, and a new partition's open is
// spared a file, its rename and two fsyncs (about a tenth of an agent's
// CPU while 2,000 partitions were created). The returned point is tail
// all the same, as the next Checkpoint must compare with.
func (r *recovery) checkpointTail(tail logPosition, lso int64) (logPosition, error) {
	l := r.l
	entries, version := l.epochs.snapshot()
	var err error
	if !slices.Equal(entries, r.fileEpochs) {
		if err = writeEpochCheckpoint(l.fs, l.dir, entries); err == nil {
			delete(l.legacyCheckpoints, epochCheckpointFile)
		}
	}
	if err == nil {
		l.epochs.markSaved(version)
		if (r.rpFound && r.rp == tail) || (!r.rpFound && tail.offset <= lso) {
			return tail, nil
		}
		if err = writeRecoveryPoint(l.fs, l.dir, tail); err == nil {
			delete(l.legacyCheckpoints, recoveryPointFile)
			return tail, nil
		}
	}
	if !errors.Is(err, ErrNoSpace) || l.dataLoss != nil || (r.rpFound && r.rp.offset > tail.offset) {
		return logPosition{}, err
	}
	l.logger.Warn("no space to checkpoint the recovered log; keeping the recovery point found", "error", err)
	if !r.rpFound {
		return logPosition{}, nil
	}
	return r.rp, nil
}

// replaceIndex writes a rebuilt index. Out of space (the rebuilt index may
// be larger than the file: entries were lost), the segment goes on without
// one rather than keep the log offline until space returns: an index only
// speeds reads up, and a lookup without entries walks from the segment
// start. The next Open finds the entries missing and rebuilds them. The
// segment takes no more appends: entries for later batches would hide the
// missing ones from that check (it trusts the entries before the last).
func (r *recovery) replaceIndex(s *segment, entries []indexEntry) error {
	err := s.index.replace(entries)
	if err == nil || !isNoSpace(err) {
		return err
	}
	r.l.logger.Warn("no space to write a rebuilt index; reading the segment without one until the next open",
		"segment", s.base, "entries", len(entries), "error", err)
	s.cutFrom = true
	return s.index.replace(nil)
}

// finish settles the start offset, writes the rebuilt indexes, syncs what
// recovery touched and writes the recovery point at the log end.
func (r *recovery) finish() error {
	l := r.l
	if n := len(r.segs); n > 0 {
		first, leo := r.segs[0].base, r.segs[n-1].next.Load()
		// A log holding nothing at or above the checkpointed start offset
		// starts over there: a full truncation stopped after moving it.
		if r.lsoFound && (leo <= r.lsoCk || (leo == first && r.lsoCk != first)) {
			// As in Truncate: the recovery point must not name a segment
			// that is about to go.
			if r.rpFound && r.rp.offset > r.lsoCk {
				r.rp = logPosition{offset: r.lsoCk, segmentBase: r.lsoCk}
				if err := writeRecoveryPoint(l.fs, l.dir, r.rp); err != nil {
					return err
				}
				delete(l.legacyCheckpoints, recoveryPointFile)
			}
			if err := r.dropAfter(-1); err != nil {
				return err
			}
		}
	}
	if len(r.segs) == 0 {
		start := int64(0)
		if r.lsoFound {
			start = r.lsoCk
		}
		s, err := createSegment(l, start, l.opts.IndexBytes)
		if err != nil {
			return err
		}
		r.segs = append(r.segs, s)
		r.state = append(r.state, segmentRecovery{created: true})
		r.dirChanged = true
		l.epochs.reset(nil)
	}
	last := r.segs[len(r.segs)-1]
	leo := last.next.Load()
	lso := r.segs[0].base
	if r.lsoFound && r.lsoCk > lso {
		lso = r.lsoCk
	}
	l.epochs.truncateFromStart(lso)
	l.epochs.truncateFromEnd(leo)

	for i, s := range r.segs {
		st := r.state[i]
		if st.rebuilt != nil {
			if err := r.replaceIndex(s, st.rebuilt); err != nil {
				return err
			}
		}
		if st.syncLog {
			if err := s.syncLog(); err != nil {
				return err
			}
		}
		if st.syncIndex {
			if err := s.index.sync(); err != nil {
				return err
			}
		}
	}
	if !r.state[len(r.segs)-1].created {
		if err := last.index.activate(l.opts.IndexBytes); err != nil {
			return err
		}
	}
	var before []closedSegment
	if prev := l.opts.Reopen; prev != nil {
		before = prev.closedSegments
	}
	for i, s := range r.segs {
		if r.state[i].cut {
			s.cutFrom = true
		}
		// Regions of the replaced log may name bytes past this end: cut
		// by its truncations, by this recovery, or by an earlier Open
		// that failed after its cut (the file no longer shows it). Both
		// lists are in base order.
		for len(before) > 0 && before[0].base < s.base {
			before = before[1:]
		}
		if len(before) > 0 && before[0].base == s.base && !r.state[i].renewed && (before[0].cut || before[0].size > s.size.Load()) {
			s.cutFrom = true
		}
	}
	last.lastIndexedPos = last.index.lastPos()
	if last.size.Load() > 0 {
		last.firstAppendAt = l.opts.Now()
	}
	if r.dirChanged {
		if err := l.fs.SyncDir(l.dir); err != nil {
			return fmt.Errorf("segstore: recover: fsync directory: %w", err)
		}
	}

	if err := r.failure(); err != nil {
		return err
	}
	tail := logPosition{offset: leo, segmentBase: last.base, pos: last.size.Load()}
	rp, err := r.checkpointTail(tail, lso)
	if err != nil {
		return err
	}
	l.recoveryPoint = rp
	l.synced = tail
	// Without the file, a reopen starts the HW at the log start: what a
	// checkpoint of it would say, so a new log writes none (two fsyncs
	// per partition of a new topic) until its HW moves.
	l.checkpointedHW = lso
	if r.hwFound {
		l.checkpointedHW = r.hwCk
	}
	l.openScanned = r.scannedBytes
	l.segments = r.segs
	l.active = last
	l.leo.Store(leo)
	l.lso.Store(lso)
	hw := r.hwCk
	if prev := l.opts.Reopen; prev != nil {
		// The replaced log's high watermark is at least as new as its
		// checkpoint; the clamp keeps it within what recovery kept.
		hw = prev.HighWatermark()
	}
	l.hw.Store(min(max(hw, lso), leo))
	l.logger.Info("opened log", "segments", len(r.segs), "log_start_offset", lso, "log_end_offset", leo,
		"recovery_point", r.rp.offset, "scanned_bytes", r.scannedBytes, "cut_bytes", r.cutBytes)
	return nil
}
