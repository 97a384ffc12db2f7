package segstore

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// FaultFS is an FS for tests: an overlay over the real files under a root
// directory that injects errors into chosen operations (Inject) and
// simulates a machine crash (Crash, CrashAfter, Reconstruct).
//
// Crash model. FaultFS remembers, per file, its content as of its last
// successful Sync plus the writes and truncations made since, and per
// directory, its entries as of its last successful SyncDir. Reconstruct
// builds what a rebooted machine would find:
//   - a directory holds exactly its durable entries: creations, renames
//     and removals not followed by a SyncDir of that directory are undone
//     (directories made by MkdirAll, and the renames and removals of whole
//     directories, count as durable at once);
//   - each file holds its durable content plus, picked at random per file,
//     nothing more; an in-order prefix of the later writes and truncations
//     whose next write may be torn at any byte; or everything, i.e. the
//     file's real content at the crash, which includes unsynced writes made
//     through mmap.
//
// Writes through mmap (index files) reach FaultFS only when the file is
// synced (Sync snapshots the real file) or through the "everything" pick.
// Real fsyncs are skipped: durability is simulated. Injected sync failures
// leave the durable content as it was, as Linux may after a failed fsync.
type FaultFS struct {
	mu      sync.Mutex
	root    string
	live    map[string]*faultNode
	durable map[string]*faultNode
	dirs    map[string]bool
	faults  []*Fault
	ops     int
	armed   bool
	crashAt int
	crashed bool
}

// FaultOp names the operations faults and crash points count.
type FaultOp int

// Operations FaultFS counts.
const (
	OpWrite FaultOp = iota + 1
	OpSync
	OpSyncDir
	OpTruncate
	OpCreate
	OpRename
	OpRemove
	OpAllocate
	// OpOpen is every OpenFile and OpenReader, creating or not. Opens do
	// not count as operations for crash points (Ops, CrashAfter).
	OpOpen
)

func (op FaultOp) String() string {
	names := [...]string{"", "write", "sync", "syncdir", "truncate", "create", "rename", "remove", "allocate", "open"}
	if op <= 0 || int(op) >= len(names) {
		return fmt.Sprintf("op(%d)", int(op))
	}
	return names[op]
}

// Fault makes the Nth matching operation from now fail.
type Fault struct {
	Op FaultOp
	// Nth counts matching operations from the call to Inject: 1 (or 0) is
	// the next one.
	Nth int
	// Path restricts the fault to paths that contain it; empty for any.
	Path string
	// Err is returned; ErrInjected when nil.
	Err error
	// Partial makes a failing write store the first half of its data.
	Partial bool
	// Sticky keeps the fault armed: from the Nth matching operation on,
	// every matching one fails until Clear, as on a full disk.
	Sticky bool
}

var (
	// ErrInjected is the default error of an injected fault.
	ErrInjected = errors.New("segstore: injected fault")
	// ErrCrashed is returned by every operation after a simulated crash.
	ErrCrashed = errors.New("segstore: simulated crash")
)

type faultNode struct {
	durable []byte
	pending []faultChange
	latest  []byte // the real content at the crash
	syncs   int
}

// faultChange is an unsynced write, or a truncation to size off.
type faultChange struct {
	off      int64
	data     []byte
	truncate bool
}

// NewFaultFS starts tracking the files under root; what is there now counts
// as durable.
func NewFaultFS(root string) (*FaultFS, error) {
	root = filepath.Clean(root)
	f := &FaultFS{
		root:    root,
		live:    map[string]*faultNode{},
		durable: map[string]*faultNode{},
		dirs:    map[string]bool{},
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			f.dirs[path] = true
			return nil
		}
		content, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n := &faultNode{durable: content}
		f.live[path], f.durable[path] = n, n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("segstore: fault fs: %w", err)
	}
	return f, nil
}

// Inject arms a fault.
func (f *FaultFS) Inject(ft Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ft.Err == nil {
		ft.Err = ErrInjected
	}
	f.faults = append(f.faults, &ft)
}

// Clear disarms every fault, sticky ones included.
func (f *FaultFS) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = nil
}

// CrashAfter lets n more counted operations happen; the one after crashes.
func (f *FaultFS) CrashAfter(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed, f.crashAt = true, f.ops+n
}

