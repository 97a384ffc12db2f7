package segstore

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

const (
	logSuffix   = ".log"
	indexSuffix = ".index"
	// unknownTimestamp marks a segment loaded without a scan, or truncated:
	// its newest timestamp is computed when retention first needs it.
	unknownTimestamp = math.MinInt64
	// noTimestamp is the newest timestamp of a segment known to be empty.
	noTimestamp = math.MinInt64 + 1
	// maxPooledReaders bounds the idle read descriptors kept per segment.
	maxPooledReaders = 4

	osCreateRW = os.O_CREATE | os.O_RDWR
)

// Segment file (<base>.log, base = the first batch's base offset, 20
// digits): batches back to back, exactly as record defines them (docs/design.md
// §4), with nothing in between and no trailer:
//
//	pos 0                pos s0                   pos s0+s1
//	+--------------------+------------------------+------
//	| batch: base B,     | batch: base B+n0,      | ...
//	| n0 offsets, s0 B   | n1 offsets, s1 bytes   |
//	+--------------------+------------------------+------
//
// The appender writes a run of whole batches with one positional write and
// only then publishes the new size, so readers never see a partial batch.
// After a crash the file may end in a torn batch; recovery cuts it.

// segment is one <base>.log file and its index. A segment is shared by the
// log's segment list and by readers and in-flight syncs, each holding a
// reference; its files close for good when the last reference is released,
// so a deleted segment stays readable until its readers are done. Until
// then the log's FileCache opens and closes their descriptors on demand.
type segment struct {
	l         *Log
	base      int64
	logPath   string
	indexPath string
	log       *fileHandle
	index     *index

	// size and next describe the whole batches published to readers. The
	// appender stores next before size, so a reader that loads size and then
	// next sees a next at least as far as the batches within size.
	size atomic.Int64
	next atomic.Int64
	// maxTimestamp is the newest batch MaxTimestamp in ms, or unknownTimestamp.
	maxTimestamp atomic.Int64

	// Owned by the appender.
	lastIndexedPos int64
	firstAppendAt  time.Time
	// cutFrom: a truncation, or a recovery, cut batches off the end of the
	// file, which open Regions (of this log or of the failed one it
	// replaces) may still send, so nothing is appended to it again.
	cutFrom bool

	refs atomic.Int32

	// Guarded by the cache's mu.
	readers []*pooledReader
	deleted bool
}

func segmentFileName(base int64, suffix string) string {
	return fmt.Sprintf("%020d%s", base, suffix)
}

// parseSegmentFileName accepts exactly the names segmentFileName produces.
func parseSegmentFileName(name string) (base int64, suffix string, ok bool) {
	for _, s := range []string{logSuffix, indexSuffix} {
		digits, found := strings.CutSuffix(name, s)
		if !found || len(digits) != 20 {
			continue
		}
		b, err := strconv.ParseInt(digits, 10, 64)
		if err != nil || b < 0 {
			return 0, "", false
		}
		return b, s, true
	}
	return 0, "", false
}

func newSegment(l *Log, base int64) *segment {
	s := &segment{
		l:         l,
		base:      base,
		logPath:   filepath.Join(l.dir, segmentFileName(base, logSuffix)),
		indexPath: filepath.Join(l.dir, segmentFileName(base, indexSuffix)),
	}
	s.log = newFileHandle(l, s.logPath, os.O_RDWR)
	s.index = newIndex(l, s.indexPath)
	s.next.Store(base)
	s.maxTimestamp.Store(noTimestamp)
	s.refs.Store(1)
	return s
}

// createSegment makes a new, empty, active segment. Its directory entries
// become durable with the next directory fsync.
func createSegment(l *Log, base int64, indexBytes int) (*segment, error) {
	s := newSegment(l, base)
	f, err := l.fs.OpenFile(s.logPath, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("segstore: create segment: %w", err)
	}
	s.log.adopt(f)
	if err := s.index.activate(indexBytes); err != nil {
		s.closeFiles()
		return nil, err
	}
	return s, nil
}

// openSegment names an existing segment's files; the cache opens them when
// they are first used (a missing index is created then).
func openSegment(l *Log, base int64) *segment {
	s := newSegment(l, base)
	s.maxTimestamp.Store(unknownTimestamp)
	return s
}

