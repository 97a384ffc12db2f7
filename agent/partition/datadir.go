package partition

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/logagent/logagent/segstore"
)

// The agent-level files of a data directory (docs/design.md §5). Partitions live in
// subdirectories and belong to segstore.
//
//	<data_dir>/
//	  meta.json        {"node_id": "n1", "format": 2}: written once, checked at every start
//	  .lock            flock(2)ed while an agent uses the directory; holds its PID for messages
//	  clean_shutdown   written last on a clean stop, removed at start
//	  boot_id          the kernel boot id (/proc/sys/kernel/random/boot_id) the agent last started under
//
// A start without clean_shutdown under another boot id than boot_id's means
// the host went down with the agent running: the page cache is gone, and
// with durability = "replicated" so may be acknowledged records that were
// never fsynced. The agent then marks every partition as having lost data
// (replica.json) before it records the new boot id.
const (
	metaFileName          = "meta.json"
	lockFileName          = ".lock"
	cleanShutdownFileName = "clean_shutdown"
	bootIDFileName        = "boot_id"
	// dataDirFormat 2 stores Kafka's RecordBatch v2 (magic 2) and
	// producer snapshots; format 1 (magic 1 batches) is not read.
	dataDirFormat = 2
)

// bootIDPath is where Linux publishes the current boot's id.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// ErrDataDirLocked is returned when another process holds the data
// directory's lock.
var ErrDataDirLocked = errors.New("agent: data directory is locked by another agent")

// ErrOlderFormat is returned for a data directory written by an older
// logagent, whose batches this one does not read.
var ErrOlderFormat = errors.New("agent: data directory written by an older format")

// ErrNodeMismatch is returned when the data directory belongs to another
// node_id: using it would mix two nodes' replicas.
var ErrNodeMismatch = errors.New("agent: data directory belongs to another node")

type metaFile struct {
	NodeID string `json:"node_id"`
	Format int    `json:"format"`
}

// DataDir is an open, locked data directory.
type DataDir struct {
	Path string
	// CleanShutdown reports whether the previous agent stopped cleanly.
	CleanShutdown bool
	// LostPageCache reports that the host rebooted since the previous
	// agent started, and that agent did not stop cleanly: whatever it had
	// not fsynced is gone.
	LostPageCache bool
	// ReplicatedBefore reports that boot_id says the previous agent ran
	// with durability = "replicated" (acknowledging unsynced records), or
	// followed one that did without a clean stop in between.
	ReplicatedBefore bool
	bootID           string
	fs               segstore.FS
	lock             segstore.File
}

// OpenDataDir creates or opens dir for nodeID through fsys and locks it.
// The lock is held until Close; a second agent gets ErrDataDirLocked naming
// the lock file.
func OpenDataDir(fsys segstore.FS, dir, nodeID string) (*DataDir, error) {
	if err := fsys.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("agent: create data directory: %w", err)
	}
	lockPath := filepath.Join(dir, lockFileName)
	f, err := fsys.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("agent: open lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := ""
		if b, rerr := readFileFS(fsys, lockPath, smallFileLimit); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
			holder = " (held by pid " + strings.TrimSpace(string(b)) + ")"
		}
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: cannot lock %s%s", ErrDataDirLocked, lockPath, holder)
		}
		return nil, fmt.Errorf("agent: lock %s: %w", lockPath, err)
	}
	d := &DataDir{Path: dir, fs: fsys, lock: f}
	if err := d.init(nodeID); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