// HoldCrash keeps the crash point CrashAfter set from being reached until
// the returned func is called, which moves it on by the operations counted
// meanwhile: a test's own checks between two steps of the workload it
// crashes (reads that make a file cache close and fsync files) do not
// spend the workload's operations.
func (f *FaultFS) HoldCrash() (release func()) {
	f.mu.Lock()
	armed, start := f.armed, f.ops
	f.armed = false
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if armed {
			f.armed, f.crashAt = true, f.crashAt+f.ops-start
		}
	}
}

// Crash simulates a crash now.
func (f *FaultFS) Crash() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.crashLocked()
}

// Crashed reports whether the crash happened.
func (f *FaultFS) Crashed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.crashed
}

// Ops is the number of counted operations performed so far.
func (f *FaultFS) Ops() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ops
}

// SyncCalls is how many times Sync was called on the file now at path,
// including calls that failed.
func (f *FaultFS) SyncCalls(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := f.live[filepath.Clean(path)]; n != nil {
		return n.syncs
	}
	return 0
}

func (f *FaultFS) crashLocked() {
	if f.crashed {
		return
	}
	f.crashed = true
	seen := map[*faultNode]bool{}
	for path, n := range f.live {
		if content, err := os.ReadFile(path); err == nil {
			n.latest = content
			seen[n] = true
		}
	}
	for _, n := range f.durable {
		if !seen[n] {
			n.latest = applyChanges(n.durable, n.pending)
		}
	}
}

// openFault returns the error of an OpOpen fault that matches path.
// Caller holds mu.
func (f *FaultFS) openFault(path string) error {
	for i, ft := range f.faults {
		if ft.Op != OpOpen || !strings.Contains(path, ft.Path) {
			continue
		}
		if ft.Nth--; ft.Nth <= 0 {
			if !ft.Sticky {
				f.faults = slices.Delete(f.faults, i, i+1)
			}
			return &os.PathError{Op: "open", Path: path, Err: ft.Err}
		}
	}
	return nil
}

// begin counts a mutating operation and decides whether it crashes or
// fails. Caller holds mu.
func (f *FaultFS) begin(op FaultOp, path string) (*Fault, error) {
	if f.crashed {
		return nil, ErrCrashed
	}
	if f.armed && f.ops >= f.crashAt {
		f.crashLocked()
		return nil, ErrCrashed
	}
	f.ops++
	for i, ft := range f.faults {
		if ft.Op != op || !strings.Contains(path, ft.Path) {
			continue
		}
		if ft.Nth--; ft.Nth <= 0 {
			if !ft.Sticky {
				f.faults = slices.Delete(f.faults, i, i+1)
			}
			return ft, fmt.Errorf("%s %s: %w", op, path, ft.Err)
		}
	}
	return nil, nil
}

func (f *FaultFS) readable() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed {
		return ErrCrashed
	}
	return nil
}

// OpenFile implements FS.
func (f *FaultFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	name = filepath.Clean(name)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed {
		return nil, ErrCrashed
	}
	if err := f.openFault(name); err != nil {
		return nil, err
	}
	n, exists := f.live[name]
	switch {
	case !exists && flag&os.O_CREATE != 0:
		if _, err := f.begin(OpCreate, name); err != nil {
			return nil, err
		}
	case exists && flag&os.O_TRUNC != 0:
		if _, err := f.begin(OpTruncate, name); err != nil {
			return nil, err
		}
	}
	// Read access lets Sync snapshot the file through this descriptor.
	realFlag := flag
	if flag&os.O_WRONLY != 0 {
		realFlag = flag&^os.O_WRONLY | os.O_RDWR
	}
	osf, err := os.OpenFile(name, realFlag, perm)
	if err != nil {
		return nil, err
	}
	switch {
	case !exists:
		n = &faultNode{}
		f.live[name] = n
	case flag&os.O_TRUNC != 0:
		n.pending = append(n.pending, faultChange{truncate: true})
	}
	return &faultFile{fs: f, node: n, path: name, f: osf}, nil
}

// OpenReader implements FS.
func (f *FaultFS) OpenReader(name string) (*os.File, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed {
		return nil, ErrCrashed
	}
	if err := f.openFault(name); err != nil {
		return nil, err
	}
	return os.Open(name)
}

