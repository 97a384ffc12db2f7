package segstore

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxOpenFiles bounds the descriptors of a Log opened without
// Options.Files, which then has a cache of its own.
const DefaultMaxOpenFiles = 1024

// errFileGone reports a use of a segment file after its segment was
// deleted or its log closed: such a file is never opened again, since its
// name may by then belong to another segment.
var errFileGone = errors.New("segstore: segment file deleted or closed")

// FileCache bounds the descriptors the logs sharing it keep open
// (docs/design.md §5, "Open files"): every segment's .log and .index, and
// the read descriptors pooled for Regions, are opened on demand and closed,
// least recently used first, once more than the bound are open. A file in
// use (a pin: an append, a sync, an index update, a lookup's read) is never
// closed under its user; a Region's descriptor counts while the Region is
// open and is closed or pooled by its Close. A file with writes no fsync
// covered yet is fsynced before it is closed, and an error of that fsync
// fails its log, so closing never drops the obligation to sync, nor the
// error of a failed writeback (Linux reports it only to descriptors open
// when it happened, and may forget it once no descriptor is).
//
// The bound is soft: pinned files and open Regions are not evicted, so the
// count may pass it while they are in use.
type FileCache struct {
	max int

	mu   sync.Mutex
	cond *sync.Cond // signalled when a handle leaves the opening or closing state
	// idle holds what may be closed: open handles without pins and pooled
	// readers, the most recently used first.
	idle lruList
	// open counts the descriptors open through the cache (or about to be),
	// closing those of them an eviction is closing now.
	open, closing int

	reopens   atomic.Int64
	evictions atomic.Int64
}

// NewFileCache returns a cache that keeps at most maxOpen descriptors open
// (at least 1) while none of them is in use.
func NewFileCache(maxOpen int) *FileCache {
	c := &FileCache{max: max(maxOpen, 1)}
	c.cond = sync.NewCond(&c.mu)
	c.idle.init()
	return c
}

// Max is the bound.
func (c *FileCache) Max() int { return c.max }

// Open is the number of descriptors open through the cache now.
func (c *FileCache) Open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open
}

// Evictions is the number of descriptors closed to keep the bound.
func (c *FileCache) Evictions() int64 { return c.evictions.Load() }

// Reopens is the number of segment files opened again after an eviction.
func (c *FileCache) Reopens() int64 { return c.reopens.Load() }

// evictLocked takes idle entries off the list, least recent first, until
// the descriptors that stay open fit the bound, and returns them for
// closeVictims (closing can mean an fsync: never under mu).
func (c *FileCache) evictLocked() []any {
	var victims []any
	for c.open-c.closing > c.max {
		e := c.idle.back()
		if e == nil {
			break
		}
		c.idle.remove(e)
		switch v := e.v.(type) {
		case *fileHandle:
			v.state = handleClosing
		case *pooledReader:
			v.seg.dropPooled(v)
		}
		c.closing++
		c.evictions.Add(1)
		victims = append(victims, e.v)
	}
	return victims
}

// closeVictims closes what evictLocked (or a final close) chose.
func (c *FileCache) closeVictims(victims []any) {
	for _, v := range victims {
		switch v := v.(type) {
		case *fileHandle:
			v.closeFile()
		case *pooledReader:
			v.f.Close()
			c.mu.Lock()
			c.open--
			c.closing--
			c.mu.Unlock()
		}
	}
}

type handleState uint8

const (
	handleClosed handleState = iota
	handleOpening
	handleOpen
	handleClosing
)

// fileHandle is one segment file (a .log or an .index) whose descriptor
// the cache opens and closes. Its fields but l, path and flag are guarded
// by the cache's mu.
type fileHandle struct {
	l    *Log
	path string
	// flag opens the file the first time; later opens only reopen it.
	flag int

	state  handleState
	f      File
	pins   int
	node   lruNode // in the idle list while open and unpinned
	opened bool    // opened once: the file exists
	// gone: the file was deleted or its segment closed for good; it is
	// closed once unpinned and never reopened.
	gone bool
	// writes counts the pins that changed the file; synced is the count a
	// successful fsync covered. Unequal: the file must be synced before it
	// is closed.
	writes, synced uint64
	// syncErr is the failed fsync of a close, which every later Sync
	// returns: an fsync of a descriptor opened after the failure does not
	// report it (Linux reports a writeback error once), and succeeded over
	// bytes the failed one had lost.
	syncErr error
}

func newFileHandle(l *Log, path string, flag int) *fileHandle {
	h := &fileHandle{l: l, path: path, flag: flag}
	h.node.v = h
	return h
}

// adopt installs a descriptor the caller just opened (a created file).
func (h *fileHandle) adopt(f File) {
	c := h.l.files
	c.mu.Lock()
	c.open++
	h.f, h.state, h.opened = f, handleOpen, true
	c.idle.pushFront(&h.node)
	victims := c.evictLocked()
	c.mu.Unlock()
	c.closeVictims(victims)
}

// pin returns the open descriptor, opening the file if it was closed, and
// keeps it open until unpin.
func (h *fileHandle) pin() (File, error) {
	c := h.l.files
	c.mu.Lock()
	for h.state == handleOpening || h.state == handleClosing {
		c.cond.Wait()
	}
	if h.state == handleOpen {
		h.pins++
		if h.node.linked() {
			c.idle.remove(&h.node)
		}
		f := h.f
		c.mu.Unlock()
		return f, nil
	}
	if h.gone {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", errFileGone, h.path)
	}
	h.state = handleOpening
	flag, reopen := h.flag, h.opened
	if reopen {
		flag = os.O_RDWR
	}
	// Count the descriptor before it exists and evict first, so that the
	// bound holds and an open at the process limit finds one free.
	c.open++
	victims := c.evictLocked()
	c.mu.Unlock()
	c.closeVictims(victims)

	f, err := h.l.fs.OpenFile(h.path, flag, 0o644)

	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.cond.Broadcast()
	if err != nil {
		c.open--
		h.state = handleClosed
		return nil, fmt.Errorf("segstore: open %s: %w", h.path, err)
	}
	if reopen {
		c.reopens.Add(1)
	}
	h.f, h.state, h.pins, h.opened = f, handleOpen, 1, true
	return f, nil
}