func (d *DataDir) init(nodeID string) error {
	if err := d.lock.Truncate(0); err != nil {
		return fmt.Errorf("agent: write lock file: %w", err)
	}
	if _, err := d.lock.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		return fmt.Errorf("agent: write lock file: %w", err)
	}

	metaPath := filepath.Join(d.Path, metaFileName)
	b, err := readFileFS(d.fs, metaPath, smallFileLimit)
	switch {
	case errors.Is(err, os.ErrNotExist):
		out, _ := json.Marshal(metaFile{NodeID: nodeID, Format: dataDirFormat})
		if err := writeFileAtomic(d.fs, metaPath, append(out, '\n')); err != nil {
			return fmt.Errorf("agent: write %s: %w", metaPath, err)
		}
	case err != nil:
		return fmt.Errorf("agent: read %s: %w", metaPath, err)
	default:
		var m metaFile
		if err := json.Unmarshal(b, &m); err != nil {
			return fmt.Errorf("agent: %s is not valid: %w", metaPath, err)
		}
		if m.Format < dataDirFormat {
			return fmt.Errorf("%w: %s says format %d, this agent reads format %d only; move the directory away (its partitions are fetched again from the other replicas) or run the build that wrote it",
				ErrOlderFormat, metaPath, m.Format, dataDirFormat)
		}
		if m.Format != dataDirFormat {
			return fmt.Errorf("agent: %s has format %d, written by a newer logagent; this agent reads format %d", metaPath, m.Format, dataDirFormat)
		}
		if m.NodeID != nodeID {
			return fmt.Errorf("%w: %s is node %q's and this agent is %q; point data_dir elsewhere or fix node_id", ErrNodeMismatch, d.Path, m.NodeID, nodeID)
		}
	}

	// The kernel's, not the data directory's: read from /proc directly.
	if b, err := os.ReadFile(bootIDPath); err == nil {
		d.bootID = strings.TrimSpace(string(b))
	}
	previousBoot, err := readFileFS(d.fs, filepath.Join(d.Path, bootIDFileName), smallFileLimit)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("agent: read %s: %w", bootIDFileName, err)
	}

	marker := filepath.Join(d.Path, cleanShutdownFileName)
	switch _, err := readFileFS(d.fs, marker, smallFileLimit); {
	case err == nil:
		d.CleanShutdown = true
		if err := d.fs.Remove(marker); err != nil {
			return fmt.Errorf("agent: remove %s: %w", marker, err)
		}
		if err := d.fs.SyncDir(d.Path); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("agent: read %s: %w", marker, err)
	}
	lines := strings.Fields(string(previousBoot))
	prev := ""
	if len(lines) > 0 {
		prev = lines[0]
	}
	d.ReplicatedBefore = len(lines) > 1 && lines[1] == "replicated"
	if !d.CleanShutdown && prev != "" && d.bootID != "" && prev != d.bootID {
		d.LostPageCache = true
	}
	return nil
}

// RecordBoot stores the current boot id, and whether this agent runs with
// durability = "replicated". The agent calls it once whatever LostPageCache
// implies has been recorded in the partitions.
func (d *DataDir) RecordBoot(replicated bool) error {
	if d.bootID == "" {
		return nil
	}
	content := d.bootID + "\n"
	// What was not synced under "replicated" stays at risk until a clean
	// stop: the mark carries over an unclean stop.
	if replicated || (d.ReplicatedBefore && !d.CleanShutdown) {
		content += "replicated\n"
	}
	return writeFileAtomic(d.fs, filepath.Join(d.Path, bootIDFileName), []byte(content))
}

// MarkAllDataLoss records in every partition directory that the replica may
// have lost acknowledged data (see LostPageCache), durably, before anything
// opens the partitions. It returns how many it marked.
func (d *DataDir) MarkAllDataLoss() (int, error) {
	names, err := d.fs.ReadDir(d.Path)
	if err != nil {
		return 0, fmt.Errorf("agent: list %s: %w", d.Path, err)
	}
	marked := 0
	for _, name := range names {
		dir := filepath.Join(d.Path, name)
		f, found, err := readReplicaFile(d.fs, dir)
		if err != nil {
			return marked, err
		}
		if !found || f.DataLoss {
			continue
		}
		f.DataLoss = true
		if err := writeReplicaFile(d.fs, dir, f); err != nil {
			return marked, fmt.Errorf("agent: mark %s as having lost data: %w", dir, err)
		}
		marked++
	}
	return marked, nil
}

// MarkCleanShutdown records that every partition was closed cleanly. It is
// the last write of a graceful stop.
func (d *DataDir) MarkCleanShutdown() error {
	return writeFileAtomic(d.fs, filepath.Join(d.Path, cleanShutdownFileName), nil)
}

// Close releases the lock.
func (d *DataDir) Close() error {
	if d.lock == nil {
		return nil
	}
	err := d.lock.Close() // closing the descriptor releases the flock
	d.lock = nil
	return err
}

// writeFileAtomic replaces name with data so that a crash leaves either the
// old or the new content: write a temporary file, fsync it, rename it over
// name, fsync the directory.
func writeFileAtomic(fsys segstore.FS, name string, data []byte) error {
	tmp := name + ".tmp"
	f, err := fsys.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	// A temporary file left by a failure would hold its space on a full
	// disk until the next write of the file.
	abandon := func(err error) error {
		if rmErr := fsys.Remove(tmp); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
			return errors.Join(err, rmErr)
		}
		return err
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		f.Close()
		return abandon(err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return abandon(err)
	}
	if err := f.Close(); err != nil {
		return abandon(err)
	}
	if err := fsys.Rename(tmp, name); err != nil {
		return abandon(err)
	}
	if err := fsys.SyncDir(filepath.Dir(name)); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}