// Rename implements FS.
func (f *FaultFS) Rename(oldpath, newpath string) error {
	oldpath, newpath = filepath.Clean(oldpath), filepath.Clean(newpath)
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.begin(OpRename, oldpath); err != nil {
		return err
	}
	if err := os.Rename(oldpath, newpath); err != nil {
		return err
	}
	if f.dirs[oldpath] {
		f.moveTreeLocked(oldpath, newpath)
		return nil
	}
	f.live[newpath] = f.live[oldpath]
	delete(f.live, oldpath)
	return nil
}

// moveTreeLocked moves what FaultFS knows of the directory oldpath and
// everything under it to newpath, durably at once. Caller holds mu.
func (f *FaultFS) moveTreeLocked(oldpath, newpath string) {
	for _, m := range []map[string]*faultNode{f.live, f.durable} {
		moved := map[string]*faultNode{}
		for path, n := range m {
			if rel, ok := underDir(oldpath, path); ok {
				delete(m, path)
				moved[filepath.Join(newpath, rel)] = n
			}
		}
		maps.Copy(m, moved)
	}
	var dirs []string
	for d := range f.dirs {
		if rel, ok := underDir(oldpath, d); ok {
			delete(f.dirs, d)
			dirs = append(dirs, filepath.Join(newpath, rel))
		}
	}
	for _, d := range dirs {
		f.dirs[d] = true
	}
	delete(f.dirs, oldpath)
	f.dirs[newpath] = true
}

// inTree reports whether path is dir or inside it.
func inTree(dir, path string) bool {
	_, inside := underDir(dir, path)
	return inside || path == dir
}

// underDir reports whether path is inside dir, and where relative to it.
func underDir(dir, path string) (string, bool) {
	rel, err := filepath.Rel(dir, path)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return rel, true
}

// Remove implements FS.
func (f *FaultFS) Remove(name string) error {
	name = filepath.Clean(name)
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.begin(OpRemove, name); err != nil {
		return err
	}
	if err := os.Remove(name); err != nil {
		return err
	}
	delete(f.live, name)
	return nil
}

// RemoveAll implements FS. A fault makes it fail before it removes
// anything; what it removes is gone durably at once.
func (f *FaultFS) RemoveAll(path string) error {
	path = filepath.Clean(path)
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.begin(OpRemove, path); err != nil {
		return err
	}
	if err := os.RemoveAll(path); err != nil {
		return err
	}
	for _, m := range []map[string]*faultNode{f.live, f.durable} {
		maps.DeleteFunc(m, func(p string, _ *faultNode) bool { return inTree(path, p) })
	}
	maps.DeleteFunc(f.dirs, func(d string, _ bool) bool { return inTree(path, d) })
	return nil
}

// ReadDir implements FS.
func (f *FaultFS) ReadDir(dir string) ([]string, error) {
	if err := f.readable(); err != nil {
		return nil, err
	}
	return OSFS{}.ReadDir(dir)
}