func (s *segment) acquire() { s.refs.Add(1) }

func (s *segment) release() {
	if s.refs.Add(-1) == 0 {
		s.closeFiles()
	}
}

// reader returns a read-only descriptor with its own file offset, counted
// by the cache until putReader. The caller must hold a reference and must
// know the file is not yet unlinked.
func (s *segment) reader() (*os.File, error) {
	c := s.l.files
	c.mu.Lock()
	if n := len(s.readers); n > 0 {
		p := s.readers[n-1]
		s.readers = s.readers[:n-1]
		c.idle.remove(&p.node)
		c.mu.Unlock()
		return p.f, nil
	}
	c.open++
	victims := c.evictLocked()
	c.mu.Unlock()
	c.closeVictims(victims)
	f, err := s.l.fs.OpenReader(s.logPath)
	if err != nil {
		c.mu.Lock()
		c.open--
		c.mu.Unlock()
		return nil, fmt.Errorf("segstore: open segment for reading: %w", err)
	}
	return f, nil
}

// putReader pools a descriptor reader returned, or closes it.
func (s *segment) putReader(f *os.File) {
	c := s.l.files
	c.mu.Lock()
	if !s.deleted && len(s.readers) < maxPooledReaders {
		p := &pooledReader{seg: s, f: f}
		p.node.v = p
		c.idle.pushFront(&p.node)
		s.readers = append(s.readers, p)
		victims := c.evictLocked()
		c.mu.Unlock()
		c.closeVictims(victims)
		return
	}
	c.mu.Unlock()
	s.closeReader(f)
}

// closeReader closes a descriptor reader returned, for the cache to count
// it closed.
func (s *segment) closeReader(f *os.File) {
	c := s.l.files
	c.mu.Lock()
	c.closing++
	c.mu.Unlock()
	c.closeVictims([]any{&pooledReader{seg: s, f: f}})
}

// dropPooled takes an evicted reader out of the pool. Caller holds the
// cache's mu.
func (s *segment) dropPooled(p *pooledReader) {
	if i := slices.Index(s.readers, p); i >= 0 {
		s.readers = slices.Delete(s.readers, i, i+1)
	}
}

// closePooled closes the idle readers, for good when deleted.
func (s *segment) closePooled(deleted bool) {
	c := s.l.files
	c.mu.Lock()
	s.deleted = s.deleted || deleted
	idle := make([]any, 0, len(s.readers))
	for _, p := range s.readers {
		c.idle.remove(&p.node)
		idle = append(idle, p)
	}
	c.closing += len(idle)
	s.readers = nil
	c.mu.Unlock()
	c.closeVictims(idle)
}

// remove unlinks the segment's files. Descriptors in use stay valid; idle
// ones close, and none is opened again. The caller then releases the log's
// reference.
func (s *segment) remove(fsys FS) error {
	s.forget()
	err := fsys.Remove(s.logPath)
	if ierr := fsys.Remove(s.indexPath); ierr != nil && !isNotExist(ierr) && err == nil {
		err = ierr
	}
	if err != nil {
		return fmt.Errorf("segstore: delete segment %d: %w", s.base, err)
	}
	return nil
}

// forget closes the idle descriptors of the segment's files and makes
// sure none is opened again by name (the files are about to be unlinked or
// replaced); descriptors in use stay valid.
func (s *segment) forget() {
	s.closePooled(true)
	s.log.drop()
	s.index.file.drop()
}

func (s *segment) closeFiles() {
	s.closePooled(false)
	s.index.close()
	s.log.drop()
}

func (s *segment) syncLog() error {
	if err := s.log.Sync(); err != nil {
		return fmt.Errorf("segstore: fsync %s: %w", s.logPath, err)
	}
	return nil
}

// noteTimestamp records a batch's MaxTimestamp unless the segment's newest
// timestamp is unknown, which a later full walk computes.
func (s *segment) noteTimestamp(ts int64) {
	if cur := s.maxTimestamp.Load(); cur != unknownTimestamp && ts > cur {
		s.maxTimestamp.Store(ts)
	}
}
