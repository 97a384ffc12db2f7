package segstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// Checkpoint files are small text files, each replaced atomically: written
// to <name>.tmp, fsynced, renamed over <name>, and the directory fsynced.
// Each starts with a version line, "0", and ends every line with "\n".
//
//	hw-checkpoint      log-start-offset    recovery-point
//	+-----------+      +-----------+       +-------------------------------+
//	| 0         |      | 0         |       | 0                             |
//	| <hw>      |      | <offset>  |       | <offset> <segment base> <pos> |
//	+-----------+      +-----------+       +-------------------------------+
//
//	leader-epoch-checkpoint (Kafka's layout)
//	+-----------------+
//	| 0               |  version
//	| <n>             |  number of entries
//	| <epoch> <start> |  n lines, strictly increasing in both fields
//	+-----------------+
//
// The recovery point names the segment and byte position of an offset, so
// recovery can start validating exactly there without an index lookup.
const (
	hwCheckpointFile    = "hw-checkpoint"
	logStartOffsetFile  = "log-start-offset"
	recoveryPointFile   = "recovery-point"
	epochCheckpointFile = "leader-epoch-checkpoint"
	tmpSuffix           = ".tmp"

	checkpointVersion = 0
	// maxCheckpointBytes bounds what Open reads from a checkpoint file.
	maxCheckpointBytes = 1 << 20
)

// noSpaceCheckpoint marks a checkpoint the file system refused for want of
// space with ErrNoSpace, after removing its temporary file: the checkpoint
// in place is untouched, so the log may go on with it.
func noSpaceCheckpoint(fsys FS, tmp string, err error) error {
	if !isNoSpace(err) {
		return err
	}
	if rerr := fsys.Remove(tmp); rerr != nil && !isNotExist(rerr) {
		return fmt.Errorf("%w (removing %s: %w)", err, tmp, rerr)
	}
	return fmt.Errorf("%w: %w", ErrNoSpace, err)
}

// writeCheckpointFile replaces dir/name atomically with lines of integers.
func writeCheckpointFile(fsys FS, dir, name string, lines [][]int64) error {
	buf := make([]byte, 0, 32*len(lines)+8)
	buf = strconv.AppendInt(buf, checkpointVersion, 10)
	buf = append(buf, '\n')
	for _, fields := range lines {
		for i, v := range fields {
			if i > 0 {
				buf = append(buf, ' ')
			}
			buf = strconv.AppendInt(buf, v, 10)
		}
		buf = append(buf, '\n')
	}
	path := filepath.Join(dir, name)
	tmp := path + tmpSuffix
	f, err := fsys.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return noSpaceCheckpoint(fsys, tmp, fmt.Errorf("segstore: checkpoint %s: %w", name, err))
	}
	if _, err := f.WriteAt(buf, 0); err != nil {
		f.Close()
		return noSpaceCheckpoint(fsys, tmp, fmt.Errorf("segstore: checkpoint %s: write: %w", name, err))
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("segstore: checkpoint %s: fsync: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("segstore: checkpoint %s: close: %w", name, err)
	}
	if err := fsys.Rename(tmp, path); err != nil {
		return fmt.Errorf("segstore: checkpoint %s: rename: %w", name, err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("segstore: checkpoint %s: fsync directory: %w", name, err)
	}
	return nil
}

// readCheckpointFile returns the lines after the version line, each with
// exactly width integers, or any number of them when width is 0. found is
// false when the file does not exist.
func readCheckpointFile(fsys FS, dir, name string, width int) (lines [][]int64, found bool, err error) {
	path := filepath.Join(dir, name)
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("segstore: read checkpoint %s: %w", name, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, false, fmt.Errorf("segstore: read checkpoint %s: %w", name, err)
	}
	corrupt := func(format string, args ...any) error {
		return &CorruptError{Path: path, Err: fmt.Errorf(format, args...)}
	}
	if size > maxCheckpointBytes {
		return nil, false, corrupt("checkpoint of %d bytes", size)
	}
	buf := make([]byte, size)
	if n, err := f.ReadAt(buf, 0); n < len(buf) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, false, fmt.Errorf("segstore: read checkpoint %s: %w", name, err)
	}
	if len(buf) == 0 || buf[len(buf)-1] != '\n' {
		return nil, false, corrupt("missing final newline")
	}
	rows := bytes.Split(buf[:len(buf)-1], []byte{'\n'})
	if string(rows[0]) != strconv.Itoa(checkpointVersion) {
		return nil, false, corrupt("unknown version %q", rows[0])
	}
	for i, row := range rows[1:] {
		fields := bytes.Split(row, []byte{' '})
		if width > 0 && len(fields) != width {
			return nil, false, corrupt("line %d has %d fields, want %d", i+2, len(fields), width)
		}
		vals := make([]int64, len(fields))
		for j, field := range fields {
			v, err := strconv.ParseInt(string(field), 10, 64)
			if err != nil {
				return nil, false, corrupt("line %d: %v", i+2, err)
			}
			vals[j] = v
		}
		lines = append(lines, vals)
	}
	return lines, true, nil
}