// MkdirAll implements FS. New directories are durable at once.
func (f *FaultFS) MkdirAll(dir string, perm os.FileMode) error {
	dir = filepath.Clean(dir)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed {
		return ErrCrashed
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	for d := dir; strings.HasPrefix(d, f.root); d = filepath.Dir(d) {
		f.dirs[d] = true
		if d == f.root {
			break
		}
	}
	return nil
}

// SyncDir implements FS.
func (f *FaultFS) SyncDir(dir string) error {
	dir = filepath.Clean(dir)
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.begin(OpSyncDir, dir); err != nil {
		return err
	}
	for path := range f.durable {
		if filepath.Dir(path) == dir && f.live[path] == nil {
			delete(f.durable, path)
		}
	}
	for path, n := range f.live {
		if filepath.Dir(path) == dir {
			f.durable[path] = n
		}
	}
	return nil
}

// Reconstruct writes into dst (which must not exist) the tree a machine
// would find under root after the crash, picking what survives with rng.
func (f *FaultFS) Reconstruct(dst string, rng *rand.Rand) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.crashed {
		return errors.New("segstore: reconstruct before the crash")
	}
	dirs := make([]string, 0, len(f.dirs))
	for d := range f.dirs {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		rel, err := filepath.Rel(f.root, d)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dst, rel), 0o755); err != nil {
			return err
		}
	}
	paths := make([]string, 0, len(f.durable))
	for p := range f.durable {
		paths = append(paths, p)
	}
	sort.Strings(paths) // deterministic use of rng
	for _, p := range paths {
		rel, err := filepath.Rel(f.root, p)
		if err != nil || strings.HasPrefix(rel, "..") {
			return fmt.Errorf("segstore: fault fs: %s is outside %s", p, f.root)
		}
		if err := os.WriteFile(filepath.Join(dst, rel), survivor(f.durable[p], rng), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// survivor picks what of a file survives the crash.
func survivor(n *faultNode, rng *rand.Rand) []byte {
	switch rng.IntN(3) {
	case 0:
		return applyChanges(n.durable, nil)
	case 1:
		k := rng.IntN(len(n.pending) + 1)
		content := applyChanges(n.durable, n.pending[:k])
		if k < len(n.pending) && !n.pending[k].truncate && rng.IntN(2) == 0 {
			w := n.pending[k]
			content = applyChanges(content, []faultChange{{off: w.off, data: w.data[:rng.IntN(len(w.data)+1)]}})
		}
		return content
	default:
		return applyChanges(n.latest, nil)
	}
}

func applyChanges(base []byte, changes []faultChange) []byte {
	out := append([]byte(nil), base...)
	for _, c := range changes {
		if c.truncate {
			if int64(len(out)) >= c.off {
				out = out[:c.off]
			} else {
				out = append(out, make([]byte, c.off-int64(len(out)))...)
			}
			continue
		}
		if end := c.off + int64(len(c.data)); end > int64(len(out)) {
			out = append(out, make([]byte, end-int64(len(out)))...)
		}
		copy(out[c.off:], c.data)
	}
	return out
}

type faultFile struct {
	fs   *FaultFS
	node *faultNode
	path string
	f    *os.File
}

func (ff *faultFile) ReadAt(p []byte, off int64) (int, error) {
	if err := ff.fs.readable(); err != nil {
		return 0, err
	}
	return ff.f.ReadAt(p, off)
}

func (ff *faultFile) WriteAt(p []byte, off int64) (int, error) {
	ff.fs.mu.Lock()
	defer ff.fs.mu.Unlock()
	ft, err := ff.fs.begin(OpWrite, ff.path)
	if err != nil {
		if ft != nil && ft.Partial {
			half := p[:len(p)/2]
			n, _ := ff.f.WriteAt(half, off)
			ff.node.pending = append(ff.node.pending, faultChange{off: off, data: append([]byte(nil), half[:n]...)})
			return n, err
		}
		return 0, err
	}
	n, err := ff.f.WriteAt(p, off)
	ff.node.pending = append(ff.node.pending, faultChange{off: off, data: append([]byte(nil), p[:n]...)})
	return n, err
}

func (ff *faultFile) Sync() error {
	ff.fs.mu.Lock()
	defer ff.fs.mu.Unlock()
	ff.node.syncs++
	if _, err := ff.fs.begin(OpSync, ff.path); err != nil {
		return err
	}
	fi, err := ff.f.Stat()
	if err != nil {
		return err
	}
	content := make([]byte, fi.Size())
	if n, err := ff.f.ReadAt(content, 0); n < len(content) {
		return fmt.Errorf("segstore: fault fs: snapshot %s: %w", ff.path, err)
	}
	ff.node.durable, ff.node.pending = content, nil
	return nil
}

func (ff *faultFile) Truncate(size int64) error {
	ff.fs.mu.Lock()
	defer ff.fs.mu.Unlock()
	if _, err := ff.fs.begin(OpTruncate, ff.path); err != nil {
		return err
	}
	if err := ff.f.Truncate(size); err != nil {
		return err
	}
	ff.node.pending = append(ff.node.pending, faultChange{off: size, truncate: true})
	return nil
}

// Allocate reserves for real; it changes no content, so the crash model
// does not see it.
func (ff *faultFile) Allocate(off, n int64) error {
	ff.fs.mu.Lock()
	defer ff.fs.mu.Unlock()
	if _, err := ff.fs.begin(OpAllocate, ff.path); err != nil {
		return err
	}
	return osFile{ff.f}.Allocate(off, n)
}

func (ff *faultFile) Size() (int64, error) {
	if err := ff.fs.readable(); err != nil {
		return 0, err
	}
	return osFile{ff.f}.Size()
}

func (ff *faultFile) ModTime() (time.Time, error) {
	if err := ff.fs.readable(); err != nil {
		return time.Time{}, err
	}
	return osFile{ff.f}.ModTime()
}

func (ff *faultFile) Fd() uintptr { return ff.f.Fd() }

// Close always releases the real descriptor, also after a crash.
func (ff *faultFile) Close() error { return ff.f.Close() }