// unpin ends a pin; wrote says whether the file changed under it.
func (h *fileHandle) unpin(wrote bool) {
	c := h.l.files
	c.mu.Lock()
	if wrote {
		h.writes++
	}
	h.pins--
	var victims []any
	if h.pins == 0 {
		if h.gone {
			h.state = handleClosing
			c.closing++
			victims = []any{h}
		} else {
			c.idle.pushFront(&h.node)
			victims = c.evictLocked()
		}
	}
	c.mu.Unlock()
	c.closeVictims(victims)
}

// closeFile closes a handle in the closing state, fsyncing it first when
// writes are not covered, unless it is gone (nothing to keep) or its log
// failed (an fsync is never retried after it failed, and nothing trusts a
// failed log's unsynced bytes).
func (h *fileHandle) closeFile() {
	c := h.l.files
	c.mu.Lock()
	dirty := h.writes != h.synced && !h.gone
	c.mu.Unlock()
	var syncErr error
	if dirty && h.l.failure.Load() == nil {
		if err := h.f.Sync(); err != nil {
			syncErr = fmt.Errorf("segstore: fsync %s before closing it: %w", h.path, err)
			h.l.fail(syncErr)
		}
	}
	h.f.Close()
	c.mu.Lock()
	if syncErr != nil {
		h.syncErr = syncErr
	}
	h.f, h.state = nil, handleClosed
	h.synced = h.writes
	c.open--
	c.closing--
	c.cond.Broadcast()
	c.mu.Unlock()
}

// drop closes the file for good (its segment is deleted or released):
// now if no one uses it, else at the last unpin.
func (h *fileHandle) drop() {
	c := h.l.files
	c.mu.Lock()
	h.gone = true
	for h.state == handleOpening || h.state == handleClosing {
		c.cond.Wait()
	}
	if h.state != handleOpen || h.pins > 0 {
		c.mu.Unlock()
		return
	}
	c.idle.remove(&h.node)
	h.state = handleClosing
	c.closing++
	c.mu.Unlock()
	c.closeVictims([]any{h})
}

// Sync fsyncs the file. A file that is gone and closed has nothing left to
// make durable: it was deleted (or already synced by its log's Close).
func (h *fileHandle) Sync() error {
	c := h.l.files
	c.mu.Lock()
	if h.gone && h.state != handleOpen {
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	f, err := h.pin()
	if err != nil {
		return err
	}
	c.mu.Lock()
	covered, failed := h.writes, h.syncErr
	c.mu.Unlock()
	if failed != nil {
		h.unpin(false)
		return failed
	}
	err = f.Sync()
	if err == nil {
		c.mu.Lock()
		h.synced = max(h.synced, covered)
		c.mu.Unlock()
	}
	h.unpin(false)
	return err
}

// ReadAt reads through a pin.
func (h *fileHandle) ReadAt(p []byte, off int64) (int, error) {
	f, err := h.pin()
	if err != nil {
		return 0, err
	}
	defer h.unpin(false)
	return f.ReadAt(p, off)
}

// WriteAt writes through a pin.
func (h *fileHandle) WriteAt(p []byte, off int64) (int, error) {
	f, err := h.pin()
	if err != nil {
		return 0, err
	}
	defer h.unpin(true)
	return f.WriteAt(p, off)
}

// Truncate truncates through a pin.
func (h *fileHandle) Truncate(size int64) error {
	f, err := h.pin()
	if err != nil {
		return err
	}
	defer h.unpin(true)
	return f.Truncate(size)
}

// Allocate allocates through a pin.
func (h *fileHandle) Allocate(off, n int64) error {
	f, err := h.pin()
	if err != nil {
		return err
	}
	defer h.unpin(true)
	return f.Allocate(off, n)
}

// ModTime stats through a pin.
func (h *fileHandle) ModTime() (time.Time, error) {
	f, err := h.pin()
	if err != nil {
		return time.Time{}, err
	}
	defer h.unpin(false)
	return f.ModTime()
}

// Size stats through a pin.
func (h *fileHandle) Size() (int64, error) {
	f, err := h.pin()
	if err != nil {
		return 0, err
	}
	defer h.unpin(false)
	return f.Size()
}

// pooledReader is an idle read descriptor kept for a segment's next Region.
type pooledReader struct {
	seg  *segment
	f    *os.File
	node lruNode
}

// lruList is an intrusive doubly linked list of what the cache may close,
// so that pinning and unpinning (on every append and read) allocate
// nothing. Guarded by the cache's mu.
type lruList struct{ root lruNode }

type lruNode struct {
	prev, next *lruNode
	v          any // the *fileHandle or *pooledReader holding the node
}

func (l *lruList) init() { l.root.prev, l.root.next = &l.root, &l.root }

func (n *lruNode) linked() bool { return n.next != nil }

func (l *lruList) pushFront(n *lruNode) {
	n.prev, n.next = &l.root, l.root.next
	l.root.next.prev = n
	l.root.next = n
}

func (l *lruList) remove(n *lruNode) {
	n.prev.next, n.next.prev = n.next, n.prev
	n.prev, n.next = nil, nil
}

// back is the least recently used node, or nil.
func (l *lruList) back() *lruNode {
	if l.root.prev == &l.root {
		return nil
	}
	return l.root.prev
}