// readOffsetCheckpoint reads a file holding one non-negative offset.
func readOffsetCheckpoint(fsys FS, dir, name string) (int64, bool, error) {
	lines, found, err := readCheckpointFile(fsys, dir, name, 1)
	if err != nil || !found {
		return 0, found, err
	}
	if len(lines) != 1 || lines[0][0] < 0 {
		return 0, false, &CorruptError{Path: filepath.Join(dir, name), Err: fmt.Errorf("want one non-negative offset, have %v", lines)}
	}
	return lines[0][0], true, nil
}

func writeOffsetCheckpoint(fsys FS, dir, name string, offset int64) error {
	return writeCheckpointFile(fsys, dir, name, [][]int64{{offset}})
}

// logPosition is an offset at a batch boundary and where it lives on disk.
type logPosition struct {
	offset      int64
	segmentBase int64
	pos         int64
}

func readRecoveryPoint(fsys FS, dir string) (logPosition, bool, error) {
	lines, found, err := readCheckpointFile(fsys, dir, recoveryPointFile, 3)
	if err != nil || !found {
		return logPosition{}, found, err
	}
	if len(lines) == 1 {
		p := logPosition{offset: lines[0][0], segmentBase: lines[0][1], pos: lines[0][2]}
		// A position at the start of a segment is that segment's base offset.
		if p.segmentBase >= 0 && p.pos >= 0 && p.offset >= p.segmentBase && (p.pos > 0 || p.offset == p.segmentBase) {
			return p, true, nil
		}
	}
	return logPosition{}, false, &CorruptError{Path: filepath.Join(dir, recoveryPointFile), Err: fmt.Errorf("impossible recovery point %v", lines)}
}

func writeRecoveryPoint(fsys FS, dir string, p logPosition) error {
	return writeCheckpointFile(fsys, dir, recoveryPointFile, [][]int64{{p.offset, p.segmentBase, p.pos}})
}

func readEpochCheckpoint(fsys FS, dir string) ([]EpochEntry, error) {
	path := filepath.Join(dir, epochCheckpointFile)
	lines, found, err := readCheckpointFile(fsys, dir, epochCheckpointFile, 0)
	if err != nil || !found {
		return nil, err
	}
	corrupt := func(format string, args ...any) error {
		return &CorruptError{Path: path, Err: fmt.Errorf(format, args...)}
	}
	if len(lines) == 0 || len(lines[0]) != 1 {
		return nil, corrupt("missing entry count")
	}
	n := lines[0][0]
	if n != int64(len(lines)-1) {
		return nil, corrupt("entry count %d, have %d entries", n, len(lines)-1)
	}
	entries := make([]EpochEntry, 0, n)
	for i, l := range lines[1:] {
		if len(l) != 2 || l[0] < 0 || l[0] > 1<<31-1 || l[1] < 0 {
			return nil, corrupt("bad entry on line %d", i+3)
		}
		e := EpochEntry{Epoch: int32(l[0]), StartOffset: l[1]}
		if k := len(entries); k > 0 && (e.Epoch <= entries[k-1].Epoch || e.StartOffset <= entries[k-1].StartOffset) {
			return nil, corrupt("entries not increasing on line %d", i+3)
		}
		entries = append(entries, e)
	}
	return entries, nil
}

func writeEpochCheckpoint(fsys FS, dir string, entries []EpochEntry) error {
	lines := make([][]int64, 0, len(entries)+1)
	lines = append(lines, []int64{int64(len(entries))})
	for _, e := range entries {
		lines = append(lines, []int64{int64(e.Epoch), e.StartOffset})
	}
	return writeCheckpointFile(fsys, dir, epochCheckpointFile, lines)
}
