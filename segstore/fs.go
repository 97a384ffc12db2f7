package segstore

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// FS is every file system operation a Log performs. OSFS is the production
// implementation; FaultFS injects errors and simulates crashes in tests.
type FS interface {
	// OpenFile opens or creates a file, with the flags of os.OpenFile.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// OpenReader opens a file read-only as an *os.File with its own file
	// offset, so a Region can be served with sendfile(2).
	OpenReader(name string) (*os.File, error)
	// Rename renames a file or a directory.
	Rename(oldpath, newpath string) error
	Remove(name string) error
	// RemoveAll removes path and everything under it, as os.RemoveAll:
	// entry by entry, so a crash or an error part way leaves some of them.
	// Callers that must not leave a partial tree behind rename it away
	// first (the agent's partition deletion does).
	RemoveAll(path string) error
	// ReadDir returns the names of the entries of dir, sorted.
	ReadDir(dir string) ([]string, error)
	MkdirAll(dir string, perm os.FileMode) error
	// SyncDir makes the creations, renames and removals of entries in dir
	// durable.
	SyncDir(dir string) error
}

// File is an open file. Writes are positional: a log never shares a file
// offset between its appender and its readers.
type File interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	Sync() error
	Truncate(size int64) error
	// Allocate reserves disk blocks for [off, off+n) without changing the
	// size (fallocate(2) with FALLOC_FL_KEEP_SIZE), so that a later write
	// there through mmap cannot fault for want of space. File systems
	// without fallocate succeed without reserving anything.
	Allocate(off, n int64) error
	Size() (int64, error)
	// ModTime is the file's last modification time (fstat(2)'s mtime):
	// time retention's age of a segment without timestamps.
	ModTime() (time.Time, error)
	// Fd is the descriptor, for mmap(2) of index files.
	Fd() uintptr
	Close() error
}

// OSFS is FS over the operating system's files.
type OSFS struct{}

type osFile struct{ *os.File }

func (f osFile) Size() (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (f osFile) ModTime() (time.Time, error) {
	fi, err := f.Stat()
	if err != nil {
		return time.Time{}, err
	}
	return fi.ModTime(), nil
}

func (f osFile) Allocate(off, n int64) error {
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, off, n)
	if errors.Is(err, unix.EOPNOTSUPP) {
		return nil
	}
	if err != nil {
		return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
	}
	return nil
}

// OpenFile implements FS.
func (OSFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// OpenReader implements FS.
func (OSFS) OpenReader(name string) (*os.File, error) { return os.Open(name) }

// Rename implements FS.
func (OSFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// Remove implements FS.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// RemoveAll implements FS.
func (OSFS) RemoveAll(path string) error { return os.RemoveAll(path) }

// MkdirAll implements FS.
func (OSFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }

// ReadDir implements FS.
func (OSFS) ReadDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	sort.Strings(names)
	return names, nil
}

// SyncDir implements FS. Calls for one directory that overlap share an
// fsync(2) that started after each of them began (dirsync.go).
func (OSFS) SyncDir(dir string) error { return syncDirCoalesced(dir, fsyncDir) }

func fsyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return d.Close()
}

func isNotExist(err error) bool { return errors.Is(err, os.ErrNotExist) }
